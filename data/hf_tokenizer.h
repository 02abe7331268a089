// Byte-level BPE from a Hugging Face tokenizer.json (the GPT-2 and Llama 3 families; what the
// file may hold, and how each part is checked, is hf_tokenizer_json.h's). Id for id what
// Hugging Face's tokenizers produce for the same file (checked against @huggingface/tokenizers
// by test/data/hf_js_agreement_test). Encoding a text:
//   1. invalid UTF-8 is replaced by U+FFFD or refused (EncodeOptions::invalid_utf8);
//   2. the text is cut at added tokens, which become their own ids: special ones only when
//      EncodeOptions allows them (tokenizer.h's contract; Hugging Face recognises them always),
//      the others always, as Hugging Face does (steps 1 and 2: encode_input.h);
//   3. each stretch between them is split into pieces by the pre-tokenizer's regexes
//      (RegexSplitter, PCRE2), one Split step after another;
//   4. with ignore_merges (Llama 3), a piece that is itself a token is that token; any other
//      piece is byte-pair merged by the file's merges, a pair's rank being its index in them
//      (byte_pair_merge.h), and its ids are kept in a per-thread cache (piece_cache.h).
//      Without ignore_merges (GPT-2), a piece that is a token the merges make from its own
//      bytes (found once, when the file is loaded) is that token with no merging either.
// A tokenizer.json converted from a tiktoken rank file (vocab = ranks, merges derived from
// them) so gives the same ids as TiktokenTokenizer on those ranks.
//
// Not done by Encode unless asked: the post-processor's BOS (Llama 3's <|begin_of_text|>) is
// bos_id(), for callers that add it themselves (data preparation puts BOS / EOT around each
// document); HfOptions::add_bos puts it first in every Encode call, as Hugging Face's
// encode(add_special_tokens=True) does.
//
// Decode gives each token's bytes; an added token gives its content as written. (Hugging Face's
// ByteLevel decoder maps added tokens through the byte-level alphabet as well, which changes
// those with characters such as U+00E9 in them; this keeps Decode(Encode(text)) == text.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "data/encode_input.h"
#include "data/hf_tokenizer_json.h"
#include "data/piece_cache.h"
#include "data/regex_splitter.h"
#include "data/tokenizer.h"

namespace longhaul::data {

struct HfOptions {
  // The end-of-text token (eot_id()), by its content; it must be an added token of the file.
  // Empty: the added token "<|endoftext|>" (GPT-2, Qwen) or else "<|end_of_text|>" (Llama 3);
  // no eot_id() when the file has neither.
  std::string eot_token;
  // Put bos_id() before the ids of every Encode call. REQUIRES: the file's post-processor has
  // a BOS (Load and Parse refuse the option otherwise).
  bool add_bos = false;
  // Pieces that needed merging, remembered with their ids per thread and tokenizer (the
  // cache is emptied when it reaches this size). 0 turns the cache off.
  size_t piece_cache_entries = size_t{1} << 16;
};

class HfTokenizer : public Tokenizer {
 public:
  // Reads `path` (at most kMaxTokenizerJsonBytes) and parses it; messages name the path.
  static StatusOr<std::unique_ptr<HfTokenizer>> Load(const std::string& path,
                                                     HfOptions options = {});
  // Parses the text of a tokenizer.json; `name` names it in messages and is name().
  static StatusOr<std::unique_ptr<HfTokenizer>> Parse(std::string_view json_text,
                                                      const std::string& name,
                                                      HfOptions options = {});
  // Builds a tokenizer from a checked spec. Errors: a pre-tokenizer pattern that does not
  // compile (naming its JSON path), an eot_token that is no added token, add_bos without a BOS.
  static StatusOr<std::unique_ptr<HfTokenizer>> Create(HfTokenizerSpec spec,
                                                       HfOptions options = {});

  Status EncodeTo(std::string_view text, const EncodeOptions& options,
                  std::vector<TokenId>* ids) const override;
  StatusOr<std::string> Decode(std::span<const TokenId> ids) const override;
  uint32_t vocab_size() const override { return uint32_t(spec_.tokens.size()); }
  std::optional<TokenId> eot_id() const override { return eot_id_; }
  // The added tokens marked special, in id order.
  std::span<const SpecialToken> special_tokens() const override { return spec_.special; }
  const std::string& name() const override { return spec_.source; }

  // The BOS that the file's post-processor puts before a text (TemplateProcessing [BOS, A]);
  // nullopt when it adds none.
  std::optional<TokenId> bos_id() const { return spec_.bos; }
  // Added tokens not marked special (recognised in any text), in id order.
  std::span<const SpecialToken> added_tokens() const { return spec_.added; }
  // The pre-tokenizer's patterns, in the order they split (PCRE2 syntax).
  std::vector<std::string> pre_tokenizer_patterns() const;
  size_t merge_count() const { return spec_.merge_count; }

  // Empties the calling thread's piece cache for this tokenizer (benchmarks time encoding
  // from a cold cache with it).
  void ResetPieceCache() const;

 private:
  HfTokenizer() = default;
  // Encodes text with no added tokens in it onto `*ids`.
  Status EncodeOrdinary(std::string_view text, std::vector<TokenId>* ids) const;
  // Splits `text` by the pre-tokenizer's steps from `step` on and encodes each piece.
  Status SplitAndEncode(size_t step, std::string_view text, PieceCache* cache,
                        std::vector<TokenId>* ids) const;
  void EncodePiece(std::string_view piece, PieceCache* cache, std::vector<TokenId>* ids) const;

  HfTokenizerSpec spec_;
  HfOptions options_;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;  // one per pre-tokenizer step
  std::unique_ptr<SpecialTokenSplitter> added_;
  // Without ignore_merges, by id: whether merging the token's bytes gives the token itself.
  std::vector<bool> whole_;
  std::optional<TokenId> eot_id_;
  uint64_t serial_ = 0;  // tells this tokenizer's cached pieces from another's
};

}  // namespace longhaul::data
