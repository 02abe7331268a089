// The ids of recently encoded pieces, per thread and per tokenizer: byte-pair merging a piece
// costs far more than looking it up, and the same words come back all through a text. Each
// tokenizer takes a serial (NewPieceCacheSerial) and finds its cache on the calling thread
// with PieceCache::ForThread, so tokenizers stay const and shareable between threads without
// a lock. Shared by the byte-level BPE tokenizers (tiktoken_tokenizer.h, hf_tokenizer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "data/byte_pair_merge.h"
#include "data/tokenizer.h"

namespace longhaul::data {

// Pieces longer than this are not cached (they are rare, and they would crowd out the rest).
inline constexpr size_t kMaxCachedPieceBytes = 256;

class PieceCache {
 public:
  // The calling thread's cache for the tokenizer with this serial. A thread keeps a few (so
  // that alternating between two tokenizers does not empty them on every call); taking one
  // for a new serial empties the one claimed longest ago.
  static PieceCache& ForThread(uint64_t serial);

  // Appends the ids of `piece` to `*ids`: the cached ones, or those `encode(piece, ids)`
  // appends, which are then remembered (unless the piece is longer than
  // kMaxCachedPieceBytes; the cache is emptied when it holds `max_entries`).
  template <typename EncodeFn>
  void Encode(std::string_view piece, size_t max_entries, std::vector<TokenId>* ids,
              EncodeFn&& encode) {
    const auto hit = ids_.find(piece);
    if (hit != ids_.end()) {
      ids->insert(ids->end(), hit->second.begin(), hit->second.end());
      return;
    }
    const size_t before = ids->size();
    encode(piece, ids);
    if (piece.size() <= kMaxCachedPieceBytes) {
      if (ids_.size() >= max_entries) ids_.clear();
      ids_.emplace(piece, CachedIds(ids->begin() + before, ids->end()));
    }
  }

  void Clear() { ids_.clear(); }

 private:
  using CachedIds = absl::InlinedVector<TokenId, 6>;
  uint64_t owner_ = 0;  // the serial of the tokenizer these pieces belong to (0: none)
  BytesMap<CachedIds> ids_;
};

// A serial no other tokenizer in this process has.
uint64_t NewPieceCacheSerial();

}  // namespace longhaul::data
