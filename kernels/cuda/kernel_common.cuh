// What the CUDA backend's kernel files share (cuda_kernels.h): launch constants, grid sizes
// and the warp reductions. The kernels are fp32 throughout, written after the reference
// (kernels/cpu/reference_ops.cc) formula by formula; reductions use warp shuffles and
// shared-memory trees whose shape depends only on the sizes, never atomics, so every result
// is reproducible bit for bit.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace longhaul::kernels::cuda {

constexpr int kWarp = 32;
constexpr int kBlock = 256;  // threads per block of most kernels
constexpr float kLayerNormEps = 1e-5f;
// Rows per chunk of the column reductions (layernorm dweight/dbias, matmul dbias).
constexpr int kRowsPerChunk = 32;

inline unsigned Blocks(size_t work, int per_block) {
  return static_cast<unsigned>((work + per_block - 1) / per_block);
}

// Butterfly sum: every lane ends with the same value (each step adds the same two numbers, in
// either order, and float addition is commutative).
__device__ inline float WarpSum(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float WarpMax(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace longhaul::kernels::cuda
