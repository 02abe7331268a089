// What defines each of OpenAI's tiktoken encodings besides its rank file: the pre-tokenizer
// pattern and the special tokens with their ids, as tiktoken (openai_public.py) defines them.
// The ranks themselves are data (LoadTiktokenRanks) and are never compiled in.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/tokenizer.h"

namespace longhaul::data {

struct TiktokenEncoding {
  std::string name;  // "gpt2", "r50k_base", "cl100k_base"
  // The pre-tokenizer regex (PCRE2 syntax; tiktoken's own patterns compile unchanged).
  std::string pattern;
  std::vector<SpecialToken> special_tokens;  // in id order
  // How many ranks the rank file must hold (0: any number).
  size_t expected_ranks = 0;
};

// GPT-2's encoding (r50k_base is the same vocabulary under another name): 50256 ranks plus
// <|endoftext|> = 50256.
TiktokenEncoding Gpt2Encoding();
// cl100k_base (GPT-3.5/GPT-4): 100256 ranks; <|endoftext|> = 100257, FIM tokens
// 100258..100260, <|endofprompt|> = 100276.
TiktokenEncoding Cl100kBaseEncoding();

// "gpt2", "r50k_base" or "cl100k_base"; another name is NotFound listing these.
StatusOr<TiktokenEncoding> TiktokenEncodingByName(const std::string& name);

}  // namespace longhaul::data
