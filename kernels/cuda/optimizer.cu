// The CUDA backend's optimizer kernels (cuda_kernels.h): the AdamW update and the sum of
// squares (in double, a fixed tree) that global gradient clipping needs.
#include "kernels/cuda/kernel_common.cuh"

namespace longhaul::kernels::cuda {
namespace {

// ---- optimizer ------------------------------------------------------------------------------

__global__ void AdamWKernel(float* params, const float* grads, float* m, float* v, size_t n,
                            float lr, float beta1, float beta2, float beta1_correction,
                            float beta2_correction, float eps, float weight_decay,
                            float grad_scale) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = grads[i] * grad_scale;
  const float mi = beta1 * m[i] + (1.0f - beta1) * g;
  const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  const float m_hat = mi / beta1_correction;
  const float v_hat = vi / beta2_correction;
  m[i] = mi;
  v[i] = vi;
  params[i] -= lr * (m_hat / (sqrtf(v_hat) + eps) + weight_decay * params[i]);
}

// Tree sum of one value per thread of a kBlock-thread block; thread 0 gets the result.
__device__ double BlockSum(double v) {
  __shared__ double shared[kBlock];
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  return shared[0];
}

// Block b sums elements [b * kSumSquaresChunk, ...): thread j takes j, j + kBlock, ...
__global__ void SumSquaresPartialKernel(double* partials, const float* x, size_t n) {
  const size_t start = static_cast<size_t>(blockIdx.x) * kSumSquaresChunk;
  const size_t end = min(n, start + kSumSquaresChunk);
  double acc = 0.0;
  for (size_t i = start + threadIdx.x; i < end; i += kBlock) {
    acc += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  }
  const double sum = BlockSum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

__global__ void SumPartialsKernel(double* result, const double* partials, size_t count) {
  double acc = 0.0;
  for (size_t i = threadIdx.x; i < count; i += kBlock) acc += partials[i];
  const double sum = BlockSum(acc);
  if (threadIdx.x == 0) *result = sum;
}

}  // namespace

void AdamW(cudaStream_t stream, float* params, const float* grads, float* m, float* v, size_t n,
           float lr, float beta1, float beta2, float beta1_correction, float beta2_correction,
           float eps, float weight_decay, float grad_scale) {
  if (n == 0) return;
  AdamWKernel<<<Blocks(n, kBlock), kBlock, 0, stream>>>(params, grads, m, v, n, lr, beta1, beta2,
                                                        beta1_correction, beta2_correction, eps,
                                                        weight_decay, grad_scale);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

size_t SumSquaresPartials(size_t n) { return (n + kSumSquaresChunk - 1) / kSumSquaresChunk; }

void SumSquares(cudaStream_t stream, double* result, double* partials, const float* x, size_t n) {
  const size_t count = SumSquaresPartials(n);
  if (count == 0) {
    LONGHAUL_CUDA_CHECK(cudaMemsetAsync(result, 0, sizeof(double), stream));
    return;
  }
  SumSquaresPartialKernel<<<static_cast<unsigned>(count), kBlock, 0, stream>>>(partials, x, n);
  LONGHAUL_CUDA_CHECK_LAUNCH();
  SumPartialsKernel<<<1, kBlock, 0, stream>>>(result, partials, count);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

}  // namespace longhaul::kernels::cuda
