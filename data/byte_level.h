// GPT-2's byte-to-unicode alphabet, in which Hugging Face's byte-level BPE files (tokenizer.json
// vocab and merges) write token bytes: each of the 256 bytes stands for one printable
// character, so that a token is a readable JSON string with no spaces or control characters.
// The printable Latin-1 bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves;
// the other 68 bytes take U+0100.. in byte order (space is 'Ġ' U+0120, '\n' is 'Ċ' U+010A).
#pragma once

#include <string>
#include <string_view>

namespace longhaul::data {

// The character that stands for `byte`.
char32_t ByteLevelChar(unsigned char byte);

// Appends the bytes that `token` (UTF-8 text in the alphabet) stands for to `*bytes`; false,
// leaving `*bytes` in an unspecified state, when `token` is not valid UTF-8 or holds a
// character outside the alphabet.
bool ByteLevelDecode(std::string_view token, std::string* bytes);

// `bytes` written in the alphabet (UTF-8).
std::string ByteLevelEncode(std::string_view bytes);

}  // namespace longhaul::data
