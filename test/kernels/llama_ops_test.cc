// The op suite (op_suite.h) for the Llama-family ops: RMSNorm, rotary embedding, SwiGLU and
// grouped-query causal attention, forward and backward, against "cpu-ref" at sizes 0, 1, odd,
// across the CPU backend's 64-row attention blocks, and Llama-shaped (8 query heads over 2
// key/value heads of 64). Also what ties the ops to their definitions beyond the reference:
// grouped attention equals ordinary attention over key/value heads repeated per group, and
// the rotary backward undoes the forward. The `_cuda` twin runs the same cases on "cuda" and
// "cuda-bf16" (the attention's products in bf16 there: ProductTol), and a Llama-8B-shaped
// attention (32 query heads over 8 key/value heads of 128) as a large shape.
#include "test/kernels/op_suite.h"

namespace longhaul::kernels::testing {
namespace {

constexpr Tolerance kTol{1e-5f, 1e-4f};

TEST_CASE("Only backends with the Llama ops claim them", "[ops][llama]") {
  CHECK(Backend("cpu-ref")->HasLlamaOps());
  for (const SuiteBackend& backend : SuiteBackends()) {
    INFO(backend.Label());
    CHECK(backend.Make()->HasLlamaOps());
  }
}

TEST_CASE("RMSNorm forward and backward match the reference", "[ops][llama][rmsnorm]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const Dims shape =
      GENERATE(Dims{{0, 8}}, Dims{{1, 1}}, Dims{{7, 13}}, Dims{{64, 256}}, Dims{{130, 1000}});
  const int N = shape[0], C = shape[1];
  const float eps = 1e-6f;
  INFO(backend.Label() << " N=" << N << " C=" << C);
  auto x = Random(size_t{1} * N * C, 1, -2.0f, 2.0f), w = Random(C, 2, 0.5f, 1.5f);
  auto fwd = [&](Ops& ops) {
    DeviceVec dx(ops, x), dw(ops, w), out(ops, Random(size_t{1} * N * C, 3)),
        rstd(ops, Random(N, 4));
    ops.RmsNormForward(out.get(), rstd.get(), dx.get(), dw.get(), N, C, eps);
    return std::vector<std::vector<float>>{out.ToHost(), rstd.ToHost()};
  };
  auto fast = backend.Make();
  auto want = fwd(*Backend("cpu-ref"));
  auto got = fwd(*fast);
  ExpectClose(got[0], want[0], kTol, "out");
  ExpectClose(got[1], want[1], kTol, "rstd");
  auto dy = Random(size_t{1} * N * C, 5);
  GradRun run = [&](Ops& ops, bool prefill) {
    DeviceVec dx(ops, x), dw(ops, w), ddy(ops, dy), rstd(ops, want[1]);
    DeviceVec dinp(ops, GradInit(0, x.size(), prefill)), dweight(ops, GradInit(1, C, prefill));
    ops.RmsNormBackward(dinp.get(), dweight.get(), ddy.get(), dx.get(), dw.get(), rstd.get(), N, C);
    return std::vector<std::vector<float>>{dinp.ToHost(), dweight.ToHost()};
  };
  CheckBackward(run, *fast, {1e-4f, 1e-4f}, {"dinp", "dweight"});
}

TEST_CASE("SwiGLU forward and backward match the reference", "[ops][llama][swiglu]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const Dims shape = GENERATE(Dims{{0, 8}}, Dims{{1, 1}}, Dims{{5, 13}}, Dims{{64, 688}});
  const int N = shape[0], I = shape[1];
  INFO(backend.Label() << " N=" << N << " I=" << I);
  // Gates far into both tails, where the sigmoid saturates.
  auto x = Random(size_t{2} * N * I, 1, -12.0f, 12.0f);
  auto fwd = [&](Ops& ops) {
    DeviceVec dx(ops, x), out(ops, Random(size_t{1} * N * I, 3));
    ops.SwiGluForward(out.get(), dx.get(), N, I);
    return out.ToHost();
  };
  auto fast = backend.Make();
  ExpectClose(fwd(*fast), fwd(*Backend("cpu-ref")), kTol, "out");
  auto dy = Random(size_t{1} * N * I, 5);
  GradRun run = [&](Ops& ops, bool prefill) {
    DeviceVec dx(ops, x), ddy(ops, dy), dinp(ops, GradInit(0, x.size(), prefill));
    ops.SwiGluBackward(dinp.get(), dx.get(), ddy.get(), N, I);
    return std::vector<std::vector<float>>{dinp.ToHost()};
  };
  CheckBackward(run, *fast, kTol, {"dinp"});
}

struct AttnShape {
  int B, T, NH, NKV, HD;
  bool large = false;  // device backends only (op_suite.h)
};

AttnShape AttentionShape() {
  return GENERATE(AttnShape{0, 7, 2, 1, 8}, AttnShape{1, 1, 1, 1, 2}, AttnShape{1, 7, 4, 2, 6},
                  AttnShape{2, 9, 3, 1, 10}, AttnShape{1, 65, 6, 3, 8}, AttnShape{2, 130, 4, 4, 16},
                  AttnShape{1, 128, 8, 2, 64}, AttnShape{1, 256, 32, 8, 128, true});
}

TEST_CASE("Rotary embedding matches the reference and its backward undoes it",
          "[ops][llama][rope]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const AttnShape s = AttentionShape();
  INFO(backend.Label() << " B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV
                       << " HD=" << s.HD);
  if (!Runs(backend, s.large)) return;
  const size_t n = size_t{1} * s.B * s.T * (s.NH + 2 * s.NKV) * s.HD;
  const size_t table = size_t{1} * s.T * (s.HD / 2);
  // Any angle table works for the op: cos and sin of random angles.
  auto angles = Random(table, 7, -3.0f, 3.0f);
  std::vector<float> cos(table), sin(table);
  for (size_t i = 0; i < table; i++) {
    cos[i] = std::cos(angles[i]);
    sin[i] = std::sin(angles[i]);
  }
  auto x = Random(n, 1);
  auto apply = [&](Ops& ops, bool backward, const std::vector<float>& in) {
    DeviceVec d(ops, in), c(ops, cos), si(ops, sin);
    if (backward) {
      ops.RopeBackward(d.get(), c.get(), si.get(), s.B, s.T, s.NH, s.NKV, s.HD);
    } else {
      ops.RopeForward(d.get(), c.get(), si.get(), s.B, s.T, s.NH, s.NKV, s.HD);
    }
    return d.ToHost();
  };
  auto fast = backend.Make();
  auto ref = Backend("cpu-ref");
  auto rotated = apply(*ref, false, x);
  ExpectClose(apply(*fast, false, x), rotated, kTol, "forward");
  ExpectClose(apply(*fast, true, x), apply(*ref, true, x), kTol, "backward");
  // The rotation is orthogonal: its transpose is its inverse. Value heads are untouched.
  ExpectClose(apply(*fast, true, rotated), x, kTol, "backward(forward(x)) == x");
  const size_t W = size_t{1} * (s.NH + 2 * s.NKV) * s.HD, v0 = size_t{1} * (s.NH + s.NKV) * s.HD;
  for (size_t r = 0; r < size_t{1} * s.B * s.T; r++) {
    for (size_t i = v0; i < W; i++) REQUIRE(rotated[r * W + i] == x[r * W + i]);
  }
}

TEST_CASE("Grouped-query attention matches the reference", "[ops][llama][attention]") {
  const SuiteBackend backend = GENERATE(from_range(SuiteBackends()));
  const AttnShape s = AttentionShape();
  INFO(backend.Label() << " B=" << s.B << " T=" << s.T << " NH=" << s.NH << " NKV=" << s.NKV
                       << " HD=" << s.HD);
  if (!Runs(backend, s.large)) return;
  const size_t n = size_t{1} * s.B * s.T * (s.NH + 2 * s.NKV) * s.HD;
  const size_t att_size = size_t{1} * s.B * s.NH * s.T * s.T;
  const size_t out_size = size_t{1} * s.B * s.T * s.NH * s.HD;
  auto qkv = Random(n, 1, -2.0f, 2.0f);
  auto fwd = [&](Ops& ops) {
    DeviceVec dq(ops, qkv), out(ops, Random(out_size, 3));
    DeviceVec preatt(ops, Random(att_size, 7)), att(ops, Random(att_size, 8));
    ops.GroupedAttentionForward(out.get(), preatt.get(), att.get(), dq.get(), s.B, s.T, s.NH, s.NKV,
                                s.HD);
    return std::vector<std::vector<float>>{out.ToHost(), att.ToHost()};
  };
  auto fast = backend.Make();
  auto want = fwd(*Backend("cpu-ref"));
  auto got = fwd(*fast);
  // Products over HD (the scores) and T (the weighted values): bf16 on "cuda-bf16".
  ExpectClose(got[0], want[0], ProductTol(*fast, std::max(s.T, s.HD), kTol), "out");
  ExpectClose(got[1], want[1], ProductTol(*fast, s.HD, kTol), "att");
  auto dout = Random(out_size, 2);
  GradRun run = [&](Ops& ops, bool prefill) {
    DeviceVec dq(ops, qkv), att(ops, want[1]), ddout(ops, dout);
    DeviceVec dpreatt(ops, Random(att_size, 9)), datt(ops, Random(att_size, 10));
    DeviceVec dqkv(ops, GradInit(0, n, prefill));
    ops.GroupedAttentionBackward(dqkv.get(), dpreatt.get(), datt.get(), ddout.get(), dq.get(),
                                 att.get(), s.B, s.T, s.NH, s.NKV, s.HD);
    return std::vector<std::vector<float>>{dqkv.ToHost()};
  };
  // dk and dv sum over the group's query rows too.
  const int k = std::max(s.T * (s.NKV > 0 ? s.NH / s.NKV : 1), s.HD);
  CheckBackward(run, *fast, ProductTol(*fast, k, {2e-5f, 1e-3f}), {"dqkv"});
}

// Grouped attention over NKV key/value heads is ordinary multi-head attention whose key and
// value heads are the grouped ones repeated for each query head of the group.
TEST_CASE("Grouped-query attention is attention over repeated key/value heads",
          "[ops][llama][attention]") {
  const int B = 2, T = 11, NH = 6, NKV = 2, HD = 4, group = NH / NKV, C = NH * HD;
  auto ops = Backend("cpu");
  auto qkv = Random(size_t{1} * B * T * (NH + 2 * NKV) * HD, 1, -2.0f, 2.0f);
  std::vector<float> full(size_t{3} * B * T * C);
  for (int bt = 0; bt < B * T; bt++) {
    const float* g = qkv.data() + size_t{1} * bt * (NH + 2 * NKV) * HD;
    float* f = full.data() + size_t{3} * bt * C;
    for (int h = 0; h < NH; h++) {
      for (int i = 0; i < HD; i++) {
        f[h * HD + i] = g[h * HD + i];
        f[C + h * HD + i] = g[(NH + h / group) * HD + i];
        f[2 * C + h * HD + i] = g[(NH + NKV + h / group) * HD + i];
      }
    }
  }
  const size_t att_size = size_t{1} * B * NH * T * T;
  DeviceVec dg(*ops, qkv), df(*ops, full), out_g(*ops, size_t{1} * B * T * C),
      out_f(*ops, size_t{1} * B * T * C), pre(*ops, att_size), att(*ops, att_size);
  ops->GroupedAttentionForward(out_g.get(), pre.get(), att.get(), dg.get(), B, T, NH, NKV, HD);
  ops->AttentionForward(out_f.get(), pre.get(), att.get(), df.get(), B, T, C, NH);
  ExpectClose(out_g.ToHost(), out_f.ToHost(), kTol, "grouped vs repeated heads");
}

}  // namespace
}  // namespace longhaul::kernels::testing
