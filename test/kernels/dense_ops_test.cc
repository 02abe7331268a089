// The op suite (op_suite.h) for the dense per-row ops: matmul and layernorm, forward and
// backward, against "cpu-ref" at sizes 0, 1, odd, large enough for OpenBLAS's blocking and, on
// device backends, GPT-2 small's (256 x 768 -> 2304, 2048 rows of 768). Backward ops are also
// checked to accumulate (+=) into their gradients, and MatmulBackwardInto to write dinp with the
// accumulating form's bits on a zeroed one.
#include "test/kernels/op_suite.h"

namespace longhaul::kernels::testing {
namespace {

constexpr Tolerance kTol{1e-4f, 1e-3f};

Dims MatmulShape() {
  return GENERATE(Dims{{0, 8, 8}}, Dims{{1, 1, 1}}, Dims{{7, 24, 72}}, Dims{{3, 0, 5}},
                  Dims{{67, 130, 97}}, Dims{{128, 768, 300}}, Dims{{256, 768, 2304}, true});
}

TEST_CASE("MatmulForward matches the reference", "[ops][matmul]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const bool with_bias = GENERATE(true, false);
  const Dims shape = MatmulShape();
  if (!Runs(backend, shape.large)) return;
  const int N = shape[0], C = shape[1], OC = shape[2];
  INFO(backend.Label() << " N=" << N << " C=" << C << " OC=" << OC << " bias=" << with_bias);
  auto x = Random(size_t{1} * N * C, 1), w = Random(size_t{1} * OC * C, 2), b = Random(OC, 3);
  auto run = [&](Ops& ops) {
    DeviceVec dx(ops, x), dw(ops, w), db(ops, b), out(ops, Random(size_t{1} * N * OC, 4));
    ops.MatmulForward(out.get(), dx.get(), dw.get(), with_bias ? db.get() : nullptr, N, C, OC);
    return out.ToHost();
  };
  auto fast = backend.Make();
  ExpectClose(run(*fast), run(*Backend("cpu-ref")), ProductTol(*fast, C, kTol), "out");
}

TEST_CASE("MatmulBackward matches the reference and accumulates", "[ops][matmul]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const bool with_bias = GENERATE(true, false);
  const bool with_dinp = GENERATE(true, false);
  const Dims shape = MatmulShape();
  if (!Runs(backend, shape.large)) return;
  const int N = shape[0], C = shape[1], OC = shape[2];
  INFO(backend.Label() << " N=" << N << " C=" << C << " OC=" << OC << " bias=" << with_bias
                       << " dinp=" << with_dinp);
  auto x = Random(size_t{1} * N * C, 1), w = Random(size_t{1} * OC * C, 2);
  auto dy = Random(size_t{1} * N * OC, 3);
  GradRun run = [&](Ops& ops, bool prefill) {
    DeviceVec dx(ops, x), dw(ops, w), ddy(ops, dy);
    DeviceVec dinp(ops, GradInit(0, x.size(), prefill)),
        dweight(ops, GradInit(1, w.size(), prefill));
    DeviceVec dbias(ops, GradInit(2, OC, prefill));
    ops.MatmulBackward(with_dinp ? dinp.get() : nullptr, dweight.get(),
                       with_bias ? dbias.get() : nullptr, ddy.get(), dx.get(), dw.get(), N, C, OC);
    return std::vector<std::vector<float>>{dinp.ToHost(), dweight.ToHost(), dbias.ToHost()};
  };
  auto fast = backend.Make();
  CheckBackward(run, *fast, ProductTol(*fast, std::max(N, OC), kTol), {"dinp", "dweight", "dbias"});
}

// The writing form: dinp starts as NaN (any read of it shows), dweight and dbias as a prefill they
// accumulate onto. It must give the accumulating form's results on a zeroed dinp: the same bits
// on the same backend, and the reference's within the tolerance.
TEST_CASE("MatmulBackwardInto writes dinp, as Zero then MatmulBackward", "[ops][matmul]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const bool with_bias = GENERATE(true, false);
  const Dims shape = MatmulShape();
  if (!Runs(backend, shape.large)) return;
  const int N = shape[0], C = shape[1], OC = shape[2];
  INFO(backend.Label() << " N=" << N << " C=" << C << " OC=" << OC << " bias=" << with_bias);
  auto x = Random(size_t{1} * N * C, 1), w = Random(size_t{1} * OC * C, 2);
  auto dy = Random(size_t{1} * N * OC, 3);
  auto run = [&](Ops& ops, bool into) {
    DeviceVec dx(ops, x), dw(ops, w), ddy(ops, dy);
    DeviceVec dinp(ops, std::vector<float>(x.size(), into ? std::nanf("") : 0.0f));
    DeviceVec dweight(ops, GradInit(1, w.size(), true)), dbias(ops, GradInit(2, OC, true));
    float* db = with_bias ? dbias.get() : nullptr;
    if (into) {
      ops.MatmulBackwardInto(dinp.get(), dweight.get(), db, ddy.get(), dx.get(), dw.get(), N, C,
                             OC);
    } else {
      ops.MatmulBackward(dinp.get(), dweight.get(), db, ddy.get(), dx.get(), dw.get(), N, C, OC);
    }
    return std::vector<std::vector<float>>{dinp.ToHost(), dweight.ToHost(), dbias.ToHost()};
  };
  auto fast = backend.Make();
  const auto into = run(*fast, true), accumulated = run(*fast, false);
  const auto ref = run(*Backend("cpu-ref"), false);
  const char* names[] = {"dinp", "dweight", "dbias"};
  for (size_t k = 0; k < 3; ++k) {
    INFO(names[k]);
    CHECK(SameBits(into[k], accumulated[k]));
    ExpectClose(into[k], ref[k], ProductTol(*fast, std::max(N, OC), kTol), names[k]);
  }
}

TEST_CASE("LayerNorm forward and backward match the reference", "[ops][layernorm]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const Dims shape =
      GENERATE(Dims{{0, 8}}, Dims{{1, 1}}, Dims{{1, 8}}, Dims{{7, 24}}, Dims{{65, 36}},
               Dims{{256, 768}}, Dims{{3, 1001}}, Dims{{2048, 768}, true});
  if (!Runs(backend, shape.large)) return;
  const int N = shape[0], C = shape[1];
  INFO(backend.Label() << " N=" << N << " C=" << C);
  // Offset and scaled rows, so the mean and variance are not trivial.
  auto x = Random(size_t{1} * N * C, 1, -3.0f, 5.0f);
  auto w = Random(C, 2, 0.5f, 1.5f), b = Random(C, 3);
  auto fast = backend.Make();
  auto ref = Backend("cpu-ref");

  auto forward = [&](Ops& ops) {
    DeviceVec dx(ops, x), dw(ops, w), db(ops, b), out(ops, size_t{1} * N * C);
    DeviceVec mean(ops, N), rstd(ops, N);
    ops.LayerNormForward(out.get(), mean.get(), rstd.get(), dx.get(), dw.get(), db.get(), N, C);
    return std::vector<std::vector<float>>{out.ToHost(), mean.ToHost(), rstd.ToHost()};
  };
  auto want = forward(*ref);
  auto got = forward(*fast);
  ExpectClose(got[0], want[0], kTol, "out");
  ExpectClose(got[1], want[1], kTol, "mean");
  ExpectClose(got[2], want[2], kTol, "rstd");

  auto dy = Random(size_t{1} * N * C, 4);
  GradRun run = [&](Ops& ops, bool prefill) {
    DeviceVec dx(ops, x), dw(ops, w), ddy(ops, dy), mean(ops, want[1]), rstd(ops, want[2]);
    DeviceVec dinp(ops, GradInit(0, x.size(), prefill)), dweight(ops, GradInit(1, C, prefill));
    DeviceVec dbias(ops, GradInit(2, C, prefill));
    ops.LayerNormBackward(dinp.get(), dweight.get(), dbias.get(), ddy.get(), dx.get(), dw.get(),
                          mean.get(), rstd.get(), N, C);
    return std::vector<std::vector<float>>{dinp.ToHost(), dweight.ToHost(), dbias.ToHost()};
  };
  CheckBackward(run, *fast, kTol, {"dinp", "dweight", "dbias"});
}

}  // namespace
}  // namespace longhaul::kernels::testing
