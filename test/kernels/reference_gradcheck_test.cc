// The reference checked against calculus: each backward op of "cpu-ref" against central
// finite differences of its forward op, for the loss L = sum(out * r) with random r (so the
// incoming gradient is r). This is what lets the reference itself fail.
#include <algorithm>
#include <cmath>
#include <functional>

#include "test/kernels/test_util.h"

namespace longhaul::kernels::testing {
namespace {

// Tolerance of float central differences with step kStep: truncation O(h^2) plus rounding.
constexpr float kStep = 1e-2f;
constexpr Tolerance kTol{2e-3f, 1e-2f};

using Fn = std::function<std::vector<float>(const std::vector<float>&)>;

double Loss(const std::vector<float>& out, const std::vector<float>& r) {
  double l = 0;
  for (size_t i = 0; i < out.size(); i++) l += static_cast<double>(out[i]) * r[i];
  return l;
}

// dL/dx by central differences, L(x) = sum(f(x) * r).
std::vector<float> NumericGrad(const Fn& f, std::vector<float> x, const std::vector<float>& r) {
  std::vector<float> grad(x.size());
  for (size_t i = 0; i < x.size(); i++) {
    const float saved = x[i];
    x[i] = saved + kStep;
    const double plus = Loss(f(x), r);
    x[i] = saved - kStep;
    const double minus = Loss(f(x), r);
    x[i] = saved;
    grad[i] = static_cast<float>((plus - minus) / (2.0 * kStep));
  }
  return grad;
}

TEST_CASE("Reference matmul gradients match finite differences", "[kernels][gradcheck]") {
  auto ops = Backend("cpu-ref");
  const int N = 3, C = 5, OC = 4;
  auto x = Random(N * C, 1), w = Random(OC * C, 2), b = Random(OC, 3), r = Random(N * OC, 4);
  auto forward = [&](const std::vector<float>& x_, const std::vector<float>& w_,
                     const std::vector<float>& b_) {
    DeviceVec dx(*ops, x_), dw(*ops, w_), db(*ops, b_), out(*ops, N * OC);
    ops->MatmulForward(out.get(), dx.get(), dw.get(), db.get(), N, C, OC);
    return out.ToHost();
  };
  DeviceVec dx(*ops, x), dw(*ops, w), dr(*ops, r);
  DeviceVec dinp(*ops, N * C), dweight(*ops, OC * C), dbias(*ops, OC);
  ops->MatmulBackward(dinp.get(), dweight.get(), dbias.get(), dr.get(), dx.get(), dw.get(), N, C,
                      OC);
  ExpectClose(dinp.ToHost(), NumericGrad([&](auto& v) { return forward(v, w, b); }, x, r), kTol,
              "dinp");
  ExpectClose(dweight.ToHost(), NumericGrad([&](auto& v) { return forward(x, v, b); }, w, r), kTol,
              "dweight");
  ExpectClose(dbias.ToHost(), NumericGrad([&](auto& v) { return forward(x, w, v); }, b, r), kTol,
              "dbias");
}

TEST_CASE("Reference layernorm gradients match finite differences", "[kernels][gradcheck]") {
  auto ops = Backend("cpu-ref");
  const int N = 3, C = 7;
  auto x = Random(N * C, 1, -2.0f, 3.0f), w = Random(C, 2, 0.5f, 1.5f), b = Random(C, 3);
  auto r = Random(N * C, 4);
  std::vector<float> mean, rstd;
  auto forward = [&](const std::vector<float>& x_, const std::vector<float>& w_,
                     const std::vector<float>& b_) {
    DeviceVec dx(*ops, x_), dw(*ops, w_), db(*ops, b_), out(*ops, N * C), m(*ops, N), s(*ops, N);
    ops->LayerNormForward(out.get(), m.get(), s.get(), dx.get(), dw.get(), db.get(), N, C);
    mean = m.ToHost();
    rstd = s.ToHost();
    return out.ToHost();
  };
  forward(x, w, b);
  DeviceVec dx(*ops, x), dw(*ops, w), dr(*ops, r), m(*ops, mean), s(*ops, rstd);
  DeviceVec dinp(*ops, N * C), dweight(*ops, C), dbias(*ops, C);
  ops->LayerNormBackward(dinp.get(), dweight.get(), dbias.get(), dr.get(), dx.get(), dw.get(),
                         m.get(), s.get(), N, C);
  ExpectClose(dinp.ToHost(), NumericGrad([&](auto& v) { return forward(v, w, b); }, x, r), kTol,
              "dinp");
  ExpectClose(dweight.ToHost(), NumericGrad([&](auto& v) { return forward(x, v, b); }, w, r), kTol,
              "dweight");
  ExpectClose(dbias.ToHost(), NumericGrad([&](auto& v) { return forward(x, w, v); }, b, r), kTol,
              "dbias");
}

TEST_CASE("Reference attention gradient matches finite differences", "[kernels][gradcheck]") {
  auto ops = Backend("cpu-ref");
  const int B = 2, T = 5, C = 8, NH = 2;
  auto qkv = Random(B * T * 3 * C, 1), r = Random(B * T * C, 2);
  std::vector<float> att;
  Fn forward = [&](const std::vector<float>& q) {
    DeviceVec dq(*ops, q), out(*ops, B * T * C), pre(*ops, B * NH * T * T), a(*ops, B * NH * T * T);
    ops->AttentionForward(out.get(), pre.get(), a.get(), dq.get(), B, T, C, NH);
    att = a.ToHost();
    return out.ToHost();
  };
  forward(qkv);
  // Causality: row t of each head's probabilities sums to 1 over t2 <= t and is 0 beyond.
  for (int bh = 0; bh < B * NH; bh++) {
    for (int t = 0; t < T; t++) {
      double sum = 0;
      for (int t2 = 0; t2 < T; t2++) {
        float p = att[(bh * T + t) * T + t2];
        if (t2 > t) CHECK(p == 0.0f);
        sum += p;
      }
      CHECK(sum == Approx(1.0).epsilon(1e-6));
    }
  }
  DeviceVec dq(*ops, qkv), a(*ops, att), dr(*ops, r);
  DeviceVec dqkv(*ops, qkv.size()), dpre(*ops, att.size()), datt(*ops, att.size());
  ops->AttentionBackward(dqkv.get(), dpre.get(), datt.get(), dr.get(), dq.get(), a.get(), B, T, C,
                         NH);
  ExpectClose(dqkv.ToHost(), NumericGrad(forward, qkv, r), kTol, "dqkv");
}

TEST_CASE("Reference GELU gradient matches finite differences", "[kernels][gradcheck]") {
  auto ops = Backend("cpu-ref");
  auto x = Random(41, 1, -5.0f, 5.0f), r = Random(41, 2);
  Fn forward = [&](const std::vector<float>& v) {
    DeviceVec dx(*ops, v), out(*ops, v.size());
    ops->GeluForward(out.get(), dx.get(), v.size());
    return out.ToHost();
  };
  DeviceVec dx(*ops, x), dr(*ops, r), dinp(*ops, x.size());
  ops->GeluBackward(dinp.get(), dx.get(), dr.get(), x.size());
  ExpectClose(dinp.ToHost(), NumericGrad(forward, x, r), kTol, "dinp");
  // Spot values of GELU (tanh form): gelu(1) = 0.841192, gelu(-1) = -0.158808.
  auto y = forward({1.0f, -1.0f, 0.0f});
  CHECK(y[0] == Approx(0.841192).epsilon(1e-5));
  CHECK(y[1] == Approx(-0.158808).epsilon(1e-5));
  CHECK(y[2] == 0.0f);
}

TEST_CASE("Reference cross-entropy gradient matches finite differences", "[kernels][gradcheck]") {
  auto ops = Backend("cpu-ref");
  const int B = 2, T = 3, V = 11, Vp = 16;
  auto logits = Random(B * T * Vp, 1, -3.0f, 3.0f);
  auto targets = RandomTokens(B * T, V, 2);
  const std::vector<float> r(B * T, 1.0f / (B * T));  // L = mean loss
  std::vector<float> probs;
  Fn forward = [&](const std::vector<float>& l) {
    DeviceVec dl(*ops, l), p(*ops, l.size()), losses(*ops, B * T);
    ops->SoftmaxCrossEntropyForward(p.get(), losses.get(), dl.get(), targets.data(), B, T, V, Vp);
    probs = p.ToHost();
    return losses.ToHost();
  };
  forward(logits);
  DeviceVec p(*ops, probs), dlogits(*ops, logits.size());
  ops->SoftmaxCrossEntropyBackward(dlogits.get(), p.get(), targets.data(), 1.0f / (B * T), B, T, V,
                                   Vp);
  // Padding columns get no gradient, matching the finite differences (they do not matter).
  ExpectClose(dlogits.ToHost(), NumericGrad(forward, logits, r), kTol, "dlogits");
}

TEST_CASE("Reference RMSNorm gradients match finite differences", "[kernels][gradcheck]") {
  auto ops = Backend("cpu-ref");
  const int N = 3, C = 7;
  const float eps = 1e-5f;
  auto x = Random(N * C, 1, -2.0f, 3.0f), w = Random(C, 2, 0.5f, 1.5f), r = Random(N * C, 4);
  std::vector<float> rstd;
  auto forward = [&](const std::vector<float>& x_, const std::vector<float>& w_) {
    DeviceVec dx(*ops, x_), dw(*ops, w_), out(*ops, N * C), s(*ops, N);
    ops->RmsNormForward(out.get(), s.get(), dx.get(), dw.get(), N, C, eps);
    rstd = s.ToHost();
    return out.ToHost();
  };
  auto y = forward(x, w);
  // Definition: y = w x / sqrt(mean(x^2) + eps).
  for (int n = 0; n < N; n++) {
    double ss = 0;
    for (int i = 0; i < C; i++) ss += double(x[n * C + i]) * x[n * C + i];
    const double r_n = 1.0 / std::sqrt(ss / C + eps);
    for (int i = 0; i < C; i++)
      CHECK(y[n * C + i] == Approx(w[i] * x[n * C + i] * r_n).epsilon(1e-5));
  }
  DeviceVec dx(*ops, x), dw(*ops, w), dr(*ops, r), s(*ops, rstd);
  DeviceVec dinp(*ops, N * C), dweight(*ops, C);
  ops->RmsNormBackward(dinp.get(), dweight.get(), dr.get(), dx.get(), dw.get(), s.get(), N, C);
  ExpectClose(dinp.ToHost(), NumericGrad([&](auto& v) { return forward(v, w); }, x, r), kTol,
              "dinp");
  ExpectClose(dweight.ToHost(), NumericGrad([&](auto& v) { return forward(x, v); }, w, r), kTol,
              "dweight");
}

TEST_CASE("Reference SwiGLU gradient matches finite differences", "[kernels][gradcheck]") {
  auto ops = Backend("cpu-ref");
  const int N = 3, I = 5;
  auto x = Random(2 * N * I, 1, -4.0f, 4.0f), r = Random(N * I, 2);
  Fn forward = [&](const std::vector<float>& v) {
    DeviceVec dx(*ops, v), out(*ops, N * I);
    ops->SwiGluForward(out.get(), dx.get(), N, I);
    return out.ToHost();
  };
  DeviceVec dx(*ops, x), dr(*ops, r), dinp(*ops, x.size());
  ops->SwiGluBackward(dinp.get(), dx.get(), dr.get(), N, I);
  ExpectClose(dinp.ToHost(), NumericGrad(forward, x, r), kTol, "dinp");
  // silu(1) * 2 = 2 / (1 + e^-1) = 1.462117.
  auto y = forward(std::vector<float>(2 * N * I, 0.0f));
  CHECK(y[0] == 0.0f);
  std::vector<float> one(2 * N * I, 2.0f);
  for (int n = 0; n < N; n++) std::fill(one.begin() + 2 * n * I, one.begin() + 2 * n * I + I, 1.0f);
  CHECK(forward(one)[0] == Approx(1.462117).epsilon(1e-5));
}

TEST_CASE("Reference grouped attention and rotary gradients match finite differences",
          "[kernels][gradcheck]") {
  auto ops = Backend("cpu-ref");
  const int B = 2, T = 4, NH = 4, NKV = 2, HD = 4, W = (NH + 2 * NKV) * HD;
  const int half = HD / 2;
  std::vector<float> cos(T * half), sin(T * half);
  for (int t = 0; t < T; t++) {
    for (int i = 0; i < half; i++) {
      cos[t * half + i] = std::cos(0.7f * t * (i + 1));
      sin[t * half + i] = std::sin(0.7f * t * (i + 1));
    }
  }
  auto qkv = Random(B * T * W, 1), r = Random(B * T * NH * HD, 2);
  std::vector<float> att, rotated;
  // out = attention(rope(qkv)): the two ops as the model chains them.
  Fn forward = [&](const std::vector<float>& q) {
    DeviceVec dq(*ops, q), c(*ops, cos), s(*ops, sin), out(*ops, B * T * NH * HD),
        pre(*ops, B * NH * T * T), a(*ops, B * NH * T * T);
    ops->RopeForward(dq.get(), c.get(), s.get(), B, T, NH, NKV, HD);
    ops->GroupedAttentionForward(out.get(), pre.get(), a.get(), dq.get(), B, T, NH, NKV, HD);
    att = a.ToHost();
    rotated = dq.ToHost();
    return out.ToHost();
  };
  forward(qkv);
  DeviceVec dq(*ops, rotated), a(*ops, att), dr(*ops, r), c(*ops, cos), s(*ops, sin);
  DeviceVec dqkv(*ops, qkv.size()), dpre(*ops, att.size()), datt(*ops, att.size());
  ops->GroupedAttentionBackward(dqkv.get(), dpre.get(), datt.get(), dr.get(), dq.get(), a.get(), B,
                                T, NH, NKV, HD);
  ops->RopeBackward(dqkv.get(), c.get(), s.get(), B, T, NH, NKV, HD);
  ExpectClose(dqkv.ToHost(), NumericGrad(forward, qkv, r), kTol, "dqkv");
}

}  // namespace
}  // namespace longhaul::kernels::testing
