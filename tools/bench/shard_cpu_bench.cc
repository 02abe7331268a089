// A stage sharded across a site's CPU devices, run, not priced: each mode (every layer
// replicated, zero1, zero2, zero3, and the cost model's choice for a memory limit between
// zero1's and zero3's needs) trains the same stage on D CPU devices; per mode the devices'
// measured peak bytes against the prediction (model::ReplicatedFragment::EstimateMemory, the
// figures the stage runner checks a site's memory with) and the measured seconds a step.
//
//   bazel build -c opt //tools/bench:shard_cpu_bench
//   bazel-bin/tools/bench/shard_cpu_bench                    # 8 x 256 GPT-2, 4 devices
//   bazel-bin/tools/bench/shard_cpu_bench --layers 4 --channels 512 --devices 2
//
// The devices run one after another in this process (the site's CPU devices share its
// cores), so a step's time is the compute of every device plus the host collectives: the
// modes' differences are their collectives and working-buffer traffic.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "daemon/job/stage/stage_sharding.h"
#include "kernels/ops.h"
#include "model/config.h"
#include "model/replicated_fragment.h"

namespace longhaul {
namespace {

struct Result {
  int64_t measured = 0, predicted = 0;
  double step_seconds = 0;
  float loss = 0;
};

Result Run(const model::ModelConfig& c, model::FragmentOptions o, int devices,
           const std::string& backend, int steps, int microbatches) {
  std::vector<std::unique_ptr<kernels::Ops>> owned;
  std::vector<kernels::Ops*> ops;
  for (int i = 0; i < devices; ++i) {
    owned.push_back(*kernels::MakeOps(backend, 1));
    ops.push_back(owned.back().get());
  }
  Result r;
  r.predicted = daemon::CpuReplicaBytes(c, o, devices);
  auto f = model::ReplicatedFragment::Create(c, o, ops);
  if (!f.ok()) {
    std::fprintf(stderr, "%s\n", f.status().ToString().c_str());
    std::exit(1);
  }
  (*f)->InitParameters(1);
  const int BT = o.batch_size * o.seq_len;
  std::vector<int32_t> in(BT), tg(BT);
  std::vector<double> times;
  model::OptimizerOptions opt;
  for (int step = 1; step <= steps + 1; ++step) {  // the first step warms up, untimed
    const auto t0 = std::chrono::steady_clock::now();
    (*f)->ZeroGrads();
    double loss = 0;
    for (int mb = 0; mb < microbatches; ++mb) {
      for (int i = 0; i < BT; ++i) {
        in[i] = (i * 131 + step * 17 + mb * 5) % c.vocab_size;
        tg[i] = (i * 131 + step * 17 + mb * 5 + 1) % c.vocab_size;
      }
      if (!(*f)->Forward(0, in.data(), nullptr).ok()) std::exit(1);
      loss += *(*f)->Loss(0, tg.data()) / microbatches;
      if (!(*f)->Backward(0, nullptr, 1.0f / (BT * microbatches)).ok()) std::exit(1);
    }
    if (!(*f)->ReduceGradients().ok()) std::exit(1);
    (*f)->CombineTiedGrads();
    if (!(*f)->Step(opt, 1e-3f, 1.0f, step).ok()) std::exit(1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (step > 1) times.push_back(s);
    r.loss = static_cast<float>(loss);
  }
  std::sort(times.begin(), times.end());
  r.step_seconds = times[times.size() / 2];
  for (kernels::Ops* d : ops) r.measured += d->peak_allocated_bytes();
  return r;
}

}  // namespace
}  // namespace longhaul

int main(int argc, char** argv) {
  using namespace longhaul;
  CLI::App app{"A stage's layers sharded across CPU devices in every mode: memory and step time"};
  int layers = 8, channels = 256, devices = 4, batch = 8, seq = 64, steps = 5, microbatches = 2;
  std::string backend = "cpu";
  app.add_option("--layers", layers, "layers of the stage (the whole GPT-2 model)");
  app.add_option("--channels", channels, "channels");
  app.add_option("--devices", devices, "CPU devices");
  app.add_option("--batch", batch, "sequences a microbatch (split between the devices)");
  app.add_option("--seq", seq, "sequence length");
  app.add_option("--steps", steps, "timed steps (the median is reported)");
  app.add_option("--microbatches", microbatches, "microbatches a step");
  app.add_option("--backend", backend, "kernel backend of each device (cpu, cpu-ref)");
  CLI11_PARSE(app, argc, argv);
  const model::ModelConfig c = model::MakeConfig(layers, channels, channels / 64, 50257, seq);
  model::FragmentOptions o;
  o.begin = 0;
  o.end = layers;
  o.batch_size = batch;
  o.seq_len = seq;
  o.slots = 1;
  auto with = [&](std::vector<model::ShardMode> modes) {
    model::FragmentOptions m = o;
    m.layer_modes = std::move(modes);
    return m;
  };
  std::printf("GPT-2 %d x %d (vocab 50257), microbatch %d x %d, %d microbatches, %d %s devices\n\n",
              layers, channels, batch, seq, microbatches, devices, backend.c_str());
  std::printf(
      "| layers | measured peak, all devices | predicted | error | step | loss after %d steps |\n",
      steps + 1);
  std::printf("|---|---|---|---|---|---|\n");
  auto row = [&](const std::string& name, const model::FragmentOptions& m) {
    const Result r = Run(c, m, devices, backend, steps, microbatches);
    std::printf("| %s | %.2f MB | %.2f MB | %+.2f%% | %.3f s | %.6f |\n", name.c_str(),
                r.measured / 1e6, r.predicted / 1e6,
                100.0 * (r.measured - r.predicted) / r.predicted, r.step_seconds, r.loss);
    std::fflush(stdout);
  };
  for (int k = 0; k < model::kNumShardModes; ++k) {
    const auto mode = model::ShardMode(k);
    row(std::string("all ") + model::ShardModeName(mode),
        with(std::vector<model::ShardMode>(layers, mode)));
  }
  const int64_t zero1 =
      daemon::CpuReplicaBytes(c, with({size_t(layers), model::ShardMode::kZero1}), devices);
  const int64_t zero3 =
      daemon::CpuReplicaBytes(c, with({size_t(layers), model::ShardMode::kZero3}), devices);
  const int64_t limit = (zero1 + zero3) / 2;
  auto chosen = daemon::ChooseStageSharding(std::nullopt, c, o, devices, microbatches, limit);
  if (!chosen.ok()) return 1;
  row("auto within " + std::to_string(limit / 1000000) +
          " MB: " + model::ModesSummary(chosen->layer_modes),
      with(chosen->layer_modes));
  return 0;
}
