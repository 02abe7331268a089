// What "cpu" promises beyond the op suite: the same bits whatever its thread count (its
// partitions depend only on shapes), which is stronger than ops.h asks and lets sites with
// different core counts agree exactly; for the block chain, matmul, attention and SumSquares.
#include "test/kernels/block_chain.h"
#include "test/kernels/test_util.h"

namespace longhaul::kernels::testing {
namespace {

TEST_CASE("cpu: a block gives the same bits on 1 to 4 threads", "[kernels][determinism]") {
  const auto want = RunBlock(*Backend("cpu", 1));
  for (int threads : {2, 3, 4}) {
    INFO("threads=" << threads);
    auto ops = Backend("cpu", threads);
    for (int rep = 0; rep < 2; rep++) CHECK(RunBlock(*ops) == want);
  }
}

TEST_CASE("cpu: matmul repeats bit for bit on several threads", "[kernels][matmul]") {
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

TEST_CASE("cpu: attention repeats bit for bit on several threads", "[kernels][attention]") {
  const int B = 2, T = 100, C = 48, NH = 4;
  const size_t att_size = size_t{1} * B * NH * T * T;
  auto qkv = Random(size_t{3} * B * T * C, 3, -2.0f, 2.0f);
  auto fast = Backend("cpu", 2);
  auto run = [&] {
    DeviceVec dqkv(*fast, qkv), out(*fast, size_t{1} * B * T * C);
    DeviceVec preatt(*fast, att_size), att(*fast, att_size);
    fast->AttentionForward(out.get(), preatt.get(), att.get(), dqkv.get(), B, T, C, NH);
    return std::vector<std::vector<float>>{out.ToHost(), att.ToHost()};
  };
  auto first = run();
  for (int i = 0; i < 3; i++) CHECK(run() == first);
}

TEST_CASE("cpu: SumSquares gives the same bits on every thread count", "[kernels][norm]") {
  const size_t n = (size_t{1} << 20) + 5;
  auto host = Random(n, 5, -3.0f, 3.0f);
  double first = -1;
  for (int threads : {1, 2, 3, 0}) {
    INFO("threads=" << threads);
    auto fast = Backend("cpu", threads);
    DeviceVec fx(*fast, host);
    const double got = fast->SumSquares(fx.get(), n);
    if (first < 0) first = got;
    CHECK(got == first);
  }
}

}  // namespace
}  // namespace longhaul::kernels::testing
