// GPU codec kernels (see device_codec.h). Each formula is the CPU reference's
// (compression/kernels_internal.h), in the same order and precision; multiplications and
// additions use the __f*_rn intrinsics, which are never fused into FMAs, and the file is
// built with -fmad=false besides, so every byte equals the CPU kernels' bytes.
//
// Quantization gives each quantization block a group of lanes (one lane for 8 floats up to a
// warp for 256 and more) that keeps the block in registers (re-reading only blocks of more than
// 1024 floats), reduces its absolute maximum (as bits, exactly), minimum and maximum with
// shuffles inside the group, and stores each float4's codes packed into one 4-, 2- or 1-byte
// word; it loads float4s when the float pointers are aligned to 16 bytes, four floats otherwise.
// Encoded-side accesses are words where the encoded pointer's alignment allows and bytes
// elsewhere. Dequantization decodes four codes per thread and stores float4s, or four floats
// when the output is not 16-byte aligned. bf16 and the in-place feedback update come in two
// kinds, picked at run time from the pointers' alignment: vectorized ones, for float pointers
// aligned to 16 bytes, and general ones (one thread per element) for the others.
// A block's codes start on a byte boundary (block * bits is a multiple of 8), so no two lanes
// ever share a byte, and nothing needs atomics except the error index, an integer minimum.
//
// Error feedback into a second residual buffer is the quantizer reading x + residual and writing
// the new residual beside the codes, in one pass; in place, it is the quantizer, then an
// elementwise kernel that updates the residual from the bytes just written, unless the error
// index says the quantizer failed. Top-k selects the k-th largest magnitude among candidates
// that a sample points to, then compacts: two passes over the input (see its section below).
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
namespace {

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

__device__ void StoreFloatBytes(uint8_t* p, float v) {
  const uint32_t u = __float_as_uint(v);
  p[0] = static_cast<uint8_t>(u);
  p[1] = static_cast<uint8_t>(u >> 8);
  p[2] = static_cast<uint8_t>(u >> 16);
  p[3] = static_cast<uint8_t>(u >> 24);
}

__device__ float LoadFloatBytes(const uint8_t* p) {
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
__device__ float Noise(uint32_t key, uint32_t index) {
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

__device__ BlockScale MakeBlockScale(float scale, float mid, float c, float qhi) {
  const float divisor = scale > 0 ? scale : 1.0f;
  const float inv = __fdiv_rn(1.0f, divisor);
  return {scale, mid, c, qhi, divisor, inv, !(inv <= FLT_MAX)};
}

__device__ BlockScale SymmetricScale(uint32_t absmax_bits, int bits) {
  const double cmax = static_cast<double>((1 << (bits - 1)) - 1);
  const float scale =
      static_cast<float>(__ddiv_rn(static_cast<double>(__uint_as_float(absmax_bits)), cmax));
  return MakeBlockScale(scale, 0.0f, static_cast<float>(cmax), static_cast<float>(2 * cmax));
}

// lo and hi are the block's minimum and maximum. The reference keeps the first occurrence of
// each; the two can differ from ours only in the sign of a zero, which matters only when
// lo == hi (then the reference's hi - lo is x - x = +0, so we use +0 there).
__device__ BlockScale AsymmetricScale(float lo, float hi, int bits) {
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

__device__ bool ValidBlock(float scale, float mid) {
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

// ---- quantization, vectorized ----------------------------------------------------------------

// Elements [e, e + 4) of a block at xb of which the first `len` exist, each plus rb's element
// when rb is not null (error feedback); elements past `len` read as 0. With `vec` (xb and rb
// 16-byte aligned) a whole quad is one float4 load each, else four float loads.
__device__ __forceinline__ float4 LoadQuad(const float* __restrict__ xb,
                                           const float* __restrict__ rb, uint32_t e, uint32_t len,
                                           bool vec) {
  if (vec && e + 4 <= len) {
    float4 v = *reinterpret_cast<const float4*>(xb + e);
    if (rb != nullptr) {
      const float4 r = *reinterpret_cast<const float4*>(rb + e);
      v = make_float4(__fadd_rn(v.x, r.x), __fadd_rn(v.y, r.y), __fadd_rn(v.z, r.z),
                      __fadd_rn(v.w, r.w));
    }
    return v;
  }
  float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    if (e + j < len) t[j] = rb != nullptr ? __fadd_rn(xb[e + j], rb[e + j]) : xb[e + j];
  }
  return make_float4(t[0], t[1], t[2], t[3]);
}

// Each quantization block belongs to a group of 2^group_log2 consecutive lanes; lane `sub` of
// the group holds the float4s at element offsets c * chunk + k * step + 4 * sub (k < kVec) of
// the block, for each of its chunks c (one, unless the block is longer than a group's kVec
// float4s per lane: then the values are re-read for the second pass). With kAligned the encoded
// pointer `out` is 4-byte aligned: scales are stored as floats and each float4's codes as one
// word (4 bytes for q8, 2 for q4; q2's are 1 byte anyway); else byte by byte.
// kFeedback (error feedback fused into the quantizer): r is not null, and each element's new
// residual, (x + r) - decoded code, goes to `next` (16-byte aligned, distinct from x and r).
template <int kBits, int kVec, bool kAligned, bool kFeedback>
__global__ void __launch_bounds__(kThreads, 2)
    QuantizeVecKernel(DeviceQuantParams p, int group_log2, const float* __restrict__ x,
                      const float* __restrict__ r, uint8_t* __restrict__ out,
                      float* __restrict__ next, unsigned long long* bad) {
  const uint32_t group = 1u << group_log2;
  const uint32_t sub = threadIdx.x & (group - 1);
  const uint64_t block = (static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x) >> group_log2;
  // A group is active or not as a whole; inactive lanes still take part in the shuffles.
  const bool active = block < p.blocks;
  const uint64_t start = active ? block * p.block : 0;
  const uint32_t len =
      active ? static_cast<uint32_t>(min(static_cast<uint64_t>(p.block), p.n - start)) : 0;
  const float* xb = x + start;
  const float* rb = r != nullptr ? r + start : nullptr;
  const uint32_t step = 4 * group;
  const uint32_t chunk = kVec * step;
  const uint32_t chunks = p.block / chunk;  // >= 1: the host picks group and kVec to fit

  float4 v[kVec];
  uint32_t absmax = 0;
  float lo = INFINITY, hi = -INFINITY;
  for (uint32_t c = 0; c < chunks; c++) {
#pragma unroll
    for (int k = 0; k < kVec; k++)
      v[k] = LoadQuad(xb, rb, c * chunk + k * step + 4 * sub, len, p.vec_floats);
#pragma unroll
    for (int k = 0; k < kVec; k++) {
      const uint32_t count = QuadCount(c * chunk + k * step + 4 * sub, len);
      const float f[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
      for (int j = 0; j < 4; j++) {
        // Missing elements are 0, which leaves the absolute maximum as it is.
        absmax = max(absmax, Magnitude(f[j]));
        if (p.asymmetric && j < count) {
          lo = fminf(lo, f[j]);
          hi = fmaxf(hi, f[j]);
        }
      }
    }
  }
  for (uint32_t o = group / 2; o > 0; o /= 2) {
    absmax = max(absmax, __shfl_xor_sync(kFull, absmax, o));
    if (p.asymmetric) {
      lo = fminf(lo, __shfl_xor_sync(kFull, lo, o));
      hi = fmaxf(hi, __shfl_xor_sync(kFull, hi, o));
    }
  }
  if (!active) return;

  if (absmax >= kExpMask) {  // a NaN or infinity: each lane reports its first one
    for (uint32_t c = 0; c < chunks; c++) {
#pragma unroll
      for (int k = 0; k < kVec; k++) {
        const uint32_t e = c * chunk + k * step + 4 * sub;
        const float4 q = chunks == 1 ? v[k] : LoadQuad(xb, rb, e, len, p.vec_floats);
        const float f[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
          if (Magnitude(f[j]) >= kExpMask) {
            atomicMin(bad, static_cast<unsigned long long>(start + e + j));
            return;
          }
        }
      }
    }
    return;
  }

  const BlockScale b =
      p.asymmetric ? AsymmetricScale(lo, hi, kBits) : SymmetricScale(absmax, kBits);
  if (sub == 0) {
    StoreFloatAt<kAligned>(out, block, b.scale);
    if (p.asymmetric) StoreFloatAt<kAligned>(out, p.blocks + block, b.mid);
  }
  uint8_t* codes = out + 4 * p.blocks * (p.asymmetric ? 2 : 1) + start * kBits / 8;
  const uint32_t index = static_cast<uint32_t>(start);  // the noise's index, mod 2^32
  constexpr int kCodeAlign = kAligned ? 4 : 1;
  const float center = CodeCenter(p);
  for (uint32_t c = 0; c < chunks; c++) {
    if (chunks > 1) {
#pragma unroll
      for (int k = 0; k < kVec; k++)
        v[k] = LoadQuad(xb, rb, c * chunk + k * step + 4 * sub, len, p.vec_floats);
    }
#pragma unroll
    for (int k = 0; k < kVec; k++) {
      const uint32_t e = c * chunk + k * step + 4 * sub;
      const uint32_t count = QuadCount(e, len);
      const float f[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
      uint32_t packed = 0;
      float left[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // kFeedback: what the codes lose
#pragma unroll
      for (int j = 0; j < 4; j++) {
        if (j < count) {
          const uint32_t code = QuantizeOne(f[j], b, p.stochastic, p.key, index + e + j);
          packed |= code << (j * kBits);
          if constexpr (kFeedback) {
            left[j] = __fsub_rn(f[j], DequantizeOne(code, b.scale, b.mid, center, p.asymmetric));
          }
        }
      }
      if constexpr (kFeedback) {
        float* nb = next + start + e;
        if (count == 4) {
          *reinterpret_cast<float4*>(nb) = make_float4(left[0], left[1], left[2], left[3]);
        } else {
          for (uint32_t j = 0; j < count; j++) nb[j] = left[j];
        }
      }
      uint8_t* dst = codes + (e / 4) * (kBits / 2);
      if (count == 4) {
        StoreLe<kBits / 2, kCodeAlign>(dst, packed);
      } else {
        for (uint32_t i = 0; i < (count * kBits + 7) / 8; i++) {
          dst[i] = static_cast<uint8_t>(packed >> (8 * i));
        }
      }
    }
  }
}

// ---- dequantization ----------------------------------------------------------------------------

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

// Thread t of CTA b decodes the quads b * kThreads * kQuadsPerThread + k * kThreads + t,
// k < kQuadsPerThread, into float4s when `out` is 16-byte aligned (p.vec_floats), else floats;
// kAligned: `in` is 4-byte aligned.
template <int kBits, bool kAligned>
__global__ void __launch_bounds__(kThreads)
    DequantizeVecKernel(DeviceQuantParams p, const uint8_t* __restrict__ in,
                        float* __restrict__ out, unsigned long long* bad) {
  const uint64_t quads = (p.n + 3) / 4;
  const uint64_t first =
      static_cast<uint64_t>(blockIdx.x) * (kThreads * kQuadsPerThread) + threadIdx.x;
  const uint8_t* codes = in + 4 * p.blocks * (p.asymmetric ? 2 : 1);
  float scale[kQuadsPerThread], mid[kQuadsPerThread];
  uint32_t word[kQuadsPerThread];
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; k++) {
    const uint64_t q = first + k * kThreads;
    scale[k] = mid[k] = 0.0f;
    word[k] = 0;
    if (q < quads) {
      const uint64_t block = (4 * q) >> p.block_log2;
      scale[k] = LoadFloatAt<kAligned>(in, block);
      if (p.asymmetric) mid[k] = LoadFloatAt<kAligned>(in, p.blocks + block);
      word[k] = QuadCodes<kBits, kAligned>(codes, q, p.n);
    }
  }
  const float c = CodeCenter(p);
  constexpr uint32_t kMask = (1u << kBits) - 1;
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; k++) {
    const uint64_t q = first + k * kThreads;
    if (q >= quads) continue;
    if (!ValidBlock(scale[k], mid[k])) {
      atomicMin(bad, static_cast<unsigned long long>((4 * q) >> p.block_log2));
      continue;
    }
    float d[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      d[j] = DequantizeOne((word[k] >> (j * kBits)) & kMask, scale[k], mid[k], c, p.asymmetric);
    }
    if (p.vec_floats && 4 * q + 4 <= p.n) {
      *reinterpret_cast<float4*>(out + 4 * q) = make_float4(d[0], d[1], d[2], d[3]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; j++) {
        if (4 * q + j < p.n) out[4 * q + j] = d[j];
      }
    }
  }
}

// ---- error feedback: the residual update after quantizing x + residual into `enc` ------------

// next = (x + residual) - decode(enc), elementwise, unless the quantizer failed (then `next` is
// left as it was); next may be residual. kVec: x, residual and next are 16-byte aligned and enc
// 4-byte aligned.
template <int kBits, bool kVec>
__global__ void __launch_bounds__(kThreads)
    FeedbackKernel(DeviceQuantParams p, const float* __restrict__ x, const float* residual,
                   float* next, const uint8_t* __restrict__ enc, const unsigned long long* bad) {
  if (*bad != kNoError) return;
  const uint64_t quads = (p.n + 3) / 4;
  const uint64_t first =
      static_cast<uint64_t>(blockIdx.x) * (kThreads * kQuadsPerThread) + threadIdx.x;
  const uint8_t* codes = enc + 4 * p.blocks * (p.asymmetric ? 2 : 1);
  const float c = CodeCenter(p);
  constexpr uint32_t kMask = (1u << kBits) - 1;
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; k++) {
    const uint64_t q = first + k * kThreads;
    if (q >= quads) continue;
    const uint64_t block = (4 * q) >> p.block_log2;
    const float scale = LoadFloatAt<kVec>(enc, block);
    const float mid = p.asymmetric ? LoadFloatAt<kVec>(enc, p.blocks + block) : 0.0f;
    const uint32_t word = QuadCodes<kBits, kVec>(codes, q, p.n);
    const bool whole = 4 * q + 4 <= p.n;
    float4 xv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), rv = xv;
    if (kVec && whole) {
      xv = *reinterpret_cast<const float4*>(x + 4 * q);
      rv = *reinterpret_cast<const float4*>(residual + 4 * q);
    } else {
      float xs[4] = {0.0f, 0.0f, 0.0f, 0.0f}, rs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < 4; j++) {
        if (4 * q + j < p.n) {
          xs[j] = x[4 * q + j];
          rs[j] = residual[4 * q + j];
        }
      }
      xv = make_float4(xs[0], xs[1], xs[2], xs[3]);
      rv = make_float4(rs[0], rs[1], rs[2], rs[3]);
    }
    const float xs[4] = {xv.x, xv.y, xv.z, xv.w}, rs[4] = {rv.x, rv.y, rv.z, rv.w};
    float d[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const float sent = DequantizeOne((word >> (j * kBits)) & kMask, scale, mid, c, p.asymmetric);
      d[j] = __fsub_rn(__fadd_rn(xs[j], rs[j]), sent);
    }
    if (kVec && whole) {
      *reinterpret_cast<float4*>(next + 4 * q) = make_float4(d[0], d[1], d[2], d[3]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; j++) {
        if (4 * q + j < p.n) next[4 * q + j] = d[j];
      }
    }
  }
}

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

// ---- top-k -------------------------------------------------------------------------------------
//
// A selection of the k-th largest magnitude T (magnitudes are 31-bit integers) among few
// candidates, then a stable compaction: two passes over x when a sample predicts where T lies
// (more when it does not, below).
//  0. A magnitude's top 11 bits are its digit (2048 of them, 1/8 of an octave each), its top 21
//     bits its bucket. A strided sample of kTopKSample values gives a range of buckets
//     [bottom, top] that holds T with high probability: those of the sample's values at ranks
//     around k's, with a margin of 4 standard deviations of a binomial count (a histogram of the
//     sample's digits finds the two digits, a second one of the next 10 bits the buckets).
//  1. Each tile of kTopKTile values counts its magnitudes in buckets above `top` and appends those
//     in the range (index and magnitude) to the candidate list, whose room is `capacity`; it also
//     finds the first non-finite value. A check then confirms that T is among the candidates
//     (fewer than k values above the range, at least k from its bottom up, and room for all).
//  2. Three radix passes over the candidates (11, 10, 10 bits) give T, and `ties`, the number of
//     values equal to T to keep (the lowest indices); each candidate above or equal to T adds one
//     to its tile's counts.
//  3. With GT(i) and EQ(i) the numbers of magnitudes above and equal to T before index i (a scan
//     of the tile counts, then a scan inside the tile), a kept index i goes to position
//     GT(i) + min(EQ(i), ties): ascending order.
// When the check fails (an unlucky sample, or values crowded into few buckets), the selection runs
// again from an exact histogram of every digit, with [bottom, top] the buckets of the one digit
// that holds T: three more passes over x (the histogram, pass 1, pass 2); if its candidates
// overflow, three more with room for all of them.
// Every step treats magnitudes as integers, so NaN bits cannot make it write out of bounds.

constexpr int kTopKItems = 16;  // values per thread in the tile passes
constexpr uint64_t kTopKTile = kThreads * kTopKItems;
constexpr int kScanThreads = 1024;
constexpr int kTopBits = 11;              // the digit: magnitude bits [20, 31)
constexpr int kTopShift = 31 - kTopBits;  // 20
constexpr int kLowBits = 10;              // the candidates' last two digits: [10, 20), [0, 10)
constexpr uint32_t kTopBins = 1u << kTopBits;
constexpr int kBucketShift = kTopShift - kLowBits;  // 10: a bucket is a magnitude's bits [10, 31)
constexpr uint32_t kTopKSample = 65536;
constexpr int kSampleItems = 4;  // sampled values per thread

struct TopKState {
  unsigned long long bad;    // first non-finite index
  uint32_t candidates;       // the candidates, or ~0u when the check failed (all later kernels
                             // then do nothing)
  uint32_t needed;           // the candidates, failed or not (the host reads these three)
  unsigned long long found;  // pass 1: values above the range << 32 | candidates
  uint32_t bottom, top;      // the range of buckets (of digits, after the sample's first step)
  uint32_t bottom_rank, top_rank;  // the sample's ranks inside those digits
  uint32_t prefix;                 // magnitude bits chosen so far
  uint32_t remaining;              // values still to choose among those matching `prefix`
  uint32_t hist[kTopBins];
};

__global__ void TopKInitKernel(TopKState* s, uint32_t k) {
  for (uint32_t i = threadIdx.x; i < kTopBins; i += blockDim.x) s->hist[i] = 0;
  if (threadIdx.x == 0) {
    s->bad = kNoError;
    s->candidates = 0;
    s->needed = 0;
    s->found = 0;
    s->bottom = s->top = 0;
    s->bottom_rank = s->top_rank = 0;
    s->prefix = 0;
    s->remaining = k;
  }
}

// Magnitudes of the 4 values from index i on (kVec: x + i is 16-byte aligned); those at or past
// n read as 0, and callers test i + j < n.
template <bool kVec>
__device__ __forceinline__ void LoadMagnitudes(const float* __restrict__ x, uint64_t i, uint64_t n,
                                               uint32_t m[4]) {
  if (kVec && i + 4 <= n) {
    const float4 v = *reinterpret_cast<const float4*>(x + i);
    m[0] = Magnitude(v.x);
    m[1] = Magnitude(v.y);
    m[2] = Magnitude(v.z);
    m[3] = Magnitude(v.w);
  } else {
#pragma unroll
    for (int j = 0; j < 4; j++) m[j] = i + j < n ? Magnitude(x[i + j]) : 0u;
  }
}

// Adds a CTA's shared histogram to the global one.
__device__ void FlushHistogram(const uint32_t* hist, uint32_t bins, uint32_t* global) {
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < bins; i += blockDim.x) {
    if (hist[i] != 0) atomicAdd(&global[i], hist[i]);
  }
}

// The exact histogram of every digit (the fallback's extra pass), and the first non-finite value
// (k == 0 runs only this).
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    TopKTopHistogramKernel(const float* __restrict__ x, uint64_t n, TopKState* s) {
  __shared__ uint32_t hist[kTopBins];
  for (uint32_t i = threadIdx.x; i < kTopBins; i += kThreads) hist[i] = 0;
  __syncthreads();
  unsigned long long first_bad = kNoError;
  const uint64_t stride = 4 * static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = 4 * (static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x); i < n;
       i += stride) {
    uint32_t m[4];
    LoadMagnitudes<kVec>(x, i, n, m);
#pragma unroll
    for (int j = 0; j < 4; j++) {
      if (i + j < n) {
        if (m[j] >= kExpMask && first_bad == kNoError) first_bad = i + j;
        atomicAdd(&hist[m[j] >> kTopShift], 1u);
      }
    }
  }
  if (first_bad != kNoError) atomicMin(&s->bad, first_bad);
  FlushHistogram(hist, kTopBins, s->hist);
}

// A histogram of the sample: values (blockIdx.x * kThreads + t + j * gridDim.x * kThreads) *
// stride, for j < kSampleItems, of those below `samples`. First step: of their digits. Second
// (`refine`): of the next 10 bits of those in digit s->top (bins 0 to 1023) and in digit
// s->bottom (bins 1024 to 2047).
__global__ void __launch_bounds__(kThreads)
    TopKSampleKernel(const float* __restrict__ x, uint64_t stride, uint32_t samples, bool refine,
                     TopKState* s) {
  __shared__ uint32_t hist[kTopBins];
  for (uint32_t i = threadIdx.x; i < kTopBins; i += kThreads) hist[i] = 0;
  __syncthreads();
  const uint32_t top = s->top, bottom = s->bottom;
  constexpr uint32_t kLowMask = (1u << kLowBits) - 1;
  uint32_t m[kSampleItems];
#pragma unroll
  for (int j = 0; j < kSampleItems; j++) {
    const uint32_t i = blockIdx.x * kThreads + threadIdx.x + j * gridDim.x * kThreads;
    m[j] = i < samples ? Magnitude(x[i * stride]) : kAbsMask + 1;
  }
#pragma unroll
  for (int j = 0; j < kSampleItems; j++) {
    if (m[j] > kAbsMask) continue;
    const uint32_t d = m[j] >> kTopShift;
    if (!refine) {
      atomicAdd(&hist[d], 1u);
      continue;
    }
    const uint32_t low = (m[j] >> kBucketShift) & kLowMask;
    if (d == top) atomicAdd(&hist[low], 1u);
    if (d == bottom) atomicAdd(&hist[(1u << kLowBits) + low], 1u);
  }
  FlushHistogram(hist, kTopBins, s->hist);
}

// Inclusive prefix sum over the lanes of the warp.
__device__ uint32_t WarpInclusiveSum(uint32_t c) {
  const int lane = threadIdx.x % kWarp;
  for (int o = 1; o < kWarp; o *= 2) {
    const uint32_t t = __shfl_up_sync(kFull, c, o);
    if (lane >= o) c += t;
  }
  return c;
}

// How many magnitudes are above the threshold and equal to it.
struct Counts {
  uint32_t gt, eq;
};

__device__ __forceinline__ Counts operator+(Counts a, Counts b) {
  return {a.gt + b.gt, a.eq + b.eq};
}
__device__ __forceinline__ Counts operator-(Counts a, Counts b) {
  return {a.gt - b.gt, a.eq - b.eq};
}

// Inclusive prefix sum over the lanes of the warp.
__device__ Counts WarpInclusiveScan(Counts c) {
  return {WarpInclusiveSum(c.gt), WarpInclusiveSum(c.eq)};
}

// Exclusive prefix sum of c over the CTA's threads (blockDim.x a multiple of 32, at most 1024),
// and the CTA's total in *total. Every thread of the CTA must call it.
__device__ Counts CtaExclusiveScan(Counts c, Counts* total) {
  __shared__ Counts warp_sums[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  const Counts inclusive = WarpInclusiveScan(c);
  if (lane == kWarp - 1) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const Counts sums = WarpInclusiveScan(lane < warps ? warp_sums[lane] : Counts{0, 0});
    if (lane < warps) warp_sums[lane] = sums;  // now inclusive over the warps
  }
  __syncthreads();
  *total = warp_sums[warps - 1];
  const Counts before = (warp > 0 ? warp_sums[warp - 1] : Counts{0, 0}) + (inclusive - c);
  __syncthreads();  // warp_sums is reused by the next call
  return before;
}

// The digit d of a histogram (`bins` digits, read from the top down) that holds the rank-th
// largest value (rank >= 1): count(above d) < rank <= count(d and above); *above gets
// count(above d). The whole CTA (kScanThreads threads, each owning bins / kScanThreads digits)
// calls it; a rank beyond the total gives digit 0 and *above the total.
__device__ uint32_t CtaFindDigit(const uint32_t* hist, uint32_t bins, uint32_t rank,
                                 uint32_t* above_out) {
  __shared__ uint32_t found_digit, found_above;
  const uint32_t per = bins / kScanThreads;       // 1 or 2
  const uint32_t top = bins - per * threadIdx.x;  // this thread's digits: [top - per, top)
  uint32_t h[2] = {0, 0};
  uint32_t sum = 0;
  for (uint32_t j = 0; j < per; j++) {
    h[j] = hist[top - 1 - j];
    sum += h[j];
  }
  if (threadIdx.x == 0) {
    found_digit = 0;
    found_above = 0;
  }
  Counts total;
  const uint32_t above = CtaExclusiveScan(Counts{sum, 0}, &total).gt;  // in higher digits
  if (rank > total.gt && threadIdx.x == 0) found_above = total.gt;
  if (above < rank && rank <= above + sum) {
    uint32_t a = above;
    for (uint32_t j = 0; j < per; j++) {
      if (rank <= a + h[j]) {
        found_digit = top - 1 - j;
        found_above = a;
        break;
      }
      a += h[j];
    }
  }
  __syncthreads();
  *above_out = found_above;
  const uint32_t d = found_digit;
  __syncthreads();  // found_* are reused by the next call
  return d;
}

__device__ void ClearHistogram(uint32_t* hist, uint32_t bins) {
  for (uint32_t i = threadIdx.x; i < bins; i += blockDim.x) hist[i] = 0;
}

// The sample's range: `top` holds its rank_top-th largest, `bottom` its rank_bottom-th. First
// step: the digits, from the histogram of digits; second (`refine`): the buckets, from the
// histograms of the next 10 bits in those two digits. One CTA of kScanThreads threads.
__global__ void __launch_bounds__(kScanThreads)
    TopKSampleRangeKernel(TopKState* s, uint32_t rank_top, uint32_t rank_bottom, bool refine) {
  uint32_t above_top, above_bottom;
  if (!refine) {
    const uint32_t top = CtaFindDigit(s->hist, kTopBins, rank_top, &above_top);
    const uint32_t bottom = CtaFindDigit(s->hist, kTopBins, rank_bottom, &above_bottom);
    ClearHistogram(s->hist, kTopBins);
    if (threadIdx.x == 0) {
      s->top = top;
      s->bottom = bottom;
      s->top_rank = rank_top - above_top;
      s->bottom_rank = rank_bottom - above_bottom;
    }
    return;
  }
  constexpr uint32_t kBins = 1u << kLowBits;
  const uint32_t top = CtaFindDigit(s->hist, kBins, s->top_rank, &above_top);
  const uint32_t bottom = CtaFindDigit(s->hist + kBins, kBins, s->bottom_rank, &above_bottom);
  ClearHistogram(s->hist, kTopBins);
  if (threadIdx.x == 0) {
    s->top = (s->top << kLowBits) | top;
    s->bottom = (s->bottom << kLowBits) | bottom;
  }
}

// Picks, among `bins` digits at `shift` (s->hist), the one that holds the remaining-th largest
// of the values matching s->prefix, and clears the histogram. With `sets_range` (the fallback's
// exact histogram), that digit's buckets are the range [bottom, top] of pass 1. Does nothing once
// the check has failed. One CTA of kScanThreads threads.
__global__ void __launch_bounds__(kScanThreads)
    TopKChooseKernel(TopKState* s, int shift, uint32_t bins, bool sets_range) {
  if (s->candidates == ~0u) return;
  const uint32_t remaining = s->remaining;
  uint32_t above;
  const uint32_t d = CtaFindDigit(s->hist, bins, remaining, &above);
  ClearHistogram(s->hist, bins);
  if (threadIdx.x == 0) {
    s->prefix |= d << shift;
    s->remaining = remaining - above;
    if (sets_range) {
      s->bottom = d << kLowBits;
      s->top = s->bottom | ((1u << kLowBits) - 1);
    }
  }
}

// Pass 1: per tile, the values in buckets above s->top into tile_counts, and those in
// [s->bottom, s->top] appended to the candidates (the first `capacity` of them); also the first
// non-finite value. Thread t owns values kTopKItems * t to kTopKItems * (t + 1) - 1 of the tile.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    TopKPartitionKernel(const float* __restrict__ x, uint64_t n, TopKState* s, Counts* tile_counts,
                        uint32_t* cand_index, uint32_t* cand_mag, uint32_t capacity) {
  const uint32_t bottom = s->bottom, top = s->top;
  const uint64_t base = static_cast<uint64_t>(blockIdx.x) * kTopKTile + threadIdx.x * kTopKItems;
  uint32_t m[kTopKItems];
#pragma unroll
  for (int q = 0; q < kTopKItems / 4; q++) LoadMagnitudes<kVec>(x, base + 4 * q, n, m + 4 * q);
  uint32_t above = 0, mine = 0, bad = 0;
#pragma unroll
  for (int j = 0; j < kTopKItems; j++) {
    const bool exists = base + j < n;
    const uint32_t b = m[j] >> kBucketShift;
    above += exists && b > top;
    mine += exists && b >= bottom && b <= top;
    bad |= exists && m[j] >= kExpMask;
  }
  if (bad) {
    for (int j = 0; j < kTopKItems; j++) {
      if (base + j < n && m[j] >= kExpMask) {
        atomicMin(&s->bad, static_cast<unsigned long long>(base + j));
        break;
      }
    }
  }
  // One atomic per CTA counts the tile's values above the range and reserves its candidates.
  Counts total;
  const Counts before = CtaExclusiveScan(Counts{above, mine}, &total);
  __shared__ uint32_t first;
  if (threadIdx.x == 0) {
    const unsigned long long add = (static_cast<unsigned long long>(total.gt) << 32) | total.eq;
    first = static_cast<uint32_t>(atomicAdd(&s->found, add));
    tile_counts[blockIdx.x] = {total.gt, 0};
  }
  __syncthreads();
  uint32_t slot = first + before.eq;
#pragma unroll
  for (int j = 0; j < kTopKItems; j++) {
    const uint32_t b = m[j] >> kBucketShift;
    if (base + j < n && b >= bottom && b <= top) {
      if (slot < capacity) {
        cand_index[slot] = static_cast<uint32_t>(base + j);
        cand_mag[slot] = m[j];
      }
      slot++;
    }
  }
}

// After pass 1: T is among the candidates if fewer than k values lie above the range and at least
// k from its bottom up, and they all fit. Then the candidates' selection starts afresh (prefix 0,
// k minus those above); else s->candidates = ~0u turns the kernels after this one off.
__global__ void TopKCheckKernel(TopKState* s, uint32_t k, uint32_t capacity) {
  const uint32_t above = static_cast<uint32_t>(s->found >> 32);
  const uint32_t count = static_cast<uint32_t>(s->found);
  const bool ok = above < k && k - above <= count && count <= capacity;
  s->needed = count;
  s->candidates = ok ? count : ~0u;
  s->prefix = 0;
  s->remaining = ok ? k - above : 0;
}

// The histogram of the candidates' bits [shift, shift + bits) among those matching s->prefix
// above them.
__global__ void __launch_bounds__(kThreads)
    TopKCandidateHistogramKernel(const uint32_t* __restrict__ cand_mag, int shift, int bits,
                                 TopKState* s) {
  const uint32_t count = s->candidates;
  if (count == ~0u) return;
  __shared__ uint32_t hist[kTopBins];
  const uint32_t bins = 1u << bits;
  for (uint32_t i = threadIdx.x; i < bins; i += kThreads) hist[i] = 0;
  __syncthreads();
  const uint32_t mask = shift + bits >= 32 ? 0u : ~0u << (shift + bits);
  const uint32_t prefix = s->prefix;
  for (uint64_t i = blockIdx.x * kThreads + threadIdx.x; i < count; i += gridDim.x * kThreads) {
    const uint32_t m = cand_mag[i];
    if ((m & mask) == prefix) atomicAdd(&hist[(m >> shift) & (bins - 1)], 1u);
  }
  FlushHistogram(hist, bins, s->hist);
}

// Adds each candidate above or equal to the threshold T = s->prefix to its tile's counts.
__global__ void __launch_bounds__(kThreads)
    TopKCandidateCountKernel(const uint32_t* __restrict__ cand_index,
                             const uint32_t* __restrict__ cand_mag, TopKState* s,
                             Counts* tile_counts) {
  const uint32_t count = s->candidates;
  if (count == ~0u) return;
  const uint32_t t = s->prefix;
  for (uint64_t i = blockIdx.x * kThreads + threadIdx.x; i < count; i += gridDim.x * kThreads) {
    const uint32_t m = cand_mag[i];
    Counts* c = &tile_counts[cand_index[i] / kTopKTile];
    if (m > t) {
      atomicAdd(&c->gt, 1u);
    } else if (m == t) {
      atomicAdd(&c->eq, 1u);
    }
  }
}

// Exclusive prefix sums of the tile counts in runs of kScanThreads tiles, in place, one CTA per
// run; each run's total goes to run_sums. Launched again on run_sums (one run: there are at most
// 2^32 / kTopKTile / kScanThreads = 1024 of them) with run_sums null.
__global__ void __launch_bounds__(kScanThreads)
    TopKScanKernel(const TopKState* s, Counts* tile_counts, uint64_t tiles, Counts* run_sums) {
  if (s->candidates == ~0u) return;
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * kScanThreads + threadIdx.x;
  const Counts c = i < tiles ? tile_counts[i] : Counts{0, 0};
  Counts total;
  const Counts before = CtaExclusiveScan(c, &total);
  if (i < tiles) tile_counts[i] = before;
  if (run_sums != nullptr && threadIdx.x == 0) run_sums[blockIdx.x] = total;
}

// Pass 2: writes the kept indices of each tile; thread t owns values kTopKItems * t to
// kTopKItems * (t + 1) - 1 of the tile, so that the ranks follow index order.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    TopKWriteKernel(const float* __restrict__ x, uint64_t n, const TopKState* s,
                    const Counts* tile_counts, const Counts* run_sums, uint32_t* indices) {
  if (s->candidates == ~0u) return;
  const uint32_t t = s->prefix, ties = s->remaining;
  const uint64_t base = static_cast<uint64_t>(blockIdx.x) * kTopKTile + threadIdx.x * kTopKItems;
  uint32_t m[kTopKItems];
#pragma unroll
  for (int q = 0; q < kTopKItems / 4; q++) LoadMagnitudes<kVec>(x, base + 4 * q, n, m + 4 * q);
  Counts c = {0, 0};
#pragma unroll
  for (int j = 0; j < kTopKItems; j++) {
    c.gt += base + j < n && m[j] > t;
    c.eq += base + j < n && m[j] == t;
  }
  Counts total;
  // Above and equal to the threshold before this thread's first value, in the whole tensor.
  c = run_sums[blockIdx.x / kScanThreads] + tile_counts[blockIdx.x] + CtaExclusiveScan(c, &total);
#pragma unroll
  for (int j = 0; j < kTopKItems; j++) {
    if (base + j >= n) break;
    if (m[j] > t) {
      indices[c.gt + min(c.eq, ties)] = static_cast<uint32_t>(base + j);
      c.gt++;
    } else if (m[j] == t) {
      if (c.eq < ties) indices[c.gt + c.eq] = static_cast<uint32_t>(base + j);
      c.eq++;
    }
  }
}

// ---- host side ---------------------------------------------------------------------------------

// Keeps the memory that cudaFreeAsync returns in the current device's default pool, instead of
// handing it back to the driver at each synchronization: the calls here allocate their scratch
// (a few bytes, or top-k's tile counts and candidates) per call, and mapping it afresh each time
// costs more than small kernels take. Up to 256 MiB stays (what top-k of 64M floats uses is a
// quarter of that); beyond, memory goes back at the next synchronization. Set once per device.
void KeepScratchMemory() {
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

int Log2(uint64_t x) {
  int l = 0;
  while ((uint64_t{1} << (l + 1)) <= x) l++;
  return l;
}

DeviceQuantParams ToDevice(const kernels::QuantParams& p, uint64_t n) {
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

unsigned Grid(uint64_t work, uint64_t per_block) {
  return static_cast<unsigned>((work + per_block - 1) / per_block);
}

// The largest power of two, at most `cap`, that divides the address.
int AlignmentOf(const void* p, int cap) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int align = 1;
  while (align < cap && a % (2 * align) == 0) align *= 2;
  return align;
}

bool Aligned16(const void* p) { return AlignmentOf(p, 16) == 16; }

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

template <int kBits, int kVec, bool kFeedback>
void LaunchQuantizeVec(const DeviceQuantParams& dp, int group_log2, const float* in, const float* r,
                       uint8_t* out, float* next, unsigned long long* bad, cudaStream_t stream) {
  const unsigned grid = Grid(dp.blocks << group_log2, kThreads);
  if (AlignmentOf(out, 4) == 4) {
    QuantizeVecKernel<kBits, kVec, true, kFeedback>
        <<<grid, kThreads, 0, stream>>>(dp, group_log2, in, r, out, next, bad);
  } else {
    QuantizeVecKernel<kBits, kVec, false, kFeedback>
        <<<grid, kThreads, 0, stream>>>(dp, group_log2, in, r, out, next, bad);
  }
}

// Blocks of up to 256 floats: 2 float4s per lane, block / 8 lanes per block; 512: a warp with
// 4 float4s per lane; 1024 and more: a warp with 8 (re-reading blocks above 1024 floats).
template <int kBits, bool kFeedback>
void QuantizeVec(const DeviceQuantParams& dp, const float* in, const float* r, uint8_t* out,
                 float* next, unsigned long long* bad, cudaStream_t stream) {
  if (dp.block <= 256) {
    LaunchQuantizeVec<kBits, 2, kFeedback>(dp, dp.block_log2 - 3, in, r, out, next, bad, stream);
  } else if (dp.block == 512) {
    LaunchQuantizeVec<kBits, 4, kFeedback>(dp, 5, in, r, out, next, bad, stream);
  } else {
    LaunchQuantizeVec<kBits, 8, kFeedback>(dp, 5, in, r, out, next, bad, stream);
  }
}

template <bool kFeedback>
void QuantizeVecBits(const DeviceQuantParams& dp, const float* in, const float* r, uint8_t* out,
                     float* next, unsigned long long* bad, cudaStream_t stream) {
  switch (dp.bits) {
    case 8:
      QuantizeVec<8, kFeedback>(dp, in, r, out, next, bad, stream);
      break;
    case 4:
      QuantizeVec<4, kFeedback>(dp, in, r, out, next, bad, stream);
      break;
    default:
      QuantizeVec<2, kFeedback>(dp, in, r, out, next, bad, stream);
      break;
  }
}

// Queues the quantizer of (in + r, or in when r is null) on the stream.
void LaunchQuantize(DeviceQuantParams dp, const float* in, const float* r, uint8_t* out,
                    unsigned long long* bad, cudaStream_t stream) {
  dp.vec_floats = Aligned16(in) && (r == nullptr || Aligned16(r));
  QuantizeVecBits<false>(dp, in, r, out, nullptr, bad, stream);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

template <int kBits>
void DequantizeVec(const DeviceQuantParams& dp, const uint8_t* in, float* out,
                   unsigned long long* bad, cudaStream_t stream) {
  const unsigned grid = Grid((dp.n + 3) / 4, kThreads * kQuadsPerThread);
  if (AlignmentOf(in, 4) == 4) {
    DequantizeVecKernel<kBits, true><<<grid, kThreads, 0, stream>>>(dp, in, out, bad);
  } else {
    DequantizeVecKernel<kBits, false><<<grid, kThreads, 0, stream>>>(dp, in, out, bad);
  }
}

template <int kBits>
void LaunchFeedback(const DeviceQuantParams& dp, const float* in, const float* residual,
                    float* next, const uint8_t* enc, const unsigned long long* bad,
                    cudaStream_t stream) {
  const unsigned grid = Grid((dp.n + 3) / 4, kThreads * kQuadsPerThread);
  if (Aligned16(in) && Aligned16(residual) && Aligned16(next) && AlignmentOf(enc, 4) == 4) {
    FeedbackKernel<kBits, true><<<grid, kThreads, 0, stream>>>(dp, in, residual, next, enc, bad);
  } else {
    FeedbackKernel<kBits, false><<<grid, kThreads, 0, stream>>>(dp, in, residual, next, enc, bad);
  }
}

}  // namespace

int64_t QuantizeOnDevice(const kernels::QuantParams& p, const float* in, uint64_t n, uint8_t* out,
                         cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  const DeviceQuantParams dp = ToDevice(p, n);
  ErrorIndex bad(stream);
  LaunchQuantize(dp, in, nullptr, out, bad.get(), stream);
  return bad.Read();
}

int64_t DequantizeOnDevice(const kernels::QuantParams& p, const uint8_t* in, uint64_t n, float* out,
                           cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  DeviceQuantParams dp = ToDevice(p, n);
  dp.vec_floats = Aligned16(out);
  ErrorIndex bad(stream);
  switch (dp.bits) {
    case 8:
      DequantizeVec<8>(dp, in, out, bad.get(), stream);
      break;
    case 4:
      DequantizeVec<4>(dp, in, out, bad.get(), stream);
      break;
    default:
      DequantizeVec<2>(dp, in, out, bad.get(), stream);
      break;
  }
  LONGHAUL_CUDA_CHECK_LAUNCH();
  return bad.Read();
}

int64_t QuantizeWithFeedbackOnDevice(const kernels::QuantParams& p, const float* in, uint64_t n,
                                     const float* residual, float* next_residual, uint8_t* out,
                                     cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  const DeviceQuantParams dp = ToDevice(p, n);
  ErrorIndex bad(stream);
  if (next_residual != residual && Aligned16(in) && Aligned16(residual) &&
      Aligned16(next_residual)) {
    // One pass: x and the residual read once, the codes and the new residual written once.
    DeviceQuantParams fused = dp;
    fused.vec_floats = true;
    QuantizeVecBits<true>(fused, in, residual, out, next_residual, bad.get(), stream);
  } else {
    // In place (or unaligned): the residual may change only once the whole quantizer succeeded.
    LaunchQuantize(dp, in, residual, out, bad.get(), stream);
    switch (dp.bits) {
      case 8:
        LaunchFeedback<8>(dp, in, residual, next_residual, out, bad.get(), stream);
        break;
      case 4:
        LaunchFeedback<4>(dp, in, residual, next_residual, out, bad.get(), stream);
        break;
      default:
        LaunchFeedback<2>(dp, in, residual, next_residual, out, bad.get(), stream);
        break;
    }
  }
  LONGHAUL_CUDA_CHECK_LAUNCH();
  return bad.Read();
}

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

int64_t TopKOnDevice(const float* x, uint64_t n, uint64_t k, uint32_t* indices,
                     cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  if (n >= (uint64_t{1} << 32)) {  // indices are uint32 (as TopKExact's)
    std::fprintf(stderr, "TopKOnDevice: %llu values; at most 2^32 - 1\n",
                 static_cast<unsigned long long>(n));
    std::abort();
  }
  KeepScratchMemory();
  k = k < n ? k : n;
  const bool vec = Aligned16(x);
  // One allocation: the state, the tile counts and their runs' sums, and room for the
  // candidates: an eighth of n (a sampled range holds a few percent of n; only values crowded
  // into few digits, as with many ties, need more, and then get a second try).
  const uint64_t tiles = (n + kTopKTile - 1) / kTopKTile;
  const uint64_t runs = (tiles + kScanThreads - 1) / kScanThreads;
  const auto capacity =
      static_cast<uint32_t>(std::min<uint64_t>(n, std::max<uint64_t>(n / 8, 4096)));
  const uint64_t head = sizeof(TopKState) + (tiles + runs) * sizeof(Counts);
  char* mem = nullptr;
  LONGHAUL_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&mem),
                                      head + (k > 0 ? 8 * uint64_t{capacity} : 0), stream));
  auto* state = reinterpret_cast<TopKState*>(mem);
  auto* tile_counts = reinterpret_cast<Counts*>(state + 1);
  auto* run_sums = tile_counts + tiles;
  auto* cand = reinterpret_cast<uint32_t*>(mem + head);
  const unsigned grid = static_cast<unsigned>(tiles);
  int sms = 0;
  int device = 0;
  LONGHAUL_CUDA_CHECK(cudaGetDevice(&device));
  LONGHAUL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const unsigned cand_grid = std::max(1u, std::min<unsigned>(Grid(capacity, kThreads), 2 * sms));
  auto exact_histogram = [&] {
    const unsigned hist_grid = std::min<unsigned>(Grid(n, 4 * kThreads * 4), 2048);
    if (vec) {
      TopKTopHistogramKernel<true><<<hist_grid, kThreads, 0, stream>>>(x, n, state);
    } else {
      TopKTopHistogramKernel<false><<<hist_grid, kThreads, 0, stream>>>(x, n, state);
    }
  };
  // Pass 1 over the range [s->bottom, s->top], the check, the candidates' digits and pass 2.
  auto select = [&](uint32_t* cand, uint32_t capacity) {
    uint32_t* cand_mag = cand + capacity;
    LONGHAUL_CUDA_CHECK(cudaMemsetAsync(&state->found, 0, sizeof(state->found), stream));
    if (vec) {
      TopKPartitionKernel<true>
          <<<grid, kThreads, 0, stream>>>(x, n, state, tile_counts, cand, cand_mag, capacity);
    } else {
      TopKPartitionKernel<false>
          <<<grid, kThreads, 0, stream>>>(x, n, state, tile_counts, cand, cand_mag, capacity);
    }
    TopKCheckKernel<<<1, 1, 0, stream>>>(state, static_cast<uint32_t>(k), capacity);
    for (int shift = kTopShift; shift >= 0; shift -= kLowBits) {
      const int bits = shift == kTopShift ? kTopBits : kLowBits;
      TopKCandidateHistogramKernel<<<cand_grid, kThreads, 0, stream>>>(cand_mag, shift, bits,
                                                                       state);
      TopKChooseKernel<<<1, kScanThreads, 0, stream>>>(state, shift, 1u << bits, false);
    }
    TopKCandidateCountKernel<<<cand_grid, kThreads, 0, stream>>>(cand, cand_mag, state,
                                                                 tile_counts);
    TopKScanKernel<<<static_cast<unsigned>(runs), kScanThreads, 0, stream>>>(state, tile_counts,
                                                                             tiles, run_sums);
    TopKScanKernel<<<1, kScanThreads, 0, stream>>>(state, run_sums, runs, nullptr);
    if (vec) {
      TopKWriteKernel<true>
          <<<grid, kThreads, 0, stream>>>(x, n, state, tile_counts, run_sums, indices);
    } else {
      TopKWriteKernel<false>
          <<<grid, kThreads, 0, stream>>>(x, n, state, tile_counts, run_sums, indices);
    }
  };
  struct {
    unsigned long long bad;
    uint32_t candidates, needed;
  } result = {kNoError, 0, 0};
  static_assert(offsetof(TopKState, needed) == sizeof(result) - sizeof(uint32_t));
  auto read_result = [&] {
    LONGHAUL_CUDA_CHECK_LAUNCH();
    LONGHAUL_CUDA_CHECK(
        cudaMemcpyAsync(&result, state, sizeof(result), cudaMemcpyDeviceToHost, stream));
    LONGHAUL_CUDA_CHECK(cudaStreamSynchronize(stream));
  };

  TopKInitKernel<<<1, 256, 0, stream>>>(state, static_cast<uint32_t>(k));
  if (k == 0) {  // only the check of the values
    exact_histogram();
    read_result();
  } else {
    if (k < n) {
      // The sample's range: its ranks k * samples / n, less and more a margin.
      const uint32_t samples = static_cast<uint32_t>(std::min<uint64_t>(n, kTopKSample));
      const double rank = static_cast<double>(k) * samples / static_cast<double>(n);
      const double margin = 4 * std::sqrt(rank) + 16;
      const auto rank_top = static_cast<uint32_t>(std::max(1.0, std::floor(rank - margin)));
      const auto rank_bottom =
          static_cast<uint32_t>(std::min<double>(samples, std::ceil(rank + margin)));
      for (const bool refine : {false, true}) {
        TopKSampleKernel<<<Grid(samples, kThreads * kSampleItems), kThreads, 0, stream>>>(
            x, n / samples, samples, refine, state);
        TopKSampleRangeKernel<<<1, kScanThreads, 0, stream>>>(state, rank_top, rank_bottom, refine);
      }
      select(cand, capacity);
      read_result();
    }
    if (result.bad == kNoError && (k == n || result.candidates == ~0u)) {
      // No sample (k == n), or it missed: the exact histogram's digit holding T is the range.
      TopKInitKernel<<<1, 256, 0, stream>>>(state, static_cast<uint32_t>(k));
      exact_histogram();
      TopKChooseKernel<<<1, kScanThreads, 0, stream>>>(state, kTopShift, kTopBins, true);
      select(cand, capacity);
      read_result();
      if (result.bad == kNoError && result.candidates == ~0u) {
        // Too many values share that digit: again, with room for all of them.
        uint32_t* more = nullptr;
        LONGHAUL_CUDA_CHECK(
            cudaMallocAsync(reinterpret_cast<void**>(&more), 8 * uint64_t{result.needed}, stream));
        TopKInitKernel<<<1, 256, 0, stream>>>(state, static_cast<uint32_t>(k));
        exact_histogram();
        TopKChooseKernel<<<1, kScanThreads, 0, stream>>>(state, kTopShift, kTopBins, true);
        select(more, result.needed);
        read_result();
        LONGHAUL_CUDA_CHECK(cudaFreeAsync(more, stream));
      }
    }
  }
  LONGHAUL_CUDA_CHECK(cudaFreeAsync(mem, stream));
  LONGHAUL_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result.bad == kNoError ? kernels::kNone : static_cast<int64_t>(result.bad);
}

}  // namespace longhaul::compression::cuda
