// UTF-8 validation and U+FFFD replacement (data/utf8.h), on hand-picked sequences whose
// WHATWG decoding is known, and on random bytes (the agreement test also checks replacement
// against Node's own decoder).
#include "data/utf8.h"

#include <catch2/catch.hpp>
#include <random>
#include <string>

namespace longhaul::data {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST_CASE("valid UTF-8 passes and comes back unchanged") {
  for (const std::string& s :
       {std::string(), std::string("plain ascii"), std::string("\0nul", 4),
        std::string("\xC2\x80 \xDF\xBF \xE0\xA0\x80 \xED\x9F\xBF \xEE\x80\x80 \xEF\xBF\xBF"),
        std::string("\xF0\x90\x80\x80 \xF4\x8F\xBF\xBF"),
        std::string("h\xC3\xA9llo w\xC3\xB6rld")}) {
    CHECK(FirstInvalidUtf8(s) == std::string_view::npos);
    CHECK(ReplaceInvalidUtf8(s) == s);
  }
}

TEST_CASE("invalid sequences are found at their first byte") {
  CHECK(FirstInvalidUtf8("abc\x80") == 3);            // lone continuation byte
  CHECK(FirstInvalidUtf8("ab\xC0\xAF") == 2);         // overlong
  CHECK(FirstInvalidUtf8("abcdefgh\xC3") == 8);       // truncated at the end, after 8 ASCII bytes
  CHECK(FirstInvalidUtf8("\xED\xA0\x80") == 0);       // a surrogate
  CHECK(FirstInvalidUtf8("x\xF4\x90\x80\x80") == 1);  // above U+10FFFF
  CHECK(FirstInvalidUtf8("\xF5\x80\x80\x80") == 0);
  CHECK(FirstInvalidUtf8("\xE0\x80\x80") == 0);  // overlong 3-byte
  CHECK(FirstInvalidUtf8("\xF0\x80\x80\x80") == 0);
}

TEST_CASE("each maximal subpart becomes one U+FFFD (WHATWG)") {
  CHECK(ReplaceInvalidUtf8("a\x80z") == "a" + kFffd + "z");
  CHECK(ReplaceInvalidUtf8("\xC3") == kFffd);
  CHECK(ReplaceInvalidUtf8("\xE2\x82") == kFffd);                      // truncated: one replacement
  CHECK(ReplaceInvalidUtf8("\xE2\x82z") == kFffd + "z");               // broken off: one, then z
  CHECK(ReplaceInvalidUtf8("\xF0\x9F\x98") == kFffd);                  // truncated emoji
  CHECK(ReplaceInvalidUtf8("\xED\xA0\x80") == kFffd + kFffd + kFffd);  // surrogate: 3
  CHECK(ReplaceInvalidUtf8("\xC0\xAF") == kFffd + kFffd);
  CHECK(ReplaceInvalidUtf8("\xE0\x80\x80") == kFffd + kFffd + kFffd);
  CHECK(ReplaceInvalidUtf8("\xF4\x90\x80\x80") == kFffd + kFffd + kFffd + kFffd);
  CHECK(ReplaceInvalidUtf8("\xFF\xFE") == kFffd + kFffd);
  CHECK(ReplaceInvalidUtf8("\xE2\x82\xAC\x80") == "\xE2\x82\xAC" + kFffd);
}

TEST_CASE("replacement always gives valid UTF-8 and leaves valid runs alone") {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20000; ++round) {
    std::string s(rng() % 24, '\0');
    for (char& c : s) {
      const uint64_t r = rng();
      // Mostly bytes that make (or break) multi-byte sequences.
      c = char(r % 4 == 0 ? 'a' + r % 26 : 0x80 + (r >> 8) % 0x80);
    }
    const std::string replaced = ReplaceInvalidUtf8(s);
    REQUIRE(FirstInvalidUtf8(replaced) == std::string_view::npos);
    if (FirstInvalidUtf8(s) == std::string_view::npos) REQUIRE(replaced == s);
  }
}

}  // namespace
}  // namespace longhaul::data
