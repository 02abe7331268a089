// Every op of the CUDA backends ("cuda" in fp32, "cuda-bf16" with bf16 matrix products) against
// "cpu-ref", with llm.c's closeness check |a - ref| <= abs_tol + |ref| * rel_tol, at sizes 0, 1,
// odd, and GPT-2-small-like; backward ops are also checked to accumulate. Plus memory, device
// selection, bit-for-bit repeatability, and (tagged [no-gpu], so CI runs it everywhere) the
// clear failure of MakeOps("cuda") on a machine without a GPU. main() is gpu_test_main.cc.
//
// Tolerances. fp32: those of the CPU backend's tests. bf16: the products round their inputs to
// 8 significant bits, so an output's error grows with the square root of the inner dimension K;
// emulating that rounding (PyTorch, inputs rounded to bf16, fp32 sums) over these shapes needs
// abs_tol = 2.8e-3 sqrt(K) at rel_tol = 1/64 (matmul, K = 768 forward); the tests allow 8e-3
// sqrt(K). Ops without products compute in fp32 in both modes and get the fp32 tolerances.
#include "kernels/cuda/cuda_ops.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/device.h"
#include "test/kernels/test_util.h"

namespace longhaul::kernels::testing {
namespace {

bool IsBf16(const Ops& ops) { return ops.name().rfind("cuda-bf16", 0) == 0; }

// The tolerance of a product over inner dimension K on `ops`.
Tolerance ProductTol(const Ops& ops, int K, Tolerance fp32) {
  if (!IsBf16(ops)) return fp32;
  return {8e-3f * std::sqrt(static_cast<float>(std::max(K, 1))), 1.0f / 64};
}

TEST_CASE("Without a GPU, MakeOps(\"cuda\") fails with a clear message", "[cuda][no-gpu]") {
  // Malformed device suffixes are rejected whatever the machine.
  for (const char* bad : {"cuda:", "cuda:x", "cuda-bf16:-1", "cuda:123456"}) {
    auto ops = MakeOps(bad);
    REQUIRE_FALSE(ops.ok());
    CHECK(ops.status().code() == absl::StatusCode::kInvalidArgument);
  }
  auto count = cuda::CudaDeviceCount();
  if (!count.ok()) {
    const std::string why(count.status().message());
    CHECK(why.rfind("no CUDA device: ", 0) == 0);
    for (const char* name : {"cuda", "cuda-bf16", "cuda:0", "cuda-bf16:1"}) {
      auto ops = MakeOps(name);
      REQUIRE_FALSE(ops.ok());
      INFO(ops.status().message());
      CHECK(ops.status().code() == absl::StatusCode::kFailedPrecondition);
      CHECK(std::string(ops.status().message()) ==
            "kernel backend \"" + std::string(name) + "\": " + why);
    }
  } else {
    // With a GPU: a device past the last one is the error instead.
    const std::string name = "cuda:" + std::to_string(*count);
    auto ops = MakeOps(name);
    REQUIRE_FALSE(ops.ok());
    INFO(ops.status().message());
    CHECK(std::string(ops.status().message()).find("no CUDA device " + std::to_string(*count)) !=
          std::string::npos);
  }
}

TEST_CASE("CUDA backends: names, devices, memory", "[cuda][memory]") {
  for (const char* name : {"cuda", "cuda-bf16", "cuda:0", "cuda-bf16:0"}) {
    auto ops = Backend(name);
    CHECK(ops->name() == name);
    CHECK(cuda::CudaDeviceOf(*ops) == 0);
    CHECK(cuda::CudaStreamOf(*ops) != nullptr);
  }
  CHECK(cuda::CudaDeviceOf(*Backend("cpu-ref")) == -1);
  CHECK(cuda::CudaStreamOf(*Backend("cpu-ref")) == nullptr);

  auto ops = Backend("cuda");
  CHECK(ops->Alloc(0) == nullptr);
  ops->Free(nullptr);
  const size_t n = 1001;
  DeviceVec a(*ops, n);
  CHECK(a.ToHost() == std::vector<float>(n, 0.0f));
  auto host = Random(n, 1);
  ops->Upload(a.get(), host.data(), n);
  CHECK(a.ToHost() == host);
  DeviceVec b(*ops, n);
  ops->Copy(b.get(), a.get(), n);
  CHECK(b.ToHost() == host);
  ops->Zero(b.get() + 1, n - 2);
  auto zeroed = b.ToHost();
  CHECK(zeroed.front() == host.front());
  CHECK(zeroed.back() == host.back());
  CHECK(std::all_of(zeroed.begin() + 1, zeroed.end() - 1, [](float f) { return f == 0.0f; }));
  // Overlapping copies behave like memmove, in both directions.
  ops->Copy(a.get() + 10, a.get(), n - 10);
  auto shifted = a.ToHost();
  CHECK(std::equal(shifted.begin() + 10, shifted.end(), host.begin()));
  ops->Upload(a.get(), host.data(), n);
  ops->Copy(a.get(), a.get() + 10, n - 10);
  shifted = a.ToHost();
  CHECK(std::equal(shifted.begin(), shifted.end() - 10, host.begin() + 10));
  // Large: 64 Mi floats round-trip.
  const size_t big = size_t{1} << 26;
  auto big_host = Random(big, 2);
  DeviceVec c(*ops, big_host);
  CHECK(c.ToHost() == big_host);
}

TEST_CASE("CUDA embedding matches the reference bit for bit", "[cuda][embedding]") {
  const std::string backend = GENERATE("cuda", "cuda-bf16");
  auto shape = GENERATE(std::vector<int>{0, 3, 8}, std::vector<int>{1, 1, 1},
                        std::vector<int>{2, 7, 24}, std::vector<int>{3, 64, 36},
                        std::vector<int>{4, 33, 200}, std::vector<int>{8, 256, 768});
  const int B = shape[0], T = shape[1], C = shape[2];
  const int Vp = 5, maxT = T + 2;  // a tiny vocabulary, so tokens repeat within a batch
  INFO(backend << " B=" << B << " T=" << T << " C=" << C);
  auto tokens = RandomTokens(size_t{1} * B * T, Vp, 1);
  auto wte = Random(size_t{1} * Vp * C, 2), wpe = Random(size_t{1} * maxT * C, 3);
  auto gpu = Backend(backend);
  auto forward = [&](Ops& ops) {
    DeviceVec dwte(ops, wte), dwpe(ops, wpe), out(ops, size_t{1} * B * T * C);
    ops.EmbeddingForward(out.get(), tokens.data(), dwte.get(), dwpe.get(), B, T, C);
    return out.ToHost();
  };
  CHECK(forward(*gpu) == forward(*Backend("cpu-ref")));

  // Same additions in the same order as the reference (positions grouped by token on the
  // host, no atomics): the same bits, also when accumulating onto a prefill.
  auto dout = Random(size_t{1} * B * T * C, 4);
  GradRun run = [&](Ops& ops, bool prefill) {
    DeviceVec ddout(ops, dout);
    DeviceVec dwte(ops, GradInit(0, wte.size(), prefill));
    DeviceVec dwpe(ops, GradInit(1, wpe.size(), prefill));
    ops.EmbeddingBackward(dwte.get(), dwpe.get(), ddout.get(), tokens.data(), B, T, C);
    return std::vector<std::vector<float>>{dwte.ToHost(), dwpe.ToHost()};
  };
  auto ref = Backend("cpu-ref");
  for (bool prefill : {false, true}) CHECK(run(*gpu, prefill) == run(*ref, prefill));
}

TEST_CASE("CUDA GELU and residual match the reference", "[cuda][pointwise]") {
  const std::string backend = GENERATE("cuda", "cuda-bf16");
  const size_t n = GENERATE(size_t{0}, size_t{1}, size_t{7}, size_t{1001},
                            size_t{3 * (1 << 16) + 3}, size_t{(1 << 24) + 1});
  INFO(backend << " n=" << n);
  constexpr Tolerance kTol{1e-5f, 1e-4f};
  auto x = Random(n, 1, -6.0f, 6.0f);
  const float extremes[] = {0.0f, -100.0f, 100.0f, -30.0f, 30.0f, 1e-6f, -1e-6f};
  for (size_t i = 0; i < n && i < 7; i++) x[i] = extremes[i];
  auto y = Random(n, 2), dout = Random(n, 3);
  auto gpu = Backend(backend);
  auto ref = Backend("cpu-ref");

  auto gelu = [&](Ops& ops) {
    DeviceVec dx(ops, x), out(ops, n);
    ops.GeluForward(out.get(), dx.get(), n);
    return out.ToHost();
  };
  ExpectClose(gelu(*gpu), gelu(*ref), kTol, "gelu out");
  GradRun gelu_back = [&](Ops& ops, bool prefill) {
    DeviceVec dx(ops, x), ddout(ops, dout), dinp(ops, GradInit(0, n, prefill));
    ops.GeluBackward(dinp.get(), dx.get(), ddout.get(), n);
    return std::vector<std::vector<float>>{dinp.ToHost()};
  };
  CheckBackward(gelu_back, *gpu, kTol, {"gelu dinp"});

  // One addition per element: exact.
  auto residual = [&](Ops& ops) {
    DeviceVec a(ops, x), b(ops, y), out(ops, n);
    ops.ResidualForward(out.get(), a.get(), b.get(), n);
    return out.ToHost();
  };
  CHECK(residual(*gpu) == residual(*ref));
  GradRun residual_back = [&](Ops& ops, bool prefill) {
    DeviceVec ddout(ops, dout), da(ops, GradInit(0, n, prefill)), db(ops, GradInit(1, n, prefill));
    ops.ResidualBackward(da.get(), db.get(), ddout.get(), n);
    return std::vector<std::vector<float>>{da.ToHost(), db.ToHost()};
  };
  CheckBackward(residual_back, *gpu, {0.0f, 0.0f}, {"da", "db"});
}

TEST_CASE("CUDA softmax cross-entropy matches the reference", "[cuda][loss]") {
  const std::string backend = GENERATE("cuda", "cuda-bf16");
  auto shape =
      GENERATE(std::vector<int>{0, 3, 37, 128}, std::vector<int>{1, 1, 1, 1},
               std::vector<int>{1, 1, 2, 128}, std::vector<int>{2, 7, 37, 128},
               std::vector<int>{3, 5, 128, 128}, std::vector<int>{2, 9, 1001, 1024},
               std::vector<int>{1, 3, 50257, 50304}, std::vector<int>{4, 64, 50257, 50304});
  const int B = shape[0], T = shape[1], V = shape[2], Vp = shape[3];
  INFO(backend << " B=" << B << " T=" << T << " V=" << V << " Vp=" << Vp);
  constexpr Tolerance kTol{1e-5f, 1e-4f};
  auto logits = Random(size_t{1} * B * T * Vp, 1, -8.0f, 8.0f);
  auto targets = RandomTokens(size_t{1} * B * T, V, 2);
  auto gpu = Backend(backend);
  auto forward = [&](Ops& ops) {
    DeviceVec dl(ops, logits), probs(ops, Random(logits.size(), 3)), losses(ops, size_t{1} * B * T);
    ops.SoftmaxCrossEntropyForward(probs.get(), losses.get(), dl.get(), targets.data(), B, T, V,
                                   Vp);
    return std::vector<std::vector<float>>{probs.ToHost(), losses.ToHost()};
  };
  auto want = forward(*Backend("cpu-ref"));
  auto got = forward(*gpu);
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
  CheckBackward(run, *gpu, kTol, {"dlogits"});
}

TEST_CASE("CUDA matmul matches the reference", "[cuda][matmul]") {
  const std::string backend = GENERATE("cuda", "cuda-bf16");
  const bool with_bias = GENERATE(true, false);
  auto shape =
      GENERATE(std::vector<int>{0, 8, 8}, std::vector<int>{1, 1, 1}, std::vector<int>{7, 24, 72},
               std::vector<int>{3, 0, 5}, std::vector<int>{67, 130, 97},
               std::vector<int>{128, 768, 300}, std::vector<int>{256, 768, 2304});
  const int N = shape[0], C = shape[1], OC = shape[2];
  INFO(backend << " N=" << N << " C=" << C << " OC=" << OC << " bias=" << with_bias);
  constexpr Tolerance kTol{1e-4f, 1e-3f};
  auto x = Random(size_t{1} * N * C, 1), w = Random(size_t{1} * OC * C, 2), b = Random(OC, 3);
  auto gpu = Backend(backend);
  auto forward = [&](Ops& ops) {
    DeviceVec dx(ops, x), dw(ops, w), db(ops, b), out(ops, Random(size_t{1} * N * OC, 4));
    ops.MatmulForward(out.get(), dx.get(), dw.get(), with_bias ? db.get() : nullptr, N, C, OC);
    return out.ToHost();
  };
  ExpectClose(forward(*gpu), forward(*Backend("cpu-ref")), ProductTol(*gpu, C, kTol), "out");

  const bool with_dinp = GENERATE(true, false);
  auto dy = Random(size_t{1} * N * OC, 5);
  GradRun run = [&](Ops& ops, bool prefill) {
    DeviceVec dx(ops, x), dw(ops, w), ddy(ops, dy);
    DeviceVec dinp(ops, GradInit(0, x.size(), prefill)),
        dweight(ops, GradInit(1, w.size(), prefill));
    DeviceVec dbias(ops, GradInit(2, OC, prefill));
    ops.MatmulBackward(with_dinp ? dinp.get() : nullptr, dweight.get(),
                       with_bias ? dbias.get() : nullptr, ddy.get(), dx.get(), dw.get(), N, C, OC);
    return std::vector<std::vector<float>>{dinp.ToHost(), dweight.ToHost(), dbias.ToHost()};
  };
  CheckBackward(run, *gpu, ProductTol(*gpu, std::max(N, OC), kTol), {"dinp", "dweight", "dbias"});
}

TEST_CASE("CUDA layernorm matches the reference", "[cuda][layernorm]") {
  const std::string backend = GENERATE("cuda", "cuda-bf16");
  auto shape =
      GENERATE(std::vector<int>{0, 8}, std::vector<int>{1, 1}, std::vector<int>{1, 8},
               std::vector<int>{7, 24}, std::vector<int>{65, 36}, std::vector<int>{256, 768},
               std::vector<int>{3, 1001}, std::vector<int>{2048, 768});
  const int N = shape[0], C = shape[1];
  INFO(backend << " N=" << N << " C=" << C);
  constexpr Tolerance kTol{1e-4f, 1e-3f};
  auto x = Random(size_t{1} * N * C, 1, -3.0f, 5.0f);
  auto w = Random(C, 2, 0.5f, 1.5f), b = Random(C, 3);
  auto gpu = Backend(backend);
  auto forward = [&](Ops& ops) {
    DeviceVec dx(ops, x), dw(ops, w), db(ops, b), out(ops, size_t{1} * N * C);
    DeviceVec mean(ops, N), rstd(ops, N);
    ops.LayerNormForward(out.get(), mean.get(), rstd.get(), dx.get(), dw.get(), db.get(), N, C);
    return std::vector<std::vector<float>>{out.ToHost(), mean.ToHost(), rstd.ToHost()};
  };
  auto want = forward(*Backend("cpu-ref"));
  auto got = forward(*gpu);
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
  CheckBackward(run, *gpu, kTol, {"dinp", "dweight", "dbias"});
}

struct AttentionShape {
  int B, T, C, NH;
};

TEST_CASE("CUDA attention matches the reference", "[cuda][attention]") {
  const std::string backend = GENERATE("cuda", "cuda-bf16");
  auto s = GENERATE(AttentionShape{0, 7, 8, 1}, AttentionShape{1, 1, 8, 1},
                    AttentionShape{1, 7, 8, 2}, AttentionShape{2, 7, 24, 3},
                    AttentionShape{3, 64, 36, 3}, AttentionShape{1, 65, 24, 2},
                    AttentionShape{2, 130, 24, 1}, AttentionShape{1, 257, 36, 3},
                    AttentionShape{2, 256, 768, 12}, AttentionShape{1, 1024, 64, 2});
  INFO(backend << " B=" << s.B << " T=" << s.T << " C=" << s.C << " NH=" << s.NH);
  auto gpu = Backend(backend);
  const bool bf16 = IsBf16(*gpu);
  const Tolerance tol = bf16 ? Tolerance{3e-2f, 1.0f / 64} : Tolerance{2e-5f, 1e-3f};
  const Tolerance att_tol = bf16 ? Tolerance{2e-3f, 1.0f / 32} : Tolerance{1e-5f, 1e-3f};
  auto qkv = Random(size_t{3} * s.B * s.T * s.C, 1, -2.0f, 2.0f);
  const size_t att_size = size_t{1} * s.B * s.NH * s.T * s.T;
  auto forward = [&](Ops& ops) {
    DeviceVec dqkv(ops, qkv), out(ops, size_t{1} * s.B * s.T * s.C);
    // Scratch and outputs start as garbage: the op must not rely on them being zero.
    DeviceVec preatt(ops, Random(att_size, 7)), att(ops, Random(att_size, 8));
    ops.AttentionForward(out.get(), preatt.get(), att.get(), dqkv.get(), s.B, s.T, s.C, s.NH);
    return std::vector<std::vector<float>>{out.ToHost(), att.ToHost()};
  };
  auto want = forward(*Backend("cpu-ref"));
  auto got = forward(*gpu);
  ExpectClose(got[0], want[0], tol, "out");
  ExpectClose(got[1], want[1], att_tol, "att");

  auto dout = Random(size_t{1} * s.B * s.T * s.C, 2);
  GradRun run = [&](Ops& ops, bool prefill) {
    DeviceVec dq(ops, qkv), att(ops, want[1]), ddout(ops, dout);
    DeviceVec dpreatt(ops, Random(att_size, 9)), datt(ops, Random(att_size, 10));
    DeviceVec dqkv(ops, GradInit(0, qkv.size(), prefill));
    ops.AttentionBackward(dqkv.get(), dpreatt.get(), datt.get(), ddout.get(), dq.get(), att.get(),
                          s.B, s.T, s.C, s.NH);
    return std::vector<std::vector<float>>{dqkv.ToHost()};
  };
  CheckBackward(run, *gpu, tol, {"dqkv"});
}

TEST_CASE("CUDA AdamW matches the reference", "[cuda][adamw]") {
  const std::string backend = GENERATE("cuda", "cuda-bf16");
  const size_t n = GENERATE(size_t{0}, size_t{1}, size_t{7}, size_t{100003}, size_t{(1 << 24) + 3});
  const int t = GENERATE(1, 2, 1000);
  INFO(backend << " n=" << n << " t=" << t);
  auto p0 = Random(n, 1), g = Random(n, 2), m0 = Random(n, 3, -0.1f, 0.1f);
  auto v0 = Random(n, 4, 0.0f, 0.01f);
  auto run = [&](Ops& ops) {
    DeviceVec p(ops, p0), dg(ops, g), m(ops, m0), v(ops, v0);
    ops.AdamW(p.get(), dg.get(), m.get(), v.get(), n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.7f, t);
    return std::vector<std::vector<float>>{p.ToHost(), m.ToHost(), v.ToHost()};
  };
  auto want = run(*Backend("cpu-ref"));
  auto got = run(*Backend(backend));
  ExpectClose(got[0], want[0], {1e-6f, 1e-5f}, "params");
  ExpectClose(got[1], want[1], {1e-7f, 1e-5f}, "m");
  ExpectClose(got[2], want[2], {1e-9f, 1e-5f}, "v");
}

TEST_CASE("CUDA SumSquares is exact on small input and fixed-order on large", "[cuda][norm]") {
  const std::string backend = GENERATE("cuda", "cuda-bf16");
  auto ops = Backend(backend);
  DeviceVec empty(*ops, size_t{0});
  CHECK(ops->SumSquares(empty.get(), 0) == 0.0);
  DeviceVec x(*ops, std::vector<float>{1.0f, -2.0f, 3.0f, 0.5f});
  CHECK(ops->SumSquares(x.get(), 4) == 14.25);
  for (size_t n : {size_t{1}, size_t{16383}, size_t{16385}, (size_t{1} << 20) + 5,
                   size_t{3} * (size_t{1} << 24) + 7}) {
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

// A GPT-2-block-like chain of every op (as determinism_test.cc's), returning every output.
std::vector<std::vector<float>> RunBlock(Ops& ops) {
  const int B = 2, T = 67, C = 48, NH = 4, OC = 3 * C, V = 101, Vp = 128, maxT = 80;
  const int N = B * T;
  auto tokens = RandomTokens(N, V, 11);
  DeviceVec wte(ops, Random(Vp * C, 12)), wpe(ops, Random(maxT * C, 13)), x(ops, N * C);
  ops.EmbeddingForward(x.get(), tokens.data(), wte.get(), wpe.get(), B, T, C);
  DeviceVec lnw(ops, Random(C, 2)), lnb(ops, Random(C, 3));
  DeviceVec ln(ops, N * C), mean(ops, N), rstd(ops, N);
  ops.LayerNormForward(ln.get(), mean.get(), rstd.get(), x.get(), lnw.get(), lnb.get(), N, C);
  DeviceVec w(ops, Random(OC * C, 4)), b(ops, Random(OC, 5)), qkv(ops, N * OC);
  ops.MatmulForward(qkv.get(), ln.get(), w.get(), b.get(), N, C, OC);
  DeviceVec att_out(ops, N * C), pre(ops, B * NH * T * T), att(ops, B * NH * T * T);
  ops.AttentionForward(att_out.get(), pre.get(), att.get(), qkv.get(), B, T, C, NH);
  DeviceVec res(ops, N * C), gelu(ops, N * C);
  ops.ResidualForward(res.get(), x.get(), att_out.get(), N * C);
  ops.GeluForward(gelu.get(), res.get(), N * C);
  DeviceVec logits(ops, N * Vp), probs(ops, N * Vp), losses(ops, N);
  ops.MatmulForward(logits.get(), gelu.get(), wte.get(), nullptr, N, C, Vp);
  auto targets = RandomTokens(N, V, 7);
  ops.SoftmaxCrossEntropyForward(probs.get(), losses.get(), logits.get(), targets.data(), B, T, V,
                                 Vp);
  DeviceVec dlogits(ops, N * Vp), dgelu(ops, N * C), dwte(ops, Vp * C), dwpe(ops, maxT * C);
  DeviceVec dres(ops, N * C), dx(ops, N * C), datt_out(ops, N * C);
  ops.SoftmaxCrossEntropyBackward(dlogits.get(), probs.get(), targets.data(), 1.0f / N, B, T, V,
                                  Vp);
  ops.MatmulBackward(dgelu.get(), dwte.get(), nullptr, dlogits.get(), gelu.get(), wte.get(), N, C,
                     Vp);
  ops.GeluBackward(dres.get(), res.get(), dgelu.get(), N * C);
  ops.ResidualBackward(dx.get(), datt_out.get(), dres.get(), N * C);
  DeviceVec dqkv(ops, N * OC), dpre(ops, B * NH * T * T), datt(ops, B * NH * T * T);
  ops.AttentionBackward(dqkv.get(), dpre.get(), datt.get(), datt_out.get(), qkv.get(), att.get(), B,
                        T, C, NH);
  DeviceVec dln(ops, N * C), dw(ops, OC * C), db(ops, OC), dlnw(ops, C), dlnb(ops, C);
  ops.MatmulBackward(dln.get(), dw.get(), db.get(), dqkv.get(), ln.get(), w.get(), N, C, OC);
  ops.LayerNormBackward(dx.get(), dlnw.get(), dlnb.get(), dln.get(), x.get(), lnw.get(), mean.get(),
                        rstd.get(), N, C);
  ops.EmbeddingBackward(dwte.get(), dwpe.get(), dx.get(), tokens.data(), B, T, C);
  const double norm = ops.SumSquares(dw.get(), OC * C);
  DeviceVec m(ops, OC * C), v(ops, OC * C);
  ops.AdamW(w.get(), dw.get(), m.get(), v.get(), OC * C, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
            static_cast<float>(1.0 / (1.0 + norm)), 1);
  std::vector<std::vector<float>> results;
  for (DeviceVec* d : {&x, &ln, &qkv, &att, &att_out, &probs, &losses, &dqkv, &dx, &dlnw, &dlnb,
                       &dw, &db, &dwte, &dwpe, &w}) {
    results.push_back(d->ToHost());
  }
  results.push_back({static_cast<float>(norm)});
  return results;
}

TEST_CASE("CUDA backends repeat bit for bit and agree with the reference", "[cuda][determinism]") {
  const std::string backend = GENERATE("cuda", "cuda-bf16");
  INFO(backend);
  auto ops = Backend(backend);
  const auto first = RunBlock(*ops);
  for (int rep = 0; rep < 3; rep++) CHECK(RunBlock(*ops) == first);
  CHECK(RunBlock(*Backend(backend)) == first);  // a fresh backend too
  if (!IsBf16(*ops)) {
    const auto want = RunBlock(*Backend("cpu-ref"));
    for (size_t k = 0; k < want.size(); k++) {
      ExpectClose(first[k], want[k], {2e-4f, 4e-3f}, "output " + std::to_string(k));
    }
  }
}

}  // namespace
}  // namespace longhaul::kernels::testing
