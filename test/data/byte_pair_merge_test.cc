// Byte-pair merging (data/byte_pair_merge.h): hand-checked cases on a toy vocabulary, then
// both algorithms against a plain re-implementation of tiktoken's rule on random
// vocabularies and texts, and the heap on a megabyte-long piece.
#include "data/byte_pair_merge.h"

#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "test/data/toy_ranks.h"

namespace longhaul::data {
namespace {

using testing::ToyRanks;

// tiktoken's rule, written as plainly as possible: merge the lowest-ranked adjacent pair,
// the leftmost on a tie, until none is a token.
std::vector<TokenId> Reference(const std::string& piece, const RankMap& ranks) {
  std::vector<std::string> parts;
  for (char c : piece) parts.push_back(std::string(1, c));
  while (parts.size() > 1) {
    size_t best = parts.size();
    TokenId best_rank = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && (best == parts.size() || it->second < best_rank)) {
        best = i;
        best_rank = it->second;
      }
    }
    if (best == parts.size()) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + best + 1);
  }
  std::vector<TokenId> ids;
  for (const std::string& p : parts) ids.push_back(ranks.at(p));
  return ids;
}

std::vector<TokenId> Rescan(const std::string& piece, const RankMap& ranks) {
  std::vector<TokenId> ids;
  BytePairEncodeRescan(piece, ranks, &ids);
  return ids;
}

std::vector<TokenId> Heap(const std::string& piece, const RankMap& ranks) {
  std::vector<TokenId> ids;
  BytePairEncodeHeap(piece, ranks, &ids);
  return ids;
}

TEST_CASE("lowest rank merges first") {
  const RankMap ranks = ToyRanks({"ab", "bc", "abc", "cd"}).rank_of;  // 256..259
  for (auto* encode : {&Rescan, &Heap}) {
    CHECK(encode("a", ranks) == std::vector<TokenId>{'a'});
    CHECK(encode("abc", ranks) == std::vector<TokenId>{258});
    CHECK(encode("bcd", ranks) == std::vector<TokenId>{257, 'd'});  // bc (257) before cd (259)
    CHECK(encode("abcd", ranks) == std::vector<TokenId>{258, 'd'});
    CHECK(encode("xyz", ranks) == std::vector<TokenId>{'x', 'y', 'z'});
  }
}

TEST_CASE("on equal ranks the leftmost pair merges first") {
  const RankMap ranks = ToyRanks({"aa", "aaaa"}).rank_of;  // 256, 257
  for (auto* encode : {&Rescan, &Heap}) {
    CHECK(encode("aaa", ranks) == std::vector<TokenId>{256, 'a'});
    CHECK(encode("aaaa", ranks) == std::vector<TokenId>{257});
    CHECK(encode("aaaaa", ranks) == std::vector<TokenId>{257, 'a'});
    CHECK(encode("aaaaaa", ranks) == std::vector<TokenId>{257, 256});
  }
}

// A random vocabulary over a few letters, grown the way BPE training grows one (each new
// token joins two existing ones) but with ranks shuffled among the merged tokens, so that
// merge order is not length order.
RankMap RandomVocabulary(std::mt19937_64& rng, int merges) {
  std::vector<std::string> tokens = {"a", "b", "c", "d"};
  std::vector<std::string> merged;
  while (int(merged.size()) < merges) {
    const std::string t = tokens[rng() % tokens.size()] + tokens[rng() % tokens.size()];
    if (std::find(tokens.begin(), tokens.end(), t) != tokens.end()) continue;
    tokens.push_back(t);
    merged.push_back(t);
  }
  if (rng() % 2) std::shuffle(merged.begin(), merged.end(), rng);
  return ToyRanks(merged).rank_of;
}

TEST_CASE("both algorithms agree with the plain rule on random vocabularies and text") {
  std::mt19937_64 rng(20240537);
  for (int vocab = 0; vocab < 40; ++vocab) {
    const RankMap ranks = RandomVocabulary(rng, 20 + int(rng() % 200));
    for (int text = 0; text < 50; ++text) {
      std::string piece(1 + rng() % 200, 'a');
      const int letters = 1 + int(rng() % 4);
      for (char& c : piece) c = char('a' + rng() % letters);
      const std::vector<TokenId> want = Reference(piece, ranks);
      REQUIRE(Rescan(piece, ranks) == want);
      REQUIRE(Heap(piece, ranks) == want);
      std::vector<TokenId> chosen;
      BytePairEncode(piece, ranks, &chosen);
      REQUIRE(chosen == want);
    }
  }
}

// No timing is asserted (tests never do): the rescan algorithm would take hours on this piece,
// so a quadratic merge fails the test by its Bazel timeout, on any machine, under any sanitizer.
TEST_CASE("a megabyte-long piece is merged") {
  const RankMap ranks = ToyRanks({"aa", "aaaa", "aaaaaaaa", "ab", "aab"}).rank_of;
  std::string piece(1 << 20, 'a');
  piece[piece.size() / 2] = 'b';
  std::vector<TokenId> ids;
  BytePairEncode(piece, ranks, &ids);
  // 2^19 'a's, then "b...": the first half merges into 2^16 tokens of 8.
  REQUIRE(ids.size() > (size_t(1) << 17) - 8);
  REQUIRE(ids.size() < (size_t(1) << 17) + 8);
  const std::string small(4000, 'a');
  CHECK(Heap(small, ranks) == Reference(small, ranks));
}

}  // namespace
}  // namespace longhaul::data
