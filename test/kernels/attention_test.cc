// "cpu" causal attention against "cpu-ref": probabilities, output and dqkv, for T on both
// sides of the fast backend's 64-row blocks, 1 to 3 heads, 1 and several (batch, head) pairs
// per thread; plus bit-for-bit repeatability of the threaded backend.
#include "test/kernels/test_util.h"

namespace longhaul::kernels::testing {
namespace {

constexpr Tolerance kTol{1e-5f, 1e-3f};

struct Shape {
  int B, T, C, NH;
};

std::vector<std::vector<float>> Forward(Ops& ops, const std::vector<float>& qkv, Shape s) {
  const size_t att_size = size_t{1} * s.B * s.NH * s.T * s.T;
  DeviceVec dqkv(ops, qkv), out(ops, size_t{1} * s.B * s.T * s.C);
  // Scratch and outputs start as garbage: the op must not rely on them being zero.
  DeviceVec preatt(ops, Random(att_size, 7)), att(ops, Random(att_size, 8));
  ops.AttentionForward(out.get(), preatt.get(), att.get(), dqkv.get(), s.B, s.T, s.C, s.NH);
  return {out.ToHost(), att.ToHost()};
}

TEST_CASE("Attention forward and backward match the reference", "[kernels][attention]") {
  const int threads = GENERATE(0, 1, 3);
  auto s = GENERATE(Shape{0, 7, 8, 1}, Shape{1, 1, 8, 1}, Shape{1, 7, 8, 2}, Shape{2, 7, 24, 3},
                    Shape{3, 64, 36, 3}, Shape{1, 65, 24, 2}, Shape{2, 130, 24, 1},
                    Shape{1, 257, 36, 3});
  INFO("B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH << " threads=" << threads);
  // Wider than [-1, 1] so that softmax rows are far from uniform.
  auto qkv = Random(size_t{3} * s.B * s.T * s.C, 1, -2.0f, 2.0f);
  auto fast = Backend("cpu", threads);
  auto ref = Backend("cpu-ref");
  auto want = Forward(*ref, qkv, s);
  auto got = Forward(*fast, qkv, s);
  ExpectClose(got[0], want[0], kTol, "out");
  ExpectClose(got[1], want[1], kTol, "att");

  const size_t att_size = size_t{1} * s.B * s.NH * s.T * s.T;
  auto dout = Random(size_t{1} * s.B * s.T * s.C, 2);
  GradRun run = [&](Ops& ops, bool prefill) {
    DeviceVec dq(ops, qkv), att(ops, want[1]), ddout(ops, dout);
    DeviceVec dpreatt(ops, Random(att_size, 9)), datt(ops, Random(att_size, 10));
    DeviceVec dqkv(ops, GradInit(0, qkv.size(), prefill));
    ops.AttentionBackward(dqkv.get(), dpreatt.get(), datt.get(), ddout.get(), dq.get(), att.get(),
                          s.B, s.T, s.C, s.NH);
    return std::vector<std::vector<float>>{dqkv.ToHost()};
  };
  CheckBackward(run, *fast, kTol, {"dqkv"});
}

TEST_CASE("Attention on the threaded backend repeats bit for bit", "[kernels][attention]") {
  const Shape s{2, 100, 48, 4};
  auto qkv = Random(size_t{3} * s.B * s.T * s.C, 3, -2.0f, 2.0f);
  auto fast = Backend("cpu", 2);
  auto first = Forward(*fast, qkv, s);
  for (int i = 0; i < 3; i++) {
    auto again = Forward(*fast, qkv, s);
    CHECK(again[0] == first[0]);
    CHECK(again[1] == first[1]);
  }
}

}  // namespace
}  // namespace longhaul::kernels::testing
