// The op suite (op_suite.h) for causal attention: probabilities, output and dqkv against
// "cpu-ref", for T on both sides of the CPU backend's 64-row blocks, 1 to 3 heads, 1 and
// several (batch, head) pairs per thread and, on device backends, GPT-2 small's heads
// (B 2, T 256, C 768, 12 heads) and T = 1024.
#include "test/kernels/op_suite.h"

namespace longhaul::kernels::testing {
namespace {

struct Shape {
  int B, T, C, NH;
  bool large = false;
};

// Output and probabilities: fp32 on the CPU, a little looser for the GPU's summation order,
// and bf16's products.
Tolerance OutTol(const Ops& ops) {
  if (IsBf16(ops)) return {3e-2f, 1.0f / 64};
  return ops.name().rfind("cuda", 0) == 0 ? Tolerance{2e-5f, 1e-3f} : Tolerance{1e-5f, 1e-3f};
}
Tolerance AttTol(const Ops& ops) {
  return IsBf16(ops) ? Tolerance{2e-3f, 1.0f / 32} : Tolerance{1e-5f, 1e-3f};
}

std::vector<std::vector<float>> Forward(Ops& ops, const std::vector<float>& qkv, Shape s) {
  const size_t att_size = size_t{1} * s.B * s.NH * s.T * s.T;
  DeviceVec dqkv(ops, qkv), out(ops, size_t{1} * s.B * s.T * s.C);
  // Scratch and outputs start as garbage: the op must not rely on them being zero.
  DeviceVec preatt(ops, Random(att_size, 7)), att(ops, Random(att_size, 8));
  ops.AttentionForward(out.get(), preatt.get(), att.get(), dqkv.get(), s.B, s.T, s.C, s.NH);
  return {out.ToHost(), att.ToHost()};
}

TEST_CASE("Attention forward and backward match the reference", "[ops][attention]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const Shape s =
      GENERATE(Shape{0, 7, 8, 1}, Shape{1, 1, 8, 1}, Shape{1, 7, 8, 2}, Shape{2, 7, 24, 3},
               Shape{3, 64, 36, 3}, Shape{1, 65, 24, 2}, Shape{2, 130, 24, 1}, Shape{1, 257, 36, 3},
               Shape{2, 256, 768, 12, true}, Shape{1, 1024, 64, 2, true});
  if (!Runs(backend, s.large)) return;
  INFO(backend.Label() << " B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH);
  // Wider than [-1, 1] so that softmax rows are far from uniform.
  auto qkv = Random(size_t{3} * s.B * s.T * s.C, 1, -2.0f, 2.0f);
  auto fast = backend.Make();
  auto want = Forward(*Backend("cpu-ref"), qkv, s);
  auto got = Forward(*fast, qkv, s);
  ExpectClose(got[0], want[0], OutTol(*fast), "out");
  ExpectClose(got[1], want[1], AttTol(*fast), "att");

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
  CheckBackward(run, *fast, OutTol(*fast), {"dqkv"});
}

}  // namespace
}  // namespace longhaul::kernels::testing
