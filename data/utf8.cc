// UTF-8 validation and WHATWG replacement (see utf8.h).
#include "data/utf8.h"

#include <cstdint>
#include <cstring>

namespace longhaul::data {
namespace {

// Length of the valid sequence at p[0..avail) (1 to 4), or 0 when it is invalid; then
// `*subpart` is how many bytes one U+FFFD replaces (at least 1): the lead byte and the
// continuation bytes that were still acceptable before the sequence broke off.
size_t SequenceLength(const unsigned char* p, size_t avail, size_t* subpart) {
  const unsigned char b = p[0];
  if (b < 0x80) return 1;
  size_t need;
  unsigned char lower = 0x80, upper = 0xBF;  // the range of the first continuation byte
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lower = 0xA0;  // overlong
    if (b == 0xED) upper = 0x9F;  // surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lower = 0x90;  // overlong
    if (b == 0xF4) upper = 0x8F;  // above U+10FFFF
  } else {
    *subpart = 1;  // continuation byte without a lead, C0, C1, F5..FF
    return 0;
  }
  for (size_t k = 1; k <= need; ++k) {
    if (k >= avail || p[k] < lower || p[k] > upper) {
      *subpart = k;
      return 0;
    }
    lower = 0x80;
    upper = 0xBF;
  }
  return need + 1;
}

// Offset of the first non-ASCII byte at or after `i`.
size_t SkipAscii(const unsigned char* p, size_t n, size_t i) {
  while (i + 8 <= n) {
    uint64_t word;
    std::memcpy(&word, p + i, 8);
    if (word & 0x8080808080808080ull) break;
    i += 8;
  }
  while (i < n && p[i] < 0x80) ++i;
  return i;
}

}  // namespace

size_t FirstInvalidUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = SkipAscii(p, n, 0);
  while (i < n) {
    size_t subpart;
    const size_t len = SequenceLength(p + i, n - i, &subpart);
    if (len == 0) return i;
    i = SkipAscii(p, n, i + len);
  }
  return std::string_view::npos;
}

std::string ReplaceInvalidUtf8(std::string_view text) {
  size_t i = FirstInvalidUtf8(text);
  if (i == std::string_view::npos) return std::string(text);
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  std::string out;
  out.reserve(n + 16);
  out.append(text.data(), i);
  while (i < n) {
    size_t subpart;
    const size_t len = SequenceLength(p + i, n - i, &subpart);
    if (len == 0) {
      out.append("\xEF\xBF\xBD");
      i += subpart;
    } else {
      out.append(text.data() + i, len);
      i += len;
    }
  }
  return out;
}

}  // namespace longhaul::data
