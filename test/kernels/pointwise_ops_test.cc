// The op suite (op_suite.h) for the element- and row-wise ops: embedding, GELU, residual and
// softmax cross-entropy, forward and backward (accumulating), against "cpu-ref" at sizes 0, 1,
// odd, vocabularies padded to Vp and, on device backends, GPT-2 small's (B 8 x T 256 x C 768,
// 2^24 + 1 elements, 256 rows of 50257). Embedding and residual give the reference's bits on
// every backend: the same additions in the same order.
#include "test/kernels/op_suite.h"

namespace longhaul::kernels::testing {
namespace {

constexpr Tolerance kTol{1e-5f, 1e-4f};

TEST_CASE("Embedding forward and backward give the reference's bits", "[ops][embedding]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const Dims shape = GENERATE(Dims{{0, 3, 8}}, Dims{{1, 1, 1}}, Dims{{2, 7, 24}}, Dims{{3, 64, 36}},
                              Dims{{4, 33, 200}}, Dims{{8, 256, 768}, true});
  if (!Runs(backend, shape.large)) return;
  const int B = shape[0], T = shape[1], C = shape[2];
  const int Vp = 5, maxT = T + 2;  // a tiny vocabulary, so tokens repeat within a batch
  INFO(backend.Label() << " B=" << B << " T=" << T << " C=" << C);
  auto tokens = RandomTokens(size_t{1} * B * T, Vp, 1);
  auto wte = Random(size_t{1} * Vp * C, 2), wpe = Random(size_t{1} * maxT * C, 3);
  auto fast = backend.Make();
  auto ref = Backend("cpu-ref");
  auto forward = [&](Ops& ops) {
    DeviceVec dwte(ops, wte), dwpe(ops, wpe), out(ops, size_t{1} * B * T * C);
    ops.EmbeddingForward(out.get(), tokens.data(), dwte.get(), dwpe.get(), B, T, C);
    return out.ToHost();
  };
  CHECK(forward(*fast) == forward(*ref));

  // Positions grouped by token and summed in order, also onto a prefill.
  auto dout = Random(size_t{1} * B * T * C, 4);
  GradRun run = [&](Ops& ops, bool prefill) {
    DeviceVec ddout(ops, dout);
    DeviceVec dwte(ops, GradInit(0, wte.size(), prefill));
    DeviceVec dwpe(ops, GradInit(1, wpe.size(), prefill));
    ops.EmbeddingBackward(dwte.get(), dwpe.get(), ddout.get(), tokens.data(), B, T, C);
    return std::vector<std::vector<float>>{dwte.ToHost(), dwpe.ToHost()};
  };
  for (bool prefill : {false, true}) CHECK(run(*fast, prefill) == run(*ref, prefill));
  CheckBackward(run, *fast, kTol, {"dwte", "dwpe"});  // and both accumulate
}

TEST_CASE("GELU and residual match the reference", "[ops][pointwise]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const Dims size =
      GENERATE(Dims{{0}}, Dims{{1}}, Dims{{7}}, Dims{{8}}, Dims{{1001}}, Dims{{(1 << 14) + 5}},
               Dims{{3 * (1 << 16) + 3}}, Dims{{(1 << 24) + 1}, true});
  if (!Runs(backend, size.large)) return;
  const size_t n = static_cast<size_t>(size[0]);
  INFO(backend.Label() << " n=" << n);
  auto x = Random(n, 1, -6.0f, 6.0f);
  // Extremes where exp saturates, and exact zero.
  const float extremes[] = {0.0f, -100.0f, 100.0f, -30.0f, 30.0f, 1e-6f, -1e-6f};
  for (size_t i = 0; i < n && i < 7; i++) x[i] = extremes[i];
  auto y = Random(n, 2), dout = Random(n, 3);
  auto fast = backend.Make();
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

  // One addition per element: exact.
  auto residual = [&](Ops& ops) {
    DeviceVec a(ops, x), b(ops, y), out(ops, n);
    ops.ResidualForward(out.get(), a.get(), b.get(), n);
    return out.ToHost();
  };
  CHECK(residual(*fast) == residual(*ref));
  GradRun residual_back = [&](Ops& ops, bool prefill) {
    DeviceVec ddout(ops, dout), da(ops, GradInit(0, n, prefill)), db(ops, GradInit(1, n, prefill));
    ops.ResidualBackward(da.get(), db.get(), ddout.get(), n);
    return std::vector<std::vector<float>>{da.ToHost(), db.ToHost()};
  };
  CheckBackward(residual_back, *fast, {0.0f, 0.0f}, {"da", "db"});
}

TEST_CASE("Softmax cross-entropy matches the reference", "[ops][loss]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const Dims shape =
      GENERATE(Dims{{0, 3, 37, 128}}, Dims{{1, 1, 1, 1}}, Dims{{1, 1, 2, 128}},
               Dims{{2, 7, 37, 128}}, Dims{{3, 5, 128, 128}}, Dims{{2, 9, 1001, 1024}},
               Dims{{1, 3, 50257, 50304}}, Dims{{4, 64, 50257, 50304}, true});
  if (!Runs(backend, shape.large)) return;
  const int B = shape[0], T = shape[1], V = shape[2], Vp = shape[3];
  INFO(backend.Label() << " B=" << B << " T=" << T << " V=" << V << " Vp=" << Vp);
  // Logits spread wide (some probabilities tiny); the padding holds garbage to ignore.
  auto logits = Random(size_t{1} * B * T * Vp, 1, -8.0f, 8.0f);
  auto targets = RandomTokens(size_t{1} * B * T, V, 2);
  auto fast = backend.Make();
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

  // The writing form, onto NaN (any read of it shows, padding included): the accumulating
  // form's bits on a zeroed buffer.
  auto write = [&](Ops& ops) {
    DeviceVec probs(ops, want[0]), dlogits(ops, std::vector<float>(logits.size(), std::nanf("")));
    ops.SoftmaxCrossEntropyBackwardInto(dlogits.get(), probs.get(), targets.data(), dloss, B, T, V,
                                        Vp);
    return dlogits.ToHost();
  };
  const std::vector<float> written = write(*fast), zeroed = run(*fast, false)[0];
  CHECK(SameBits(written, zeroed));
  ExpectClose(write(*Backend("cpu-ref")), zeroed, kTol, "dlogits written (cpu-ref)");
}

}  // namespace
}  // namespace longhaul::kernels::testing
