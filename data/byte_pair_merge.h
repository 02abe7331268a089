// Byte-pair encoding of one pre-tokenized piece: start from single bytes and repeatedly merge
// the adjacent pair of parts with the lowest merge rank (the leftmost such pair on a tie)
// until no adjacent pair merges; each remaining part is one token.
//
// Two vocabularies rank merges differently, and the algorithms take either (a `Ranks` policy):
//   - tiktoken: two parts merge when their concatenation is a token, at that token's rank
//     (RankMapRanks; the ids are the ranks). This is tiktoken's rule, id for id.
//   - Hugging Face BPE: two parts merge when the pair (left, right) is in the merges list, at
//     its index there (data/hf_tokenizer.h). A token reachable from several pairs merges only
//     from those listed, which is why the policy sees where the left part ends.
//
// Two algorithms give the same result: tiktoken's own (re-scan the parts after each merge,
// O(n * merges), fastest for the short pieces that words make) and a min-heap of candidate
// pairs over a linked list of parts (O(n log n)), for long pieces (hostile or odd input: a
// megabyte without a space), where the first would take hours.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
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

// "These parts do not merge" (and "no such token").
inline constexpr TokenId kNoMerge = std::numeric_limits<TokenId>::max();

// Pieces at least this long use the heap.
inline constexpr size_t kHeapMergeMinBytes = 64;

// A `Ranks` policy has
//   TokenId MergeRank(std::string_view piece, uint32_t left, uint32_t mid, uint32_t end) const;
//       the rank of merging the parts piece[left, mid) and piece[mid, end), or kNoMerge;
//   TokenId PartId(std::string_view part) const;
//       the id of a part that is left when merging stops (every such part is a token: a single
//       byte, or the result of a merge).
// tiktoken's policy: the rank of the concatenation, whatever the split.
struct RankMapRanks {
  const RankMap& ranks;
  TokenId PartId(std::string_view part) const {
    const auto it = ranks.find(part);
    return it == ranks.end() ? kNoMerge : it->second;
  }
  TokenId MergeRank(std::string_view piece, uint32_t left, uint32_t /*mid*/, uint32_t end) const {
    return PartId(piece.substr(left, end - left));
  }
};

// Appends the tokens of `piece` to `*out`.
// REQUIRES: `piece` is not empty, shorter than 2^32 bytes, and each of its bytes is a token
// of `ranks`.
void BytePairEncode(std::string_view piece, const RankMap& ranks, std::vector<TokenId>* out);

// The two algorithms behind BytePairEncode, for tests; same REQUIRES.
void BytePairEncodeRescan(std::string_view piece, const RankMap& ranks, std::vector<TokenId>* out);
void BytePairEncodeHeap(std::string_view piece, const RankMap& ranks, std::vector<TokenId>* out);

// The same over any `Ranks` policy (above); same REQUIRES, each byte a token of the policy.
template <typename Ranks>
void BytePairEncodeRescanWith(std::string_view piece, const Ranks& ranks,
                              std::vector<TokenId>* out) {
  const size_t n = piece.size();
  if (n == 1) {
    out->push_back(ranks.PartId(piece));
    return;
  }
  // parts[i] = (start of part i, rank of part i merged with part i + 1), as in tiktoken;
  // the last two entries are sentinels (the last byte, and the end).
  struct Part {
    uint32_t start;
    TokenId rank;
  };
  absl::InlinedVector<Part, kHeapMergeMinBytes + 1> parts;
  parts.reserve(n + 1);
  for (size_t i = 0; i + 1 < n; ++i) {
    parts.push_back(
        {uint32_t(i), ranks.MergeRank(piece, uint32_t(i), uint32_t(i + 1), uint32_t(i + 2))});
  }
  parts.push_back({uint32_t(n - 1), kNoMerge});
  parts.push_back({uint32_t(n), kNoMerge});
  while (true) {
    TokenId min_rank = kNoMerge;
    size_t min_i = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parts[i].rank < min_rank) {
        min_rank = parts[i].rank;
        min_i = i;
      }
    }
    if (min_rank == kNoMerge) break;
    // Parts min_i and min_i + 1 become one, ending at parts[min_i + 2].start: re-rank it with
    // its left and right neighbours.
    if (min_i > 0) {
      parts[min_i - 1].rank = ranks.MergeRank(piece, parts[min_i - 1].start, parts[min_i].start,
                                              parts[min_i + 2].start);
    }
    parts[min_i].rank = min_i + 3 < parts.size()
                            ? ranks.MergeRank(piece, parts[min_i].start, parts[min_i + 2].start,
                                              parts[min_i + 3].start)
                            : kNoMerge;
    parts.erase(parts.begin() + min_i + 1);
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    out->push_back(ranks.PartId(piece.substr(parts[i].start, parts[i + 1].start - parts[i].start)));
  }
}

template <typename Ranks>
void BytePairEncodeHeapWith(std::string_view piece, const Ranks& ranks, std::vector<TokenId>* out) {
  const size_t n = piece.size();
  if (n == 1) {
    out->push_back(ranks.PartId(piece));
    return;
  }
  // Parts as a doubly linked list indexed by their first byte: a part starting at byte i
  // spans [i, end[i]); next[i] == n ends the list. A merged-away part has end[i] == 0.
  std::vector<uint32_t> end(n), prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    end[i] = uint32_t(i + 1);
    prev[i] = uint32_t(i == 0 ? n : i - 1);
    next[i] = uint32_t(i + 1);
  }
  // Candidate merges: (rank, left part's start, right part's end). Ordering by (rank, start)
  // pops the lowest rank, leftmost first, which is tiktoken's choice. Entries go stale when a
  // neighbour merges; one is current while its left part still starts there and that part's
  // right neighbour still ends where the entry says (then both parts, hence the rank, are the
  // same).
  struct Candidate {
    TokenId rank;
    uint32_t left;
    uint32_t right_end;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::vector<Candidate> storage;
  storage.reserve(n);
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap(
      std::greater<Candidate>(), std::move(storage));
  auto push = [&](uint32_t left, uint32_t mid, uint32_t right_end) {
    const TokenId rank = ranks.MergeRank(piece, left, mid, right_end);
    if (rank != kNoMerge) heap.push({rank, left, right_end});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(uint32_t(i), uint32_t(i + 1), uint32_t(i + 2));
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const uint32_t left = c.left;
    if (end[left] == 0) continue;  // merged into its left neighbour
    const uint32_t right = next[left];
    if (right >= n || end[right] != c.right_end) continue;  // stale
    end[left] = c.right_end;
    end[right] = 0;
    next[left] = next[right];
    if (next[left] < n) prev[next[left]] = left;
    if (prev[left] < n) push(prev[left], left, end[left]);
    if (next[left] < n) push(left, next[left], end[next[left]]);
  }
  for (uint32_t i = 0; i < n; i = next[i]) {
    out->push_back(ranks.PartId(piece.substr(i, end[i] - i)));
  }
}

template <typename Ranks>
void BytePairEncodeWith(std::string_view piece, const Ranks& ranks, std::vector<TokenId>* out) {
  if (piece.size() < kHeapMergeMinBytes) {
    BytePairEncodeRescanWith(piece, ranks, out);
  } else {
    BytePairEncodeHeapWith(piece, ranks, out);
  }
}

}  // namespace longhaul::data
