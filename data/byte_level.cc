// GPT-2's byte-to-unicode alphabet (see byte_level.h).
#include "data/byte_level.h"

#include <array>
#include <cstdint>

namespace longhaul::data {
namespace {

bool StandsForItself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Tables {
  std::array<char32_t, 256> char_of{};
  std::array<int16_t, 0x100 + 68> byte_of{};  // code point -> byte, -1: not in the alphabet
  Tables() {
    byte_of.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      char_of[b] = StandsForItself(b) ? char32_t(b) : next++;
      byte_of[char_of[b]] = int16_t(b);
    }
  }
};

const Tables& TheTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

char32_t ByteLevelChar(unsigned char byte) { return TheTables().char_of[byte]; }

bool ByteLevelDecode(std::string_view token, std::string* bytes) {
  const Tables& t = TheTables();
  size_t i = 0;
  while (i < token.size()) {
    const auto c0 = static_cast<unsigned char>(token[i]);
    char32_t cp;
    if (c0 < 0x80) {
      cp = c0;
      i += 1;
    } else if ((c0 & 0xE0) == 0xC0 && i + 1 < token.size()) {
      // Every character of the alphabet is below U+0800: two bytes at most.
      const auto c1 = static_cast<unsigned char>(token[i + 1]);
      if ((c1 & 0xC0) != 0x80) return false;
      cp = (char32_t(c0 & 0x1F) << 6) | (c1 & 0x3F);
      if (cp < 0x80) return false;  // overlong
      i += 2;
    } else {
      return false;
    }
    if (cp >= t.byte_of.size() || t.byte_of[cp] < 0) return false;
    bytes->push_back(char(t.byte_of[cp]));
  }
  return true;
}

std::string ByteLevelEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const char32_t cp = ByteLevelChar(static_cast<unsigned char>(c));
    if (cp < 0x80) {
      out.push_back(char(cp));
    } else {
      out.push_back(char(0xC0 | (cp >> 6)));
      out.push_back(char(0x80 | (cp & 0x3F)));
    }
  }
  return out;
}

}  // namespace longhaul::data
