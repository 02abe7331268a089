// tiktoken-compatible byte-level BPE (see tiktoken_tokenizer.h).
#include "data/tiktoken_tokenizer.h"

#include <array>
#include <atomic>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "data/utf8.h"

namespace longhaul::data {
namespace {

// Pieces longer than this are not cached (they are rare, and they would crowd out the rest).
constexpr size_t kMaxCachedPieceBytes = 256;

using CachedIds = absl::InlinedVector<TokenId, 6>;

struct PieceCache {
  uint64_t owner = 0;  // the serial of the tokenizer these pieces belong to (0: none)
  BytesMap<CachedIds> ids;
};

// This thread's caches, one per tokenizer recently used on it (a few, so that alternating
// between two encodings does not empty them on every call).
PieceCache& ThreadCache(uint64_t serial) {
  constexpr size_t kCaches = 4;
  thread_local std::array<PieceCache, kCaches> caches;
  thread_local size_t next_victim = 0;
  for (PieceCache& cache : caches) {
    if (cache.owner == serial) return cache;
  }
  PieceCache& cache = caches[next_victim];
  next_victim = (next_victim + 1) % kCaches;
  cache.owner = serial;
  cache.ids.clear();
  return cache;
}

std::atomic<uint64_t> next_serial{1};

// Debian's abseil has its own string_view type.
absl::string_view Absl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

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
  t->encoding_ = std::move(encoding);
  t->ranks_ = std::move(ranks);
  t->options_ = options;
  t->serial_ = next_serial.fetch_add(1);
  return t;
}

StatusOr<std::unique_ptr<TiktokenTokenizer>> TiktokenTokenizer::Load(const std::string& rank_file,
                                                                     TiktokenEncoding encoding,
                                                                     TiktokenOptions options) {
  ASSIGN_OR_RETURN(TiktokenRanks ranks, LoadTiktokenRanks(rank_file));
  return Create(std::move(encoding), std::move(ranks), options);
}

void TiktokenTokenizer::ResetPieceCache() const { ThreadCache(serial_).ids.clear(); }

Status TiktokenTokenizer::EncodeOrdinary(std::string_view text, std::vector<TokenId>* ids) const {
  const RankMap& rank_of = ranks_.rank_of;
  PieceCache* cache = options_.piece_cache_entries > 0 ? &ThreadCache(serial_) : nullptr;
  return splitter_->Split(text, [&](std::string_view piece) {
    const auto direct = rank_of.find(piece);
    if (direct != rank_of.end()) {
      ids->push_back(direct->second);
      return;
    }
    if (cache != nullptr) {
      const auto hit = cache->ids.find(piece);
      if (hit != cache->ids.end()) {
        ids->insert(ids->end(), hit->second.begin(), hit->second.end());
        return;
      }
    }
    const size_t before = ids->size();
    BytePairEncode(piece, rank_of, ids);
    if (cache != nullptr && piece.size() <= kMaxCachedPieceBytes) {
      if (cache->ids.size() >= options_.piece_cache_entries) cache->ids.clear();
      cache->ids.emplace(piece, CachedIds(ids->begin() + before, ids->end()));
    }
  });
}

Status TiktokenTokenizer::EncodeTo(std::string_view text, const EncodeOptions& options,
                                   std::vector<TokenId>* ids) const {
  std::string replaced;
  const size_t bad = FirstInvalidUtf8(text);
  if (bad != std::string_view::npos) {
    if (options.invalid_utf8 == InvalidUtf8::kReject) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), ": text is not valid UTF-8: invalid sequence at byte offset ", bad,
                       " ('", absl::CHexEscape(Absl(text.substr(bad, 4))), "...')"));
    }
    replaced = ReplaceInvalidUtf8(text);
    text = replaced;
  }
  if (text.size() > kMaxEncodeBytes) {
    return absl::InvalidArgumentError(absl::StrCat(name(), ": text of ", text.size(),
                                                   " bytes is more than one call encodes (",
                                                   kMaxEncodeBytes, "); encode it in parts"));
  }

  const auto& specials = encoding_.special_tokens;
  std::vector<bool> allowed(specials.size(), options.allow_all_special);
  for (const std::string& s : options.allowed_special) {
    size_t k = 0;
    while (k < specials.size() && specials[k].text != s) ++k;
    if (k == specials.size()) {
      return absl::InvalidArgumentError(absl::StrCat(name(), ": allowed special token '", s,
                                                     "' is not a special token of this encoding"));
    }
    allowed[k] = true;
  }
  if (options.reject_disallowed_special) {
    for (size_t k = 0; k < specials.size(); ++k) {
      const size_t at = allowed[k] ? std::string_view::npos : text.find(specials[k].text);
      if (at != std::string_view::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            name(), ": text holds the special token ", specials[k].text, " at byte offset ", at,
            ", which is not allowed (EncodeOptions::allowed_special)"));
      }
    }
  }

  // Each allowed special token's next occurrence at or after `start` (npos: none left).
  constexpr size_t kUnknown = std::string_view::npos - 1;
  std::vector<size_t> next_at(specials.size(), kUnknown);
  const size_t size_before = ids->size();
  size_t start = 0;
  while (true) {
    size_t best = std::string_view::npos;
    size_t which = specials.size();
    for (size_t k = 0; k < specials.size(); ++k) {
      if (!allowed[k]) continue;
      if (next_at[k] == kUnknown || (next_at[k] != std::string_view::npos && next_at[k] < start)) {
        next_at[k] = text.find(specials[k].text, start);
      }
      if (next_at[k] < best) {  // the earliest; the first listed on a tie
        best = next_at[k];
        which = k;
      }
    }
    const size_t end = which == specials.size() ? text.size() : best;
    const Status status = EncodeOrdinary(text.substr(start, end - start), ids);
    if (!status.ok()) {
      ids->resize(size_before);
      return Annotate(status, name());
    }
    if (which == specials.size()) break;
    ids->push_back(specials[which].id);
    start = best + specials[which].text.size();
  }
  return absl::OkStatus();
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
