// What every GPU codec kernel file shares (see device_codec.h): launch constants, the
// quantizer's parameters as the kernels see them, the scalar pieces that mirror the CPU
// reference (compression/kernels_internal.h) formula for formula, and the host-side helpers
// (scratch memory, the error index, grid sizes, pointer alignment). Each formula is the CPU
// reference's, in the same order and precision; multiplications and additions use the
// __f*_rn intrinsics, which are never fused into FMAs, and the files are built with
// -fmad=false besides, so every byte equals the CPU kernels' bytes.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "compression/cuda/device_codec.h"
#include "compression/kernels.h"
#include "compression/kernels_internal.h"
#include "kernels/cuda/check.h"

namespace longhaul::compression::cuda {


constexpr int kWarp = 32;
constexpr int kThreads = 256;       // threads per CTA, every kernel but the small top-k ones
constexpr int kQuadsPerThread = 4;  // elementwise vector kernels: float4s per thread
constexpr unsigned kFull = 0xffffffffu;
constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kExpMask = 0x7f800000u;
constexpr unsigned long long kNoError = ~0ull;

struct DeviceQuantParams {
  int bits;
  uint32_t block;
  int block_log2;
  bool asymmetric;
  bool stochastic;
  uint32_t key;  // NoiseKey(seed), computed on the host
  uint64_t n;
  uint64_t blocks;  // QuantBlocks(p, n)
  bool vec_floats;  // the float-side pointers are 16-byte aligned: float4 loads and stores
};

// ---- scalar pieces, mirroring kernels_internal.h --------------------------------------------

__device__ inline void StoreFloatBytes(uint8_t* p, float v) {
  const uint32_t u = __float_as_uint(v);
  p[0] = static_cast<uint8_t>(u);
  p[1] = static_cast<uint8_t>(u >> 8);
  p[2] = static_cast<uint8_t>(u >> 16);
  p[3] = static_cast<uint8_t>(u >> 24);
}

__device__ inline float LoadFloatBytes(const uint8_t* p) {
  return __uint_as_float(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24));
}

// Little-endian store and load of the low kBytes (1, 2, 4 or 8) bytes at p, which is aligned to
// kAlign bytes: one access when kAlign >= kBytes, else kAlign-byte pieces.
template <int kBytes, int kAlign>
__device__ __forceinline__ void StoreLe(uint8_t* p, uint64_t v) {
  if constexpr (kAlign >= kBytes) {
    if constexpr (kBytes == 8) {
      *reinterpret_cast<uint64_t*>(p) = v;
    } else if constexpr (kBytes == 4) {
      *reinterpret_cast<uint32_t*>(p) = static_cast<uint32_t>(v);
    } else if constexpr (kBytes == 2) {
      *reinterpret_cast<uint16_t*>(p) = static_cast<uint16_t>(v);
    } else {
      *p = static_cast<uint8_t>(v);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kBytes; i += kAlign) StoreLe<kAlign, kAlign>(p + i, v >> (8 * i));
  }
}

template <int kBytes, int kAlign>
__device__ __forceinline__ uint64_t LoadLe(const uint8_t* p) {
  if constexpr (kAlign >= kBytes) {
    if constexpr (kBytes == 8) {
      return *reinterpret_cast<const uint64_t*>(p);
    } else if constexpr (kBytes == 4) {
      return *reinterpret_cast<const uint32_t*>(p);
    } else if constexpr (kBytes == 2) {
      return *reinterpret_cast<const uint16_t*>(p);
    } else {
      return *p;
    }
  } else {
    uint64_t v = 0;
#pragma unroll
    for (int i = 0; i < kBytes; i += kAlign) v |= LoadLe<kAlign, kAlign>(p + i) << (8 * i);
    return v;
  }
}

// Float i of a little-endian float array at p (4-byte aligned when kAligned).
template <bool kAligned>
__device__ __forceinline__ float LoadFloatAt(const uint8_t* p, uint64_t i) {
  if constexpr (kAligned) {
    return reinterpret_cast<const float*>(p)[i];
  } else {
    return LoadFloatBytes(p + 4 * i);
  }
}

template <bool kAligned>
__device__ __forceinline__ void StoreFloatAt(uint8_t* p, uint64_t i, float v) {
  if constexpr (kAligned) {
    reinterpret_cast<float*>(p)[i] = v;
  } else {
    StoreFloatBytes(p + 4 * i, v);
  }
}

// The noise of element `index` (the reference truncates the index to 32 bits as well).
__device__ inline float Noise(uint32_t key, uint32_t index) {
  uint32_t x = key ^ index;
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  return __fmul_rn(static_cast<float>(x >> 8), 0x1p-24f);
}

struct BlockScale {
  float scale, mid, c, qhi, divisor, inv;
  bool divide;
};

__device__ inline BlockScale MakeBlockScale(float scale, float mid, float c, float qhi) {
  const float divisor = scale > 0 ? scale : 1.0f;
  const float inv = __fdiv_rn(1.0f, divisor);
  return {scale, mid, c, qhi, divisor, inv, !(inv <= FLT_MAX)};
}

__device__ inline BlockScale SymmetricScale(uint32_t absmax_bits, int bits) {
  const double cmax = static_cast<double>((1 << (bits - 1)) - 1);
  const float scale =
      static_cast<float>(__ddiv_rn(static_cast<double>(__uint_as_float(absmax_bits)), cmax));
  return MakeBlockScale(scale, 0.0f, static_cast<float>(cmax), static_cast<float>(2 * cmax));
}

// lo and hi are the block's minimum and maximum. The reference keeps the first occurrence of
// each; the two can differ from ours only in the sign of a zero, which matters only when
// lo == hi (then the reference's hi - lo is x - x = +0, so we use +0 there).
__device__ inline BlockScale AsymmetricScale(float lo, float hi, int bits) {
  const double levels = static_cast<double>((1 << bits) - 1);
  const double range = lo == hi ? 0.0 : __dsub_rn(static_cast<double>(hi), static_cast<double>(lo));
  const float scale = static_cast<float>(__ddiv_rn(range, levels));
  float mid = static_cast<float>(
      __dmul_rn(0.5, __dadd_rn(static_cast<double>(lo), static_cast<double>(hi))));
  if (mid == 0) mid = 0.0f;
  return MakeBlockScale(scale, mid, static_cast<float>(levels / 2), static_cast<float>(levels));
}

__device__ __forceinline__ uint32_t QuantizeOne(float x, const BlockScale& b, bool stochastic,
                                                uint32_t key, uint32_t index) {
  const float d = __fsub_rn(x, b.mid);
  const float y = __fadd_rn(b.divide ? __fdiv_rn(d, b.divisor) : __fmul_rn(d, b.inv), b.c);
  float r = stochastic ? floorf(__fadd_rn(y, Noise(key, index))) : rintf(y);
  r = r < 0.0f ? 0.0f : r;
  r = r > b.qhi ? b.qhi : r;
  return static_cast<uint32_t>(r);
}

__device__ __forceinline__ float DequantizeOne(uint32_t code, float scale, float mid, float c,
                                               bool asymmetric) {
  float v = __fmul_rn(__fsub_rn(static_cast<float>(code), c), scale);
  if (asymmetric) v = __fadd_rn(v, mid);
  v = v < -FLT_MAX ? -FLT_MAX : v;
  v = v > FLT_MAX ? FLT_MAX : v;
  return v;
}

__device__ inline bool ValidBlock(float scale, float mid) {
  return scale >= 0.0f && scale <= FLT_MAX && mid >= -FLT_MAX && mid <= FLT_MAX;
}

__device__ __forceinline__ float CodeCenter(const DeviceQuantParams& p) {
  return p.asymmetric ? static_cast<float>((1 << p.bits) - 1) / 2
                      : static_cast<float>((1 << (p.bits - 1)) - 1);
}

// The code of element i, read bit by bit (any alignment, no byte past the element's).
__device__ __forceinline__ uint32_t CodeAt(const uint8_t* codes, uint64_t i, int bits) {
  const uint64_t bit = i * bits;
  return (codes[bit / 8] >> (bit % 8)) & ((1u << bits) - 1);
}

__device__ __forceinline__ uint32_t Magnitude(float f) { return __float_as_uint(f) & kAbsMask; }

// How many of the 4 elements from e on exist when `len` do.
__device__ __forceinline__ uint32_t QuadCount(uint64_t e, uint64_t len) {
  return e >= len ? 0 : static_cast<uint32_t>(min(uint64_t{4}, len - e));
}

// ---- host side ---------------------------------------------------------------------------------

// Keeps the memory that cudaFreeAsync returns in the current device's default pool, instead of
// handing it back to the driver at each synchronization: the calls here allocate their scratch
// (a few bytes, or top-k's tile counts and candidates) per call, and mapping it afresh each time
// costs more than small kernels take. Up to 256 MiB stays (what top-k of 64M floats uses is a
// quarter of that); beyond, memory goes back at the next synchronization. Set once per device.
inline void KeepScratchMemory() {
  static std::atomic<uint64_t> done{0};
  int device = 0;
  LONGHAUL_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if ((done.load(std::memory_order_relaxed) & bit) != 0) return;
  cudaMemPool_t pool;
  LONGHAUL_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  uint64_t keep = uint64_t{256} << 20;
  LONGHAUL_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  done.fetch_or(bit, std::memory_order_relaxed);
}

// The error index of one call: set to "none" before its kernel, read back after it.
class ErrorIndex {
 public:
  explicit ErrorIndex(cudaStream_t stream) : stream_(stream) {
    KeepScratchMemory();
    LONGHAUL_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&dev_), sizeof(*dev_), stream_));
    LONGHAUL_CUDA_CHECK(cudaMemsetAsync(dev_, 0xff, sizeof(*dev_), stream_));
  }
  ~ErrorIndex() { (void)cudaFreeAsync(dev_, stream_); }
  ErrorIndex(const ErrorIndex&) = delete;
  ErrorIndex& operator=(const ErrorIndex&) = delete;

  unsigned long long* get() { return dev_; }

  // Waits for the stream; kernels::kNone or the index.
  int64_t Read() {
    unsigned long long host = kNoError;
    LONGHAUL_CUDA_CHECK(
        cudaMemcpyAsync(&host, dev_, sizeof(host), cudaMemcpyDeviceToHost, stream_));
    LONGHAUL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return host == kNoError ? kernels::kNone : static_cast<int64_t>(host);
  }

 private:
  cudaStream_t stream_;
  unsigned long long* dev_ = nullptr;
};

inline int Log2(uint64_t x) {
  int l = 0;
  while ((uint64_t{1} << (l + 1)) <= x) l++;
  return l;
}

inline DeviceQuantParams ToDevice(const kernels::QuantParams& p, uint64_t n) {
  return {p.bits,
          p.block,
          Log2(p.block),
          p.asymmetric,
          p.stochastic,
          kernels::internal::NoiseKey(p.seed),
          n,
          kernels::QuantBlocks(p, n),
          false};
}

inline unsigned Grid(uint64_t work, uint64_t per_block) {
  return static_cast<unsigned>((work + per_block - 1) / per_block);
}

// The largest power of two, at most `cap`, that divides the address.
inline int AlignmentOf(const void* p, int cap) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int align = 1;
  while (align < cap && a % (2 * align) == 0) align *= 2;
  return align;
}

inline bool Aligned16(const void* p) { return AlignmentOf(p, 16) == 16; }

// Calls launch(std::integral_constant<int, A>{}) for A the alignment of p: 8, 4, 2 or 1 bytes.
template <typename Launch>
void WithAlignment(const void* p, Launch&& launch) {
  switch (AlignmentOf(p, 8)) {
    case 8:
      launch(std::integral_constant<int, 8>{});
      break;
    case 4:
      launch(std::integral_constant<int, 4>{});
      break;
    case 2:
      launch(std::integral_constant<int, 2>{});
      break;
    default:
      launch(std::integral_constant<int, 1>{});
      break;
  }
}

// Used by dequantization and by the feedback update, which decodes what it just wrote.
// The 4 codes of quad q (elements 4q to 4q + 3, those below n), packed as in the stream: one
// word when the quad is whole (kAligned: the codes are 4-byte aligned), else bit by bit.
template <int kBits, bool kAligned>
__device__ __forceinline__ uint32_t QuadCodes(const uint8_t* codes, uint64_t q, uint64_t n) {
  constexpr int kAlign = kAligned ? 4 : 1;
  if (4 * q + 4 <= n) {
    return static_cast<uint32_t>(LoadLe<kBits / 2, kAlign>(codes + q * (kBits / 2)));
  }
  uint32_t word = 0;
  for (uint64_t i = 4 * q; i < n; i++) word |= CodeAt(codes, i, kBits) << ((i - 4 * q) * kBits);
  return word;
}

}  // namespace longhaul::compression::cuda
