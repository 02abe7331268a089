// The CUDA backend's loss kernels (cuda_kernels.h): softmax cross-entropy over the
// (padded) vocabulary, forward (probabilities and per-token losses) and backward.
#include "kernels/cuda/kernel_common.cuh"

namespace longhaul::kernels::cuda {
namespace {

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

}  // namespace

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

}  // namespace longhaul::kernels::cuda
