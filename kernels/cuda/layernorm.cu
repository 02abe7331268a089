// The CUDA backend's layernorm kernels (cuda_kernels.h), and the column sums that share its
// chunked reduction: layernorm's dweight and dbias, the matmul bias (broadcast forward,
// column sum backward).
#include "kernels/cuda/kernel_common.cuh"

namespace longhaul::kernels::cuda {
namespace {

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

}  // namespace

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
  ColumnChunksAccumulate(stream, out, scratch, N, C);
}

void ColumnChunksAccumulate(cudaStream_t stream, float* out, const float* scratch, int N, int C) {
  if (N == 0 || C == 0) return;
  const unsigned chunks = Blocks(N, kRowsPerChunk);
  ChunkSumKernel<<<Blocks(C, kBlock), kBlock, 0, stream>>>(out, nullptr, scratch, chunks, C, C);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

}  // namespace longhaul::kernels::cuda
