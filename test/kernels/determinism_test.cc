// "cpu" gives the same bits whatever its thread count (its partitions depend only on shapes),
// which is stronger than ops.h asks and lets sites with different core counts agree exactly.
#include "test/kernels/test_util.h"

namespace longhaul::kernels::testing {
namespace {

// Runs a GPT-2-block-like sequence of ops (layernorm, matmul, attention, GELU, loss, their
// backward ops, AdamW, SumSquares) and returns every output.
std::vector<std::vector<float>> RunBlock(Ops& ops) {
  const int B = 2, T = 67, C = 48, NH = 4, OC = 3 * C, V = 101, Vp = 128;
  const int N = B * T;
  std::vector<std::vector<float>> results;
  DeviceVec x(ops, Random(N * C, 1)), lnw(ops, Random(C, 2)), lnb(ops, Random(C, 3));
  DeviceVec ln(ops, N * C), mean(ops, N), rstd(ops, N);
  ops.LayerNormForward(ln.get(), mean.get(), rstd.get(), x.get(), lnw.get(), lnb.get(), N, C);
  DeviceVec w(ops, Random(OC * C, 4)), b(ops, Random(OC, 5)), qkv(ops, N * OC);
  ops.MatmulForward(qkv.get(), ln.get(), w.get(), b.get(), N, C, OC);
  DeviceVec att_out(ops, N * C), pre(ops, B * NH * T * T), att(ops, B * NH * T * T);
  ops.AttentionForward(att_out.get(), pre.get(), att.get(), qkv.get(), B, T, C, NH);
  DeviceVec gelu(ops, N * C);
  ops.GeluForward(gelu.get(), att_out.get(), N * C);
  DeviceVec head(ops, Random(Vp * C, 6)), logits(ops, N * Vp), probs(ops, N * Vp), losses(ops, N);
  ops.MatmulForward(logits.get(), gelu.get(), head.get(), nullptr, N, C, Vp);
  auto targets = RandomTokens(N, V, 7);
  ops.SoftmaxCrossEntropyForward(probs.get(), losses.get(), logits.get(), targets.data(), B, T, V,
                                 Vp);
  // Backward.
  DeviceVec dlogits(ops, N * Vp), dgelu(ops, N * C), dhead(ops, Vp * C), datt_out(ops, N * C);
  ops.SoftmaxCrossEntropyBackward(dlogits.get(), probs.get(), targets.data(), 1.0f / N, B, T, V,
                                  Vp);
  ops.MatmulBackward(dgelu.get(), dhead.get(), nullptr, dlogits.get(), gelu.get(), head.get(), N, C,
                     Vp);
  ops.GeluBackward(datt_out.get(), att_out.get(), dgelu.get(), N * C);
  DeviceVec dqkv(ops, N * OC), dpre(ops, B * NH * T * T), datt(ops, B * NH * T * T);
  ops.AttentionBackward(dqkv.get(), dpre.get(), datt.get(), datt_out.get(), qkv.get(), att.get(), B,
                        T, C, NH);
  DeviceVec dln(ops, N * C), dw(ops, OC * C), db(ops, OC);
  ops.MatmulBackward(dln.get(), dw.get(), db.get(), dqkv.get(), ln.get(), w.get(), N, C, OC);
  DeviceVec dx(ops, N * C), dlnw(ops, C), dlnb(ops, C);
  ops.LayerNormBackward(dx.get(), dlnw.get(), dlnb.get(), dln.get(), x.get(), lnw.get(), mean.get(),
                        rstd.get(), N, C);
  const double norm = ops.SumSquares(dw.get(), OC * C);
  DeviceVec m(ops, OC * C), v(ops, OC * C);
  ops.AdamW(w.get(), dw.get(), m.get(), v.get(), OC * C, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
            static_cast<float>(1.0 / (1.0 + norm)), 1);
  for (DeviceVec* d : {&ln, &qkv, &att, &att_out, &probs, &losses, &dqkv, &dx, &dlnw, &dlnb, &dw,
                       &db, &dhead, &w}) {
    results.push_back(d->ToHost());
  }
  results.push_back({static_cast<float>(norm)});
  return results;
}

TEST_CASE("cpu results do not depend on the thread count", "[kernels][determinism]") {
  auto one = Backend("cpu", 1);
  const auto want = RunBlock(*one);
  for (int threads : {2, 3, 4}) {
    INFO("threads=" << threads);
    auto ops = Backend("cpu", threads);
    for (int rep = 0; rep < 2; rep++) CHECK(RunBlock(*ops) == want);
  }
  // And the sequence agrees with the reference within tolerance (a smoke test of the whole).
  auto ref = Backend("cpu-ref");
  const auto ref_results = RunBlock(*ref);
  for (size_t k = 0; k < want.size(); k++) {
    ExpectClose(want[k], ref_results[k], {1e-4f, 2e-3f}, "output " + std::to_string(k));
  }
}

}  // namespace
}  // namespace longhaul::kernels::testing
