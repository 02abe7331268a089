// "cpu" against "cpu-ref" for the dense per-row ops: matmul and layernorm, forward and
// backward, at sizes 0, 1, odd and large enough for OpenBLAS's blocking, with 1, 3 and all
// threads. Backward ops are also checked to accumulate (+=) into their gradients.
#include "test/kernels/test_util.h"

namespace longhaul::kernels::testing {
namespace {

constexpr Tolerance kTol{1e-4f, 1e-3f};

TEST_CASE("MatmulForward matches the reference", "[kernels][matmul]") {
  const int threads = GENERATE(0, 1, 3);
  const bool with_bias = GENERATE(true, false);
  auto shape = GENERATE(std::vector<int>{0, 8, 8}, std::vector<int>{1, 1, 1},
                        std::vector<int>{7, 24, 72}, std::vector<int>{3, 0, 5},
                        std::vector<int>{67, 130, 97}, std::vector<int>{128, 768, 300});
  const int N = shape[0], C = shape[1], OC = shape[2];
  INFO("N=" << N << " C=" << C << " OC=" << OC << " bias=" << with_bias << " threads=" << threads);
  auto x = Random(size_t{1} * N * C, 1), w = Random(size_t{1} * OC * C, 2), b = Random(OC, 3);
  auto run = [&](Ops& ops) {
    DeviceVec dx(ops, x), dw(ops, w), db(ops, b), out(ops, Random(size_t{1} * N * OC, 4));
    ops.MatmulForward(out.get(), dx.get(), dw.get(), with_bias ? db.get() : nullptr, N, C, OC);
    return out.ToHost();
  };
  auto fast = Backend("cpu", threads);
  ExpectClose(run(*fast), run(*Backend("cpu-ref")), kTol, "out");
}

TEST_CASE("MatmulBackward matches the reference and accumulates", "[kernels][matmul]") {
  const int threads = GENERATE(0, 1, 3);
  const bool with_bias = GENERATE(true, false);
  const bool with_dinp = GENERATE(true, false);
  auto shape =
      GENERATE(std::vector<int>{0, 8, 8}, std::vector<int>{1, 1, 1}, std::vector<int>{7, 24, 72},
               std::vector<int>{67, 130, 97}, std::vector<int>{128, 768, 300});
  const int N = shape[0], C = shape[1], OC = shape[2];
  INFO("N=" << N << " C=" << C << " OC=" << OC << " threads=" << threads);
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
  auto fast = Backend("cpu", threads);
  CheckBackward(run, *fast, kTol, {"dinp", "dweight", "dbias"});
}

TEST_CASE("LayerNorm forward and backward match the reference", "[kernels][layernorm]") {
  const int threads = GENERATE(0, 1, 3);
  auto shape = GENERATE(std::vector<int>{0, 8}, std::vector<int>{1, 1}, std::vector<int>{1, 8},
                        std::vector<int>{7, 24}, std::vector<int>{65, 36},
                        std::vector<int>{256, 768}, std::vector<int>{3, 1001});
  const int N = shape[0], C = shape[1];
  INFO("N=" << N << " C=" << C << " threads=" << threads);
  // Offset and scaled rows, so the mean and variance are not trivial.
  auto x = Random(size_t{1} * N * C, 1, -3.0f, 5.0f);
  auto w = Random(C, 2, 0.5f, 1.5f), b = Random(C, 3);
  auto fast = Backend("cpu", threads);
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

TEST_CASE("Matmul on the threaded backend repeats bit for bit", "[kernels][matmul]") {
  const int N = 130, C = 200, OC = 330;
  auto x = Random(N * C, 1), w = Random(OC * C, 2), b = Random(OC, 3), dy = Random(N * OC, 4);
  auto fast = Backend("cpu", 2);
  auto run = [&] {
    DeviceVec dx(*fast, x), dw(*fast, w), db(*fast, b), ddy(*fast, dy), out(*fast, N * OC);
    DeviceVec dinp(*fast, N * C), dweight(*fast, OC * C), dbias(*fast, OC);
    fast->MatmulForward(out.get(), dx.get(), dw.get(), db.get(), N, C, OC);
    fast->MatmulBackward(dinp.get(), dweight.get(), dbias.get(), ddy.get(), dx.get(), dw.get(), N,
                         C, OC);
    return std::vector<std::vector<float>>{out.ToHost(), dinp.ToHost(), dweight.ToHost(),
                                           dbias.ToHost()};
  };
  auto first = run();
  for (int i = 0; i < 3; i++) CHECK(run() == first);
}

}  // namespace
}  // namespace longhaul::kernels::testing
