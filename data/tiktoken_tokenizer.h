// Byte-level BPE over a tiktoken rank file, id-for-id what OpenAI's tiktoken produces
// (checked against js-tiktoken by test/data/tiktoken_js_agreement_test). Encoding a text:
//   1. invalid UTF-8 is replaced by U+FFFD or refused (EncodeOptions::invalid_utf8);
//   2. allowed special tokens cut the text into segments and become their own ids
//      (steps 1 and 2: encode_input.h);
//   3. each segment is split into pieces by the encoding's regex (RegexSplitter, PCRE2);
//   4. a piece that is itself a token is that token; any other is byte-pair merged
//      (byte_pair_merge.h), and its ids are kept in a per-thread cache of recent pieces
//      (piece_cache.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/status.h"
#include "data/byte_pair_merge.h"
#include "data/encode_input.h"
#include "data/regex_splitter.h"
#include "data/tiktoken_encodings.h"
#include "data/tiktoken_ranks.h"
#include "data/tokenizer.h"

namespace longhaul::data {

struct TiktokenOptions {
  // Pieces that needed merging, remembered with their ids per thread and tokenizer (the
  // cache is emptied when it reaches this size). 0 turns the cache off.
  size_t piece_cache_entries = size_t{1} << 16;
};

class TiktokenTokenizer : public Tokenizer {
 public:
  // Builds a tokenizer from checked ranks. Errors: a rank count other than the encoding's
  // expected_ranks, a special token whose id is also a rank's or another special token's,
  // two special tokens with the same text, a pattern that does not compile.
  static StatusOr<std::unique_ptr<TiktokenTokenizer>> Create(TiktokenEncoding encoding,
                                                             TiktokenRanks ranks,
                                                             TiktokenOptions options = {});
  // LoadTiktokenRanks(rank_file), then Create.
  static StatusOr<std::unique_ptr<TiktokenTokenizer>> Load(const std::string& rank_file,
                                                           TiktokenEncoding encoding,
                                                           TiktokenOptions options = {});

  Status EncodeTo(std::string_view text, const EncodeOptions& options,
                  std::vector<TokenId>* ids) const override;
  StatusOr<std::string> Decode(std::span<const TokenId> ids) const override;
  uint32_t vocab_size() const override { return vocab_size_; }
  std::optional<TokenId> eot_id() const override { return eot_id_; }
  std::span<const SpecialToken> special_tokens() const override { return encoding_.special_tokens; }
  const std::string& name() const override { return encoding_.name; }

  // Empties the calling thread's piece cache for this tokenizer (benchmarks time encoding
  // from a cold cache with it).
  void ResetPieceCache() const;

  // The bytes of ordinary token `rank` (REQUIRES: rank < number of ranks).
  std::string_view token_bytes(TokenId rank) const { return ranks_.tokens[rank]; }
  const RegexSplitter& splitter() const { return *splitter_; }

 private:
  TiktokenTokenizer() = default;
  // Encodes ordinary text (no special tokens) onto `*ids`.
  Status EncodeOrdinary(std::string_view text, std::vector<TokenId>* ids) const;

  TiktokenEncoding encoding_;
  TiktokenRanks ranks_;
  TiktokenOptions options_;
  std::unique_ptr<RegexSplitter> splitter_;
  std::unique_ptr<SpecialTokenSplitter> specials_;
  absl::flat_hash_map<TokenId, size_t> special_by_id_;  // id -> index in special_tokens
  uint32_t vocab_size_ = 0;
  std::optional<TokenId> eot_id_;
  uint64_t serial_ = 0;  // tells this tokenizer's cached pieces from another's
};

// A tiktoken tokenizer by encoding name (TiktokenEncodingByName) and rank file.
StatusOr<std::unique_ptr<Tokenizer>> MakeTiktokenTokenizer(const std::string& encoding_name,
                                                           const std::string& rank_file);

}  // namespace longhaul::data
