// Micro-benchmark of the CUDA kernel backends ("cuda", "cuda-bf16") at GPT-2-small shapes: every
// op of a layer forward and backward plus the LM head and the loss, in ms and (for products)
// TFLOP/s against cuBLAS's own 4096^3 peak measured in the same run (fp32 for "cuda", bf16
// tensor cores for "cuda-bf16"); and the GPU codec kernels (quantization, error feedback, bf16,
// top-k) in GB/s of input against the device-to-device copy rate. Not a test; run by
// tools/gpu-check. Needs a GPU (--config=cuda).
//
//   bazel run --config=cuda -c opt //tools/bench:cuda_kernels_bench -- [--B 8 --T 1024]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "compression/cuda/device_codec.h"
#include "compression/kernels.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/device.h"
#include "kernels/ops.h"

namespace longhaul::kernels {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds per call of `fn`: after a warm-up, batches of calls with one synchronization per batch
// (`sync`), the best batch average over about `budget_s`.
double TimePerCall(const std::function<void()>& fn, const std::function<void()>& sync,
                   double budget_s) {
  fn();
  sync();
  double best = 1e30, spent = 0;
  int batch = 1;
  for (int round = 0; round < 50 && (round < 3 || spent < budget_s); round++) {
    const auto start = Clock::now();
    for (int i = 0; i < batch; i++) fn();
    sync();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::min(best, s / batch);
    spent += s;
    if (s < 0.01) batch *= 2;  // amortize launch and sync overhead for short ops
  }
  return best;
}

// cuBLAS's 4096^3 throughput with the given compute type, in FLOP/s.
double GemmPeak(int device, cublasComputeType_t compute, double budget) {
  const int n = 4096;
  LONGHAUL_CUDA_CHECK(cudaSetDevice(device));
  float *a = nullptr, *b = nullptr, *c = nullptr;
  const size_t bytes = size_t{1} * n * n * sizeof(float);
  LONGHAUL_CUDA_CHECK(cudaMalloc(&a, bytes));
  LONGHAUL_CUDA_CHECK(cudaMalloc(&b, bytes));
  LONGHAUL_CUDA_CHECK(cudaMalloc(&c, bytes));
  LONGHAUL_CUDA_CHECK(cudaMemset(a, 0, bytes));
  LONGHAUL_CUDA_CHECK(cudaMemset(b, 0, bytes));
  cublasHandle_t h = nullptr;
  LONGHAUL_CUBLAS_CHECK(cublasCreate(&h));
  const float one = 1.0f, zero = 0.0f;
  const double s = TimePerCall(
      [&] {
        LONGHAUL_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a,
                                           CUDA_R_32F, n, b, CUDA_R_32F, n, &zero, c, CUDA_R_32F, n,
                                           compute, CUBLAS_GEMM_DEFAULT));
      },
      [] { LONGHAUL_CUDA_CHECK(cudaDeviceSynchronize()); }, budget);
  LONGHAUL_CUBLAS_CHECK(cublasDestroy(h));
  for (float* p : {a, b, c}) LONGHAUL_CUDA_CHECK(cudaFree(p));
  return 2.0 * n * n * n / s;
}

struct Buffer {
  Ops* ops;
  float* p;
  Buffer(Ops& o, size_t count, uint32_t seed) : ops(&o), p(o.Alloc(count)) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
    std::vector<float> host(count);
    for (float& x : host) x = dist(rng);
    o.Upload(p, host.data(), count);
  }
  ~Buffer() { ops->Free(p); }
};

struct Shape {
  int B, T, C, NH, V, Vp;
};

void Report(const std::string& what, const std::string& backend, double seconds, double flops,
            double peak) {
  if (flops > 0) {
    const double tflops = flops / seconds / 1e12;
    std::printf("  %-28s %-10s %9.3f ms %8.1f TFLOP/s %6.1f%% of cuBLAS peak\n", what.c_str(),
                backend.c_str(), seconds * 1e3, tflops, 100.0 * flops / seconds / peak);
  } else {
    std::printf("  %-28s %-10s %9.3f ms\n", what.c_str(), backend.c_str(), seconds * 1e3);
  }
}

void RunOps(Ops& ops, const Shape& s, double peak, double budget) {
  const std::string name = ops.name();
  auto sync = [&] { ops.Synchronize(); };
  const int N = s.B * s.T, C = s.C, hs = C / s.NH;
  const size_t BT = N, TT = size_t{1} * s.B * s.NH * s.T * s.T;
  for (int OC : {3 * C, 4 * C, s.Vp}) {
    Buffer inp(ops, BT * C, 1), w(ops, size_t{1} * OC * C, 2), b(ops, OC, 3), out(ops, BT * OC, 4);
    Buffer dinp(ops, BT * C, 5), dw(ops, size_t{1} * OC * C, 6), db(ops, OC, 7);
    const double f = 2.0 * N * C * OC;
    const std::string shape = std::to_string(C) + "->" + std::to_string(OC);
    Report("matmul fwd " + shape, name,
           TimePerCall([&] { ops.MatmulForward(out.p, inp.p, w.p, b.p, N, C, OC); }, sync, budget),
           f, peak);
    Report("matmul bwd " + shape, name,
           TimePerCall([&] { ops.MatmulBackward(dinp.p, dw.p, db.p, out.p, inp.p, w.p, N, C, OC); },
                       sync, budget),
           2 * f, peak);
  }
  {
    Buffer qkv(ops, BT * 3 * C, 8), out(ops, BT * C, 9), pre(ops, TT, 10), att(ops, TT, 11);
    Buffer dqkv(ops, BT * 3 * C, 12), datt(ops, TT, 13), dpre(ops, TT, 14), dout(ops, BT * C, 15);
    // Useful (causal) flops only.
    const double f = 2.0 * 2.0 * s.B * s.NH * (s.T * (s.T + 1.0) / 2.0) * hs;
    Report("attention fwd", name,
           TimePerCall([&] { ops.AttentionForward(out.p, pre.p, att.p, qkv.p, s.B, s.T, C, s.NH); },
                       sync, budget),
           f, peak);
    Report("attention bwd", name,
           TimePerCall(
               [&] {
                 ops.AttentionBackward(dqkv.p, dpre.p, datt.p, dout.p, qkv.p, att.p, s.B, s.T, C,
                                       s.NH);
               },
               sync, budget),
           2 * f, peak);
  }
  {
    Buffer x(ops, BT * 4 * C, 16), y(ops, BT * 4 * C, 17), dy(ops, BT * 4 * C, 18);
    Buffer mean(ops, BT, 19), rstd(ops, BT, 20), w(ops, C, 21), b(ops, C, 22);
    Report("layernorm fwd", name,
           TimePerCall([&] { ops.LayerNormForward(y.p, mean.p, rstd.p, x.p, w.p, b.p, N, C); },
                       sync, budget),
           0, peak);
    Report("layernorm bwd", name,
           TimePerCall(
               [&] { ops.LayerNormBackward(y.p, w.p, b.p, dy.p, x.p, w.p, mean.p, rstd.p, N, C); },
               sync, budget),
           0, peak);
    Report("gelu fwd (B,T,4C)", name,
           TimePerCall([&] { ops.GeluForward(y.p, x.p, BT * 4 * C); }, sync, budget), 0, peak);
    Report("gelu bwd (B,T,4C)", name,
           TimePerCall([&] { ops.GeluBackward(y.p, x.p, dy.p, BT * 4 * C); }, sync, budget), 0,
           peak);
    Report("residual fwd (B,T,C)", name,
           TimePerCall([&] { ops.ResidualForward(y.p, x.p, dy.p, BT * C); }, sync, budget), 0,
           peak);
  }
  {
    const size_t n = size_t{4} * C * C;  // the MLP's fc weight
    Buffer p(ops, n, 40), g(ops, n, 41), m(ops, n, 42), v(ops, n, 43);
    Report("adamw (4C x C)", name,
           TimePerCall(
               [&] { ops.AdamW(p.p, g.p, m.p, v.p, n, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 1); },
               sync, budget),
           0, peak);
    Report("sum of squares (4C x C)", name,
           TimePerCall([&] { (void)ops.SumSquares(g.p, n); }, sync, budget), 0, peak);
  }
  {
    Buffer logits(ops, BT * s.Vp, 23), probs(ops, BT * s.Vp, 24), losses(ops, BT, 25);
    std::vector<int32_t> targets(BT);
    for (size_t i = 0; i < BT; i++) targets[i] = static_cast<int32_t>((i * 7919) % s.V);
    Report("softmax+xent fwd (V)", name,
           TimePerCall(
               [&] {
                 ops.SoftmaxCrossEntropyForward(probs.p, losses.p, logits.p, targets.data(), s.B,
                                                s.T, s.V, s.Vp);
               },
               sync, budget),
           0, peak);
    Report("softmax+xent bwd (V)", name,
           TimePerCall(
               [&] {
                 ops.SoftmaxCrossEntropyBackward(logits.p, probs.p, targets.data(), 1.0f / N, s.B,
                                                 s.T, s.V, s.Vp);
               },
               sync, budget),
           0, peak);
    std::vector<int32_t> tokens(targets);
    Buffer wte(ops, size_t{1} * s.Vp * C, 26), wpe(ops, size_t{1} * s.T * C, 27);
    Buffer emb(ops, BT * C, 28);
    Report(
        "embedding fwd", name,
        TimePerCall([&] { ops.EmbeddingForward(emb.p, tokens.data(), wte.p, wpe.p, s.B, s.T, C); },
                    sync, budget),
        0, peak);
    Report(
        "embedding bwd", name,
        TimePerCall([&] { ops.EmbeddingBackward(wte.p, wpe.p, emb.p, tokens.data(), s.B, s.T, C); },
                    sync, budget),
        0, peak);
  }
}

// Codec kernels on `count` floats (16-byte-aligned buffers: the vectorized kernels): GB/s of
// float input, against the device-to-device copy rate of the same bytes.
void RunCodecs(Ops& ops, size_t count, double budget) {
  namespace cc = compression::cuda;
  using compression::kernels::kNone;
  cudaStream_t stream = cuda::CudaStreamOf(ops);
  Buffer x(ops, count, 30), y(ops, count, 31), residual(ops, count, 32);
  uint8_t* enc = nullptr;
  LONGHAUL_CUDA_CHECK(cudaMalloc(&enc, count * sizeof(float) + 64));
  auto sync = [&] { ops.Synchronize(); };
  const double bytes = static_cast<double>(count) * sizeof(float);
  const double copy = TimePerCall([&] { ops.Copy(y.p, x.p, count); }, sync, budget);
  const double copy_rate = bytes / copy / 1e9;
  std::printf("  %-28s %9.3f ms %8.1f GB/s (the reference rate)\n", "device-to-device copy",
              copy * 1e3, copy_rate);
  auto report = [&](const std::string& what, double s) {
    std::printf("  %-28s %9.3f ms %8.1f GB/s %6.1f%% of copy\n", what.c_str(), s * 1e3,
                bytes / s / 1e9, 100.0 * copy / s);
  };
  // Times fn, which must return kNone.
  auto timed = [&](const std::function<int64_t()>& fn) {
    return TimePerCall(
        [&] {
          if (fn() != kNone) std::abort();
        },
        sync, budget);
  };
  struct Variant {
    int bits;
    bool asym, stochastic;
  };
  for (const Variant v :
       {Variant{8, false, false}, Variant{8, true, false}, Variant{8, false, true},
        Variant{4, false, false}, Variant{4, true, false}, Variant{2, false, false},
        Variant{2, true, false}}) {
    compression::kernels::QuantParams p;
    p.bits = v.bits;
    p.asymmetric = v.asym;
    p.stochastic = v.stochastic;
    const std::string label =
        "q" + std::to_string(v.bits) + (v.asym ? ",asym" : "") + (v.stochastic ? ",sr" : "");
    report(label + " quantize",
           timed([&] { return cc::QuantizeOnDevice(p, x.p, count, enc, stream); }));
    report(label + " dequantize",
           timed([&] { return cc::DequantizeOnDevice(p, enc, count, y.p, stream); }));
  }
  {
    // For comparison: float pointers off a 16-byte boundary (float loads and stores, not float4s).
    compression::kernels::QuantParams p;
    report("q8 quantize, unaligned input",
           timed([&] { return cc::QuantizeOnDevice(p, x.p + 1, count - 1, enc, stream); }));
    report("q8 dequantize, unaligned output",
           timed([&] { return cc::DequantizeOnDevice(p, enc, count - 1, y.p + 1, stream); }));
  }
  for (int bits : {8, 4}) {
    compression::kernels::QuantParams p;
    p.bits = bits;
    // The residual stays small: after each call it is the rounding error of x + residual.
    // Double-buffered (the one-pass kernel; the two buffers swap after each call) and in place.
    float* from = residual.p;
    float* to = y.p;
    report("q" + std::to_string(bits) + " error feedback, double-buffered", timed([&] {
             const int64_t bad =
                 cc::QuantizeWithFeedbackOnDevice(p, x.p, count, from, to, enc, stream);
             std::swap(from, to);
             return bad;
           }));
    report("q" + std::to_string(bits) + " error feedback, in place", timed([&] {
             return cc::QuantizeWithFeedbackOnDevice(p, x.p, count, residual.p, residual.p, enc,
                                                     stream);
           }));
  }
  report("bf16 encode", timed([&] { return cc::FloatsToBf16OnDevice(x.p, count, enc, stream); }));
  report("bf16 decode", timed([&] { return cc::Bf16ToFloatsOnDevice(enc, count, y.p, stream); }));
  if (count < (uint64_t{1} << 32)) {
    uint32_t* idx = nullptr;
    LONGHAUL_CUDA_CHECK(cudaMalloc(&idx, count * sizeof(uint32_t)));
    for (double fraction : {0.001, 0.01, 0.1}) {
      const uint64_t k = static_cast<uint64_t>(fraction * count);
      char label[64];
      std::snprintf(label, sizeof(label), "top-k, k = %g n", fraction);
      report(label, timed([&] { return cc::TopKOnDevice(x.p, count, k, idx, stream); }));
    }
    LONGHAUL_CUDA_CHECK(cudaFree(idx));
  }
  LONGHAUL_CUDA_CHECK(cudaFree(enc));
}

int Main(int argc, char** argv) {
  CLI::App app{"Times the CUDA kernel backends and GPU codecs against cuBLAS and copy peaks."};
  int device = 0;
  Shape s{8, 1024, 768, 12, 50257, 50304};
  double budget = 1.0;
  size_t codec_floats = size_t{64} << 20;
  std::vector<std::string> backends{"cuda", "cuda-bf16"};
  app.add_option("--device", device, "CUDA device");
  app.add_option("--B", s.B, "batch");
  app.add_option("--T", s.T, "time steps");
  app.add_option("--C", s.C, "channels");
  app.add_option("--NH", s.NH, "heads");
  app.add_option("--V", s.V, "vocabulary (Vp = V rounded up to 128)");
  app.add_option("--budget", budget, "seconds of repeats per measurement (best is kept)");
  app.add_option("--codec-floats", codec_floats, "tensor size of the codec measurements");
  app.add_option("--backends", backends, "backends to time (cuda, cuda-bf16)");
  CLI11_PARSE(app, argc, argv);
  s.Vp = (s.V + 127) / 128 * 128;

  if (Status st = cuda::CheckCudaDevice(device); !st.ok()) {
    std::fprintf(stderr, "cuda_kernels_bench: %s\n", std::string(st.message()).c_str());
    return 1;
  }
  std::printf("cuda_kernels_bench: cuda:%d = %s\n", device,
              cuda::CudaDeviceDescription(device).c_str());
  std::printf("  B=%d T=%d C=%d NH=%d V=%d (Vp %d)\n", s.B, s.T, s.C, s.NH, s.V, s.Vp);
  const double fp32_peak = GemmPeak(device, CUBLAS_COMPUTE_32F, budget);
  const double bf16_peak = GemmPeak(device, CUBLAS_COMPUTE_32F_FAST_16BF, budget);
  std::printf("  cuBLAS 4096^3 peak: fp32 %.1f TFLOP/s, bf16 compute %.1f TFLOP/s\n",
              fp32_peak / 1e12, bf16_peak / 1e12);
  for (const std::string& base : backends) {
    const std::string name = base + ":" + std::to_string(device);
    auto ops = MakeOps(name);
    if (!ops.ok()) {
      std::fprintf(stderr, "cuda_kernels_bench: %s\n", std::string(ops.status().message()).c_str());
      return 1;
    }
    std::printf("%s:\n", name.c_str());
    RunOps(**ops, s, base == "cuda-bf16" ? bf16_peak : fp32_peak, budget);
  }
  auto ops = MakeOps("cuda:" + std::to_string(device));
  if (!ops.ok()) return 1;
  std::printf("GPU codecs on %zu floats (%.0f MiB):\n", codec_floats,
              codec_floats * 4.0 / (1 << 20));
  RunCodecs(**ops, codec_floats, budget);
  return 0;
}

}  // namespace
}  // namespace longhaul::kernels

int main(int argc, char** argv) {
  try {
    return longhaul::kernels::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_kernels_bench: %s\n", e.what());
    return 1;
  }
}
