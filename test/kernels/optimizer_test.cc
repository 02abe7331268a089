// AdamW and SumSquares: against hand computation (so the reference is checked too), "cpu"
// against "cpu-ref", and SumSquares' promise of a fixed summation order (same bits on every
// call and, for "cpu", for every thread count).
#include <cmath>

#include "test/kernels/test_util.h"

namespace longhaul::kernels::testing {
namespace {

TEST_CASE("AdamW follows the documented formula", "[kernels][adamw]") {
  const std::string backend = GENERATE("cpu-ref", "cpu");
  INFO(backend);
  auto ops = Backend(backend);
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

TEST_CASE("AdamW on cpu matches the reference", "[kernels][adamw]") {
  const int threads = GENERATE(0, 1, 3);
  const size_t n = GENERATE(size_t{0}, size_t{1}, size_t{7}, size_t{100003});
  const int t = GENERATE(1, 2, 1000);
  INFO("n=" << n << " t=" << t << " threads=" << threads);
  auto p0 = Random(n, 1), g = Random(n, 2), m0 = Random(n, 3, -0.1f, 0.1f);
  auto v0 = Random(n, 4, 0.0f, 0.01f);
  auto run = [&](Ops& ops) {
    DeviceVec p(ops, p0), dg(ops, g), m(ops, m0), v(ops, v0);
    ops.AdamW(p.get(), dg.get(), m.get(), v.get(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
    return std::vector<std::vector<float>>{p.ToHost(), m.ToHost(), v.ToHost()};
  };
  auto want = run(*Backend("cpu-ref"));
  auto got = run(*Backend("cpu", threads));
  ExpectClose(got[0], want[0], {1e-6f, 1e-5f}, "params");
  ExpectClose(got[1], want[1], {1e-7f, 1e-5f}, "m");
  ExpectClose(got[2], want[2], {1e-9f, 1e-5f}, "v");
}

TEST_CASE("SumSquares is exact on small input and fixed-order on large", "[kernels][norm]") {
  for (const char* backend : {"cpu-ref", "cpu"}) {
    INFO(backend);
    auto ops = Backend(backend);
    DeviceVec empty(*ops, size_t{0});
    CHECK(ops->SumSquares(empty.get(), 0) == 0.0);
    DeviceVec x(*ops, std::vector<float>{1.0f, -2.0f, 3.0f, 0.5f});
    CHECK(ops->SumSquares(x.get(), 4) == 14.25);  // 1 + 4 + 9 + 0.25, exact in double
  }
  // Large input: within double rounding of a long double sum, the same bits on every call,
  // and for "cpu" the same bits for every thread count.
  const size_t n = (size_t{1} << 20) + 5;
  auto host = Random(n, 5, -3.0f, 3.0f);
  long double exact = 0;
  for (float f : host) exact += static_cast<long double>(f) * f;
  auto ref = Backend("cpu-ref");
  DeviceVec rx(*ref, host);
  const double ref_sum = ref->SumSquares(rx.get(), n);
  CHECK(std::fabs(ref_sum - static_cast<double>(exact)) <= 1e-12 * ref_sum);
  CHECK(ref->SumSquares(rx.get(), n) == ref_sum);
  double first = -1;
  for (int threads : {1, 2, 3, 0}) {
    auto fast = Backend("cpu", threads);
    DeviceVec fx(*fast, host);
    const double got = fast->SumSquares(fx.get(), n);
    CHECK(std::fabs(got - static_cast<double>(exact)) <= 1e-12 * got);
    if (first < 0) first = got;
    CHECK(got == first);
    CHECK(fast->SumSquares(fx.get(), n) == got);
  }
}

}  // namespace
}  // namespace longhaul::kernels::testing
