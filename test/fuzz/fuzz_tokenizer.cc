// Fuzz target: the tokenizer's hostile inputs (data/). The first byte picks what the rest is:
//   0: a tiktoken rank file (ParseTiktokenRanks): no crash, and a file that parses is
//      self-consistent (ranks 0..n-1 each with one distinct token, all 256 bytes present);
//   1: text for a tokenizer over a small vocabulary, with options from the first byte's other
//      bits: no crash, Decode(Encode(x)) is x (with U+FFFD for invalid UTF-8), and an error
//      only where one is due (invalid UTF-8 refused, a special token refused);
//   2: one piece for byte-pair merging: both algorithms give the same ids, which decode to
//      the piece.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/byte_pair_merge.h"
#include "data/tiktoken_ranks.h"
#include "data/tiktoken_tokenizer.h"
#include "data/utf8.h"
#include "test/data/toy_ranks.h"

namespace {

namespace d = longhaul::data;

void Check(bool ok) {
  if (!ok) std::abort();
}

const std::vector<std::string> kMerged = {"th", "he",   "the", " the", "in",       "er", "an", " a",
                                          "aa", "aaaa", "  ",  "    ", "\xC3\xA9", "'s", "12"};

const d::TiktokenTokenizer& Toy() {
  static const std::unique_ptr<d::TiktokenTokenizer> t = [] {
    d::TiktokenEncoding e = d::Cl100kBaseEncoding();
    e.name = "toy";
    e.special_tokens = {{"<|endoftext|>", 1000}, {"<|x|>", 1001}};
    e.expected_ranks = 0;
    return d::TiktokenTokenizer::Create(e, d::testing::ToyRanks(kMerged)).value();
  }();
  return *t;
}

void FuzzRanks(std::string_view in) {
  auto ranks = d::ParseTiktokenRanks(in, "fuzz.tiktoken");
  if (!ranks.ok()) return;
  Check(ranks->tokens.size() == ranks->rank_of.size() && ranks->tokens.size() >= 256);
  for (size_t r = 0; r < ranks->tokens.size(); ++r) {
    const auto it = ranks->rank_of.find(ranks->tokens[r]);
    Check(it != ranks->rank_of.end() && it->second == r && !ranks->tokens[r].empty());
  }
}

void FuzzEncode(uint8_t flags, std::string_view in) {
  d::EncodeOptions options;
  options.allow_all_special = flags & 4;
  options.reject_disallowed_special = flags & 8;
  if (flags & 16) options.allowed_special = {"<|x|>"};
  options.invalid_utf8 = flags & 32 ? d::InvalidUtf8::kReject : d::InvalidUtf8::kReplace;
  const d::TiktokenTokenizer& t = Toy();
  auto ids = t.Encode(in, options);
  const bool valid = d::FirstInvalidUtf8(in) == std::string_view::npos;
  if (!ids.ok()) {
    const bool refused_utf8 = !valid && options.invalid_utf8 == d::InvalidUtf8::kReject;
    const bool refused_special =
        options.reject_disallowed_special && (in.find("<|endoftext|>") != std::string_view::npos ||
                                              in.find("<|x|>") != std::string_view::npos);
    Check(refused_utf8 || refused_special);
    return;
  }
  for (d::TokenId id : *ids) Check(id < t.vocab_size());
  auto back = t.Decode(*ids);
  Check(back.ok() && *back == (valid ? std::string(in) : d::ReplaceInvalidUtf8(in)));
}

void FuzzMerge(std::string_view piece) {
  if (piece.empty()) return;
  static const d::RankMap ranks = d::testing::ToyRanks(kMerged).rank_of;
  std::vector<d::TokenId> rescan, heap;
  d::BytePairEncodeRescan(piece, ranks, &rescan);
  d::BytePairEncodeHeap(piece, ranks, &heap);
  Check(rescan == heap);
  std::string back;
  for (d::TokenId id : heap) back += Toy().token_bytes(id);
  Check(back == piece);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      FuzzRanks(in);
      break;
    case 1:
      FuzzEncode(data[0], in);
      break;
    default:
      FuzzMerge(in);
      break;
  }
  return 0;
}

extern "C" void LonghaulFuzzSeeds(std::vector<std::string>* seeds) {
  seeds->push_back(std::string(1, '\0') + d::testing::ToyRankFile(kMerged));
  seeds->push_back("\x01The the  theater's 1234 \xC3\xA9t\xC3\xA9 <|endoftext|> <|x|>\xFF!");
  seeds->push_back("\x04<|endoftext|>a<|x|>b\n\n  c");   // all special tokens allowed
  seeds->push_back("\x0a<|endoftext|> refused");         // disallowed special refused
  seeds->push_back("\x22invalid UTF-8 refused: \xC3(");  // invalid UTF-8 refused
  seeds->push_back("\x02" + std::string(100, 'a') + " the");
}
