// Scalar pieces shared by the reference and fast kernels, so that both compute the block
// scales, the stochastic rounding noise and every per-element formula the same way and
// therefore produce identical bytes. Internal to compression/: not part of the API.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "compression/kernels.h"

namespace longhaul::compression::kernels::internal {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline uint16_t LoadU16(const uint8_t* p, uint64_t i) {
  uint16_t v;
  std::memcpy(&v, p + 2 * i, sizeof(v));
  return v;
}
inline void StoreU16(uint8_t* p, uint64_t i, uint16_t v) { std::memcpy(p + 2 * i, &v, sizeof(v)); }
inline float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline constexpr uint32_t kAbsMask = 0x7fffffffu;
inline constexpr uint32_t kExpMask = 0x7f800000u;        // magnitude bits >= this: Inf or NaN
inline constexpr uint32_t kHalfLimitBits = 0x477ff000u;  // 65520.0f: rounds to half infinity

// Stochastic rounding noise: a per-tensor 32-bit key from the seed (splitmix64), then one
// xorshift-multiply-xorshift round over (key ^ element index); the top 24 bits give u in
// [0, 1). One multiply per element keeps the vector kernel fast; every u is uniform over
// seeds, which is what unbiasedness needs.
inline uint32_t NoiseKey(uint64_t seed) {
  seed += 0x9e3779b97f4a7c15ull;
  seed = (seed ^ (seed >> 30)) * 0xbf58476d1ce4e5b9ull;
  seed = (seed ^ (seed >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>(seed ^ (seed >> 31));
}
inline uint32_t NoiseHash(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  return x;
}
inline float Noise(uint32_t key, uint64_t index) {
  return static_cast<float>(NoiseHash(key ^ static_cast<uint32_t>(index)) >> 8) * 0x1p-24f;
}

// Per-block constants of the quantizer (see kernels.h for the formulas).
struct BlockScale {
  float scale;    // stored
  float mid;      // stored for asymmetric blocks, 0 for symmetric ones
  float c;        // code of the midpoint
  float qhi;      // largest code
  float divisor;  // scale, or 1 for an all-zero block (avoids 0/0)
  float inv;      // 1 / divisor, what the quantizer multiplies by ...
  bool divide;    // ... unless it overflows (subnormal scales): then it divides
};

inline BlockScale MakeBlockScale(float scale, float mid, float c, float qhi) {
  const float divisor = scale > 0 ? scale : 1.0f;
  const float inv = 1.0f / divisor;
  return {scale, mid, c, qhi, divisor, inv, !(inv <= FLT_MAX)};
}

inline BlockScale SymmetricScale(uint32_t absmax_bits, int bits) {
  const double cmax = static_cast<double>((1 << (bits - 1)) - 1);
  float scale = static_cast<float>(static_cast<double>(BitsFloat(absmax_bits)) / cmax);
  return MakeBlockScale(scale, 0.0f, static_cast<float>(cmax), static_cast<float>(2 * cmax));
}

inline BlockScale AsymmetricScale(float lo, float hi, int bits) {
  const double levels = static_cast<double>((1 << bits) - 1);
  float scale = static_cast<float>((static_cast<double>(hi) - static_cast<double>(lo)) / levels);
  float mid = static_cast<float>(0.5 * (static_cast<double>(lo) + static_cast<double>(hi)));
  if (mid == 0) mid = 0.0f;  // one zero (+0), whichever of min/max was -0
  return MakeBlockScale(scale, mid, static_cast<float>(levels / 2), static_cast<float>(levels));
}

// Code of one finite value.
inline uint32_t QuantizeOne(float x, const BlockScale& b, bool stochastic, uint32_t key,
                            uint64_t index) {
  const float d = x - b.mid;
  const float y = (b.divide ? d / b.divisor : d * b.inv) + b.c;
  float r = stochastic ? std::floor(y + Noise(key, index)) : std::nearbyint(y);
  r = r < 0.0f ? 0.0f : r;
  r = r > b.qhi ? b.qhi : r;
  return static_cast<uint32_t>(r);
}

inline float DequantizeOne(uint32_t code, float scale, float mid, float c, bool asymmetric) {
  float v = (static_cast<float>(code) - c) * scale;
  if (asymmetric) v = v + mid;
  v = v < -FLT_MAX ? -FLT_MAX : v;
  v = v > FLT_MAX ? FLT_MAX : v;
  return v;
}

inline bool ValidBlock(float scale, float mid) {
  return scale >= 0.0f && scale <= FLT_MAX && mid >= -FLT_MAX && mid <= FLT_MAX;
}

// Quantizes elements [start, start + len) of x (one block) with the reference formulas,
// writing its scale/mid and its codes. Used by every table for blocks its fast path skips.
// Returns the index of the first non-finite element, or kNone.
int64_t QuantizeBlockReference(const QuantParams& p, const float* x, uint64_t n, uint64_t block,
                               uint8_t* out);
// Decodes block `block` of a quantized tensor with the reference formulas.
// Returns false when its scale or mid is invalid.
bool DequantizeBlockReference(const QuantParams& p, const uint8_t* in, uint64_t n, uint64_t block,
                              float* out);

// Reference scalar conversions (also used for tails by the fast kernels).
uint16_t FloatToHalf(float f);  // REQUIRES: finite, |f| < 65520
float HalfToFloat(uint16_t h);
uint16_t FloatToBf16(float f);  // REQUIRES: finite
inline float Bf16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

#if defined(__x86_64__)
// AVX2 quantizer entry points (avx2_quantize.cc), assembled into the table elsewhere.
int64_t QuantizeAvx2(const QuantParams& p, const float* in, uint64_t n, uint8_t* out);
int64_t DequantizeAvx2(const QuantParams& p, const uint8_t* in, uint64_t n, float* out);
#endif

}  // namespace longhaul::compression::kernels::internal
