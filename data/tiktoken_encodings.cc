// The built-in tiktoken encodings (see tiktoken_encodings.h).
#include "data/tiktoken_encodings.h"

#include "absl/strings/str_cat.h"

namespace longhaul::data {

TiktokenEncoding Gpt2Encoding() {
  TiktokenEncoding e;
  e.name = "gpt2";
  e.pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  e.special_tokens = {{"<|endoftext|>", 50256}};
  e.expected_ranks = 50256;
  return e;
}

TiktokenEncoding Cl100kBaseEncoding() {
  TiktokenEncoding e;
  e.name = "cl100k_base";
  // tiktoken's pattern. Its case-insensitive contractions also match "'ſ" (U+017F folds to
  // s, in Rust's regex as in PCRE2); js-tiktoken spells the cases out and does not.
  e.pattern = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
              R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  e.special_tokens = {{"<|endoftext|>", 100257},
                      {"<|fim_prefix|>", 100258},
                      {"<|fim_middle|>", 100259},
                      {"<|fim_suffix|>", 100260},
                      {"<|endofprompt|>", 100276}};
  e.expected_ranks = 100256;
  return e;
}

StatusOr<TiktokenEncoding> TiktokenEncodingByName(const std::string& name) {
  if (name == "gpt2") return Gpt2Encoding();
  if (name == "r50k_base") {
    TiktokenEncoding e = Gpt2Encoding();
    e.name = "r50k_base";
    return e;
  }
  if (name == "cl100k_base") return Cl100kBaseEncoding();
  return absl::NotFoundError(
      absl::StrCat("unknown tiktoken encoding '", name, "' (known: gpt2, r50k_base, cl100k_base)"));
}

}  // namespace longhaul::data
