// tiktoken's rank files: one token a line, "<base64 of the token's bytes> <rank>", ranks
// 0, 1, 2, ... in order (the format of OpenAI's gpt2/r50k_base, cl100k_base and o200k_base
// files). A rank file comes from outside, so everything in it is checked and a bad one is an
// error naming file:line and what is wrong with it, before anything is built from it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "data/byte_pair_merge.h"
#include "data/tokenizer.h"

namespace longhaul::data {

// Limits on what a rank file may hold (OpenAI's largest, o200k_base: 3.6 MB, 200000 ranks,
// lines under 200 bytes, tokens of at most 128 bytes).
inline constexpr size_t kMaxRankFileBytes = size_t{64} << 20;
inline constexpr size_t kMaxRankLineBytes = 1024;
inline constexpr size_t kMaxRanks = size_t{1} << 24;

struct TiktokenRanks {
  std::string source;               // where the ranks came from, for messages
  std::vector<std::string> tokens;  // tokens[rank]: the token's bytes
  // The inverse of `tokens`.
  RankMap rank_of;
};

// Parses a rank file's contents; `source` names it in errors ("FILE:LINE: what"). Empty
// lines are skipped (as tiktoken does). Errors: a line longer than kMaxRankLineBytes, a line
// that is not "<base64> <rank>", base64 that is malformed or not canonical (padding,
// alphabet), an empty token, a rank that is not a decimal number, a duplicate rank, a rank
// out of order (a gap), a duplicate token, more than kMaxRanks ranks, and a vocabulary that
// lacks one of the 256 single bytes (byte-level BPE needs every byte as a token).
StatusOr<TiktokenRanks> ParseTiktokenRanks(std::string_view contents, const std::string& source);

// Reads and parses the rank file `path` (at most kMaxRankFileBytes).
StatusOr<TiktokenRanks> LoadTiktokenRanks(const std::string& path);

}  // namespace longhaul::data
