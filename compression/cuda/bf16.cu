// bfloat16 on the GPU (device_codec.h): FloatsToBf16OnDevice and Bf16ToFloatsOnDevice, round
// to nearest even and saturating as the CPU kernel. Two kinds of kernel, picked at run time
// from the pointers' alignment: vectorized ones for float pointers aligned to 16 bytes, and
// general ones (one thread per element) for the others.
#include "compression/cuda/codec_common.cuh"
#include "compression/cuda/device_codec.h"

namespace longhaul::compression::cuda {
namespace {

// ---- bfloat16 ----------------------------------------------------------------------------------

__device__ __forceinline__ uint32_t FloatToBf16Bits(uint32_t x) {
  uint32_t h = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  if ((h & 0x7f80u) == 0x7f80u) h = (h & 0x8000u) | 0x7f7fu;
  return h;
}

// float4s in (`in` 16-byte aligned), 8 bytes out at `out`, which is kAlign-byte aligned.
template <int kAlign>
__global__ void __launch_bounds__(kThreads)
    FloatsToBf16VecKernel(const float* __restrict__ in, uint64_t n, uint8_t* __restrict__ out,
                          unsigned long long* bad) {
  const uint64_t quads = (n + 3) / 4;
  const uint64_t first =
      static_cast<uint64_t>(blockIdx.x) * (kThreads * kQuadsPerThread) + threadIdx.x;
  float4 v[kQuadsPerThread];
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; k++) {
    const uint64_t q = first + k * kThreads;
    v[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (q < quads) {
      if (4 * q + 4 <= n) {
        v[k] = *reinterpret_cast<const float4*>(in + 4 * q);
      } else {
        float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 4; j++) {
          if (4 * q + j < n) t[j] = in[4 * q + j];
        }
        v[k] = make_float4(t[0], t[1], t[2], t[3]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; k++) {
    const uint64_t q = first + k * kThreads;
    if (q >= quads) continue;
    const uint32_t x[4] = {__float_as_uint(v[k].x), __float_as_uint(v[k].y),
                           __float_as_uint(v[k].z), __float_as_uint(v[k].w)};
    const uint32_t count = QuadCount(4 * q, n);
    uint32_t first_bad = 4;
#pragma unroll
    for (int j = 3; j >= 0; j--) {
      if (j < count && (x[j] & kAbsMask) >= kExpMask) first_bad = j;
    }
    if (first_bad < 4) {
      atomicMin(bad, static_cast<unsigned long long>(4 * q + first_bad));
      continue;
    }
    const uint64_t word = static_cast<uint64_t>(FloatToBf16Bits(x[0])) |
                          (static_cast<uint64_t>(FloatToBf16Bits(x[1])) << 16) |
                          (static_cast<uint64_t>(FloatToBf16Bits(x[2])) << 32) |
                          (static_cast<uint64_t>(FloatToBf16Bits(x[3])) << 48);
    if (count == 4) {
      StoreLe<8, kAlign>(out + 8 * q, word);
    } else {
      for (uint32_t i = 0; i < 2 * count; i++) {
        out[8 * q + i] = static_cast<uint8_t>(word >> (8 * i));
      }
    }
  }
}

// 8 bytes in at `in` (kAlign-byte aligned), float4s out (`out` 16-byte aligned).
template <int kAlign>
__global__ void __launch_bounds__(kThreads)
    Bf16ToFloatsVecKernel(const uint8_t* __restrict__ in, uint64_t n, float* __restrict__ out,
                          unsigned long long* bad) {
  const uint64_t quads = (n + 3) / 4;
  const uint64_t first =
      static_cast<uint64_t>(blockIdx.x) * (kThreads * kQuadsPerThread) + threadIdx.x;
  uint64_t word[kQuadsPerThread];
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; k++) {
    const uint64_t q = first + k * kThreads;
    word[k] = 0;
    if (q < quads) {
      if (4 * q + 4 <= n) {
        word[k] = LoadLe<8, kAlign>(in + 8 * q);
      } else {
        for (uint64_t i = 8 * q; i < 2 * n; i++) {
          word[k] |= static_cast<uint64_t>(in[i]) << (8 * (i - 8 * q));
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; k++) {
    const uint64_t q = first + k * kThreads;
    if (q >= quads) continue;
    const uint32_t count = QuadCount(4 * q, n);
    uint32_t h[4];
    uint32_t first_bad = 4;
#pragma unroll
    for (int j = 3; j >= 0; j--) {
      h[j] = static_cast<uint32_t>(word[k] >> (16 * j)) & 0xffffu;
      if (j < count && (h[j] & 0x7f80u) == 0x7f80u) first_bad = j;
    }
    if (first_bad < 4) {
      atomicMin(bad, static_cast<unsigned long long>(4 * q + first_bad));
      continue;
    }
    if (count == 4) {
      *reinterpret_cast<float4*>(out + 4 * q) =
          make_float4(__uint_as_float(h[0] << 16), __uint_as_float(h[1] << 16),
                      __uint_as_float(h[2] << 16), __uint_as_float(h[3] << 16));
    } else {
#pragma unroll
      for (int j = 0; j < 4; j++) {
        if (j < count) out[4 * q + j] = __uint_as_float(h[j] << 16);
      }
    }
  }
}

// General: one element per thread.
__global__ void FloatsToBf16Kernel(const float* in, uint64_t n, uint8_t* out,
                                   unsigned long long* bad) {
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t x = __float_as_uint(in[i]);
  if ((x & kAbsMask) >= kExpMask) {
    atomicMin(bad, static_cast<unsigned long long>(i));
    return;
  }
  const uint32_t h = FloatToBf16Bits(x);
  out[2 * i] = static_cast<uint8_t>(h);
  out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
}

__global__ void Bf16ToFloatsKernel(const uint8_t* in, uint64_t n, float* out,
                                   unsigned long long* bad) {
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t h = static_cast<uint32_t>(in[2 * i]) | (static_cast<uint32_t>(in[2 * i + 1]) << 8);
  if ((h & 0x7f80u) == 0x7f80u) {
    atomicMin(bad, static_cast<unsigned long long>(i));
    return;
  }
  out[i] = __uint_as_float(h << 16);
}

}  // namespace

int64_t FloatsToBf16OnDevice(const float* in, uint64_t n, uint8_t* out, cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  ErrorIndex bad(stream);
  if (Aligned16(in)) {
    const unsigned grid = Grid((n + 3) / 4, kThreads * kQuadsPerThread);
    WithAlignment(out, [&](auto a) {
      FloatsToBf16VecKernel<decltype(a)::value>
          <<<grid, kThreads, 0, stream>>>(in, n, out, bad.get());
    });
  } else {
    FloatsToBf16Kernel<<<Grid(n, kThreads), kThreads, 0, stream>>>(in, n, out, bad.get());
  }
  LONGHAUL_CUDA_CHECK_LAUNCH();
  return bad.Read();
}

int64_t Bf16ToFloatsOnDevice(const uint8_t* in, uint64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  ErrorIndex bad(stream);
  if (Aligned16(out)) {
    const unsigned grid = Grid((n + 3) / 4, kThreads * kQuadsPerThread);
    WithAlignment(in, [&](auto a) {
      Bf16ToFloatsVecKernel<decltype(a)::value>
          <<<grid, kThreads, 0, stream>>>(in, n, out, bad.get());
    });
  } else {
    Bf16ToFloatsKernel<<<Grid(n, kThreads), kThreads, 0, stream>>>(in, n, out, bad.get());
  }
  LONGHAUL_CUDA_CHECK_LAUNCH();
  return bad.Read();
}

}  // namespace longhaul::compression::cuda
