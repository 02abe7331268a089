// The two byte-pair merge algorithms (see byte_pair_merge.h).
#include "data/byte_pair_merge.h"

#include <cstdint>
#include <limits>
#include <queue>

#include "absl/container/inlined_vector.h"

namespace longhaul::data {
namespace {

constexpr TokenId kNoRank = std::numeric_limits<TokenId>::max();

inline TokenId RankOf(const RankMap& ranks, std::string_view bytes) {
  const auto it = ranks.find(bytes);
  return it == ranks.end() ? kNoRank : it->second;
}

}  // namespace

void BytePairEncodeRescan(std::string_view piece, const RankMap& ranks, std::vector<TokenId>* out) {
  const size_t n = piece.size();
  if (n == 1) {
    out->push_back(RankOf(ranks, piece));
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
    parts.push_back({uint32_t(i), RankOf(ranks, piece.substr(i, 2))});
  }
  parts.push_back({uint32_t(n - 1), kNoRank});
  parts.push_back({uint32_t(n), kNoRank});
  // The rank of parts i and i + 1 merged with part i + 2 (i.e. after i + 1 is removed).
  auto rank_after = [&](size_t i) {
    if (i + 3 >= parts.size()) return kNoRank;
    return RankOf(ranks, piece.substr(parts[i].start, parts[i + 3].start - parts[i].start));
  };
  while (true) {
    TokenId min_rank = kNoRank;
    size_t min_i = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      if (parts[i].rank < min_rank) {
        min_rank = parts[i].rank;
        min_i = i;
      }
    }
    if (min_rank == kNoRank) break;
    if (min_i > 0) parts[min_i - 1].rank = rank_after(min_i - 1);
    parts[min_i].rank = rank_after(min_i);
    parts.erase(parts.begin() + min_i + 1);
  }
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    out->push_back(
        RankOf(ranks, piece.substr(parts[i].start, parts[i + 1].start - parts[i].start)));
  }
}

void BytePairEncodeHeap(std::string_view piece, const RankMap& ranks, std::vector<TokenId>* out) {
  const size_t n = piece.size();
  if (n == 1) {
    out->push_back(RankOf(ranks, piece));
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
  // right neighbour still ends where the entry says (then the span, hence the rank, is the
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
  auto push = [&](uint32_t left, uint32_t right_end) {
    const TokenId rank = RankOf(ranks, piece.substr(left, right_end - left));
    if (rank != kNoRank) heap.push({rank, left, right_end});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(uint32_t(i), uint32_t(i + 2));
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
    if (prev[left] < n) push(prev[left], end[left]);
    if (next[left] < n) push(left, end[next[left]]);
  }
  for (uint32_t i = 0; i < n; i = next[i]) {
    out->push_back(RankOf(ranks, piece.substr(i, end[i] - i)));
  }
}

void BytePairEncode(std::string_view piece, const RankMap& ranks, std::vector<TokenId>* out) {
  if (piece.size() < kHeapMergeMinBytes) {
    BytePairEncodeRescan(piece, ranks, out);
  } else {
    BytePairEncodeHeap(piece, ranks, out);
  }
}

}  // namespace longhaul::data
