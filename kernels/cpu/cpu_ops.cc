// "cpu" backend, the ops that are not matmuls: embedding, layernorm, GELU, residual,
// softmax cross-entropy, AdamW and the sum of squares. Rows (or fixed chunks) are split
// across the pool's threads; reductions across rows (dweight, dbias, dwte) are split by
// columns instead, so each output is summed in one fixed order whatever the thread count.
#include "kernels/cpu/cpu_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cpu_ops_internal.h"
#include "kernels/cpu/vec_math.h"

namespace longhaul::kernels {
namespace {

constexpr float kLayerNormEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
// Column chunk for the column-split reductions: 16 floats, one cache line.
constexpr int kColumnChunk = 16;
// SumSquares' partial sums: one per kChunk elements (fixed, so the sum's order is too).
constexpr size_t kChunk = 1 << 14;

}  // namespace

CpuOps::CpuOps(int threads) : pool_(threads > 0 ? threads : AvailableCores()) {
  openblas_set_num_threads(1);  // sgemm runs as single-threaded tiles on the pool
}

void CpuOps::ParallelRange(size_t n, size_t item_cost,
                           const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  size_t per_block = std::max<size_t>(1, kGrain / std::max<size_t>(1, item_cost));
  if (per_block >= 64) per_block = per_block / 16 * 16;  // whole vectors for element-wise ops
  const size_t blocks = (n + per_block - 1) / per_block;
  if (blocks == 1) {
    fn(0, n);
    return;
  }
  pool_.ParallelFor(blocks, [&](size_t b) { fn(b * per_block, std::min(n, (b + 1) * per_block)); });
}

void CpuOps::EmbeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                              int B, int T, int C) {
  ParallelRange(size_t{1} * B * T, 2 * C, [&](size_t begin, size_t end) {
    for (size_t bt = begin; bt < end; bt++) {
      float* o = out + bt * C;
      const float* e = wte + static_cast<size_t>(tokens[bt]) * C;
      const float* p = wpe + (bt % T) * C;
      for (int i = 0; i < C; i++) o[i] = e[i] + p[i];
    }
  });
}

void CpuOps::EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                               int B, int T, int C) {
  const size_t chunks = (C + kColumnChunk - 1) / kColumnChunk;
  ParallelRange(chunks, size_t{2} * B * T * kColumnChunk, [&](size_t begin, size_t end) {
    const int c0 = static_cast<int>(begin) * kColumnChunk;
    const int c1 = std::min(C, static_cast<int>(end) * kColumnChunk);
    for (int b = 0; b < B; b++) {
      for (int t = 0; t < T; t++) {
        const float* d = dout + (static_cast<size_t>(b) * T + t) * C;
        float* we = dwte + static_cast<size_t>(tokens[b * T + t]) * C;
        float* wp = dwpe + static_cast<size_t>(t) * C;
        for (int i = c0; i < c1; i++) {
          we[i] += d[i];
          wp[i] += d[i];
        }
      }
    }
  });
}

void CpuOps::LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                              const float* weight, const float* bias, int N, int C) {
  ParallelRange(N, size_t{4} * C, [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; n++) {
      const float* x = inp + static_cast<size_t>(n) * C;
      float* o = out + static_cast<size_t>(n) * C;
      float m = 0.0f;
#pragma omp simd reduction(+ : m)
      for (int i = 0; i < C; i++) m += x[i];
      m /= C;
      float v = 0.0f;
#pragma omp simd reduction(+ : v)
      for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
      v /= C;
      const float s = 1.0f / std::sqrt(v + kLayerNormEps);
      for (int i = 0; i < C; i++) o[i] = (s * (x[i] - m)) * weight[i] + bias[i];
      mean[n] = m;
      rstd[n] = s;
    }
  });
}

void CpuOps::LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                               const float* inp, const float* weight, const float* mean,
                               const float* rstd, int N, int C) {
  // dinp: independent per row.
  ParallelRange(N, size_t{6} * C, [&](size_t begin, size_t end) {
    for (size_t n = begin; n < end; n++) {
      const float* dy = dout + static_cast<size_t>(n) * C;
      const float* x = inp + static_cast<size_t>(n) * C;
      float* dx = dinp + static_cast<size_t>(n) * C;
      const float mu = mean[n], rs = rstd[n];
      float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
      for (int i = 0; i < C; i++) {
        float dnorm = weight[i] * dy[i];
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * ((x[i] - mu) * rs);
      }
      dnorm_mean /= C;
      dnorm_norm_mean /= C;
      for (int i = 0; i < C; i++) {
        float norm = (x[i] - mu) * rs;
        dx[i] += (weight[i] * dy[i] - dnorm_mean - norm * dnorm_norm_mean) * rs;
      }
    }
  });
  // dweight, dbias: sums over rows, split by columns, rows in order.
  const size_t chunks = (C + kColumnChunk - 1) / kColumnChunk;
  ParallelRange(chunks, size_t{4} * N * kColumnChunk, [&](size_t begin, size_t end) {
    const int c0 = static_cast<int>(begin) * kColumnChunk;
    const int c1 = std::min(C, static_cast<int>(end) * kColumnChunk);
    for (int n = 0; n < N; n++) {
      const float* dy = dout + static_cast<size_t>(n) * C;
      const float* x = inp + static_cast<size_t>(n) * C;
      const float mu = mean[n], rs = rstd[n];
      for (int i = c0; i < c1; i++) {
        dbias[i] += dy[i];
        dweight[i] += ((x[i] - mu) * rs) * dy[i];
      }
    }
  });
}

// GELU(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
void CpuOps::GeluForward(float* out, const float* inp, size_t n) {
  ParallelRange(n, 20, [&](size_t begin, size_t end) {
    const size_t len = end - begin;
    vec::ForEach8(len, [&](size_t i, size_t count) {
      __m256 x = vec::Load(inp + begin + i, count);
      __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
      __m256 u = _mm256_mul_ps(_mm256_set1_ps(kGeluScale),
                               _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x));
      __m256 e = vec::Exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
      __m256 y = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
      vec::Store(out + begin + i, y, count);
    });
  });
}

// d/dx = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3 * 0.044715 x^2), s = sigmoid(2u); this is
// llm.c's 0.5 (1 + tanh) + 0.5 x sech^2 (...) rewritten, since tanh = 2s - 1 and
// sech^2 = 4 s (1 - s).
void CpuOps::GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) {
  ParallelRange(n, 30, [&](size_t begin, size_t end) {
    const size_t len = end - begin;
    vec::ForEach8(len, [&](size_t i, size_t count) {
      const __m256 one = _mm256_set1_ps(1.0f);
      __m256 x = vec::Load(inp + begin + i, count);
      __m256 x2 = _mm256_mul_ps(x, x);
      __m256 u = _mm256_mul_ps(_mm256_set1_ps(kGeluScale),
                               _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), x2), x, x));
      __m256 e = vec::Exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
      __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, e));
      __m256 one_minus_s = _mm256_mul_ps(e, s);
      __m256 poly = _mm256_fmadd_ps(_mm256_set1_ps(3.0f * 0.044715f), x2, one);
      __m256 t = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(2.0f * kGeluScale), x),
                               _mm256_mul_ps(_mm256_mul_ps(s, one_minus_s), poly));
      __m256 grad = _mm256_add_ps(s, t);
      __m256 d = _mm256_fmadd_ps(grad, vec::Load(dout + begin + i, count),
                                 vec::Load(dinp + begin + i, count));
      vec::Store(dinp + begin + i, d, count);
    });
  });
}

void CpuOps::Zero(float* p, size_t count) {
  ParallelRange(count, 1, [=](size_t begin, size_t end) {
    std::memset(p + begin, 0, (end - begin) * sizeof(float));
  });
}

void CpuOps::ResidualForward(float* out, const float* a, const float* b, size_t n) {
  ParallelRange(n, 3, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; i++) out[i] = a[i] + b[i];
  });
}

void CpuOps::ResidualBackward(float* da, float* db, const float* dout, size_t n) {
  ParallelRange(n, 5, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; i++) {
      da[i] += dout[i];
      db[i] += dout[i];
    }
  });
}

void CpuOps::SoftmaxCrossEntropyForward(float* probs, float* losses, const float* logits,
                                        const int32_t* targets, int B, int T, int V, int Vp) {
  ParallelRange(size_t{1} * B * T, size_t{8} * V, [&](size_t begin, size_t end) {
    for (size_t bt = begin; bt < end; bt++) {
      const float* x = logits + static_cast<size_t>(bt) * Vp;
      float* p = probs + static_cast<size_t>(bt) * Vp;
      float maxval = vec::Max(x, V);
      float sum = vec::ExpShiftSum(p, x, maxval, V);
      vec::Scale(p, 1.0f / sum, V);
      for (int i = V; i < Vp; i++) p[i] = 0.0f;
      losses[bt] = -std::log(p[targets[bt]]);
    }
  });
}

void CpuOps::SoftmaxCrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                         float dloss, int B, int T, int V, int Vp) {
  ParallelRange(size_t{1} * B * T, size_t{3} * V, [&](size_t begin, size_t end) {
    for (size_t bt = begin; bt < end; bt++) {
      float* d = dlogits + static_cast<size_t>(bt) * Vp;
      const float* p = probs + static_cast<size_t>(bt) * Vp;
      const int target = targets[bt];
      const float d_target = d[target];
      for (int i = 0; i < V; i++) d[i] += p[i] * dloss;
      d[target] = d_target + (p[target] - 1.0f) * dloss;  // the indicator, as the reference
    }
  });
}

// The accumulating form's bits on a zeroed dlogits (0 + x is x), in one pass instead of two.
void CpuOps::SoftmaxCrossEntropyBackwardInto(float* dlogits, const float* probs,
                                             const int32_t* targets, float dloss, int B, int T,
                                             int V, int Vp) {
  ParallelRange(size_t{1} * B * T, size_t{2} * Vp, [&](size_t begin, size_t end) {
    for (size_t bt = begin; bt < end; bt++) {
      float* d = dlogits + static_cast<size_t>(bt) * Vp;
      const float* p = probs + static_cast<size_t>(bt) * Vp;
      const int target = targets[bt];
      for (int i = 0; i < V; i++) d[i] = p[i] * dloss;
      for (int i = V; i < Vp; i++) d[i] = 0.0f;
      d[target] = (p[target] - 1.0f) * dloss;
    }
  });
}

// Eight lanes at a time, the tail through the same vector code (vec::Load/Store), so an
// element's bits never depend on where a slice or a thread's range starts. The constants are
// locals: captured by reference they would be reloaded every element (the stores may alias
// them), which kept the compiler's loop scalar and this op at a third of memory speed.
void CpuOps::AdamW(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                   float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                   int t) {
  const float beta1_correction = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float beta2_correction = 1.0f - std::pow(beta2, static_cast<float>(t));
  const __m256 scale = _mm256_set1_ps(grad_scale), b1 = _mm256_set1_ps(beta1),
               b2 = _mm256_set1_ps(beta2), one_b1 = _mm256_set1_ps(1.0f - beta1),
               one_b2 = _mm256_set1_ps(1.0f - beta2), c1 = _mm256_set1_ps(beta1_correction),
               c2 = _mm256_set1_ps(beta2_correction), vlr = _mm256_set1_ps(lr),
               veps = _mm256_set1_ps(eps), decay = _mm256_set1_ps(weight_decay);
  ParallelRange(n, 12, [=](size_t begin, size_t end) {
    vec::ForEach8(end - begin, [=](size_t i, size_t count) {
      const size_t at = begin + i;
      const __m256 g = _mm256_mul_ps(vec::Load(grads + at, count), scale);
      const __m256 mi = _mm256_fmadd_ps(b1, vec::Load(m + at, count), _mm256_mul_ps(one_b1, g));
      const __m256 vi =
          _mm256_fmadd_ps(b2, vec::Load(v + at, count), _mm256_mul_ps(_mm256_mul_ps(one_b2, g), g));
      vec::Store(m + at, mi, count);
      vec::Store(v + at, vi, count);
      const __m256 m_hat = _mm256_div_ps(mi, c1);
      const __m256 v_hat = _mm256_div_ps(vi, c2);
      const __m256 p = vec::Load(params + at, count);
      const __m256 update = _mm256_fmadd_ps(
          decay, p, _mm256_div_ps(m_hat, _mm256_add_ps(_mm256_sqrt_ps(v_hat), veps)));
      vec::Store(params + at, _mm256_fnmadd_ps(vlr, update, p), count);
    });
  });
}

// Fixed chunks, each summed over four double lanes x four accumulators, then the chunk sums
// in order: the result does not depend on the thread count.
double CpuOps::SumSquares(const float* x, size_t n) {
  const size_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks);
  ParallelRange(chunks, 2 * kChunk, [&](size_t begin, size_t end) {
    for (size_t c = begin; c < end; c++) {
      const float* p = x + c * kChunk;
      const size_t len = std::min(n, (c + 1) * kChunk) - c * kChunk;
      __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                        _mm256_setzero_pd()};
      size_t i = 0;
      for (; i + 16 <= len; i += 16) {
        for (int k = 0; k < 4; k++) {
          __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(p + i + 4 * k));
          acc[k] = _mm256_fmadd_pd(d, d, acc[k]);
        }
      }
      __m256d s = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
      alignas(32) double lanes[4];
      _mm256_store_pd(lanes, s);
      double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
      for (; i < len; i++) sum += static_cast<double>(p[i]) * p[i];
      partial[c] = sum;
    }
  });
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

std::unique_ptr<Ops> NewCpuOps(int threads) { return std::make_unique<CpuOps>(threads); }

}  // namespace longhaul::kernels
