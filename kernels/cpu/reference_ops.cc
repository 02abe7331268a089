// "cpu-ref": GPT-2's ops as plain loops, following llm.c's train_gpt2.c op by op (layernorm
// epsilon 1e-5, GELU tanh approximation, causal attention scaled by 1/sqrt(head size)).
// Single-threaded and unblocked on purpose: it is the reference the fast backends are tested
// against, and the finite-difference tests check it in turn.
#include "kernels/cpu/reference_ops.h"

#include <cmath>
#include <cstring>

#include "kernels/cpu/host_ops.h"
#include "kernels/cpu/reference_llama.h"

namespace longhaul::kernels {
namespace {

constexpr float kLayerNormEps = 1e-5f;
const float kGeluScale = std::sqrt(2.0f / static_cast<float>(M_PI));

class ReferenceOps final : public HostOps {
 public:
  std::string name() const override { return "cpu-ref"; }

  void EmbeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                        int B, int T, int C) override {
    for (int b = 0; b < B; b++) {
      for (int t = 0; t < T; t++) {
        float* out_bt = out + (static_cast<size_t>(b) * T + t) * C;
        const float* wte_ix = wte + static_cast<size_t>(tokens[b * T + t]) * C;
        const float* wpe_t = wpe + static_cast<size_t>(t) * C;
        for (int i = 0; i < C; i++) out_bt[i] = wte_ix[i] + wpe_t[i];
      }
    }
  }

  void EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                         int T, int C) override {
    for (int b = 0; b < B; b++) {
      for (int t = 0; t < T; t++) {
        const float* dout_bt = dout + (static_cast<size_t>(b) * T + t) * C;
        float* dwte_ix = dwte + static_cast<size_t>(tokens[b * T + t]) * C;
        float* dwpe_t = dwpe + static_cast<size_t>(t) * C;
        for (int i = 0; i < C; i++) {
          dwte_ix[i] += dout_bt[i];
          dwpe_t[i] += dout_bt[i];
        }
      }
    }
  }

  void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C) override {
    for (int n = 0; n < N; n++) {
      const float* x = inp + static_cast<size_t>(n) * C;
      float m = 0.0f;
      for (int i = 0; i < C; i++) m += x[i];
      m = m / C;
      float v = 0.0f;
      for (int i = 0; i < C; i++) {
        float xshift = x[i] - m;
        v += xshift * xshift;
      }
      v = v / C;
      float s = 1.0f / std::sqrt(v + kLayerNormEps);
      float* out_n = out + static_cast<size_t>(n) * C;
      for (int i = 0; i < C; i++) out_n[i] = (s * (x[i] - m)) * weight[i] + bias[i];
      mean[n] = m;
      rstd[n] = s;
    }
  }

  void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, const float* mean,
                         const float* rstd, int N, int C) override {
    for (int n = 0; n < N; n++) {
      const float* dout_n = dout + static_cast<size_t>(n) * C;
      const float* inp_n = inp + static_cast<size_t>(n) * C;
      float* dinp_n = dinp + static_cast<size_t>(n) * C;
      const float mean_n = mean[n];
      const float rstd_n = rstd[n];
      // Two reductions: the mean of dnorm and of dnorm * norm.
      float dnorm_mean = 0.0f;
      float dnorm_norm_mean = 0.0f;
      for (int i = 0; i < C; i++) {
        float norm_i = (inp_n[i] - mean_n) * rstd_n;
        float dnorm_i = weight[i] * dout_n[i];
        dnorm_mean += dnorm_i;
        dnorm_norm_mean += dnorm_i * norm_i;
      }
      dnorm_mean = dnorm_mean / C;
      dnorm_norm_mean = dnorm_norm_mean / C;
      for (int i = 0; i < C; i++) {
        float norm_i = (inp_n[i] - mean_n) * rstd_n;
        float dnorm_i = weight[i] * dout_n[i];
        dbias[i] += dout_n[i];
        dweight[i] += norm_i * dout_n[i];
        float dval = dnorm_i - dnorm_mean - norm_i * dnorm_norm_mean;
        dinp_n[i] += dval * rstd_n;
      }
    }
  }

  void MatmulForward(float* out, const float* inp, const float* weight, const float* bias, int N,
                     int C, int OC) override {
    for (int n = 0; n < N; n++) {
      const float* inp_n = inp + static_cast<size_t>(n) * C;
      float* out_n = out + static_cast<size_t>(n) * OC;
      for (int o = 0; o < OC; o++) {
        const float* w_o = weight + static_cast<size_t>(o) * C;
        float val = bias != nullptr ? bias[o] : 0.0f;
        for (int i = 0; i < C; i++) val += inp_n[i] * w_o[i];
        out_n[o] = val;
      }
    }
  }

  void MatmulBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                      const float* inp, const float* weight, int N, int C, int OC) override {
    if (dinp != nullptr) {
      for (int n = 0; n < N; n++) {
        const float* dout_n = dout + static_cast<size_t>(n) * OC;
        float* dinp_n = dinp + static_cast<size_t>(n) * C;
        for (int o = 0; o < OC; o++) {
          const float* w_o = weight + static_cast<size_t>(o) * C;
          float d = dout_n[o];
          for (int i = 0; i < C; i++) dinp_n[i] += w_o[i] * d;
        }
      }
    }
    for (int o = 0; o < OC; o++) {
      float* dw_o = dweight + static_cast<size_t>(o) * C;
      for (int n = 0; n < N; n++) {
        const float* inp_n = inp + static_cast<size_t>(n) * C;
        float d = dout[static_cast<size_t>(n) * OC + o];
        if (dbias != nullptr) dbias[o] += d;
        for (int i = 0; i < C; i++) dw_o[i] += inp_n[i] * d;
      }
    }
  }

  // Causal attention is grouped-query attention with as many key/value heads as query heads.
  void AttentionForward(float* out, float* preatt, float* att, const float* qkv, int B, int T,
                        int C, int NH) override {
    if (NH == 0) return;
    ref::GroupedAttentionForward(out, preatt, att, qkv, B, T, NH, NH, C / NH);
  }
  void AttentionBackward(float* dqkv, float* dpreatt, float* datt, const float* dout,
                         const float* qkv, const float* att, int B, int T, int C, int NH) override {
    if (NH == 0) return;
    ref::GroupedAttentionBackward(dqkv, dpreatt, datt, dout, qkv, att, B, T, NH, NH, C / NH);
  }

  void GeluForward(float* out, const float* inp, size_t n) override {
    for (size_t i = 0; i < n; i++) {
      float x = inp[i];
      float cube = 0.044715f * x * x * x;
      out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + cube)));
    }
  }

  void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) override {
    for (size_t i = 0; i < n; i++) {
      float x = inp[i];
      float cube = 0.044715f * x * x * x;
      float tanh_arg = kGeluScale * (x + cube);
      float tanh_out = std::tanh(tanh_arg);
      float cosh_out = std::cosh(tanh_arg);
      float sech2 = 1.0f / (cosh_out * cosh_out);
      float local_grad = 0.5f * (1.0f + tanh_out) +
                         x * 0.5f * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
      dinp[i] += local_grad * dout[i];
    }
  }

  void ResidualForward(float* out, const float* a, const float* b, size_t n) override {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
  }

  void ResidualBackward(float* da, float* db, const float* dout, size_t n) override {
    for (size_t i = 0; i < n; i++) {
      da[i] += dout[i];
      db[i] += dout[i];
    }
  }

  void SoftmaxCrossEntropyForward(float* probs, float* losses, const float* logits,
                                  const int32_t* targets, int B, int T, int V, int Vp) override {
    for (int bt = 0; bt < B * T; bt++) {
      const float* logits_bt = logits + static_cast<size_t>(bt) * Vp;
      float* probs_bt = probs + static_cast<size_t>(bt) * Vp;
      float maxval = -INFINITY;
      for (int i = 0; i < V; i++) maxval = std::fmax(maxval, logits_bt[i]);
      float sum = 0.0f;
      for (int i = 0; i < V; i++) {
        probs_bt[i] = std::exp(logits_bt[i] - maxval);
        sum += probs_bt[i];
      }
      for (int i = 0; i < V; i++) probs_bt[i] /= sum;
      for (int i = V; i < Vp; i++) probs_bt[i] = 0.0f;
      losses[bt] = -std::log(probs_bt[targets[bt]]);
    }
  }

  void SoftmaxCrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                   float dloss, int B, int T, int V, int Vp) override {
    for (int bt = 0; bt < B * T; bt++) {
      float* dlogits_bt = dlogits + static_cast<size_t>(bt) * Vp;
      const float* probs_bt = probs + static_cast<size_t>(bt) * Vp;
      for (int i = 0; i < V; i++) {
        float indicator = i == targets[bt] ? 1.0f : 0.0f;
        dlogits_bt[i] += (probs_bt[i] - indicator) * dloss;
      }
    }
  }

  void AdamW(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
             float beta2, float eps, float weight_decay, float grad_scale, int t) override {
    float beta1_correction = 1.0f - std::pow(beta1, static_cast<float>(t));
    float beta2_correction = 1.0f - std::pow(beta2, static_cast<float>(t));
    for (size_t i = 0; i < n; i++) {
      float g = grads[i] * grad_scale;
      float mi = beta1 * m[i] + (1.0f - beta1) * g;
      float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
      float m_hat = mi / beta1_correction;
      float v_hat = vi / beta2_correction;
      m[i] = mi;
      v[i] = vi;
      params[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + weight_decay * params[i]);
    }
  }

  double SumSquares(const float* x, size_t n) override {
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += static_cast<double>(x[i]) * x[i];
    return sum;
  }

  bool HasLlamaOps() const override { return true; }
  void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                      float eps) override {
    ref::RmsNormForward(out, rstd, inp, weight, N, C, eps);
  }
  void RmsNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                       const float* weight, const float* rstd, int N, int C) override {
    ref::RmsNormBackward(dinp, dweight, dout, inp, weight, rstd, N, C);
  }
  void RopeForward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int HD) override {
    ref::RopeForward(qkv, cos, sin, B, T, NH, NKV, HD);
  }
  void RopeBackward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                    int HD) override {
    ref::RopeBackward(dqkv, cos, sin, B, T, NH, NKV, HD);
  }
  void SwiGluForward(float* out, const float* inp, int N, int I) override {
    ref::SwiGluForward(out, inp, N, I);
  }
  void SwiGluBackward(float* dinp, const float* inp, const float* dout, int N, int I) override {
    ref::SwiGluBackward(dinp, inp, dout, N, I);
  }
  void GroupedAttentionForward(float* out, float* preatt, float* att, const float* qkv, int B,
                               int T, int NH, int NKV, int HD) override {
    ref::GroupedAttentionForward(out, preatt, att, qkv, B, T, NH, NKV, HD);
  }
  void GroupedAttentionBackward(float* dqkv, float* dpreatt, float* datt, const float* dout,
                                const float* qkv, const float* att, int B, int T, int NH, int NKV,
                                int HD) override {
    ref::GroupedAttentionBackward(dqkv, dpreatt, datt, dout, qkv, att, B, T, NH, NKV, HD);
  }
};

}  // namespace

std::unique_ptr<Ops> NewReferenceOps() { return std::make_unique<ReferenceOps>(); }

}  // namespace longhaul::kernels
