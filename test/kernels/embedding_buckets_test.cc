// The GPU embedding backward's host-side grouping (kernels/cuda/embedding_buckets.h): every
// position in exactly one bucket, buckets by ascending token, positions ascending within one.
#include "kernels/cuda/embedding_buckets.h"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

namespace longhaul::kernels::cuda {
namespace {

TEST_CASE("embedding buckets: positions grouped by token, in order") {
  const std::vector<int32_t> tokens = {3, 1, 3, 0, 1};
  const EmbeddingBuckets b = PlanEmbeddingBuckets(tokens.data(), tokens.size());
  CHECK(b.num_buckets == 3);
  // tokens 0, 1, 3 | starts 0, 1, 3, 5 | positions 3 | 1, 4 | 0, 2
  CHECK(b.packed == std::vector<int32_t>{0, 1, 3, 0, 1, 3, 5, 3, 1, 4, 0, 2});
}

TEST_CASE("embedding buckets: an empty batch and a batch of one token") {
  const EmbeddingBuckets empty = PlanEmbeddingBuckets(nullptr, 0);
  CHECK(empty.num_buckets == 0);
  CHECK(empty.packed == std::vector<int32_t>{0});  // one start: the end, 0
  const std::vector<int32_t> same(4, 7);
  const EmbeddingBuckets one = PlanEmbeddingBuckets(same.data(), same.size());
  CHECK(one.num_buckets == 1);
  CHECK(one.packed == std::vector<int32_t>{7, 0, 4, 0, 1, 2, 3});
}

TEST_CASE("embedding buckets: a random batch partitions its positions") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int32_t> token(0, 49);
  std::vector<int32_t> tokens(1000);
  for (auto& t : tokens) t = token(rng);
  const EmbeddingBuckets b = PlanEmbeddingBuckets(tokens.data(), tokens.size());
  const int n = b.num_buckets;
  REQUIRE(b.packed.size() == static_cast<size_t>(2 * n + 1) + tokens.size());
  const int32_t* starts = b.packed.data() + n;
  const int32_t* positions = starts + n + 1;
  CHECK(starts[0] == 0);
  CHECK(starts[n] == static_cast<int32_t>(tokens.size()));
  std::vector<int> seen(tokens.size(), 0);
  for (int k = 0; k < n; ++k) {
    if (k > 0) CHECK(b.packed[k - 1] < b.packed[k]);
    REQUIRE(starts[k] < starts[k + 1]);
    for (int32_t i = starts[k]; i < starts[k + 1]; ++i) {
      CHECK(tokens[positions[i]] == b.packed[k]);
      if (i > starts[k]) CHECK(positions[i - 1] < positions[i]);
      ++seen[positions[i]];
    }
  }
  CHECK(seen == std::vector<int>(tokens.size(), 1));
}

}  // namespace
}  // namespace longhaul::kernels::cuda
