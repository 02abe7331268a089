// AVX2 (+F16C) versions of the streaming kernels: float copy with a finite check, half and
// bfloat16 conversions, and the magnitude selection top-k is built on. Compiled with
// per-function target attributes, so the rest of the binary needs no -mavx2, and chosen at
// run time only on CPUs that have the features. Tails and error positions fall back to the
// reference code, so results are identical to it.
#include "compression/kernels.h"
#include "compression/kernels_internal.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace longhaul::compression::kernels {

#if defined(__x86_64__)
namespace {

using internal::Bf16ToFloat;
using internal::FloatBits;
using internal::FloatToBf16;
using internal::FloatToHalf;
using internal::HalfToFloat;
using internal::kAbsMask;
using internal::kExpMask;
using internal::kHalfLimitBits;
using internal::LoadU16;
using internal::StoreU16;

#define LH_AVX2 __attribute__((target("avx2,f16c")))

// Scalar loops for tails and for locating the first bad element.
int64_t CopyFloatsFrom(const uint8_t* in, uint64_t i, uint64_t n, uint8_t* out) {
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, in + 4 * i, 4);
    if ((bits & kAbsMask) >= kExpMask) return static_cast<int64_t>(i);
    std::memcpy(out + 4 * i, &bits, 4);
  }
  return kNone;
}

LH_AVX2 int64_t CopyFloatsAvx2(const void* src, uint64_t n, void* dst) {
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  const __m256i abs = _mm256_set1_epi32(static_cast<int>(kAbsMask));
  const __m256i lim = _mm256_set1_epi32(static_cast<int>(kExpMask - 1));
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 v[4];
    __m256i bad = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_loadu_ps(reinterpret_cast<const float*>(in + 4 * (i + 8 * j)));
      __m256i mag = _mm256_and_si256(_mm256_castps_si256(v[j]), abs);
      bad = _mm256_or_si256(bad, _mm256_cmpgt_epi32(mag, lim));
    }
    if (!_mm256_testz_si256(bad, bad)) return CopyFloatsFrom(in, i, n, out);
    for (int j = 0; j < 4; ++j) {
      _mm256_storeu_ps(reinterpret_cast<float*>(out + 4 * (i + 8 * j)), v[j]);
    }
  }
  return CopyFloatsFrom(in, i, n, out);
}

int64_t FloatsToHalfFrom(const float* in, uint64_t i, uint64_t n, uint8_t* out) {
  for (; i < n; ++i) {
    if ((FloatBits(in[i]) & kAbsMask) >= kHalfLimitBits) return static_cast<int64_t>(i);
    StoreU16(out, i, FloatToHalf(in[i]));
  }
  return kNone;
}

LH_AVX2 int64_t FloatsToHalfAvx2(const float* in, uint64_t n, uint8_t* out) {
  const __m256i abs = _mm256_set1_epi32(static_cast<int>(kAbsMask));
  const __m256i lim = _mm256_set1_epi32(static_cast<int>(kHalfLimitBits - 1));
  uint64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a = _mm256_loadu_ps(in + i);
    __m256 b = _mm256_loadu_ps(in + i + 8);
    __m256i bad =
        _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(a), abs), lim),
                        _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_castps_si256(b), abs), lim));
    if (!_mm256_testz_si256(bad, bad)) return FloatsToHalfFrom(in, i, n, out);
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), _mm256_cvtps_ph(a, kRound));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * (i + 8)), _mm256_cvtps_ph(b, kRound));
  }
  return FloatsToHalfFrom(in, i, n, out);
}

int64_t HalfToFloatsFrom(const uint8_t* in, uint64_t i, uint64_t n, float* out) {
  for (; i < n; ++i) {
    const uint16_t h = LoadU16(in, i);
    if ((h & 0x7c00u) == 0x7c00u) return static_cast<int64_t>(i);
    out[i] = HalfToFloat(h);
  }
  return kNone;
}

LH_AVX2 int64_t HalfToFloatsAvx2(const uint8_t* in, uint64_t n, float* out) {
  const __m256i exp = _mm256_set1_epi16(0x7c00);
  uint64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i));
    __m256i bad = _mm256_cmpeq_epi16(_mm256_and_si256(h, exp), exp);
    if (!_mm256_testz_si256(bad, bad)) return HalfToFloatsFrom(in, i, n, out);
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
    _mm256_storeu_ps(out + i + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
  }
  return HalfToFloatsFrom(in, i, n, out);
}

int64_t FloatsToBf16From(const float* in, uint64_t i, uint64_t n, uint8_t* out) {
  for (; i < n; ++i) {
    if ((FloatBits(in[i]) & kAbsMask) >= kExpMask) return static_cast<int64_t>(i);
    StoreU16(out, i, FloatToBf16(in[i]));
  }
  return kNone;
}

// Eight floats to eight bfloat16 in the low half of each 32-bit lane (see FloatToBf16).
LH_AVX2 inline __m256i RoundToBf16(__m256i bits) {
  const __m256i one = _mm256_set1_epi32(1);
  __m256i r = _mm256_add_epi32(bits, _mm256_set1_epi32(0x7fff));
  r = _mm256_add_epi32(r, _mm256_and_si256(_mm256_srli_epi32(bits, 16), one));
  __m256i h = _mm256_srli_epi32(r, 16);
  const __m256i exp = _mm256_set1_epi32(0x7f80);
  __m256i overflow = _mm256_cmpeq_epi32(_mm256_and_si256(h, exp), exp);
  __m256i saturated =
      _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), _mm256_set1_epi32(0x7f7f));
  return _mm256_blendv_epi8(h, saturated, overflow);
}

LH_AVX2 int64_t FloatsToBf16Avx2(const float* in, uint64_t n, uint8_t* out) {
  const __m256i abs = _mm256_set1_epi32(static_cast<int>(kAbsMask));
  const __m256i lim = _mm256_set1_epi32(static_cast<int>(kExpMask - 1));
  uint64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8));
    __m256i bad = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_and_si256(a, abs), lim),
                                  _mm256_cmpgt_epi32(_mm256_and_si256(b, abs), lim));
    if (!_mm256_testz_si256(bad, bad)) return FloatsToBf16From(in, i, n, out);
    __m256i packed = _mm256_packus_epi32(RoundToBf16(a), RoundToBf16(b));
    packed = _mm256_permute4x64_epi64(packed, 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * i), packed);
  }
  return FloatsToBf16From(in, i, n, out);
}

int64_t Bf16ToFloatsFrom(const uint8_t* in, uint64_t i, uint64_t n, float* out) {
  for (; i < n; ++i) {
    const uint16_t h = LoadU16(in, i);
    if ((h & 0x7f80u) == 0x7f80u) return static_cast<int64_t>(i);
    out[i] = Bf16ToFloat(h);
  }
  return kNone;
}

LH_AVX2 int64_t Bf16ToFloatsAvx2(const uint8_t* in, uint64_t n, float* out) {
  const __m256i exp = _mm256_set1_epi16(0x7f80);
  uint64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * i));
    __m256i bad = _mm256_cmpeq_epi16(_mm256_and_si256(h, exp), exp);
    if (!_mm256_testz_si256(bad, bad)) return Bf16ToFloatsFrom(in, i, n, out);
    __m256i lo = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(h)), 16);
    __m256i hi = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(h, 1)), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), lo);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 8), hi);
  }
  return Bf16ToFloatsFrom(in, i, n, out);
}

LH_AVX2 uint64_t SelectAtLeastAvx2(const float* x, uint64_t n, uint32_t threshold, uint32_t* idx) {
  const __m256i abs = _mm256_set1_epi32(static_cast<int>(kAbsMask));
  // Magnitudes are non-negative int32s, so a signed compare against threshold - 1 works
  // (threshold 0 gives -1, which selects everything).
  const __m256i thr = _mm256_set1_epi32(static_cast<int>(threshold - 1));
  uint64_t count = 0;
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i m[4];
    for (int j = 0; j < 4; ++j) {
      __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8 * j));
      m[j] = _mm256_cmpgt_epi32(_mm256_and_si256(v, abs), thr);
    }
    __m256i any = _mm256_or_si256(_mm256_or_si256(m[0], m[1]), _mm256_or_si256(m[2], m[3]));
    if (_mm256_testz_si256(any, any)) continue;
    uint32_t mask = 0;
    for (int j = 0; j < 4; ++j) {
      mask |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(m[j]))) << (8 * j);
    }
    while (mask != 0) {
      idx[count++] = static_cast<uint32_t>(i) + static_cast<uint32_t>(__builtin_ctz(mask));
      mask &= mask - 1;
    }
  }
  for (; i < n; ++i) {
    if ((FloatBits(x[i]) & kAbsMask) >= threshold) idx[count++] = static_cast<uint32_t>(i);
  }
  return count;
}

bool CpuHasAvx2AndF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const bool f16c = (ecx & bit_F16C) != 0;
  return f16c && __builtin_cpu_supports("avx2");
}

}  // namespace

const KernelTable* Avx2Kernels() {
  static const bool supported = CpuHasAvx2AndF16c();
  if (!supported) return nullptr;
  static const KernelTable table = {
      "avx2",
      CopyFloatsAvx2,
      FloatsToHalfAvx2,
      HalfToFloatsAvx2,
      FloatsToBf16Avx2,
      Bf16ToFloatsAvx2,
      internal::QuantizeAvx2,
      internal::DequantizeAvx2,
      SelectAtLeastAvx2,
  };
  return &table;
}

#else  // !defined(__x86_64__)

const KernelTable* Avx2Kernels() { return nullptr; }

#endif

}  // namespace longhaul::compression::kernels
