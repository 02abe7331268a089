// Byte-pair encoding of one pre-tokenized piece: start from single bytes and repeatedly merge
// the adjacent pair whose concatenation has the lowest rank (the leftmost such pair on a
// tie) until no adjacent pair is a token; each remaining part is one token. This is exactly
// tiktoken's rule, so ids match tiktoken's for the same ranks.
//
// Two algorithms give the same result: tiktoken's own (re-scan the parts after each merge,
// O(n * merges), fastest for the short pieces that words make) and a min-heap of candidate
// pairs over a linked list of parts (O(n log n)), for long pieces (hostile or odd input: a
// megabyte without a space), where the first would take hours.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "data/tokenizer.h"

namespace longhaul::data {

// Hash and equality of byte strings that also take std::string_view (Debian's abseil has its
// own string_view, which its default string hash expects), so lookups need no copy.
struct BytesHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const {
    return absl::Hash<absl::string_view>()(absl::string_view(s.data(), s.size()));
  }
};
struct BytesEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

// A map keyed by byte strings, looked up by std::string_view.
template <typename V>
using BytesMap = absl::flat_hash_map<std::string, V, BytesHash, BytesEq>;

// Token bytes -> rank (= id).
using RankMap = BytesMap<TokenId>;

// Pieces at least this long use the heap.
inline constexpr size_t kHeapMergeMinBytes = 64;

// Appends the tokens of `piece` to `*out`.
// REQUIRES: `piece` is not empty, shorter than 2^32 bytes, and each of its bytes is a token
// of `ranks`.
void BytePairEncode(std::string_view piece, const RankMap& ranks, std::vector<TokenId>* out);

// The two algorithms behind BytePairEncode, for tests; same REQUIRES.
void BytePairEncodeRescan(std::string_view piece, const RankMap& ranks, std::vector<TokenId>* out);
void BytePairEncodeHeap(std::string_view piece, const RankMap& ranks, std::vector<TokenId>* out);

}  // namespace longhaul::data
