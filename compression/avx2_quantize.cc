// AVX2 block quantizer and dequantizer (8, 4 and 2 bits, symmetric or asymmetric, nearest or
// stochastic rounding). Full blocks whose size is a multiple of 32 are quantized eight blocks
// at a time: one pass gathers the eight blocks' statistics, one transposed reduction and a
// vector computation give their scales (the per-block scalar work was the bottleneck), and a
// branch-free loop, templated on bits and rounding, writes their codes. The formulas and
// their order are the reference's (kernels_internal.h), with no FMA, so the bytes are
// identical; other blocks use the reference code.
#include <cfloat>

#include "compression/kernels.h"
#include "compression/kernels_internal.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace longhaul::compression::kernels::internal {
namespace {

#define LH_AVX2 __attribute__((target("avx2,f16c")))

struct Regions {
  uint8_t* scales;
  uint8_t* mids;
  uint8_t* codes;
};
Regions Split(const QuantParams& p, uint64_t n, const uint8_t* base) {
  const uint64_t nb = QuantBlocks(p, n);
  uint8_t* b = const_cast<uint8_t*>(base);
  return {b, b + 4 * nb, b + 4 * nb * (p.asymmetric ? 2 : 1)};
}

LH_AVX2 inline uint32_t HorizontalMaxU32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4e));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xb1));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
}
LH_AVX2 inline float HorizontalMin(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_shuffle_ps(m, m, 0x4e));
  m = _mm_min_ps(m, _mm_shuffle_ps(m, m, 0xb1));
  return _mm_cvtss_f32(m);
}
LH_AVX2 inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 0x4e));
  m = _mm_max_ps(m, _mm_shuffle_ps(m, m, 0xb1));
  return _mm_cvtss_f32(m);
}

// NoiseHash of key ^ (first + lane), for eight consecutive element indices, as u in [0, 1).
LH_AVX2 inline __m256 NoiseAvx2(uint32_t key, uint64_t first) {
  __m256i x = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(first))),
                               _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  x = _mm256_xor_si256(x, _mm256_set1_epi32(static_cast<int>(key)));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
  x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
  x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
  return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(x, 8)), _mm256_set1_ps(0x1p-24f));
}

// 32 codes (four vectors of eight int32 in [0, 255]) to 32 bytes in element order.
LH_AVX2 inline __m256i PackBytes(const __m256i q[4]) {
  __m256i ab = _mm256_packs_epi32(q[0], q[1]);
  __m256i cd = _mm256_packs_epi32(q[2], q[3]);
  __m256i bytes = _mm256_packus_epi16(ab, cd);
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

LH_AVX2 inline void StoreCodes(int bits, const __m256i q[4], uint8_t* dst) {
  __m256i bytes = PackBytes(q);
  if (bits == 8) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), bytes);
  } else if (bits == 4) {
    __m256i lo = _mm256_and_si256(bytes, _mm256_set1_epi16(0x000f));
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi16(0x00f0));
    __m256i words = _mm256_or_si256(lo, hi);
    __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi16(words, words), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(packed));
  } else {
    __m256i w = bytes;
    __m256i b = _mm256_and_si256(w, _mm256_set1_epi32(0x03));
    b = _mm256_or_si256(b, _mm256_and_si256(_mm256_srli_epi32(w, 6), _mm256_set1_epi32(0x0c)));
    b = _mm256_or_si256(b, _mm256_and_si256(_mm256_srli_epi32(w, 12), _mm256_set1_epi32(0x30)));
    b = _mm256_or_si256(b, _mm256_and_si256(_mm256_srli_epi32(w, 18), _mm256_set1_epi32(0xc0)));
    const __m256i gather =
        _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12,
                         -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    b = _mm256_shuffle_epi8(b, gather);
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 2, 3, 5, 6, 7));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(b));
  }
}

// 32 codes starting at src (byte aligned) to four vectors of eight int32.
LH_AVX2 inline void LoadCodes(int bits, const uint8_t* src, __m256i q[4]) {
  __m128i v0, v1;
  if (bits == 8) {
    for (int t = 0; t < 4; ++t) {
      q[t] = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 8 * t)));
    }
    return;
  }
  if (bits == 4) {
    __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    const __m128i m = _mm_set1_epi8(0x0f);
    __m128i lo = _mm_and_si128(x, m);
    __m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), m);
    v0 = _mm_unpacklo_epi8(lo, hi);
    v1 = _mm_unpackhi_epi8(lo, hi);
  } else {
    __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src));
    const __m128i m = _mm_set1_epi8(0x03);
    __m128i a0 = _mm_and_si128(x, m);
    __m128i a1 = _mm_and_si128(_mm_srli_epi16(x, 2), m);
    __m128i a2 = _mm_and_si128(_mm_srli_epi16(x, 4), m);
    __m128i a3 = _mm_and_si128(_mm_srli_epi16(x, 6), m);
    __m128i p01 = _mm_unpacklo_epi8(a0, a1);
    __m128i p23 = _mm_unpacklo_epi8(a2, a3);
    v0 = _mm_unpacklo_epi16(p01, p23);
    v1 = _mm_unpackhi_epi16(p01, p23);
  }
  q[0] = _mm256_cvtepu8_epi32(v0);
  q[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(v0, 8));
  q[2] = _mm256_cvtepu8_epi32(v1);
  q[3] = _mm256_cvtepu8_epi32(_mm_srli_si128(v1, 8));
}

// Eight vectors of per-lane partial maxima (one vector per block) to one vector of the eight
// blocks' maxima, in block order.
LH_AVX2 inline __m256i ReduceMaxU32x8(const __m256i a[8]) {
  auto pair = [](__m256i x, __m256i y) LH_AVX2 {
    return _mm256_max_epu32(_mm256_unpacklo_epi32(x, y), _mm256_unpackhi_epi32(x, y));
  };
  const __m256i t01 = pair(a[0], a[1]), t23 = pair(a[2], a[3]);
  const __m256i t45 = pair(a[4], a[5]), t67 = pair(a[6], a[7]);
  const __m256i u0 =
      _mm256_max_epu32(_mm256_unpacklo_epi64(t01, t23), _mm256_unpackhi_epi64(t01, t23));
  const __m256i u1 =
      _mm256_max_epu32(_mm256_unpacklo_epi64(t45, t67), _mm256_unpackhi_epi64(t45, t67));
  return _mm256_max_epu32(_mm256_permute2x128_si256(u0, u1, 0x20),
                          _mm256_permute2x128_si256(u0, u1, 0x31));
}

// The same for float minima or maxima (`op` is _mm256_min_ps or _mm256_max_ps).
template <typename Op>
LH_AVX2 inline __m256 ReduceFloatx8(const __m256 a[8], Op op) {
  auto pair = [&](__m256 x, __m256 y)
                  LH_AVX2 { return op(_mm256_unpacklo_ps(x, y), _mm256_unpackhi_ps(x, y)); };
  auto lo64 = [](__m256 x, __m256 y) LH_AVX2 {
    return _mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(x), _mm256_castps_pd(y)));
  };
  auto hi64 = [](__m256 x, __m256 y) LH_AVX2 {
    return _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(x), _mm256_castps_pd(y)));
  };
  const __m256 t01 = pair(a[0], a[1]), t23 = pair(a[2], a[3]);
  const __m256 t45 = pair(a[4], a[5]), t67 = pair(a[6], a[7]);
  const __m256 u0 = op(lo64(t01, t23), hi64(t01, t23));
  const __m256 u1 = op(lo64(t45, t67), hi64(t45, t67));
  return op(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// (double)a op (double)b for eight floats, rounded back to float: the scalar formulas of
// SymmetricScale / AsymmetricScale, lane by lane, with identical rounding.
template <typename Op>
LH_AVX2 inline __m256 InDouble(__m256 a, __m256 b, Op op) {
  const __m128 lo = _mm256_cvtpd_ps(
      op(_mm256_cvtps_pd(_mm256_castps256_ps128(a)), _mm256_cvtps_pd(_mm256_castps256_ps128(b))));
  const __m128 hi = _mm256_cvtpd_ps(op(_mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)),
                                       _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1))));
  return _mm256_set_m128(hi, lo);
}

// Scale constants of eight consecutive blocks (see BlockScale).
struct GroupScales {
  alignas(32) float scale[8];
  alignas(32) float mid[8];
  alignas(32) float divisor[8];
  alignas(32) float inv[8];
  int divide_mask;
  BlockScale Block(int j, float c, float qhi) const {
    return {scale[j], mid[j], c, qhi, divisor[j], inv[j], ((divide_mask >> j) & 1) != 0};
  }
};

LH_AVX2 inline void FinishGroup(__m256 scale, __m256 mid, GroupScales* g) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 positive = _mm256_cmp_ps(scale, _mm256_setzero_ps(), _CMP_GT_OQ);
  const __m256 divisor = _mm256_blendv_ps(one, scale, positive);
  const __m256 inv = _mm256_div_ps(one, divisor);
  _mm256_store_ps(g->scale, scale);
  _mm256_store_ps(g->mid, mid);
  _mm256_store_ps(g->divisor, divisor);
  _mm256_store_ps(g->inv, inv);
  g->divide_mask = _mm256_movemask_ps(_mm256_cmp_ps(inv, _mm256_set1_ps(FLT_MAX), _CMP_GT_OQ));
}

// Quantizes one full block (block % 32 == 0) whose constants are known. Templated on what
// stays fixed for a whole tensor so the inner loop has no branches.
template <int kBits, bool kStochastic, bool kDivide>
LH_AVX2 __attribute__((always_inline)) inline void QuantizeBody(uint32_t block, const float* xb,
                                                                uint64_t start, const BlockScale& s,
                                                                uint32_t key, uint8_t* codes) {
  const __m256 mid = _mm256_set1_ps(s.mid), div = _mm256_set1_ps(s.divisor);
  const __m256 inv = _mm256_set1_ps(s.inv);
  const __m256 c = _mm256_set1_ps(s.c), qhi = _mm256_set1_ps(s.qhi);
  const __m256 zero = _mm256_setzero_ps();
  for (uint32_t j = 0; j < block; j += 32) {
    __m256i q[4];
    for (int t = 0; t < 4; ++t) {
      __m256 d = _mm256_sub_ps(_mm256_loadu_ps(xb + j + 8 * t), mid);
      __m256 y = _mm256_add_ps(kDivide ? _mm256_div_ps(d, div) : _mm256_mul_ps(d, inv), c);
      __m256 rounded = kStochastic
                           ? _mm256_floor_ps(_mm256_add_ps(y, NoiseAvx2(key, start + j + 8 * t)))
                           : _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      rounded = _mm256_min_ps(_mm256_max_ps(rounded, zero), qhi);
      q[t] = _mm256_cvttps_epi32(rounded);
    }
    StoreCodes(kBits, q, codes + (start + j) * kBits / 8);
  }
}

template <int kBits, bool kStochastic>
LH_AVX2 __attribute__((always_inline)) inline void QuantizeBlock(uint32_t block, const float* xb,
                                                                 uint64_t start,
                                                                 const BlockScale& s, uint32_t key,
                                                                 uint8_t* codes) {
  if (s.divide) {
    QuantizeBody<kBits, kStochastic, true>(block, xb, start, s, key, codes);
  } else {
    QuantizeBody<kBits, kStochastic, false>(block, xb, start, s, key, codes);
  }
}

// Quantizes blocks [b, b + 8), all full. Returns the first non-finite index, or kNone.
template <int kBits, bool kStochastic, bool kAsym>
LH_AVX2 __attribute__((always_inline)) inline int64_t QuantizeGroup(const QuantParams& p,
                                                                    const float* x, uint64_t n,
                                                                    uint64_t b, uint32_t key,
                                                                    const Regions& r,
                                                                    uint8_t* out) {
  const __m256i abs = _mm256_set1_epi32(static_cast<int>(kAbsMask));
  __m256i amax[8];
  __m256 lo[8], hi[8];
  for (int j = 0; j < 8; ++j) {
    const float* xb = x + (b + j) * p.block;
    amax[j] = _mm256_setzero_si256();
    lo[j] = hi[j] = _mm256_loadu_ps(xb);
    for (uint32_t i = 0; i < p.block; i += 8) {
      const __m256 v = _mm256_loadu_ps(xb + i);
      amax[j] = _mm256_max_epu32(amax[j], _mm256_and_si256(_mm256_castps_si256(v), abs));
      if (kAsym) {
        lo[j] = _mm256_min_ps(lo[j], v);
        hi[j] = _mm256_max_ps(hi[j], v);
      }
    }
  }
  const __m256i absmax = ReduceMaxU32x8(amax);
  const __m256i bad = _mm256_cmpgt_epi32(absmax, _mm256_set1_epi32(static_cast<int>(kExpMask - 1)));
  if (!_mm256_testz_si256(bad, bad)) {
    for (int j = 0; j < 8; ++j) {
      const int64_t at = QuantizeBlockReference(p, x, n, b + j, out);
      if (at != kNone) return at;
    }
  }
  GroupScales g;
  float c, qhi;
  if (kAsym) {
    const __m256 vlo =
        ReduceFloatx8(lo, [](__m256 u, __m256 v) LH_AVX2 { return _mm256_min_ps(u, v); });
    const __m256 vhi =
        ReduceFloatx8(hi, [](__m256 u, __m256 v) LH_AVX2 { return _mm256_max_ps(u, v); });
    const double levels = static_cast<double>((1 << kBits) - 1);
    const __m256d vlevels = _mm256_set1_pd(levels), half = _mm256_set1_pd(0.5);
    const __m256 scale = InDouble(vhi, vlo, [&](__m256d h, __m256d l) LH_AVX2 {
      return _mm256_div_pd(_mm256_sub_pd(h, l), vlevels);
    });
    __m256 mid = InDouble(vlo, vhi, [&](__m256d l, __m256d h) LH_AVX2 {
      return _mm256_mul_pd(half, _mm256_add_pd(l, h));
    });
    mid = _mm256_andnot_ps(_mm256_cmp_ps(mid, _mm256_setzero_ps(), _CMP_EQ_OQ), mid);
    FinishGroup(scale, mid, &g);
    c = static_cast<float>(levels / 2);
    qhi = static_cast<float>(levels);
    _mm256_storeu_ps(reinterpret_cast<float*>(r.mids + 4 * b), mid);
  } else {
    const double cmax = static_cast<double>((1 << (kBits - 1)) - 1);
    const __m256d vcmax = _mm256_set1_pd(cmax);
    const __m256 m = _mm256_castsi256_ps(absmax);
    const __m256 scale =
        InDouble(m, m, [&](__m256d a, __m256d) LH_AVX2 { return _mm256_div_pd(a, vcmax); });
    FinishGroup(scale, _mm256_setzero_ps(), &g);
    c = static_cast<float>(cmax);
    qhi = static_cast<float>(2 * cmax);
  }
  _mm256_storeu_ps(reinterpret_cast<float*>(r.scales + 4 * b), _mm256_load_ps(g.scale));
  for (int j = 0; j < 8; ++j) {
    const uint64_t start = (b + j) * p.block;
    QuantizeBlock<kBits, kStochastic>(p.block, x + start, start, g.Block(j, c, qhi), key, r.codes);
  }
  return kNone;
}

}  // namespace

namespace {

template <int kBits, bool kStochastic, bool kAsym>
LH_AVX2 int64_t QuantizeImpl(const QuantParams& p, const float* x, uint64_t n, uint8_t* out) {
  const uint64_t nb = QuantBlocks(p, n);
  const Regions r = Split(p, n, out);
  const uint32_t key = NoiseKey(p.seed);
  const __m256i abs = _mm256_set1_epi32(static_cast<int>(kAbsMask));
  for (uint64_t b = 0; b < nb;) {
    const uint64_t start = b * p.block;
    if (p.block % 32 == 0 && (b + 8) * p.block <= n) {
      const int64_t bad = QuantizeGroup<kBits, kStochastic, kAsym>(p, x, n, b, key, r, out);
      if (bad != kNone) return bad;
      b += 8;
      continue;
    }
    if (p.block % 32 != 0 || start + p.block > n) {
      const int64_t bad = QuantizeBlockReference(p, x, n, b, out);
      if (bad != kNone) return bad;
      ++b;
      continue;
    }
    const float* xb = x + start;
    __m256i amax = _mm256_setzero_si256();
    __m256 lo = _mm256_loadu_ps(xb), hi = lo;
    for (uint32_t j = 0; j < p.block; j += 8) {
      __m256 v = _mm256_loadu_ps(xb + j);
      amax = _mm256_max_epu32(amax, _mm256_and_si256(_mm256_castps_si256(v), abs));
      if (kAsym) {
        lo = _mm256_min_ps(lo, v);
        hi = _mm256_max_ps(hi, v);
      }
    }
    const uint32_t absmax = HorizontalMaxU32(amax);
    if (absmax >= kExpMask) return QuantizeBlockReference(p, x, n, b, out);
    const BlockScale s = kAsym ? AsymmetricScale(HorizontalMin(lo), HorizontalMax(hi), kBits)
                               : SymmetricScale(absmax, kBits);
    std::memcpy(r.scales + 4 * b, &s.scale, 4);
    if (kAsym) std::memcpy(r.mids + 4 * b, &s.mid, 4);
    QuantizeBlock<kBits, kStochastic>(p.block, xb, start, s, key, r.codes);
    ++b;
  }
  return kNone;
}

template <int kBits>
int64_t QuantizeBits(const QuantParams& p, const float* x, uint64_t n, uint8_t* out) {
  if (p.stochastic) {
    return p.asymmetric ? QuantizeImpl<kBits, true, true>(p, x, n, out)
                        : QuantizeImpl<kBits, true, false>(p, x, n, out);
  }
  return p.asymmetric ? QuantizeImpl<kBits, false, true>(p, x, n, out)
                      : QuantizeImpl<kBits, false, false>(p, x, n, out);
}

}  // namespace

int64_t QuantizeAvx2(const QuantParams& p, const float* x, uint64_t n, uint8_t* out) {
  switch (p.bits) {
    case 8:
      return QuantizeBits<8>(p, x, n, out);
    case 4:
      return QuantizeBits<4>(p, x, n, out);
    default:
      return QuantizeBits<2>(p, x, n, out);
  }
}

LH_AVX2 int64_t DequantizeAvx2(const QuantParams& p, const uint8_t* in, uint64_t n, float* out) {
  const uint64_t nb = QuantBlocks(p, n);
  const Regions r = Split(p, n, in);
  const float cval = p.asymmetric ? static_cast<float>((1 << p.bits) - 1) / 2
                                  : static_cast<float>((1 << (p.bits - 1)) - 1);
  const __m256 c = _mm256_set1_ps(cval);
  const __m256 lo = _mm256_set1_ps(-FLT_MAX), hi = _mm256_set1_ps(FLT_MAX);
  for (uint64_t b = 0; b < nb; ++b) {
    const uint64_t start = b * p.block;
    if (p.block % 32 != 0 || start + p.block > n) {
      if (!DequantizeBlockReference(p, in, n, b, out)) return static_cast<int64_t>(b);
      continue;
    }
    float scale, midval = 0.0f;
    std::memcpy(&scale, r.scales + 4 * b, 4);
    if (p.asymmetric) std::memcpy(&midval, r.mids + 4 * b, 4);
    if (!ValidBlock(scale, midval)) return static_cast<int64_t>(b);
    const __m256 s = _mm256_set1_ps(scale), mid = _mm256_set1_ps(midval);
    for (uint32_t j = 0; j < p.block; j += 32) {
      __m256i q[4];
      LoadCodes(p.bits, r.codes + (start + j) * p.bits / 8, q);
      for (int t = 0; t < 4; ++t) {
        __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_cvtepi32_ps(q[t]), c), s);
        if (p.asymmetric) v = _mm256_add_ps(v, mid);
        v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
        _mm256_storeu_ps(out + start + j + 8 * t, v);
      }
    }
  }
  return kNone;
}

}  // namespace longhaul::compression::kernels::internal

#endif  // defined(__x86_64__)
