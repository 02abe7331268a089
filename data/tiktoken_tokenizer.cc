// tiktoken-compatible byte-level BPE (see tiktoken_tokenizer.h).
#include "data/tiktoken_tokenizer.h"

#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "data/piece_cache.h"

namespace longhaul::data {

StatusOr<std::unique_ptr<TiktokenTokenizer>> TiktokenTokenizer::Create(TiktokenEncoding encoding,
                                                                       TiktokenRanks ranks,
                                                                       TiktokenOptions options) {
  const size_t n_ranks = ranks.tokens.size();
  if (encoding.expected_ranks != 0 && n_ranks != encoding.expected_ranks) {
    return absl::InvalidArgumentError(absl::StrCat(ranks.source, ": holds ", n_ranks,
                                                   " ranks, but encoding ", encoding.name, " has ",
                                                   encoding.expected_ranks));
  }
  auto t = std::unique_ptr<TiktokenTokenizer>(new TiktokenTokenizer());
  uint64_t vocab = n_ranks;
  absl::flat_hash_set<std::string> texts;
  for (size_t i = 0; i < encoding.special_tokens.size(); ++i) {
    const SpecialToken& s = encoding.special_tokens[i];
    if (s.text.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(encoding.name, ": special token ", s.id, " has no text"));
    }
    if (s.id < n_ranks) {
      return absl::InvalidArgumentError(
          absl::StrCat(encoding.name, ": special token ", s.text, " has id ", s.id,
                       ", which is the rank of an ordinary token of ", ranks.source));
    }
    if (!t->special_by_id_.emplace(s.id, i).second || !texts.insert(s.text).second) {
      return absl::InvalidArgumentError(absl::StrCat(encoding.name, ": special token ", s.text,
                                                     " (id ", s.id,
                                                     ") repeats another's id or text"));
    }
    if (s.text == "<|endoftext|>") t->eot_id_ = s.id;
    vocab = std::max<uint64_t>(vocab, uint64_t(s.id) + 1);
  }
  if (vocab > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(encoding.name, ": vocabulary too large"));
  }
  ASSIGN_OR_RETURN(t->splitter_, RegexSplitter::Create(encoding.pattern));
  t->vocab_size_ = uint32_t(vocab);
  t->specials_ = std::make_unique<SpecialTokenSplitter>(encoding.special_tokens);
  t->encoding_ = std::move(encoding);
  t->ranks_ = std::move(ranks);
  t->options_ = options;
  t->serial_ = NewPieceCacheSerial();
  return t;
}

StatusOr<std::unique_ptr<TiktokenTokenizer>> TiktokenTokenizer::Load(const std::string& rank_file,
                                                                     TiktokenEncoding encoding,
                                                                     TiktokenOptions options) {
  ASSIGN_OR_RETURN(TiktokenRanks ranks, LoadTiktokenRanks(rank_file));
  return Create(std::move(encoding), std::move(ranks), options);
}

void TiktokenTokenizer::ResetPieceCache() const { PieceCache::ForThread(serial_).Clear(); }

Status TiktokenTokenizer::EncodeOrdinary(std::string_view text, std::vector<TokenId>* ids) const {
  const RankMap& rank_of = ranks_.rank_of;
  const size_t cache_entries = options_.piece_cache_entries;
  PieceCache* cache = cache_entries > 0 ? &PieceCache::ForThread(serial_) : nullptr;
  return splitter_->Split(text, [&](std::string_view piece) {
    const auto direct = rank_of.find(piece);
    if (direct != rank_of.end()) {
      ids->push_back(direct->second);
    } else if (cache != nullptr) {
      cache->Encode(piece, cache_entries, ids, [&](std::string_view p, std::vector<TokenId>* out) {
        BytePairEncode(p, rank_of, out);
      });
    } else {
      BytePairEncode(piece, rank_of, ids);
    }
  });
}

Status TiktokenTokenizer::EncodeTo(std::string_view text, const EncodeOptions& options,
                                   std::vector<TokenId>* ids) const {
  return EncodeWithSpecialTokens(
      text, options, *specials_, std::nullopt, name(),
      [&](std::string_view segment) { return EncodeOrdinary(segment, ids); }, ids);
}

StatusOr<std::string> TiktokenTokenizer::Decode(std::span<const TokenId> ids) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  const size_t n_ranks = ranks_.tokens.size();
  for (size_t i = 0; i < ids.size(); ++i) {
    const TokenId id = ids[i];
    if (id < n_ranks) {
      bytes += ranks_.tokens[id];
      continue;
    }
    const auto special = special_by_id_.find(id);
    if (special == special_by_id_.end()) {
      return absl::InvalidArgumentError(absl::StrCat(name(), ": id ", id, " at index ", i,
                                                     " is no token (vocabulary size ", vocab_size_,
                                                     ")"));
    }
    bytes += encoding_.special_tokens[special->second].text;
  }
  return bytes;
}

StatusOr<std::unique_ptr<Tokenizer>> MakeTiktokenTokenizer(const std::string& encoding_name,
                                                           const std::string& rank_file) {
  ASSIGN_OR_RETURN(TiktokenEncoding encoding, TiktokenEncodingByName(encoding_name));
  ASSIGN_OR_RETURN(std::unique_ptr<TiktokenTokenizer> t,
                   TiktokenTokenizer::Load(rank_file, std::move(encoding)));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace longhaul::data
