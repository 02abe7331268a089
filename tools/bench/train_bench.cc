// Training throughput of a whole GPT-2 or Llama on a kernel backend (default "cpu"), against
// PyTorch on the same model, batch and thread count in the same run (torch_train_bench.py), and
// model FLOP utilisation against the OpenBLAS sgemm peak measured in this run.
//
// Model FLOPs per token: 6 * (parameters - wpe) for the matmuls forward and backward (the
// tied wte counts once, as the head matmul) plus 12 * L * T * C for attention scores and
// values (forward 4 L T C, backward twice that; causal masking not discounted). A llama has
// no wpe and its attention is NH * HD wide: 6 * (parameters - wte when the head is untied,
// as the embedding is then a lookup) + 12 * L * T * NH * HD.
//
// What each side times (the same work on both): one optimizer step on a batch already in host
// memory, from a device synchronisation to the next: the batch's copy to the device, forward,
// loss (read back to the host), backward, grad-norm clipping and AdamW. Producing the batch
// (longhaul's DataLoader::Next, PyTorch's torch.randint) is outside both timers; each step's
// time includes its own AdamW and not the previous step's (a CUDA backend queues work that
// only the final synchronisation waits for).
//
//   bazel run //tools/bench:train_bench -- --layers 6 --channels 384 --batch 4
//   bazel run //tools/bench:train_bench -- --family llama   # 6 x 512, 8 heads, 2 kv heads
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
#include "model/optimizer.h"
#include "tools/bench/op_profiler.h"

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_num_threads(void);

namespace {

using Clock = std::chrono::steady_clock;
using namespace longhaul;  // NOLINT(google-build-using-namespace)

// Restores OpenBLAS's thread count after: the "cpu" backend runs single-threaded sgemm tiles on
// its own pool (kernels/cpu/cpu_matmul.cc), and a 2-thread OpenBLAS inside each of its tasks
// oversubscribes the cores (rounds after the first ran 2-4x slower before this).
double SgemmPeak(int threads) {
  const int n = 1024;
  const int before = openblas_get_num_threads();
  openblas_set_num_threads(threads);
  std::vector<float> a(size_t{1} * n * n, 0.5f), b(a), c(a.size());
  double best = 1e30;
  for (int rep = 0; rep < 8; ++rep) {
    const auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  openblas_set_num_threads(before);
  return 2.0 * n * n * n / best / 1e9;
}

// One optimizer step of `chain` on the batch in `inputs` and `targets` (B*T tokens each),
// exactly what FragmentChain::TrainStep does with one microbatch but with the batch fetched
// by the caller (model/chain.h: TrainStep is AccumulateGradients, ReduceGradients, then
// ApplyStep with LearningRate and ClipScale, bit for bit; AccumulateGradients is ZeroGrads,
// then DataLoader::Next, ForwardLoss and Backward per microbatch).
StatusOr<model::StepResult> TimedStep(model::FragmentChain& chain, const int32_t* inputs,
                                      const int32_t* targets, float dloss,
                                      const model::OptimizerOptions& opt, int step,
                                      int total_steps) {
  for (int i = 0; i < chain.size(); ++i) chain.fragment(i).ZeroGrads();
  model::StepResult result;
  ASSIGN_OR_RETURN(result.loss, chain.ForwardLoss(inputs, targets));
  RETURN_IF_ERROR(chain.Backward(dloss));
  result.grad_norm = chain.ReduceGradients();
  result.lr = model::LearningRate(opt, step, total_steps);
  chain.ApplyStep(opt, result.lr, model::ClipScale(result.grad_norm, opt.grad_clip), step + 1);
  return result;
}

struct Flags {
  std::string family = "gpt2";
  int layers = 6, channels = 384, heads = 6, vocab = 50257, context = 256;
  // Llama only (LlamaDefaults fills what is not given).
  int kv_heads = 0, head_dim = 0, intermediate = 0;
  double rope_theta = 10000.0;
  float norm_eps = 1e-5f;
  bool tied = false;
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

// A small Llama shape (Llama 2's proportions at 6 x 512: SwiGLU width about 8/3 C rounded to a
// multiple of 32, 4 query heads per kv head, its 32000-token vocabulary, untied head) for the
// shape flags the command line did not give.
void LlamaDefaults(const CLI::App& app, Flags* f) {
  auto fill = [&app](const char* flag, int* value, int dflt) {
    if (app.count(flag) == 0) *value = dflt;
  };
  fill("--layers", &f->layers, 6);
  fill("--channels", &f->channels, 512);
  fill("--heads", &f->heads, 8);
  fill("--kv-heads", &f->kv_heads, 2);
  fill("--intermediate", &f->intermediate, 1376);
  fill("--vocab", &f->vocab, 32000);
  fill("--context", &f->context, 256);
  if (app.count("--head-dim") == 0 && f->heads > 0) f->head_dim = f->channels / f->heads;
}

int Run(const Flags& f) {
  // A GPU's peak is given (its datasheet's dense figure for the precision); a CPU's is measured.
  auto measure_peak = [&f] { return f.peak_gflops > 0 ? f.peak_gflops : SgemmPeak(f.threads); };
  auto family = model::ParseFamily(f.family);
  if (!family.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", std::string(family.status().message()).c_str());
    return 1;
  }
  const bool llama = *family == model::Family::kLlama;
  model::ModelConfig config = model::MakeConfig(f.layers, f.channels, f.heads, f.vocab, f.context);
  if (llama) {
    config.family = model::Family::kLlama;
    config.num_kv_heads = f.kv_heads;
    config.head_dim = f.head_dim;
    config.intermediate_size = f.intermediate;
    config.rope_theta = f.rope_theta;
    config.norm_eps = f.norm_eps;
    config.tied_embeddings = f.tied;
  }
  if (const Status valid = model::ValidateConfig(config); !valid.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", std::string(valid.message()).c_str());
    return 1;
  }
  const double peak = measure_peak();
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
  if (!loader.ok()) {
    std::fprintf(stderr, "train_bench: %s\n", std::string(loader.status().message()).c_str());
    return 1;
  }
  model::OptimizerOptions opt;
  opt.weight_decay = 0.1f;
  std::vector<int32_t> inputs(size_t(f.batch) * f.seq_len), targets(inputs.size());
  const float dloss = 1.0f / (float(f.batch) * f.seq_len);  // TrainStep's, one microbatch

  const int64_t params = model::NumParameters(config);
  const double tokens = double(f.batch) * f.seq_len;
  const double flops_per_token =
      llama ? 6.0 * double(params - (f.tied ? 0 : int64_t(config.padded_vocab_size) * f.channels)) +
                  12.0 * f.layers * double(f.seq_len) * f.heads * f.head_dim
            : 6.0 * double(params - int64_t(config.max_seq_len) * config.channels) +
                  12.0 * f.layers * double(f.seq_len) * f.channels;
  if (llama) {
    std::printf(
        "model llama L=%d C=%d NH=%d NKV=%d HD=%d I=%d V=%d (Vp %d) T=%d theta=%g %s: %.1fM "
        "parameters; batch %d x %d; %d threads; %.2f GFLOP per step\n",
        f.layers, f.channels, f.heads, f.kv_heads, f.head_dim, f.intermediate, f.vocab,
        config.padded_vocab_size, f.seq_len, f.rope_theta, f.tied ? "tied" : "untied", params / 1e6,
        f.batch, f.seq_len, f.threads, flops_per_token * tokens / 1e9);
  } else {
    std::printf(
        "model L=%d C=%d NH=%d V=%d (Vp %d) T=%d: %.1fM parameters; batch %d x %d; "
        "%d threads; %.2f GFLOP per step\n",
        f.layers, f.channels, f.heads, f.vocab, config.padded_vocab_size, f.seq_len, params / 1e6,
        f.batch, f.seq_len, f.threads, flops_per_token * tokens / 1e9);
  }
  std::printf("memory: %s\n", (*chain)->memory().DebugString().c_str());
  std::printf(
      "timing (both sides): a step is the batch's copy to the device, forward, loss to the host, "
      "backward, clipping and AdamW, between two device synchronisations; fetching the batch "
      "(longhaul's DataLoader, PyTorch's torch.randint) is outside the timer\n");
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
      // The batch first, outside the timer (as PyTorch's side draws its batch before its
      // clock starts), then an idle device (ops, not the profiler: this wait is no step's).
      if (Status s = (*loader)->Next(inputs.data(), targets.data()); !s.ok()) {
        std::fprintf(stderr, "train_bench: %s\n", std::string(s.message()).c_str());
        return 1;
      }
      (*ops)->Synchronize();
      const auto t0 = Clock::now();
      auto r = TimedStep(**chain, inputs.data(), targets.data(), dloss, opt, step, 1 << 30);
      // The step's queued work (its AdamW on a CUDA backend) is the step's, not the next one's.
      backend->Synchronize();
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
        round_peak, " --flops-per-token ", flops_per_token, " --ours-tokens-per-s ", tps,
        llama ? absl::StrCat(" --family llama --kv-heads ", f.kv_heads, " --head-dim ", f.head_dim,
                             " --intermediate ", f.intermediate, " --rope-theta ", f.rope_theta,
                             " --norm-eps ", f.norm_eps, " --tied ", f.tied ? 1 : 0)
              : "");
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
  const std::string shape =
      llama ? absl::StrCat("family=llama NH=", f.heads, " NKV=", f.kv_heads, " HD=", f.head_dim,
                           " I=", f.intermediate, " V=", f.vocab, f.tied ? " tied " : " untied ")
            : "";
  std::printf(
      "SUMMARY %sbackend=%s L=%d C=%d B=%d T=%d threads=%d peak=%.1f longhaul_tokens_per_s=%.1f "
      "mfu=%.1f%%",
      shape.c_str(), f.backend.c_str(), f.layers, f.channels, f.batch, f.seq_len, f.threads,
      best_peak, ours, 100.0 * flops_per_token * ours / 1e9 / best_peak);
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
  CLI::App app{"GPT-2 or Llama training throughput: a longhaul kernel backend against PyTorch"};
  app.add_option("--family", f.family,
                 "gpt2, or llama (its shape defaults: 6 x 512, 8 heads, "
                 "2 kv heads, intermediate 1376, vocab 32000, untied)")
      ->check(CLI::IsMember({"gpt2", "llama"}))
      ->capture_default_str();
  app.add_option("--layers", f.layers, "gpt2 default; llama 6")->capture_default_str();
  app.add_option("--channels", f.channels, "gpt2 default; llama 512")->capture_default_str();
  app.add_option("--heads", f.heads, "gpt2 default; llama 8")->capture_default_str();
  app.add_option("--vocab", f.vocab, "gpt2 default; llama 32000")->capture_default_str();
  app.add_option("--context", f.context)->capture_default_str();
  app.add_option("--kv-heads", f.kv_heads, "llama: key/value heads (default 2)");
  app.add_option("--head-dim", f.head_dim, "llama: width of a head (default channels / heads)");
  app.add_option("--intermediate", f.intermediate, "llama: SwiGLU width (default 1376)");
  app.add_option("--rope-theta", f.rope_theta, "llama")->capture_default_str();
  app.add_option("--norm-eps", f.norm_eps, "llama: RMSNorm epsilon")->capture_default_str();
  app.add_flag("--tied,!--untied", f.tied, "llama: head tied to the token embedding")
      ->capture_default_str();
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
  if (f.family == "llama") {
    LlamaDefaults(app, &f);
  } else {
    for (const char* flag :
         {"--kv-heads", "--head-dim", "--intermediate", "--rope-theta", "--norm-eps", "--tied"}) {
      if (app.count(flag) > 0) {
        std::fprintf(stderr, "train_bench: %s is a llama flag (add --family llama)\n", flag);
        return 1;
      }
    }
  }
  return Run(f);
}
