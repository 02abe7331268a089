// UTF-8 checks for text from outside: where the first invalid sequence is, and the
// WHATWG decoder's replacement of invalid sequences by U+FFFD (what Node.js, browsers and
// therefore js-tiktoken do to bytes before they become a string), so that the tokenizer can
// hand its regex engine valid UTF-8 only and match the reference implementation.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace longhaul::data {

// Byte offset of the first byte of the first invalid UTF-8 sequence in `text`, or
// std::string_view::npos when `text` is valid UTF-8 (no overlong forms, no surrogates, no
// code points above U+10FFFF, no truncated sequence at the end).
size_t FirstInvalidUtf8(std::string_view text);

// `text` with each maximal invalid subsequence ("maximal subpart", Unicode 15 section 3.9,
// as the WHATWG Encoding Standard's UTF-8 decoder finds them) replaced by U+FFFD (EF BF BD).
// Valid text comes back unchanged.
std::string ReplaceInvalidUtf8(std::string_view text);

}  // namespace longhaul::data
