// Plain-loop reference of the Llama-family ops and of grouped-query causal attention
// (reference_llama.h). Written for obvious correctness, single-threaded, unblocked.
#include "kernels/cpu/reference_llama.h"

#include <cmath>
#include <cstddef>

namespace longhaul::kernels::ref {

void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                    float eps) {
  for (int n = 0; n < N; n++) {
    const float* x = inp + static_cast<size_t>(n) * C;
    float* o = out + static_cast<size_t>(n) * C;
    float ss = 0.0f;
    for (int i = 0; i < C; i++) ss += x[i] * x[i];
    const float r = 1.0f / std::sqrt(ss / C + eps);
    for (int i = 0; i < C; i++) o[i] = weight[i] * (x[i] * r);
    rstd[n] = r;
  }
}

// y = w * x * r with r = (mean(x^2) + eps)^(-1/2): dx = r (w dy) - x r^3 / C sum(w dy x),
// dw = sum over rows of dy x r.
void RmsNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, const float* rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const float* dy = dout + static_cast<size_t>(n) * C;
    const float* x = inp + static_cast<size_t>(n) * C;
    float* dx = dinp + static_cast<size_t>(n) * C;
    const float r = rstd[n];
    float dot = 0.0f;  // sum of (w dy) * (x r)
    for (int i = 0; i < C; i++) dot += weight[i] * dy[i] * (x[i] * r);
    dot /= C;
    for (int i = 0; i < C; i++) {
      const float xhat = x[i] * r;
      dx[i] += (weight[i] * dy[i] - xhat * dot) * r;
      dweight[i] += dy[i] * xhat;
    }
  }
}

namespace {

// Rotates the NH + NKV query and key heads of every row of qkv by +angle (sign 1) or by
// -angle (sign -1, the transpose).
void Rotate(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV, int HD,
            float sign) {
  const int half = HD / 2;
  const size_t width = static_cast<size_t>(NH + 2 * NKV) * HD;
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      float* row = qkv + (static_cast<size_t>(b) * T + t) * width;
      const float* c = cos + static_cast<size_t>(t) * half;
      const float* s = sin + static_cast<size_t>(t) * half;
      for (int h = 0; h < NH + NKV; h++) {
        float* x = row + static_cast<size_t>(h) * HD;
        for (int i = 0; i < half; i++) {
          const float x1 = x[i], x2 = x[i + half], si = sign * s[i];
          x[i] = x1 * c[i] - x2 * si;
          x[i + half] = x2 * c[i] + x1 * si;
        }
      }
    }
  }
}

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

}  // namespace

void RopeForward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                 int HD) {
  Rotate(qkv, cos, sin, B, T, NH, NKV, HD, 1.0f);
}

void RopeBackward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int HD) {
  Rotate(dqkv, cos, sin, B, T, NH, NKV, HD, -1.0f);
}

void SwiGluForward(float* out, const float* inp, int N, int I) {
  for (int n = 0; n < N; n++) {
    const float* gate = inp + static_cast<size_t>(n) * 2 * I;
    const float* up = gate + I;
    float* o = out + static_cast<size_t>(n) * I;
    for (int i = 0; i < I; i++) o[i] = Silu(gate[i]) * up[i];
  }
}

// d silu(g) / dg = sig(g) (1 + g (1 - sig(g))).
void SwiGluBackward(float* dinp, const float* inp, const float* dout, int N, int I) {
  for (int n = 0; n < N; n++) {
    const float* gate = inp + static_cast<size_t>(n) * 2 * I;
    const float* up = gate + I;
    const float* dy = dout + static_cast<size_t>(n) * I;
    float* dgate = dinp + static_cast<size_t>(n) * 2 * I;
    float* dup = dgate + I;
    for (int i = 0; i < I; i++) {
      const float g = gate[i], sig = 1.0f / (1.0f + std::exp(-g));
      dgate[i] += dy[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
      dup[i] += dy[i] * (g * sig);
    }
  }
}

void GroupedAttentionForward(float* out, float* preatt, float* att, const float* qkv, int B, int T,
                             int NH, int NKV, int HD) {
  if (B == 0 || T == 0 || NH == 0 || HD == 0) return;
  const size_t W = static_cast<size_t>(NH + 2 * NKV) * HD, OW = static_cast<size_t>(NH) * HD;
  const int group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      for (int h = 0; h < NH; h++) {
        const size_t k_at = static_cast<size_t>(NH + h / group) * HD;
        const size_t v_at = static_cast<size_t>(NH + NKV + h / group) * HD;
        const float* q = qkv + (static_cast<size_t>(b) * T + t) * W + h * HD;
        size_t row = ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        float* preatt_row = preatt + row;
        float* att_row = att + row;
        // Scaled scores q.k and their maximum, over the causal window t2 <= t.
        float maxval = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const float* k = qkv + (static_cast<size_t>(b) * T + t2) * W + k_at;
          float val = 0.0f;
          for (int i = 0; i < HD; i++) val += q[i] * k[i];
          val *= scale;
          if (val > maxval) maxval = val;
          preatt_row[t2] = val;
        }
        float expsum = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
          float e = std::exp(preatt_row[t2] - maxval);
          expsum += e;
          att_row[t2] = e;
        }
        float expsum_inv = expsum == 0.0f ? 0.0f : 1.0f / expsum;
        for (int t2 = 0; t2 < T; t2++) att_row[t2] = t2 <= t ? att_row[t2] * expsum_inv : 0.0f;
        // out = att x v.
        float* out_h = out + (static_cast<size_t>(b) * T + t) * OW + h * HD;
        for (int i = 0; i < HD; i++) out_h[i] = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) {
          const float* v = qkv + (static_cast<size_t>(b) * T + t2) * W + v_at;
          float a = att_row[t2];
          for (int i = 0; i < HD; i++) out_h[i] += a * v[i];
        }
      }
    }
  }
}

void GroupedAttentionBackward(float* dqkv, float* dpreatt, float* datt, const float* dout,
                              const float* qkv, const float* att, int B, int T, int NH, int NKV,
                              int HD) {
  if (B == 0 || T == 0 || NH == 0 || HD == 0) return;
  const size_t W = static_cast<size_t>(NH + 2 * NKV) * HD, OW = static_cast<size_t>(NH) * HD;
  const int group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      for (int h = 0; h < NH; h++) {
        const size_t k_at = static_cast<size_t>(NH + h / group) * HD;
        const size_t v_at = static_cast<size_t>(NH + NKV + h / group) * HD;
        size_t row = ((static_cast<size_t>(b) * NH + h) * T + t) * T;
        const float* att_row = att + row;
        float* datt_row = datt + row;
        float* dpreatt_row = dpreatt + row;
        const float* dout_h = dout + (static_cast<size_t>(b) * T + t) * OW + h * HD;
        size_t qoff = (static_cast<size_t>(b) * T + t) * W + h * HD;
        // Through out = att x v: datt and dv.
        for (int t2 = 0; t2 <= t; t2++) {
          size_t voff = (static_cast<size_t>(b) * T + t2) * W + v_at;
          float d = 0.0f;
          for (int i = 0; i < HD; i++) {
            d += qkv[voff + i] * dout_h[i];
            dqkv[voff + i] += att_row[t2] * dout_h[i];
          }
          datt_row[t2] = d;
        }
        // Through the softmax: dpreatt = att * (datt - sum(att * datt)).
        float dot = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) dot += att_row[t2] * datt_row[t2];
        for (int t2 = 0; t2 <= t; t2++) dpreatt_row[t2] = att_row[t2] * (datt_row[t2] - dot);
        // Through the scaled scores q.k: dq and dk.
        for (int t2 = 0; t2 <= t; t2++) {
          size_t koff = (static_cast<size_t>(b) * T + t2) * W + k_at;
          float d = dpreatt_row[t2] * scale;
          for (int i = 0; i < HD; i++) {
            dqkv[qoff + i] += qkv[koff + i] * d;
            dqkv[koff + i] += qkv[qoff + i] * d;
          }
        }
      }
    }
  }
}

}  // namespace longhaul::kernels::ref
