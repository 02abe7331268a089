// The op suite (op_suite.h) for AdamW and SumSquares: against "cpu-ref" (up to 2^24 + 3
// parameters on device backends), SumSquares within double rounding of a long-double sum and
// the same bits on every call; plus AdamW against values worked out by hand, which checks the
// reference itself.
#include <cmath>

#include "test/kernels/op_suite.h"

namespace longhaul::kernels::testing {
namespace {

TEST_CASE("AdamW follows the documented formula", "[ops][adamw]") {
  // The reference, and the CPU backends (device backends are held to the reference below).
  std::vector<SuiteBackend> backends = {{"cpu-ref"}};
  for (const auto& b : SuiteBackends()) {
    if (!b.device) backends.push_back(b);
  }
  for (const auto& backend : backends) {
    INFO(backend.Label());
    auto ops = backend.Make();
    // One parameter, two steps, worked out in double by hand:
    // step 1: g = 0.5 * 2 = 1; m = 0.1; v = 0.001; m_hat = 1; v_hat = 1;
    //         param = 1 - 0.1 * (1 / (1 + 1e-8) + 0.01 * 1) = 0.899 (to 1e-9)
    DeviceVec param(*ops, std::vector<float>{1.0f}), grad(*ops, std::vector<float>{0.5f});
    DeviceVec m(*ops, std::vector<float>{0.0f}), v(*ops, std::vector<float>{0.0f});
    ops->AdamW(param.get(), grad.get(), m.get(), v.get(), 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 2.0f,
               1);
    CHECK(param.ToHost()[0] == Approx(0.899).epsilon(1e-6));
    CHECK(m.ToHost()[0] == Approx(0.1).epsilon(1e-6));
    // 1 - 0.999f is 0.99998713e-3 in float: v carries that 1.3e-5 relative rounding.
    CHECK(v.ToHost()[0] == Approx(0.001).epsilon(1e-4));
    // step 2 with g = -0.25 * 2 = -0.5:
    //   m = 0.9 * 0.1 - 0.1 * 0.5 = 0.04; v = 0.999 * 0.001 + 0.001 * 0.25 = 0.001249
    //   m_hat = 0.04 / 0.19; v_hat = 0.001249 / 0.001999
    //   param = 0.899 - 0.1 * (m_hat / (sqrt(v_hat) + 1e-8) + 0.01 * 0.899)
    ops->Upload(grad.get(), std::vector<float>{-0.25f}.data(), 1);
    ops->AdamW(param.get(), grad.get(), m.get(), v.get(), 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 2.0f,
               2);
    const double m_hat = 0.04 / 0.19, v_hat = 0.001249 / 0.001999;
    const double expected = 0.899 - 0.1 * (m_hat / (std::sqrt(v_hat) + 1e-8) + 0.01 * 0.899);
    CHECK(param.ToHost()[0] == Approx(expected).epsilon(1e-6));
    CHECK(m.ToHost()[0] == Approx(0.04).epsilon(1e-5));
    CHECK(v.ToHost()[0] == Approx(0.001249).epsilon(1e-4));
  }
}

TEST_CASE("AdamW matches the reference", "[ops][adamw]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const Dims size =
      GENERATE(Dims{{0}}, Dims{{1}}, Dims{{7}}, Dims{{100003}}, Dims{{(1 << 24) + 3}, true});
  const int t = GENERATE(1, 2, 1000);
  if (!Runs(backend, size.large)) return;
  const size_t n = static_cast<size_t>(size[0]);
  INFO(backend.Label() << " n=" << n << " t=" << t);
  auto p0 = Random(n, 1), g = Random(n, 2), m0 = Random(n, 3, -0.1f, 0.1f);
  auto v0 = Random(n, 4, 0.0f, 0.01f);
  auto run = [&](Ops& ops) {
    DeviceVec p(ops, p0), dg(ops, g), m(ops, m0), v(ops, v0);
    ops.AdamW(p.get(), dg.get(), m.get(), v.get(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
    return std::vector<std::vector<float>>{p.ToHost(), m.ToHost(), v.ToHost()};
  };
  auto want = run(*Backend("cpu-ref"));
  auto got = run(*backend.Make());
  ExpectClose(got[0], want[0], {1e-6f, 1e-5f}, "params");
  ExpectClose(got[1], want[1], {1e-7f, 1e-5f}, "m");
  ExpectClose(got[2], want[2], {1e-9f, 1e-5f}, "v");
}

TEST_CASE("SumSquares is exact on small input and fixed-order on large", "[ops][norm]") {
  std::vector<SuiteBackend> backends = SuiteBackends();
  backends.push_back({"cpu-ref"});
  for (const auto& backend : backends) {
    INFO(backend.Label());
    auto ops = backend.Make();
    DeviceVec empty(*ops, size_t{0});
    CHECK(ops->SumSquares(empty.get(), 0) == 0.0);
    DeviceVec x(*ops, std::vector<float>{1.0f, -2.0f, 3.0f, 0.5f});
    CHECK(ops->SumSquares(x.get(), 4) == 14.25);  // 1 + 4 + 9 + 0.25, exact in double
    // Large input: within double rounding of a long double sum, the same bits on every call.
    for (Dims size : {Dims{{1}}, Dims{{16383}}, Dims{{16385}}, Dims{{(1 << 20) + 5}},
                      Dims{{3 * (1 << 24) + 7}, true}}) {
      if (!Runs(backend, size.large)) continue;
      const size_t n = static_cast<size_t>(size[0]);
      INFO("n=" << n);
      auto host = Random(n, 5, -3.0f, 3.0f);
      long double exact = 0;
      for (float f : host) exact += static_cast<long double>(f) * f;
      DeviceVec dx(*ops, host);
      const double got = ops->SumSquares(dx.get(), n);
      CHECK(std::fabs(got - static_cast<double>(exact)) <= 1e-12 * got);
      CHECK(ops->SumSquares(dx.get(), n) == got);
    }
  }
}

}  // namespace
}  // namespace longhaul::kernels::testing
