// Vectorized float math for the "cpu" backend: exp over 8 lanes (AVX2 + FMA), and the span
// helpers built on it that the hot pointwise loops use (GELU, softmax pieces). Every element
// goes through the same vector code, tails included (they are padded into a lane buffer), so
// an element's result never depends on where a thread's range happens to start.
// Accuracy: exp is Cephes' polynomial, about 2 ulp on [-87, 88]; below -87 it returns 0.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstring>

#if !defined(__AVX2__) || !defined(__FMA__)
#error "kernels/cpu/vec_math.h needs AVX2 and FMA (-mavx2 -mfma)"
#endif

namespace longhaul::kernels::vec {

inline __m256 Exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 hi = _mm256_set1_ps(88.0f);
  __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  // x = n ln2 + r, |r| <= ln2/2, with ln2 split in two for an exact product.
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // Scale by 2^n through the exponent bits.
  __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 result = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(underflow, result);
}

// Applies `f` (a functor on __m256 lane groups reading from `in...` pointers) to n elements:
// full groups of 8 directly, the tail through a zero-padded lane buffer.
template <typename F>
inline void ForEach8(size_t n, F f) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) f(i, 8);
  if (i < n) f(i, n - i);
}

// Loads `count` <= 8 floats (zero-padded) and stores them back.
inline __m256 Load(const float* p, size_t count) {
  if (count == 8) return _mm256_loadu_ps(p);
  alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(buf, p, count * sizeof(float));
  return _mm256_load_ps(buf);
}

inline void Store(float* p, __m256 v, size_t count) {
  if (count == 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  alignas(32) float buf[8];
  _mm256_store_ps(buf, v);
  std::memcpy(p, buf, count * sizeof(float));
}

// Sum of the 8 lanes in a fixed order.
inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HorizontalMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Max of x[0..n), -inf when n == 0.
inline float Max(const float* x, size_t n) {
  __m256 m = _mm256_set1_ps(-__builtin_inff());
  size_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float r = HorizontalMax(m);
  for (; i < n; i++) r = x[i] > r ? x[i] : r;
  return r;
}

// y[i] = exp(x[i] - shift) for i < n; returns the sum of the y (lane-wise, fixed order).
inline float ExpShiftSum(float* y, const float* x, float shift, size_t n) {
  const __m256 s = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  float tail_sum = 0.0f;
  ForEach8(n, [&](size_t i, size_t count) {
    __m256 e = Exp8(_mm256_sub_ps(Load(x + i, count), s));
    Store(y + i, e, count);
    if (count == 8) {
      acc = _mm256_add_ps(acc, e);
    } else {
      alignas(32) float buf[8];
      _mm256_store_ps(buf, e);
      for (size_t j = 0; j < count; j++) tail_sum += buf[j];
    }
  });
  return HorizontalSum(acc) + tail_sum;
}

// y[i] *= a for i < n.
inline void Scale(float* y, float a, size_t n) {
  const __m256 va = _mm256_set1_ps(a);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), va));
  for (; i < n; i++) y[i] *= a;
}

// Dot product of x and y over n, lane-wise then a fixed-order tail.
inline float Dot(const float* x, const float* y, size_t n) {
  __m256 acc = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc);
  }
  float r = HorizontalSum(acc);
  for (; i < n; i++) r += x[i] * y[i];
  return r;
}

}  // namespace longhaul::kernels::vec
