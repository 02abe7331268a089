// The CUDA backend's embedding kernels (cuda_kernels.h): token and position embeddings
// forward, and their gradients (dwte by token, dwpe by position), without atomics.
#include "kernels/cuda/kernel_common.cuh"

namespace longhaul::kernels::cuda {
namespace {

// ---- embedding ------------------------------------------------------------------------------

__global__ void EmbeddingForwardKernel(float* out, const int32_t* tokens, const float* wte,
                                       const float* wpe, int T, int C, size_t total) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const size_t bt = i / C;
  const int c = static_cast<int>(i % C);
  const int t = static_cast<int>(bt % T);
  out[i] = wte[static_cast<size_t>(tokens[bt]) * C + c] + wpe[static_cast<size_t>(t) * C + c];
}

// grid (num_buckets, ceil(C / kBlock)).
__global__ void EmbeddingBackwardWteKernel(float* dwte, const float* dout,
                                           const int32_t* bucket_tokens,
                                           const int32_t* bucket_starts, const int32_t* positions,
                                           int C) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int bucket = blockIdx.x;
  float* row = dwte + static_cast<size_t>(bucket_tokens[bucket]) * C;
  float acc = row[c];
  for (int j = bucket_starts[bucket]; j < bucket_starts[bucket + 1]; j++) {
    acc += dout[static_cast<size_t>(positions[j]) * C + c];
  }
  row[c] = acc;
}

__global__ void EmbeddingBackwardWpeKernel(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // t * C + c
  if (i >= static_cast<size_t>(T) * C) return;
  float acc = dwpe[i];
  for (int b = 0; b < B; b++) acc += dout[static_cast<size_t>(b) * T * C + i];
  dwpe[i] = acc;
}

}  // namespace

void EmbeddingForward(cudaStream_t stream, float* out, const int32_t* tokens, const float* wte,
                      const float* wpe, int B, int T, int C) {
  const size_t total = static_cast<size_t>(B) * T * C;
  if (total == 0) return;
  EmbeddingForwardKernel<<<Blocks(total, kBlock), kBlock, 0, stream>>>(out, tokens, wte, wpe, T, C,
                                                                       total);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void EmbeddingBackwardWte(cudaStream_t stream, float* dwte, const float* dout,
                          const int32_t* bucket_tokens, const int32_t* bucket_starts,
                          const int32_t* positions, int num_buckets, int C) {
  if (num_buckets == 0 || C == 0) return;
  const dim3 grid(num_buckets, Blocks(C, kBlock));
  EmbeddingBackwardWteKernel<<<grid, kBlock, 0, stream>>>(dwte, dout, bucket_tokens, bucket_starts,
                                                          positions, C);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void EmbeddingBackwardWpe(cudaStream_t stream, float* dwpe, const float* dout, int B, int T,
                          int C) {
  const size_t total = static_cast<size_t>(T) * C;
  if (B == 0 || total == 0) return;
  EmbeddingBackwardWpeKernel<<<Blocks(total, kBlock), kBlock, 0, stream>>>(dwpe, dout, B, T, C);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

}  // namespace longhaul::kernels::cuda
