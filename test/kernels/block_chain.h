// A GPT-2-block-like chain of every op of the Ops interface (embedding, layernorm, matmul,
// attention, residual, GELU, the tied head's loss, every backward op, SumSquares and AdamW),
// returning every output: the determinism tests run it on each backend.
#pragma once

#include <vector>

#include "test/kernels/test_util.h"

namespace longhaul::kernels::testing {

inline std::vector<std::vector<float>> RunBlock(Ops& ops) {
  const int B = 2, T = 67, C = 48, NH = 4, OC = 3 * C, V = 101, Vp = 128, maxT = 80;
  const int N = B * T;
  auto tokens = RandomTokens(N, V, 11);
  DeviceVec wte(ops, Random(Vp * C, 12)), wpe(ops, Random(maxT * C, 13)), x(ops, N * C);
  ops.EmbeddingForward(x.get(), tokens.data(), wte.get(), wpe.get(), B, T, C);
  DeviceVec lnw(ops, Random(C, 2)), lnb(ops, Random(C, 3));
  DeviceVec ln(ops, N * C), mean(ops, N), rstd(ops, N);
  ops.LayerNormForward(ln.get(), mean.get(), rstd.get(), x.get(), lnw.get(), lnb.get(), N, C);
  DeviceVec w(ops, Random(OC * C, 4)), b(ops, Random(OC, 5)), qkv(ops, N * OC);
  ops.MatmulForward(qkv.get(), ln.get(), w.get(), b.get(), N, C, OC);
  DeviceVec att_out(ops, N * C), pre(ops, B * NH * T * T), att(ops, B * NH * T * T);
  ops.AttentionForward(att_out.get(), pre.get(), att.get(), qkv.get(), B, T, C, NH);
  DeviceVec res(ops, N * C), gelu(ops, N * C);
  ops.ResidualForward(res.get(), x.get(), att_out.get(), N * C);
  ops.GeluForward(gelu.get(), res.get(), N * C);
  DeviceVec logits(ops, N * Vp), probs(ops, N * Vp), losses(ops, N);
  ops.MatmulForward(logits.get(), gelu.get(), wte.get(), nullptr, N, C, Vp);
  auto targets = RandomTokens(N, V, 7);
  ops.SoftmaxCrossEntropyForward(probs.get(), losses.get(), logits.get(), targets.data(), B, T, V,
                                 Vp);
  DeviceVec dlogits(ops, N * Vp), dgelu(ops, N * C), dwte(ops, Vp * C), dwpe(ops, maxT * C);
  DeviceVec dres(ops, N * C), dx(ops, N * C), datt_out(ops, N * C);
  ops.SoftmaxCrossEntropyBackward(dlogits.get(), probs.get(), targets.data(), 1.0f / N, B, T, V,
                                  Vp);
  ops.MatmulBackward(dgelu.get(), dwte.get(), nullptr, dlogits.get(), gelu.get(), wte.get(), N, C,
                     Vp);
  ops.GeluBackward(dres.get(), res.get(), dgelu.get(), N * C);
  ops.ResidualBackward(dx.get(), datt_out.get(), dres.get(), N * C);
  DeviceVec dqkv(ops, N * OC), dpre(ops, B * NH * T * T), datt(ops, B * NH * T * T);
  ops.AttentionBackward(dqkv.get(), dpre.get(), datt.get(), datt_out.get(), qkv.get(), att.get(), B,
                        T, C, NH);
  DeviceVec dln(ops, N * C), dw(ops, OC * C), db(ops, OC), dlnw(ops, C), dlnb(ops, C);
  ops.MatmulBackward(dln.get(), dw.get(), db.get(), dqkv.get(), ln.get(), w.get(), N, C, OC);
  ops.LayerNormBackward(dx.get(), dlnw.get(), dlnb.get(), dln.get(), x.get(), lnw.get(), mean.get(),
                        rstd.get(), N, C);
  ops.EmbeddingBackward(dwte.get(), dwpe.get(), dx.get(), tokens.data(), B, T, C);
  const double norm = ops.SumSquares(dw.get(), OC * C);
  DeviceVec m(ops, OC * C), v(ops, OC * C);
  ops.AdamW(w.get(), dw.get(), m.get(), v.get(), OC * C, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
            static_cast<float>(1.0 / (1.0 + norm)), 1);
  std::vector<std::vector<float>> results;
  for (DeviceVec* d : {&x, &ln, &qkv, &att, &att_out, &probs, &losses, &dqkv, &dx, &dlnw, &dlnb,
                       &dw, &db, &dwte, &dwpe, &w}) {
    results.push_back(d->ToHost());
  }
  results.push_back({static_cast<float>(norm)});
  return results;
}

}  // namespace longhaul::kernels::testing
