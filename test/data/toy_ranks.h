// A small byte-level BPE vocabulary for tests that need no real rank file: the 256 single
// bytes (ranks 0..255, in byte order) and then the given merged tokens, in rank order.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "data/tiktoken_ranks.h"

namespace longhaul::data::testing {

// The text of a tiktoken rank file with those tokens.
inline std::string ToyRankFile(const std::vector<std::string>& merged) {
  std::string file;
  int rank = 0;
  for (int b = 0; b < 256; ++b) {
    absl::StrAppend(&file, absl::Base64Escape(std::string(1, char(b))), " ", rank++, "\n");
  }
  for (const std::string& token : merged) {
    absl::StrAppend(&file, absl::Base64Escape(token), " ", rank++, "\n");
  }
  return file;
}

// Parsed; the tokens must be distinct and longer than one byte.
inline TiktokenRanks ToyRanks(const std::vector<std::string>& merged) {
  return ParseTiktokenRanks(ToyRankFile(merged), "toy.tiktoken").value();
}

}  // namespace longhaul::data::testing
