// The CUDA backend's attention kernels besides the cuBLAS products (cuda_kernels.h): the
// reshapes between the QKV projection and per-head layouts, and the causal softmax forward
// and backward.
#include "kernels/cuda/kernel_common.cuh"

namespace longhaul::kernels::cuda {
namespace {

// ---- attention ------------------------------------------------------------------------------

// One thread per element of a (B,NH,T,hs) tensor: its offset in (B,T,NH,hs) layout with rows
// of `row` floats.
__device__ size_t InterleavedOffset(size_t i, int NH, int T, int hs, int row) {
  const int d = static_cast<int>(i % hs);
  const int t = static_cast<int>((i / hs) % T);
  const int h = static_cast<int>((i / (static_cast<size_t>(hs) * T)) % NH);
  const size_t b = i / (static_cast<size_t>(hs) * T * NH);
  return (b * T + t) * row + static_cast<size_t>(h) * hs + d;
}

__global__ void SplitQkvKernel(float* q, float* k, float* v, const float* qkv, int T, int C, int NH,
                               size_t total) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const size_t src = InterleavedOffset(i, NH, T, C / NH, 3 * C);
  q[i] = qkv[src];
  k[i] = qkv[src + C];
  v[i] = qkv[src + 2 * C];
}

__global__ void AccumulateQkvKernel(float* dqkv, const float* dq, const float* dk, const float* dv,
                                    int T, int C, int NH, size_t total) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const size_t dst = InterleavedOffset(i, NH, T, C / NH, 3 * C);
  dqkv[dst] += dq[i];
  dqkv[dst + C] += dk[i];
  dqkv[dst + 2 * C] += dv[i];
}

__global__ void MergeHeadsKernel(float* out, const float* heads, int T, int C, int NH,
                                 size_t total) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) out[InterleavedOffset(i, NH, T, C / NH, C)] = heads[i];
}

__global__ void SplitHeadsKernel(float* heads, const float* in, int T, int C, int NH,
                                 size_t total) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) heads[i] = in[InterleavedOffset(i, NH, T, C / NH, C)];
}

// One warp per row.
__global__ void CausalSoftmaxForwardKernel(float* att, const float* preatt, size_t rows, int T) {
  const size_t row = static_cast<size_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int t = static_cast<int>(row % T);
  const float* p = preatt + row * T;
  float* a = att + row * T;
  float maxval = -INFINITY;
  for (int t2 = lane; t2 <= t; t2 += kWarp) maxval = fmaxf(maxval, p[t2]);
  maxval = WarpMax(maxval);
  float sum = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += kWarp) sum += expf(p[t2] - maxval);
  sum = WarpSum(sum);
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int t2 = lane; t2 < T; t2 += kWarp) a[t2] = t2 <= t ? expf(p[t2] - maxval) * inv : 0.0f;
}

__global__ void CausalSoftmaxBackwardKernel(float* dpreatt, const float* datt, const float* att,
                                            size_t rows, int T, float scale) {
  const size_t row = static_cast<size_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= rows) return;
  const int t = static_cast<int>(row % T);
  const float* a = att + row * T;
  const float* da = datt + row * T;
  float* dp = dpreatt + row * T;
  float dot = 0.0f;
  for (int t2 = lane; t2 <= t; t2 += kWarp) dot += a[t2] * da[t2];
  dot = WarpSum(dot);
  for (int t2 = lane; t2 < T; t2 += kWarp) {
    dp[t2] = t2 <= t ? a[t2] * (da[t2] - dot) * scale : 0.0f;
  }
}

}  // namespace

void SplitQkv(cudaStream_t stream, float* q, float* k, float* v, const float* qkv, int B, int T,
              int C, int NH) {
  const size_t total = static_cast<size_t>(B) * T * C;
  if (total == 0) return;
  SplitQkvKernel<<<Blocks(total, kBlock), kBlock, 0, stream>>>(q, k, v, qkv, T, C, NH, total);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void AccumulateQkv(cudaStream_t stream, float* dqkv, const float* dq, const float* dk,
                   const float* dv, int B, int T, int C, int NH) {
  const size_t total = static_cast<size_t>(B) * T * C;
  if (total == 0) return;
  AccumulateQkvKernel<<<Blocks(total, kBlock), kBlock, 0, stream>>>(dqkv, dq, dk, dv, T, C, NH,
                                                                    total);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void MergeHeads(cudaStream_t stream, float* out, const float* heads, int B, int T, int C, int NH) {
  const size_t total = static_cast<size_t>(B) * T * C;
  if (total == 0) return;
  MergeHeadsKernel<<<Blocks(total, kBlock), kBlock, 0, stream>>>(out, heads, T, C, NH, total);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void SplitHeads(cudaStream_t stream, float* heads, const float* in, int B, int T, int C, int NH) {
  const size_t total = static_cast<size_t>(B) * T * C;
  if (total == 0) return;
  SplitHeadsKernel<<<Blocks(total, kBlock), kBlock, 0, stream>>>(heads, in, T, C, NH, total);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void CausalSoftmaxForward(cudaStream_t stream, float* att, const float* preatt, size_t rows,
                          int T) {
  if (rows == 0) return;
  CausalSoftmaxForwardKernel<<<Blocks(rows, kBlock / kWarp), kBlock, 0, stream>>>(att, preatt, rows,
                                                                                  T);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void CausalSoftmaxBackward(cudaStream_t stream, float* dpreatt, const float* datt, const float* att,
                           size_t rows, int T, float scale) {
  if (rows == 0) return;
  CausalSoftmaxBackwardKernel<<<Blocks(rows, kBlock / kWarp), kBlock, 0, stream>>>(
      dpreatt, datt, att, rows, T, scale);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

}  // namespace longhaul::kernels::cuda
