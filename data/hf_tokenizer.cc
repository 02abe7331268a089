// Byte-level BPE over a Hugging Face tokenizer.json (see hf_tokenizer.h).
#include "data/hf_tokenizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "model/file_io.h"

namespace longhaul::data {
namespace {

// Hugging Face's merge rule for byte_pair_merge.h: parts merge when the pair is in the merges
// list (not merely when their concatenation is a token), at the pair's index there.
struct HfRanks {
  const HfTokenizerSpec& spec;
  TokenId PartId(std::string_view part) const {
    const auto it = spec.id_of.find(part);
    return it == spec.id_of.end() ? kNoMerge : it->second;
  }
  TokenId MergeRank(std::string_view piece, uint32_t left, uint32_t mid, uint32_t end) const {
    const TokenId made = PartId(piece.substr(left, end - left));
    if (made == kNoMerge) return kNoMerge;
    const HfMerge& m = spec.merges[made];
    const uint32_t left_bytes = mid - left;
    if (m.left_bytes == left_bytes) return m.rank;
    for (uint32_t k = m.more_begin; k < m.more_begin + m.more_count; ++k) {
      if (spec.more_merges[k].left_bytes == left_bytes) return spec.more_merges[k].rank;
    }
    return kNoMerge;
  }
};

}  // namespace

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(const std::string& path,
                                                         HfOptions options) {
  ASSIGN_OR_RETURN(const int64_t size, model::FileSize(path, "tokenizer.json"));
  if (uint64_t(size) > kMaxTokenizerJsonBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tokenizer.json is ", size,
                                                   " bytes, more than the limit of ",
                                                   kMaxTokenizerJsonBytes));
  }
  std::string text(size_t(size), '\0');
  RETURN_IF_ERROR(model::ReadFileRange(path, "tokenizer.json", 0, text.data(), text.size()));
  return Parse(text, path, std::move(options));
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Parse(std::string_view json_text,
                                                          const std::string& name,
                                                          HfOptions options) {
  ASSIGN_OR_RETURN(HfTokenizerSpec spec, ParseHfTokenizerJson(json_text, name));
  return Create(std::move(spec), std::move(options));
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Create(HfTokenizerSpec spec,
                                                           HfOptions options) {
  auto t = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  for (const HfSplitStep& step : spec.pre_tokenizer) {
    auto splitter = RegexSplitter::Create(step.pattern);
    if (!splitter.ok())
      return Annotate(splitter.status(), absl::StrCat(spec.source, ": ", step.where));
    t->splitters_.push_back(std::move(splitter).value());
  }
  auto find_added = [&](const std::string& content) -> std::optional<TokenId> {
    for (const auto* tokens : {&spec.special, &spec.added}) {
      for (const SpecialToken& s : *tokens) {
        if (s.text == content) return s.id;
      }
    }
    return std::nullopt;
  };
  if (!options.eot_token.empty()) {
    t->eot_id_ = find_added(options.eot_token);
    if (!t->eot_id_.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(spec.source, ": HfOptions::eot_token '",
                                                     options.eot_token,
                                                     "' is not an added token of the file"));
    }
  } else {
    t->eot_id_ = find_added("<|endoftext|>");
    if (!t->eot_id_.has_value()) t->eot_id_ = find_added("<|end_of_text|>");
  }
  if (options.add_bos && !spec.bos.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        spec.source, ": HfOptions::add_bos, but the file's post_processor puts no BOS first"));
  }
  if (!spec.ignore_merges) {
    // Which tokens the merges make from their own bytes: a piece that is one of them is that
    // token (one lookup, as with ignore_merges), the others need merging.
    t->whole_.assign(spec.tokens.size(), false);
    std::vector<TokenId> ids;
    for (const auto& [bytes, id] : spec.id_of) {
      ids.clear();
      BytePairEncodeWith(bytes, HfRanks{spec}, &ids);
      t->whole_[id] = ids.size() == 1 && ids[0] == id;
    }
  }
  t->added_ = std::make_unique<SpecialTokenSplitter>(spec.special, spec.added);
  t->spec_ = std::move(spec);
  t->options_ = std::move(options);
  t->serial_ = NewPieceCacheSerial();
  return t;
}

std::vector<std::string> HfTokenizer::pre_tokenizer_patterns() const {
  std::vector<std::string> patterns;
  for (const auto& splitter : splitters_) patterns.push_back(splitter->pattern());
  return patterns;
}

void HfTokenizer::ResetPieceCache() const { PieceCache::ForThread(serial_).Clear(); }

void HfTokenizer::EncodePiece(std::string_view piece, PieceCache* cache,
                              std::vector<TokenId>* ids) const {
  const auto direct = spec_.id_of.find(piece);
  if (direct != spec_.id_of.end() && (spec_.ignore_merges || whole_[direct->second])) {
    ids->push_back(direct->second);
    return;
  }
  if (cache == nullptr) {
    BytePairEncodeWith(piece, HfRanks{spec_}, ids);
    return;
  }
  cache->Encode(piece, options_.piece_cache_entries, ids,
                [&](std::string_view p, std::vector<TokenId>* out) {
                  BytePairEncodeWith(p, HfRanks{spec_}, out);
                });
}

Status HfTokenizer::SplitAndEncode(size_t step, std::string_view text, PieceCache* cache,
                                   std::vector<TokenId>* ids) const {
  if (step == splitters_.size()) {
    EncodePiece(text, cache, ids);
    return absl::OkStatus();
  }
  if (step + 1 == splitters_.size()) {  // the last (usually the only) step: no nesting
    return splitters_[step]->Split(
        text, [&](std::string_view piece) { EncodePiece(piece, cache, ids); },
        RegexSplitter::Unmatched::kKeep);
  }
  Status inner;
  const Status status = splitters_[step]->Split(
      text,
      [&](std::string_view piece) {
        if (inner.ok()) inner = SplitAndEncode(step + 1, piece, cache, ids);
      },
      RegexSplitter::Unmatched::kKeep);
  return status.ok() ? inner : status;
}

Status HfTokenizer::EncodeOrdinary(std::string_view text, std::vector<TokenId>* ids) const {
  PieceCache* cache = options_.piece_cache_entries > 0 ? &PieceCache::ForThread(serial_) : nullptr;
  return SplitAndEncode(0, text, cache, ids);
}

Status HfTokenizer::EncodeTo(std::string_view text, const EncodeOptions& options,
                             std::vector<TokenId>* ids) const {
  return EncodeWithSpecialTokens(
      text, options, *added_, options_.add_bos ? spec_.bos : std::nullopt, name(),
      [&](std::string_view segment) { return EncodeOrdinary(segment, ids); }, ids);
}

StatusOr<std::string> HfTokenizer::Decode(std::span<const TokenId> ids) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (size_t i = 0; i < ids.size(); ++i) {
    const TokenId id = ids[i];
    if (id >= spec_.tokens.size() || !spec_.defined[id]) {
      return absl::InvalidArgumentError(absl::StrCat(name(), ": id ", id, " at index ", i,
                                                     " is no token (vocabulary size ", vocab_size(),
                                                     ")"));
    }
    bytes += spec_.tokens[id];
  }
  return bytes;
}

}  // namespace longhaul::data
