// "cpu" against "cpu-ref" for the element- and row-wise ops: embedding, GELU, residual and
// softmax cross-entropy, forward and backward (accumulating), at sizes 0, 1, odd, and
// vocabularies padded to Vp.
#include "test/kernels/test_util.h"

namespace longhaul::kernels::testing {
namespace {

constexpr Tolerance kTol{1e-5f, 1e-4f};

TEST_CASE("Embedding forward and backward match the reference", "[kernels][embedding]") {
  const int threads = GENERATE(0, 1, 3);
  auto shape =
      GENERATE(std::vector<int>{0, 3, 8}, std::vector<int>{1, 1, 1}, std::vector<int>{2, 7, 24},
               std::vector<int>{3, 64, 36}, std::vector<int>{4, 33, 200});
  const int B = shape[0], T = shape[1], C = shape[2];
  const int Vp = 5, maxT = T + 2;  // a tiny vocabulary, so tokens repeat within a batch
  INFO("B=" << B << " T=" << T << " C=" << C << " threads=" << threads);
  auto tokens = RandomTokens(size_t{1} * B * T, Vp, 1);
  auto wte = Random(size_t{1} * Vp * C, 2), wpe = Random(size_t{1} * maxT * C, 3);
  auto fast = Backend("cpu", threads);
  auto forward = [&](Ops& ops) {
    DeviceVec dwte(ops, wte), dwpe(ops, wpe), out(ops, size_t{1} * B * T * C);
    ops.EmbeddingForward(out.get(), tokens.data(), dwte.get(), dwpe.get(), B, T, C);
    return out.ToHost();
  };
  ExpectClose(forward(*fast), forward(*Backend("cpu-ref")), kTol, "out");

  auto dout = Random(size_t{1} * B * T * C, 4);
  GradRun run = [&](Ops& ops, bool prefill) {
    DeviceVec ddout(ops, dout);
    DeviceVec dwte(ops, GradInit(0, wte.size(), prefill));
    DeviceVec dwpe(ops, GradInit(1, wpe.size(), prefill));
    ops.EmbeddingBackward(dwte.get(), dwpe.get(), ddout.get(), tokens.data(), B, T, C);
    return std::vector<std::vector<float>>{dwte.ToHost(), dwpe.ToHost()};
  };
  CheckBackward(run, *fast, kTol, {"dwte", "dwpe"});
}

TEST_CASE("GELU and residual match the reference", "[kernels][pointwise]") {
  const int threads = GENERATE(0, 1, 3);
  const size_t n = GENERATE(size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{1001},
                            size_t{(1 << 14) + 5}, size_t{3 * (1 << 16) + 3});
  INFO("n=" << n << " threads=" << threads);
  auto x = Random(n, 1, -6.0f, 6.0f);
  // Extremes where exp saturates, and exact zero.
  const float extremes[] = {0.0f, -100.0f, 100.0f, -30.0f, 30.0f, 1e-6f, -1e-6f};
  for (size_t i = 0; i < n && i < 7; i++) x[i] = extremes[i];
  auto y = Random(n, 2), dout = Random(n, 3);
  auto fast = Backend("cpu", threads);
  auto ref = Backend("cpu-ref");

  auto gelu = [&](Ops& ops) {
    DeviceVec dx(ops, x), out(ops, n);
    ops.GeluForward(out.get(), dx.get(), n);
    return out.ToHost();
  };
  ExpectClose(gelu(*fast), gelu(*ref), kTol, "gelu out");
  GradRun gelu_back = [&](Ops& ops, bool prefill) {
    DeviceVec dx(ops, x), ddout(ops, dout), dinp(ops, GradInit(0, n, prefill));
    ops.GeluBackward(dinp.get(), dx.get(), ddout.get(), n);
    return std::vector<std::vector<float>>{dinp.ToHost()};
  };
  CheckBackward(gelu_back, *fast, kTol, {"gelu dinp"});

  auto residual = [&](Ops& ops) {
    DeviceVec a(ops, x), b(ops, y), out(ops, n);
    ops.ResidualForward(out.get(), a.get(), b.get(), n);
    return out.ToHost();
  };
  ExpectClose(residual(*fast), residual(*ref), kTol, "residual out");
  GradRun residual_back = [&](Ops& ops, bool prefill) {
    DeviceVec ddout(ops, dout), da(ops, GradInit(0, n, prefill)), db(ops, GradInit(1, n, prefill));
    ops.ResidualBackward(da.get(), db.get(), ddout.get(), n);
    return std::vector<std::vector<float>>{da.ToHost(), db.ToHost()};
  };
  CheckBackward(residual_back, *fast, kTol, {"da", "db"});
}

TEST_CASE("Softmax cross-entropy matches the reference", "[kernels][loss]") {
  const int threads = GENERATE(0, 1, 3);
  auto shape = GENERATE(std::vector<int>{0, 3, 37, 128}, std::vector<int>{1, 1, 1, 1},
                        std::vector<int>{1, 1, 2, 128}, std::vector<int>{2, 7, 37, 128},
                        std::vector<int>{3, 5, 128, 128}, std::vector<int>{2, 9, 1001, 1024},
                        std::vector<int>{1, 3, 50257, 50304});
  const int B = shape[0], T = shape[1], V = shape[2], Vp = shape[3];
  INFO("B=" << B << " T=" << T << " V=" << V << " Vp=" << Vp << " threads=" << threads);
  // Logits spread wide (some probabilities tiny); the padding holds garbage to ignore.
  auto logits = Random(size_t{1} * B * T * Vp, 1, -8.0f, 8.0f);
  auto targets = RandomTokens(size_t{1} * B * T, V, 2);
  auto fast = Backend("cpu", threads);
  auto forward = [&](Ops& ops) {
    DeviceVec dl(ops, logits), probs(ops, Random(logits.size(), 3)), losses(ops, size_t{1} * B * T);
    ops.SoftmaxCrossEntropyForward(probs.get(), losses.get(), dl.get(), targets.data(), B, T, V,
                                   Vp);
    return std::vector<std::vector<float>>{probs.ToHost(), losses.ToHost()};
  };
  auto want = forward(*Backend("cpu-ref"));
  auto got = forward(*fast);
  ExpectClose(got[0], want[0], {1e-7f, 1e-4f}, "probs");
  ExpectClose(got[1], want[1], kTol, "losses");
  for (int bt = 0; bt < B * T; bt++) {
    for (int v = V; v < Vp; v++) REQUIRE(got[0][size_t{1} * bt * Vp + v] == 0.0f);
  }

  const float dloss = B * T > 0 ? 1.0f / (B * T) : 1.0f;
  GradRun run = [&](Ops& ops, bool prefill) {
    DeviceVec probs(ops, want[0]), dlogits(ops, GradInit(0, logits.size(), prefill));
    ops.SoftmaxCrossEntropyBackward(dlogits.get(), probs.get(), targets.data(), dloss, B, T, V, Vp);
    return std::vector<std::vector<float>>{dlogits.ToHost()};
  };
  CheckBackward(run, *fast, kTol, {"dlogits"});
}

}  // namespace
}  // namespace longhaul::kernels::testing
