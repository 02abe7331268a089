// Positions grouped by token for the GPU embedding backward; see embedding_buckets.h.
#include "kernels/cuda/embedding_buckets.h"

#include <algorithm>
#include <numeric>

namespace longhaul::kernels::cuda {

EmbeddingBuckets PlanEmbeddingBuckets(const int32_t* tokens, size_t BT) {
  // Group positions by token, each group in ascending position order (a stable sort).
  std::vector<int32_t> order(BT);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return tokens[a] < tokens[b]; });
  std::vector<int32_t> bucket_tokens, bucket_starts;
  for (size_t i = 0; i < BT; i++) {
    if (i == 0 || tokens[order[i]] != tokens[order[i - 1]]) {
      bucket_tokens.push_back(tokens[order[i]]);
      bucket_starts.push_back(static_cast<int32_t>(i));
    }
  }
  EmbeddingBuckets out;
  out.num_buckets = static_cast<int>(bucket_tokens.size());
  bucket_starts.push_back(static_cast<int32_t>(BT));
  out.packed = std::move(bucket_tokens);
  out.packed.insert(out.packed.end(), bucket_starts.begin(), bucket_starts.end());
  out.packed.insert(out.packed.end(), order.begin(), order.end());
  return out;
}

}  // namespace longhaul::kernels::cuda
