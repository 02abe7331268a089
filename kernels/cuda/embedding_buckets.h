// The host-side half of the GPU embedding backward (embedding.cu): the batch's positions
// grouped by token, so that one block per distinct token sums its positions' gradients into
// that token's row in a fixed order (no atomics; the same bits every run). Plain C++, tested
// on the CPU (test/kernels/embedding_buckets_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace longhaul::kernels::cuda {

struct EmbeddingBuckets {
  int num_buckets = 0;  // distinct tokens in the batch
  // One upload: [bucket tokens (num_buckets, ascending) | bucket starts (num_buckets + 1,
  // the last = BT) | positions (BT), grouped by token, ascending within a group].
  std::vector<int32_t> packed;
};

// The buckets of `BT` tokens.
EmbeddingBuckets PlanEmbeddingBuckets(const int32_t* tokens, size_t BT);

}  // namespace longhaul::kernels::cuda
