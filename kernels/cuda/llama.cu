// The CUDA backend's Llama-family kernels (cuda_kernels.h): RMSNorm, the rotary embedding,
// SwiGLU, and the head reshapes of grouped-query attention (its products are cuBLAS's, in
// cuda_ops.cc). Written after the reference (kernels/cpu/reference_llama.cc) formula by
// formula; no atomics: RMSNorm's dweight sums fixed chunks of rows, then the chunks in order
// (layernorm.cu's second pass, ColumnChunksAccumulate).
#include "kernels/cuda/kernel_common.cuh"

namespace longhaul::kernels::cuda {
namespace {

// ---- RMSNorm --------------------------------------------------------------------------------

// One warp per row.
__global__ void RmsNormForwardKernel(float* out, float* rstd, const float* inp, const float* weight,
                                     int N, int C, float eps) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const float* x = inp + static_cast<size_t>(row) * C;
  float ss = 0.0f;
  for (int i = lane; i < C; i += kWarp) ss += x[i] * x[i];
  const float r = 1.0f / sqrtf(WarpSum(ss) / C + eps);
  float* o = out + static_cast<size_t>(row) * C;
  for (int i = lane; i < C; i += kWarp) o[i] = weight[i] * (x[i] * r);
  if (lane == 0) rstd[row] = r;
}

// dx += (w dy - xhat dot) r, dot = mean(w dy xhat), xhat = x r. One warp per row.
__global__ void RmsNormBackwardInputKernel(float* dinp, const float* dout, const float* inp,
                                           const float* weight, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const size_t off = static_cast<size_t>(row) * C;
  const float r = rstd[row];
  float dot = 0.0f;
  for (int i = lane; i < C; i += kWarp) dot += weight[i] * dout[off + i] * (inp[off + i] * r);
  dot = WarpSum(dot) / C;
  for (int i = lane; i < C; i += kWarp) {
    const float xhat = inp[off + i] * r;
    dinp[off + i] += (weight[i] * dout[off + i] - xhat * dot) * r;
  }
}

// grid (ceil(C / kBlock), chunks): one chunk of rows' sum of dy * xhat per column.
__global__ void RmsNormWeightPartialKernel(float* scratch, const float* dout, const float* inp,
                                           const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int chunk = blockIdx.y;
  const int end = min(N, (chunk + 1) * kRowsPerChunk);
  float dw = 0.0f;
  for (int n = chunk * kRowsPerChunk; n < end; n++) {
    const size_t off = static_cast<size_t>(n) * C + c;
    dw += dout[off] * (inp[off] * rstd[n]);
  }
  scratch[static_cast<size_t>(chunk) * C + c] = dw;
}

// ---- rotary embedding -----------------------------------------------------------------------

// One thread per pair (x[i], x[i + HD/2]) of a query or key head; sign -1 is the transpose.
__global__ void RotateKernel(float* qkv, const float* cos, const float* sin, int T, int heads,
                             int HD, size_t width, float sign, size_t total) {
  const size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (p >= total) return;
  const int half = HD / 2;
  const int i = static_cast<int>(p % half);
  const int h = static_cast<int>((p / half) % heads);
  const size_t bt = p / (static_cast<size_t>(half) * heads);
  const int t = static_cast<int>(bt % T);
  float* x = qkv + bt * width + static_cast<size_t>(h) * HD;
  const float c = cos[static_cast<size_t>(t) * half + i];
  const float s = sign * sin[static_cast<size_t>(t) * half + i];
  const float x1 = x[i], x2 = x[i + half];
  x[i] = x1 * c - x2 * s;
  x[i + half] = x2 * c + x1 * s;
}

// ---- SwiGLU ---------------------------------------------------------------------------------

__global__ void SwiGluForwardKernel(float* out, const float* inp, int I, size_t total) {
  const size_t k = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= total) return;
  const size_t n = k / I, i = k % I;
  const float g = inp[n * 2 * I + i], up = inp[n * 2 * I + I + i];
  out[k] = g / (1.0f + expf(-g)) * up;
}

__global__ void SwiGluBackwardKernel(float* dinp, const float* inp, const float* dout, int I,
                                     size_t total) {
  const size_t k = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k >= total) return;
  const size_t n = k / I, i = k % I;
  const float g = inp[n * 2 * I + i], up = inp[n * 2 * I + I + i], dy = dout[k];
  const float sig = 1.0f / (1.0f + expf(-g));
  dinp[n * 2 * I + i] += dy * up * sig * (1.0f + g * (1.0f - sig));
  dinp[n * 2 * I + I + i] += dy * (g * sig);
}

// ---- grouped-query attention: head layouts --------------------------------------------------

// One thread per element of a (B,H,T,HD) tensor: its offset in rows of `width` floats
// (B,T,width) whose heads start at column `first`.
__device__ size_t RowOffset(size_t e, int H, int T, int HD, size_t width, size_t first) {
  const int d = static_cast<int>(e % HD);
  const int t = static_cast<int>((e / HD) % T);
  const int h = static_cast<int>((e / (static_cast<size_t>(HD) * T)) % H);
  const size_t b = e / (static_cast<size_t>(HD) * T * H);
  return (b * T + t) * width + first + static_cast<size_t>(h) * HD + d;
}

__global__ void GatherHeadsKernel(float* heads, const float* rows, int H, int T, int HD,
                                  size_t width, size_t first, size_t total) {
  const size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < total) heads[e] = rows[RowOffset(e, H, T, HD, width, first)];
}

__global__ void ScatterHeadsKernel(float* rows, const float* heads, int H, int T, int HD,
                                   size_t width, size_t first, bool accumulate, size_t total) {
  const size_t e = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= total) return;
  float* r = rows + RowOffset(e, H, T, HD, width, first);
  *r = accumulate ? *r + heads[e] : heads[e];
}

}  // namespace

void RmsNormForward(cudaStream_t stream, float* out, float* rstd, const float* inp,
                    const float* weight, int N, int C, float eps) {
  if (N == 0) return;
  RmsNormForwardKernel<<<Blocks(N, kBlock / kWarp), kBlock, 0, stream>>>(out, rstd, inp, weight, N,
                                                                         C, eps);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void RmsNormBackward(cudaStream_t stream, float* dinp, float* dweight, float* scratch,
                     const float* dout, const float* inp, const float* weight, const float* rstd,
                     int N, int C) {
  if (N == 0 || C == 0) return;
  RmsNormBackwardInputKernel<<<Blocks(N, kBlock / kWarp), kBlock, 0, stream>>>(dinp, dout, inp,
                                                                               weight, rstd, N, C);
  LONGHAUL_CUDA_CHECK_LAUNCH();
  RmsNormWeightPartialKernel<<<dim3(Blocks(C, kBlock), Blocks(N, kRowsPerChunk)), kBlock, 0,
                               stream>>>(scratch, dout, inp, rstd, N, C);
  LONGHAUL_CUDA_CHECK_LAUNCH();
  ColumnChunksAccumulate(stream, dweight, scratch, N, C);
}

void Rotate(cudaStream_t stream, float* qkv, const float* cos, const float* sin, int B, int T,
            int NH, int NKV, int HD, float sign) {
  const size_t total = static_cast<size_t>(B) * T * (NH + NKV) * (HD / 2);
  if (total == 0) return;
  const size_t width = static_cast<size_t>(NH + 2 * NKV) * HD;
  RotateKernel<<<Blocks(total, kBlock), kBlock, 0, stream>>>(qkv, cos, sin, T, NH + NKV, HD, width,
                                                             sign, total);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void SwiGluForward(cudaStream_t stream, float* out, const float* inp, int N, int I) {
  const size_t total = static_cast<size_t>(N) * I;
  if (total == 0) return;
  SwiGluForwardKernel<<<Blocks(total, kBlock), kBlock, 0, stream>>>(out, inp, I, total);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void SwiGluBackward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, int N,
                    int I) {
  const size_t total = static_cast<size_t>(N) * I;
  if (total == 0) return;
  SwiGluBackwardKernel<<<Blocks(total, kBlock), kBlock, 0, stream>>>(dinp, inp, dout, I, total);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void GatherHeads(cudaStream_t stream, float* heads, const float* rows, int B, int T, int H, int HD,
                 size_t width, size_t first) {
  const size_t total = static_cast<size_t>(B) * H * T * HD;
  if (total == 0) return;
  GatherHeadsKernel<<<Blocks(total, kBlock), kBlock, 0, stream>>>(heads, rows, H, T, HD, width,
                                                                  first, total);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

void ScatterHeads(cudaStream_t stream, float* rows, const float* heads, int B, int T, int H, int HD,
                  size_t width, size_t first, bool accumulate) {
  const size_t total = static_cast<size_t>(B) * H * T * HD;
  if (total == 0) return;
  ScatterHeadsKernel<<<Blocks(total, kBlock), kBlock, 0, stream>>>(rows, heads, H, T, HD, width,
                                                                   first, accumulate, total);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

}  // namespace longhaul::kernels::cuda
