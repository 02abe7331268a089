// Micro-benchmark of the kernel backends: matmul and causal attention, forward and backward,
// "cpu" against "cpu-ref" at GPT-2-small-like shapes, in GFLOP/s and as a fraction of the
// OpenBLAS sgemm peak measured in the same run (1024^3, same thread count). Also times the
// memory-bound ops once per backend. Not a test: figures go to docs/kernels.md.
//
//   bazel run -c opt //tools/bench:kernels_bench -- [--threads N] [--B 4 --T 256 --C 768 --NH 12]
#include <cblas.h>
#include <sched.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace longhaul::kernels {
namespace {

using Clock = std::chrono::steady_clock;

// Best wall time of `fn` in seconds: one warm-up, then repeats until `budget_s` is spent
// (at least once, at most max_reps).
double BestTime(const std::function<void()>& fn, double budget_s, int max_reps = 20) {
  fn();
  double best = 1e30, spent = 0;
  for (int rep = 0; rep < max_reps && (rep == 0 || spent < budget_s); rep++) {
    auto start = Clock::now();
    fn();
    double s = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::min(best, s);
    spent += s;
  }
  return best;
}

double SgemmPeak(int threads) {
  const int n = 1024;
  openblas_set_num_threads(threads);
  std::vector<float> a(size_t{1} * n * n, 0.5f), b(a), c(a.size());
  double s = BestTime(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(),
                    n, 0.0f, c.data(), n);
      },
      1.0);
  return 2.0 * n * n * n / s / 1e9;
}

// A buffer of `count` floats in the backend's memory, filled with small random values.
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

void Report(const char* what, const std::string& backend, double seconds, double flops,
            double peak) {
  if (flops > 0) {
    double gflops = flops / seconds / 1e9;
    std::printf("  %-26s %-8s %9.2f ms %8.1f GFLOP/s %6.1f%% of sgemm peak\n", what,
                backend.c_str(), seconds * 1e3, gflops, 100.0 * gflops / peak);
  } else {
    std::printf("  %-26s %-8s %9.2f ms\n", what, backend.c_str(), seconds * 1e3);
  }
}

void Run(Ops& ops, const Shape& s, double peak, double budget) {
  const std::string name = ops.name();
  const int N = s.B * s.T, C = s.C, hs = C / s.NH;
  const size_t BT = N, TT = size_t{1} * s.B * s.NH * s.T * s.T;
  // Matmuls at the shapes of one block: qkv (C -> 3C) and the MLP's fc (C -> 4C).
  for (int OC : {3 * C, 4 * C}) {
    Buffer inp(ops, BT * C, 1), w(ops, size_t{1} * OC * C, 2), b(ops, OC, 3), out(ops, BT * OC, 4);
    Buffer dinp(ops, BT * C, 5), dw(ops, size_t{1} * OC * C, 6), db(ops, OC, 7);
    const double f = 2.0 * N * C * OC;
    std::string label = "matmul fwd " + std::to_string(C) + "->" + std::to_string(OC);
    Report(label.c_str(), name,
           BestTime([&] { ops.MatmulForward(out.p, inp.p, w.p, b.p, N, C, OC); }, budget), f, peak);
    label = "matmul bwd " + std::to_string(C) + "->" + std::to_string(OC);
    Report(label.c_str(), name,
           BestTime([&] { ops.MatmulBackward(dinp.p, dw.p, db.p, out.p, inp.p, w.p, N, C, OC); },
                    budget),
           2 * f, peak);
  }
  // Attention: useful (causal) flops only, T(T+1)/2 scores per head for each of the products.
  {
    Buffer qkv(ops, BT * 3 * C, 8), out(ops, BT * C, 9), pre(ops, TT, 10), att(ops, TT, 11);
    Buffer dqkv(ops, BT * 3 * C, 12), datt(ops, TT, 13), dpre(ops, TT, 14), dout(ops, BT * C, 15);
    const double f = 2.0 * 2.0 * s.B * s.NH * (s.T * (s.T + 1.0) / 2.0) * hs;
    Report("attention fwd", name,
           BestTime([&] { ops.AttentionForward(out.p, pre.p, att.p, qkv.p, s.B, s.T, C, s.NH); },
                    budget),
           f, peak);
    Report("attention bwd", name,
           BestTime(
               [&] {
                 ops.AttentionBackward(dqkv.p, dpre.p, datt.p, dout.p, qkv.p, att.p, s.B, s.T, C,
                                       s.NH);
               },
               budget),
           2 * f, peak);
  }
  // Memory-bound ops, time only.
  {
    Buffer x(ops, BT * 4 * C, 16), y(ops, BT * 4 * C, 17), dy(ops, BT * 4 * C, 18);
    Buffer mean(ops, BT, 19), rstd(ops, BT, 20), w(ops, C, 21), b(ops, C, 22);
    Report(
        "layernorm fwd", name,
        BestTime([&] { ops.LayerNormForward(y.p, mean.p, rstd.p, x.p, w.p, b.p, N, C); }, budget),
        0, peak);
    Report("layernorm bwd", name,
           BestTime(
               [&] { ops.LayerNormBackward(y.p, w.p, b.p, dy.p, x.p, w.p, mean.p, rstd.p, N, C); },
               budget),
           0, peak);
    Report("gelu fwd (B,T,4C)", name,
           BestTime([&] { ops.GeluForward(y.p, x.p, BT * 4 * C); }, budget), 0, peak);
    Report("gelu bwd (B,T,4C)", name,
           BestTime([&] { ops.GeluBackward(y.p, x.p, dy.p, BT * 4 * C); }, budget), 0, peak);
  }
  {
    Buffer logits(ops, BT * s.Vp, 23), probs(ops, BT * s.Vp, 24), losses(ops, BT, 25);
    std::vector<int32_t> targets(BT);
    for (size_t i = 0; i < BT; i++) targets[i] = static_cast<int32_t>((i * 7919) % s.V);
    Report("softmax+xent fwd (V)", name,
           BestTime(
               [&] {
                 ops.SoftmaxCrossEntropyForward(probs.p, losses.p, logits.p, targets.data(), s.B,
                                                s.T, s.V, s.Vp);
               },
               budget),
           0, peak);
    Report("softmax+xent bwd (V)", name,
           BestTime(
               [&] {
                 ops.SoftmaxCrossEntropyBackward(logits.p, probs.p, targets.data(), 1.0f / N, s.B,
                                                 s.T, s.V, s.Vp);
               },
               budget),
           0, peak);
  }
}

int Main(int argc, char** argv) {
  CLI::App app{"Times the kernel backends against each other and the sgemm peak."};
  int threads = 0;
  Shape s{4, 256, 768, 12, 50257, 50304};
  double budget = 2.0;
  std::vector<std::string> backends{"cpu", "cpu-ref"};
  app.add_option("--threads", threads, "threads for \"cpu\" and OpenBLAS (<= 0: all cores)");
  app.add_option("--B", s.B, "batch");
  app.add_option("--T", s.T, "time steps");
  app.add_option("--C", s.C, "channels");
  app.add_option("--NH", s.NH, "heads");
  app.add_option("--V", s.V, "vocabulary (Vp = V rounded up to 128)");
  app.add_option("--budget", budget, "seconds of repeats per measurement (best time is kept)");
  app.add_option("--backends", backends, "backends to time");
  CLI11_PARSE(app, argc, argv);
  s.Vp = (s.V + 127) / 128 * 128;

  int used = threads;
  if (used <= 0) {  // all cores this process may use, as the backend counts them
    cpu_set_t set;
    CPU_ZERO(&set);
    used = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  }
  // Peak first: the "cpu" backend sets OpenBLAS to one thread (it runs sgemm tiles itself).
  const double peak = SgemmPeak(used);
  std::printf("kernels_bench: B=%d T=%d C=%d NH=%d V=%d, %d threads\n", s.B, s.T, s.C, s.NH, s.V,
              used);
  std::printf("  OpenBLAS sgemm 1024^3 peak: %.1f GFLOP/s\n", peak);
  for (const std::string& name : backends) {
    auto ops = MakeOps(name, threads);
    if (!ops.ok()) {
      std::fprintf(stderr, "%s\n", ops.status().ToString().c_str());
      return 1;
    }
    Run(**ops, s, peak, name == "cpu-ref" ? 0.0 : budget);
  }
  return 0;
}

}  // namespace
}  // namespace longhaul::kernels

int main(int argc, char** argv) {
  try {
    return longhaul::kernels::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernels_bench: %s\n", e.what());
    return 1;
  }
}
