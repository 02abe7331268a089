// Training throughput of a whole GPT-2 on a kernel backend (default "cpu"), against PyTorch
// on the same model, batch and thread count in the same run (torch_train_bench.py), and
// model FLOP utilisation against the OpenBLAS sgemm peak measured in this run.
//
// Model FLOPs per token: 6 * (parameters - wpe) for the matmuls forward and backward (the
// tied wte counts once, as the head matmul) plus 12 * L * T * C for attention scores and
// values (forward 4 L T C, backward twice that; causal masking not discounted).
//
//   bazel run //tools/bench:train_bench -- --layers 6 --channels 384 --batch 4
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/blas_core.h"
#include "kernels/ops.h"
#include "model/chain.h"
#include "model/data_loader.h"
#include "tools/bench/op_profiler.h"

extern "C" void openblas_set_num_threads(int num_threads);

namespace {

using Clock = std::chrono::steady_clock;
using namespace longhaul;  // NOLINT(google-build-using-namespace)

double SgemmPeak(int threads) {
  const int n = 1024;
  openblas_set_num_threads(threads);
  std::vector<float> a(size_t{1} * n * n, 0.5f), b(a), c(a.size());
  double best = 1e30;
  for (int rep = 0; rep < 8; ++rep) {
    const auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * n * n * n / best / 1e9;
}

struct Flags {
  int layers = 6, channels = 384, heads = 6, vocab = 50257, context = 256;
  int batch = 4, seq_len = 256, warmup = 2, steps = 5, threads = 2;
  std::string backend = "cpu";
  bool torch = true;
  bool profile = false;
  int rounds = 1;
  std::string torch_script = "tools/bench/torch_train_bench.py";
  std::string python = "/usr/bin/python3";
  std::string torch_device = "cpu";  // cpu | cuda
  std::string torch_dtype = "fp32";  // fp32 | bf16 (autocast)
  double peak_gflops = 0;            // 0: the OpenBLAS sgemm peak measured here (CPU backends)
};

int Run(const Flags& f) {
  // A GPU's peak is given (its datasheet's dense figure for the precision); a CPU's is measured.
  auto measure_peak = [&f] { return f.peak_gflops > 0 ? f.peak_gflops : SgemmPeak(f.threads); };
  const double peak = measure_peak();
  const model::ModelConfig config =
      model::MakeConfig(f.layers, f.channels, f.heads, f.vocab, f.context);
  auto ops = kernels::MakeOps(f.backend, f.threads);
  if (!ops.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", std::string(ops.status().message()).c_str());
    return 1;
  }
  // With --profile every op call is timed (a little overhead per call).
  std::unique_ptr<bench::OpProfiler> profiler;
  kernels::Ops* backend = ops->get();
  if (f.profile) {
    profiler = std::make_unique<bench::OpProfiler>(backend);
    backend = profiler.get();
  }
  model::ChainOptions co;
  co.batch_size = f.batch;
  co.seq_len = f.seq_len;
  auto chain = model::FragmentChain::Create(config, co, backend);
  if (!chain.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", std::string(chain.status().message()).c_str());
    return 1;
  }
  (*chain)->InitParameters(1);
  auto data = std::make_shared<model::TokenData>();
  std::mt19937 rng(1);
  data->tokens.resize(size_t(f.batch) * f.seq_len * 64 + 1);
  for (auto& t : data->tokens) t = uint32_t(rng() % uint32_t(f.vocab));
  data->max_token = f.vocab - 1;
  model::DataLoaderOptions lo;
  lo.batch_size = f.batch;
  lo.seq_len = f.seq_len;
  auto loader = model::DataLoader::Create(data, lo);
  model::OptimizerOptions opt;
  opt.weight_decay = 0.1f;

  const int64_t params = model::NumParameters(config);
  const double tokens = double(f.batch) * f.seq_len;
  const double flops_per_token =
      6.0 * double(params - int64_t(config.max_seq_len) * config.channels) +
      12.0 * f.layers * double(f.seq_len) * f.channels;
  std::printf(
      "model L=%d C=%d NH=%d V=%d (Vp %d) T=%d: %.1fM parameters; batch %d x %d; "
      "%d threads; %.2f GFLOP per step\n",
      f.layers, f.channels, f.heads, f.vocab, config.padded_vocab_size, f.seq_len, params / 1e6,
      f.batch, f.seq_len, f.threads, flops_per_token * tokens / 1e9);
  std::printf("memory: %s\n", (*chain)->memory().DebugString().c_str());
  std::printf("peak (%s): %.1f GFLOP/s; %s\n",
              f.peak_gflops > 0 ? "given" : "OpenBLAS sgemm 1024^3, measured", peak,
              kernels::BlasCoreReport().c_str());
  // Rounds alternate between this backend and PyTorch, so that both see the same machine
  // (a shared machine's speed drifts); the summary takes the median over rounds.
  // MFU of a round is against that round's peak; the summary's against the best peak seen.
  std::vector<double> ours_rounds, torch_rounds;
  double best_peak = 0, best_step = 1e30, torch_best_step = 0;
  int step = 0;
  for (int round = 0; round < f.rounds; ++round) {
    const double round_peak = round == 0 ? peak : measure_peak();
    if (round > 0) std::printf("peak: %.1f GFLOP/s\n", round_peak);
    best_peak = std::max(best_peak, round_peak);
    std::vector<double> times;
    for (int i = 0; i < f.warmup + f.steps; ++i, ++step) {
      const auto t0 = Clock::now();
      auto r = (*chain)->TrainStep(**loader, 1, opt, step, 1 << 30);
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!r.ok()) {
        std::fprintf(stderr, "train_bench: %s\n", std::string(r.status().message()).c_str());
        return 1;
      }
      if (i >= f.warmup) times.push_back(s);
      if (profiler && i + 1 == f.warmup) profiler->Reset();
      std::printf("  longhaul %-7s step %d: %.3f s  loss %.4f%s\n", f.backend.c_str(), i, s,
                  r->loss, i < f.warmup ? " (warmup)" : "");
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    const double tps = tokens / median;
    const double gflops = flops_per_token * tps / 1e9;
    std::printf(
        "RESULT round %d longhaul-%s tokens_per_s=%.1f median_step_s=%.3f "
        "best_step_s=%.3f gflops=%.1f mfu=%.1f%%\n",
        round, f.backend.c_str(), tps, median, times.front(), gflops, 100.0 * gflops / round_peak);
    ours_rounds.push_back(tps);
    best_step = std::min(best_step, times.front());
    if (profiler) {
      double total = 0;
      for (double t : times) total += t;
      profiler->Print(total / times.size(), int(times.size()));
      profiler->Reset();
    }
    std::fflush(stdout);
    if (!f.torch) continue;
    const std::string cmd = absl::StrCat(
        f.python, " ", f.torch_script, " --device ", f.torch_device, " --dtype ", f.torch_dtype,
        " ", " --layers ", f.layers, " --channels ", f.channels, " --heads ", f.heads, " --vocab ",
        f.vocab, " --context ", f.context, " --batch ", f.batch, " --seq-len ", f.seq_len,
        " --warmup ", f.warmup, " --steps ", f.steps, " --threads ", f.threads, " --peak-gflops ",
        round_peak, " --flops-per-token ", flops_per_token, " --ours-tokens-per-s ", tps);
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (pipe == nullptr) return 1;
    char line[512];
    double torch_tps = 0, torch_best = 0;
    while (std::fgets(line, sizeof(line), pipe) != nullptr) {
      std::printf("%s", line);
      if (std::strstr(line, "RESULT pytorch") != nullptr) {
        if (const char* p = std::strstr(line, "tokens_per_s=")) {
          torch_tps = std::atof(p + std::strlen("tokens_per_s="));
        }
      }
      if (const char* p = std::strstr(line, "best_step_s=")) {
        torch_best = std::atof(p + std::strlen("best_step_s="));
      }
    }
    if (::pclose(pipe) != 0 || torch_tps <= 0) {
      std::fprintf(stderr, "train_bench: %s failed\n", f.torch_script.c_str());
      return 1;
    }
    torch_rounds.push_back(torch_tps);
    torch_best_step = torch_best_step == 0 ? torch_best : std::min(torch_best_step, torch_best);
    std::fflush(stdout);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double ours = median(ours_rounds);
  std::printf(
      "SUMMARY backend=%s L=%d C=%d B=%d T=%d threads=%d peak=%.1f longhaul_tokens_per_s=%.1f "
      "mfu=%.1f%%",
      f.backend.c_str(), f.layers, f.channels, f.batch, f.seq_len, f.threads, best_peak, ours,
      100.0 * flops_per_token * ours / 1e9 / best_peak);
  if (!torch_rounds.empty()) {
    std::vector<double> ratios;
    for (size_t i = 0; i < torch_rounds.size(); ++i) {
      ratios.push_back(ours_rounds[i] / torch_rounds[i]);
    }
    const double theirs = median(torch_rounds);
    std::printf(" pytorch_tokens_per_s=%.1f pytorch_mfu=%.1f%% ratio_median_of_rounds=%.2fx",
                theirs, 100.0 * flops_per_token * theirs / 1e9 / best_peak, median(ratios));
    std::printf(" best_step_s=%.3f pytorch_best_step_s=%.3f ratio_best_steps=%.2fx", best_step,
                torch_best_step, torch_best_step / best_step);
  }
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"GPT-2 training throughput: a longhaul kernel backend against PyTorch"};
  app.add_option("--layers", f.layers)->capture_default_str();
  app.add_option("--channels", f.channels)->capture_default_str();
  app.add_option("--heads", f.heads)->capture_default_str();
  app.add_option("--vocab", f.vocab)->capture_default_str();
  app.add_option("--context", f.context)->capture_default_str();
  app.add_option("--batch", f.batch, "Sequences per step")->capture_default_str();
  app.add_option("--seq-len", f.seq_len)->capture_default_str();
  app.add_option("--warmup", f.warmup, "Untimed steps first")->capture_default_str();
  app.add_option("--steps", f.steps, "Timed steps (median reported)")->capture_default_str();
  app.add_option("--threads", f.threads)->capture_default_str();
  app.add_option("--backend", f.backend)->capture_default_str();
  app.add_flag("--torch,!--no-torch", f.torch, "Also run torch_train_bench.py")
      ->capture_default_str();
  app.add_option("--rounds", f.rounds, "Alternate longhaul and PyTorch this many times")
      ->capture_default_str();
  app.add_flag("--profile", f.profile, "Print the time per op")->capture_default_str();
  app.add_option("--torch-script", f.torch_script)->capture_default_str();
  app.add_option("--python", f.python, "Python with PyTorch")->capture_default_str();
  app.add_option("--torch-device", f.torch_device, "PyTorch's device: cpu or cuda")
      ->capture_default_str();
  app.add_option("--torch-dtype", f.torch_dtype, "fp32, or bf16 (autocast)")->capture_default_str();
  app.add_option("--peak-gflops", f.peak_gflops,
                 "Peak for MFU (a GPU's datasheet figure); 0 measures the OpenBLAS sgemm peak")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return Run(f);
}
