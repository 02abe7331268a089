// The CUDA backend's own kernels (see cuda_kernels.h): embedding, layernorm, attention's
// reshapes and causal softmax, GELU, residual, softmax cross-entropy, AdamW and the sum of
// squares. fp32 throughout, written after the reference (kernels/cpu/reference_ops.cc) formula
// by formula. Reductions use warp shuffles and shared-memory trees whose shape depends only on
// the sizes, never atomics, so every result is reproducible bit for bit.
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace longhaul::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kBlock = 256;  // threads per block of most kernels
constexpr float kLayerNormEps = 1e-5f;
// Rows per chunk of the column reductions (layernorm dweight/dbias, matmul dbias).
constexpr int kRowsPerChunk = 32;

unsigned Blocks(size_t work, int per_block) {
  return static_cast<unsigned>((work + per_block - 1) / per_block);
}

// Butterfly sum: every lane ends with the same value (each step adds the same two numbers, in
// either order, and float addition is commutative).
__device__ float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

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

// ---- layernorm ------------------------------------------------------------------------------

// One warp per row.
__global__ void LayerNormForwardKernel(float* out, float* mean, float* rstd, const float* inp,
                                       const float* weight, const float* bias, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + static_cast<size_t>(row) * C;
  float sum = 0.0f;
  for (int i = lane; i < C; i += kWarp) sum += x[i];
  const float m = WarpSum(sum) / C;
  float var = 0.0f;
  for (int i = lane; i < C; i += kWarp) {
    const float xshift = x[i] - m;
    var += xshift * xshift;
  }
  const float s = 1.0f / sqrtf(WarpSum(var) / C + kLayerNormEps);
  float* o = out + static_cast<size_t>(row) * C;
  for (int i = lane; i < C; i += kWarp) o[i] = (s * (x[i] - m)) * weight[i] + bias[i];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void LayerNormBackwardInputKernel(float* dinp, const float* dout, const float* inp,
                                             const float* weight, const float* mean,
                                             const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  const float mean_n = mean[row], rstd_n = rstd[row];
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
  for (int i = lane; i < C; i += kWarp) {
    const float norm_i = (inp[off + i] - mean_n) * rstd_n;
    const float dnorm_i = weight[i] * dout[off + i];
    dnorm_mean += dnorm_i;
    dnorm_norm_mean += dnorm_i * norm_i;
  }
  dnorm_mean = WarpSum(dnorm_mean) / C;
  dnorm_norm_mean = WarpSum(dnorm_norm_mean) / C;
  for (int i = lane; i < C; i += kWarp) {
    const float norm_i = (inp[off + i] - mean_n) * rstd_n;
    const float dnorm_i = weight[i] * dout[off + i];
    dinp[off + i] += (dnorm_i - dnorm_mean - norm_i * dnorm_norm_mean) * rstd_n;
  }
}

// grid (ceil(C / kBlock), chunks): partial sums of one chunk of rows per column.
// scratch layout: [chunk][0..C) for dweight, [chunk][C..2C) for dbias.
__global__ void LayerNormParamsPartialKernel(float* scratch, const float* dout, const float* inp,
                                             const float* mean, const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int chunk = blockIdx.y;
  const int end = min(N, (chunk + 1) * kRowsPerChunk);
  float dw = 0.0f, db = 0.0f;
  for (int n = chunk * kRowsPerChunk; n < end; n++) {
    const size_t off = static_cast<size_t>(n) * C + c;
    const float norm = (inp[off] - mean[n]) * rstd[n];
    dw += norm * dout[off];
    db += dout[off];
  }
  scratch[static_cast<size_t>(chunk) * 2 * C + c] = dw;
  scratch[static_cast<size_t>(chunk) * 2 * C + C + c] = db;
}

// Adds the chunks, in order, onto out[c] (out2[c] from the second half when out2 != nullptr).
__global__ void ChunkSumKernel(float* out, float* out2, const float* scratch, int chunks,
                               int stride, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = 0.0f, acc2 = 0.0f;
  for (int k = 0; k < chunks; k++) {
    acc += scratch[static_cast<size_t>(k) * stride + c];
    if (out2 != nullptr) acc2 += scratch[static_cast<size_t>(k) * stride + C + c];
  }
  out[c] += acc;
  if (out2 != nullptr) out2[c] += acc2;
}

// ---- matmul helpers -------------------------------------------------------------------------

__global__ void BroadcastRowsKernel(float* out, const float* row, int C, size_t total) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) out[i] = row[i % C];
}

__global__ void ColumnSumPartialKernel(float* scratch, const float* in, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int chunk = blockIdx.y;
  const int end = min(N, (chunk + 1) * kRowsPerChunk);
  float acc = 0.0f;
  for (int n = chunk * kRowsPerChunk; n < end; n++) acc += in[static_cast<size_t>(n) * C + c];
  scratch[static_cast<size_t>(chunk) * C + c] = acc;
}

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

// ---- pointwise ------------------------------------------------------------------------------

__global__ void GeluForwardKernel(float* out, const float* inp, size_t n, float gelu_scale) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  const float cube = 0.044715f * x * x * x;
  out[i] = 0.5f * x * (1.0f + tanhf(gelu_scale * (x + cube)));
}

__global__ void GeluBackwardKernel(float* dinp, const float* inp, const float* dout, size_t n,
                                   float gelu_scale) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  const float cube = 0.044715f * x * x * x;
  const float tanh_arg = gelu_scale * (x + cube);
  const float tanh_out = tanhf(tanh_arg);
  const float cosh_out = coshf(tanh_arg);
  const float sech2 = 1.0f / (cosh_out * cosh_out);
  const float local_grad =
      0.5f * (1.0f + tanh_out) + x * 0.5f * sech2 * gelu_scale * (1.0f + 3.0f * 0.044715f * x * x);
  dinp[i] += local_grad * dout[i];
}

__global__ void ResidualForwardKernel(float* out, const float* a, const float* b, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

// Reads dout twice, as the reference does, so aliasing (da == dout) behaves the same.
__global__ void ResidualBackwardKernel(float* da, float* db, const float* dout, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  da[i] += dout[i];
  db[i] += dout[i];
}

// ---- loss -----------------------------------------------------------------------------------

// Running (max, sum of exp(x - max)) pairs, merged in a fixed tree.
struct MaxSum {
  float m;
  float s;
};

__device__ MaxSum Merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  const float sa = a.m == -INFINITY ? 0.0f : a.s * expf(a.m - m);
  const float sb = b.m == -INFINITY ? 0.0f : b.s * expf(b.m - m);
  return {m, sa + sb};
}

// One block (kBlock threads) per row.
__global__ void SoftmaxCrossEntropyForwardKernel(float* probs, float* losses, const float* logits,
                                                 const int32_t* targets, int V, int Vp) {
  __shared__ MaxSum shared[kBlock / kWarp];
  const size_t row = blockIdx.x;
  const float* l = logits + row * Vp;
  float* p = probs + row * Vp;
  MaxSum acc{-INFINITY, 0.0f};
  for (int i = threadIdx.x; i < V; i += blockDim.x) acc = Merge(acc, MaxSum{l[i], 1.0f});
  for (int o = kWarp / 2; o > 0; o /= 2) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, acc.m, o), __shfl_xor_sync(0xffffffffu, acc.s, o)};
    acc = Merge(acc, other);
  }
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) shared[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < kBlock / kWarp ? shared[lane] : MaxSum{-INFINITY, 0.0f};
    for (int o = kWarp / 2; o > 0; o /= 2) {
      MaxSum other{__shfl_xor_sync(0xffffffffu, acc.m, o), __shfl_xor_sync(0xffffffffu, acc.s, o)};
      acc = Merge(acc, other);
    }
    if (lane == 0) shared[0] = acc;
  }
  __syncthreads();
  const float maxval = shared[0].m, sum = shared[0].s;
  for (int i = threadIdx.x; i < Vp; i += blockDim.x)
    p[i] = i < V ? expf(l[i] - maxval) / sum : 0.0f;
  if (threadIdx.x == 0) {
    const int target = targets[row];
    losses[row] = -logf(expf(l[target] - maxval) / sum);
  }
}

// One block per row.
__global__ void SoftmaxCrossEntropyBackwardKernel(float* dlogits, const float* probs,
                                                  const int32_t* targets, float dloss, int V,
                                                  int Vp) {
  const size_t row = blockIdx.x;
  const int target = targets[row];
  float* d = dlogits + row * Vp;
  const float* p = probs + row * Vp;
  for (int i = threadIdx.x; i < V; i += blockDim.x) {
    const float indicator = i == target ? 1.0f : 0.0f;
    d[i] += (p[i] - indicator) * dloss;
  }
}

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

// ---- launchers --------------------------------------------------------------------------------

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

void LayerNormForward(cudaStream_t stream, float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, int N, int C) {
  if (N == 0) return;
  LayerNormForwardKernel<<<Blocks(N, kBlock / kWarp), kBlock, 0, stream>>>(out, mean, rstd, inp,
                                                                           weight, bias, N, C);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void LayerNormBackwardInput(cudaStream_t stream, float* dinp, const float* dout, const float* inp,
                            const float* weight, const float* mean, const float* rstd, int N,
                            int C) {
  if (N == 0 || C == 0) return;
  LayerNormBackwardInputKernel<<<Blocks(N, kBlock / kWarp), kBlock, 0, stream>>>(
      dinp, dout, inp, weight, mean, rstd, N, C);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

size_t LayerNormParamsScratch(int N, int C) {
  return static_cast<size_t>(Blocks(N, kRowsPerChunk)) * 2 * C;
}

void LayerNormBackwardParams(cudaStream_t stream, float* dweight, float* dbias, float* scratch,
                             const float* dout, const float* inp, const float* mean,
                             const float* rstd, int N, int C) {
  if (N == 0 || C == 0) return;
  const unsigned chunks = Blocks(N, kRowsPerChunk);
  LayerNormParamsPartialKernel<<<dim3(Blocks(C, kBlock), chunks), kBlock, 0, stream>>>(
      scratch, dout, inp, mean, rstd, N, C);
  LONGHAUL_CUDA_CHECK_LAUNCH();
  ChunkSumKernel<<<Blocks(C, kBlock), kBlock, 0, stream>>>(dweight, dbias, scratch, chunks, 2 * C,
                                                           C);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void BroadcastRows(cudaStream_t stream, float* out, const float* row, int N, int C) {
  const size_t total = static_cast<size_t>(N) * C;
  if (total == 0) return;
  BroadcastRowsKernel<<<Blocks(total, kBlock), kBlock, 0, stream>>>(out, row, C, total);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

size_t ColumnSumScratch(int N, int C) { return static_cast<size_t>(Blocks(N, kRowsPerChunk)) * C; }

void ColumnSumAccumulate(cudaStream_t stream, float* out, float* scratch, const float* in, int N,
                         int C) {
  if (N == 0 || C == 0) return;
  const unsigned chunks = Blocks(N, kRowsPerChunk);
  ColumnSumPartialKernel<<<dim3(Blocks(C, kBlock), chunks), kBlock, 0, stream>>>(scratch, in, N, C);
  LONGHAUL_CUDA_CHECK_LAUNCH();
  ChunkSumKernel<<<Blocks(C, kBlock), kBlock, 0, stream>>>(out, nullptr, scratch, chunks, C, C);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

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

void GeluForward(cudaStream_t stream, float* out, const float* inp, size_t n, float gelu_scale) {
  if (n == 0) return;
  GeluForwardKernel<<<Blocks(n, kBlock), kBlock, 0, stream>>>(out, inp, n, gelu_scale);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void GeluBackward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, size_t n,
                  float gelu_scale) {
  if (n == 0) return;
  GeluBackwardKernel<<<Blocks(n, kBlock), kBlock, 0, stream>>>(dinp, inp, dout, n, gelu_scale);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void ResidualForward(cudaStream_t stream, float* out, const float* a, const float* b, size_t n) {
  if (n == 0) return;
  ResidualForwardKernel<<<Blocks(n, kBlock), kBlock, 0, stream>>>(out, a, b, n);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void ResidualBackward(cudaStream_t stream, float* da, float* db, const float* dout, size_t n) {
  if (n == 0) return;
  ResidualBackwardKernel<<<Blocks(n, kBlock), kBlock, 0, stream>>>(da, db, dout, n);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void SoftmaxCrossEntropyForward(cudaStream_t stream, float* probs, float* losses,
                                const float* logits, const int32_t* targets, int BT, int V,
                                int Vp) {
  if (BT == 0) return;
  SoftmaxCrossEntropyForwardKernel<<<BT, kBlock, 0, stream>>>(probs, losses, logits, targets, V,
                                                              Vp);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void SoftmaxCrossEntropyBackward(cudaStream_t stream, float* dlogits, const float* probs,
                                 const int32_t* targets, float dloss, int BT, int V, int Vp) {
  if (BT == 0 || V == 0) return;
  SoftmaxCrossEntropyBackwardKernel<<<BT, kBlock, 0, stream>>>(dlogits, probs, targets, dloss, V,
                                                               Vp);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

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
