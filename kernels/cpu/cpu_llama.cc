// "cpu" backend, the Llama-family ops that are not matmuls: RMSNorm, rotary embedding and
// SwiGLU (grouped-query attention is in cpu_attention.cc). Rows are split across the pool's
// threads; dweight, a sum over rows, is split by columns, so each output is summed in one
// fixed order whatever the thread count (as cpu_ops.cc does for layernorm).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops_internal.h"
#include "kernels/cpu/vec_math.h"

namespace longhaul::kernels {
namespace {

constexpr int kColumnChunk = 16;  // one cache line of dweight per task

// sigmoid(x) over 8 lanes.
inline __m256 Sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one, _mm256_add_ps(one, vec::Exp8(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

}  // namespace

void CpuOps::RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int N,
                            int C, float eps) {
  ParallelRange(N, size_t{3} * C, [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; n++) {
      const float* x = inp + n * C;
      float* o = out + n * C;
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int i = 0; i < C; i++) ss += x[i] * x[i];
      const float r = 1.0f / std::sqrt(ss / C + eps);
      for (int i = 0; i < C; i++) o[i] = weight[i] * (x[i] * r);
      rstd[n] = r;
    }
  });
}

void CpuOps::RmsNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                             const float* weight, const float* rstd, int N, int C) {
  ParallelRange(N, size_t{5} * C, [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; n++) {
      const float* dy = dout + n * C;
      const float* x = inp + n * C;
      float* dx = dinp + n * C;
      const float r = rstd[n];
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int i = 0; i < C; i++) dot += weight[i] * dy[i] * (x[i] * r);
      dot /= C;
      for (int i = 0; i < C; i++) dx[i] += (weight[i] * dy[i] - (x[i] * r) * dot) * r;
    }
  });
  const size_t chunks = (C + kColumnChunk - 1) / kColumnChunk;
  ParallelRange(chunks, size_t{3} * N * kColumnChunk, [&](size_t begin, size_t end) {
    const int c0 = static_cast<int>(begin) * kColumnChunk;
    const int c1 = std::min(C, static_cast<int>(end) * kColumnChunk);
    for (int n = 0; n < N; n++) {
      const float* dy = dout + static_cast<size_t>(n) * C;
      const float* x = inp + static_cast<size_t>(n) * C;
      const float r = rstd[n];
      for (int i = c0; i < c1; i++) dweight[i] += dy[i] * (x[i] * r);
    }
  });
}

namespace {

// Rotates the query and key heads of rows [begin, end) of a (B*T, W) buffer by +angle
// (sign 1) or -angle (sign -1).
void RotateRows(float* qkv, const float* cos, const float* sin, size_t begin, size_t end, int T,
                int NH, int NKV, int HD, float sign) {
  const int half = HD / 2;
  const size_t width = static_cast<size_t>(NH + 2 * NKV) * HD;
  for (size_t bt = begin; bt < end; bt++) {
    const float* c = cos + (bt % T) * half;
    const float* s = sin + (bt % T) * half;
    float* row = qkv + bt * width;
    for (int h = 0; h < NH + NKV; h++) {
      float* x = row + static_cast<size_t>(h) * HD;
#pragma omp simd
      for (int i = 0; i < half; i++) {
        const float x1 = x[i], x2 = x[i + half], si = sign * s[i];
        x[i] = x1 * c[i] - x2 * si;
        x[i + half] = x2 * c[i] + x1 * si;
      }
    }
  }
}

}  // namespace

void CpuOps::RopeForward(float* qkv, const float* cos, const float* sin, int B, int T, int NH,
                         int NKV, int HD) {
  ParallelRange(size_t{1} * B * T, size_t{3} * (NH + NKV) * HD, [&](size_t begin, size_t end) {
    RotateRows(qkv, cos, sin, begin, end, T, NH, NKV, HD, 1.0f);
  });
}

void CpuOps::RopeBackward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH,
                          int NKV, int HD) {
  ParallelRange(size_t{1} * B * T, size_t{3} * (NH + NKV) * HD, [&](size_t begin, size_t end) {
    RotateRows(dqkv, cos, sin, begin, end, T, NH, NKV, HD, -1.0f);
  });
}

void CpuOps::SwiGluForward(float* out, const float* inp, int N, int I) {
  ParallelRange(N, size_t{20} * I, [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; n++) {
      const float* gate = inp + n * 2 * I;
      const float* up = gate + I;
      float* o = out + n * I;
      vec::ForEach8(I, [&](size_t i, size_t count) {
        const __m256 g = vec::Load(gate + i, count);
        const __m256 y = _mm256_mul_ps(_mm256_mul_ps(g, Sigmoid8(g)), vec::Load(up + i, count));
        vec::Store(o + i, y, count);
      });
    }
  });
}

// dgate += dy up sig (1 + g (1 - sig)); dup += dy g sig.
void CpuOps::SwiGluBackward(float* dinp, const float* inp, const float* dout, int N, int I) {
  ParallelRange(N, size_t{30} * I, [&](size_t begin, size_t end) {
    const __m256 one = _mm256_set1_ps(1.0f);
    for (size_t n = begin; n < end; n++) {
      const float* gate = inp + n * 2 * I;
      const float* up = gate + I;
      const float* dy = dout + n * I;
      float* dgate = dinp + n * 2 * I;
      float* dup = dgate + I;
      vec::ForEach8(I, [&](size_t i, size_t count) {
        const __m256 g = vec::Load(gate + i, count), u = vec::Load(up + i, count);
        const __m256 d = vec::Load(dy + i, count), sig = Sigmoid8(g);
        const __m256 dsilu = _mm256_mul_ps(sig, _mm256_fmadd_ps(g, _mm256_sub_ps(one, sig), one));
        vec::Store(dgate + i,
                   _mm256_fmadd_ps(_mm256_mul_ps(d, u), dsilu, vec::Load(dgate + i, count)), count);
        vec::Store(dup + i, _mm256_fmadd_ps(d, _mm256_mul_ps(g, sig), vec::Load(dup + i, count)),
                   count);
      });
    }
  });
}

}  // namespace longhaul::kernels
