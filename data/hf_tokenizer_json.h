// Reading a Hugging Face tokenizer.json for byte-level BPE (the GPT-2 and Llama 3 families) into
// the tables HfTokenizer (hf_tokenizer.h) encodes with. The file comes from outside, so every
// part is checked as hostile input before anything is built from it, and anything that is
// malformed or that this reader does not implement is InvalidArgument naming the file, the JSON
// path and the value ("tokenizer.json: pre_tokenizer.pretokenizers[0].type: "Metaspace" is
// not supported (byte-level BPE only)"), never a crash and never a silent difference.
//
// The JSON itself goes through ParseUntrustedJson (common/json_load.h: nesting limited, a key
// repeated in one object refused). Then what is read (other fields are ignored: they concern
// offsets, type ids or the pair template, not the ids of one text):
//   model           type "BPE"; vocab (token strings in GPT-2's byte-to-unicode alphabet,
//                   byte_level.h -> id); merges ("a b" strings or [a, b] arrays; a merge's rank
//                   is its index); ignore_merges; byte_fallback false; dropout null;
//                   continuing_subword_prefix / end_of_word_suffix null or ""; unk_token null or
//                   a vocab token (never produced: every byte is a token).
//   pre_tokenizer   ByteLevel (use_regex: GPT-2's pattern; add_prefix_space must be false, since
//                   it changes the text), or Sequence of Split steps (pattern Regex or String,
//                   behavior Isolated, invert false) ending in ByteLevel (Llama 3's form).
//   normalizer      null (NFC, Lowercase, ... are refused). truncation, padding: null.
//   added_tokens    id, content, special; lstrip, rstrip and single_word must be false;
//                   normalized is accepted either way (there is no normalizer to apply). One
//                   that is also in model.vocab must be the same token there, standing for its
//                   own text (GPT-2's <|endoftext|>).
//   post_processor  null, ByteLevel (nothing to do for ids), TemplateProcessing whose single
//                   template is [A] or [SpecialToken, A] (the BOS), or a Sequence of those.
//   decoder         ByteLevel.
// Ids must be below kMaxHfTokens and leave at most kMaxHfUnusedIds unused; every one of the 256
// bytes must be a vocabulary token; a merge must name two vocabulary tokens whose concatenation
// is one, and no pair twice. Regex patterns are Oniguruma's syntax, compiled by PCRE2
// (regex_splitter.h); the two agree on the patterns these families use (the differences in rare
// characters are regex_splitter.h's), and a pattern PCRE2 rejects is an error naming its path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "data/byte_pair_merge.h"
#include "data/tokenizer.h"

namespace longhaul::data {

// Limits on what a tokenizer.json may hold (Llama 3's: 9 MB, 128256 ids, 280147 merges).
inline constexpr size_t kMaxTokenizerJsonBytes = size_t{128} << 20;
inline constexpr size_t kMaxHfTokens = size_t{1} << 22;  // vocab entries, added tokens, merges
inline constexpr size_t kMaxHfTokenBytes = 1024;         // one token's bytes (or content)
// Ids below the largest that name no token (cl100k_base leaves 16 unused): a sparse id space
// would make the tables that ids index as large as the largest id.
inline constexpr size_t kMaxHfUnusedIds = size_t{1} << 16;

// How a token the model's merges can make is made. A token several pairs make (files
// converted from tiktoken ranks list every split) has its lowest-ranked pair here and the
// others in HfTokenizerSpec::more_merges[more_begin, more_begin + more_count).
struct HfMerge {
  TokenId rank = kNoMerge;  // the pair's index in model.merges; kNoMerge: no merge makes it
  uint32_t left_bytes = 0;  // the length of the pair's left token
  uint32_t more_begin = 0;
  uint32_t more_count = 0;
};
struct HfMoreMerge {
  uint32_t left_bytes;
  TokenId rank;
};

// One Split step of the pre-tokenizer: the text becomes the pattern's matches and the
// stretches between them (Isolated).
struct HfSplitStep {
  std::string pattern;  // PCRE2 syntax
  std::string where;    // its JSON path, for messages
};

struct HfTokenizerSpec {
  std::string source;  // the file, for messages
  // By id: the token's bytes (model vocab: what its string stands for in the byte-level
  // alphabet; added tokens: their content) and whether the id names a token at all. Both are
  // vocab_size() long.
  std::vector<std::string> tokens;
  std::vector<bool> defined;
  // The model vocabulary's tokens (those BPE produces) by their bytes.
  RankMap id_of;
  // Indexed by id (tokens.size() long).
  std::vector<HfMerge> merges;
  std::vector<HfMoreMerge> more_merges;
  size_t merge_count = 0;
  bool ignore_merges = false;
  // Applied in order, each to the pieces of the one before; empty: a text is one piece.
  std::vector<HfSplitStep> pre_tokenizer;
  std::vector<SpecialToken> special;  // special added tokens, in id order
  std::vector<SpecialToken> added;    // the other added tokens, in id order
  std::optional<TokenId> bos;         // the post-processor's TemplateProcessing prefix
};

// Parses and checks `json_text`; `source` names it in messages.
StatusOr<HfTokenizerSpec> ParseHfTokenizerJson(std::string_view json_text,
                                               const std::string& source);

}  // namespace longhaul::data
