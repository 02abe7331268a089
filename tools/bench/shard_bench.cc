// The per-tensor sharding search (scheduler/shard_plan.h) against always-replicate, always-zero1
// and always-shard (zero3), on the cost model, for big models' stages on 8-device sites: the
// peak memory a device, whether it fits, the predicted step and the collective bytes.
//
//   bazel build -c opt //tools/bench:shard_bench
//   bazel-bin/tools/bench/shard_bench                      # xl, llama8b, llama70b; both sites
//   bazel-bin/tools/bench/shard_bench --models llama70b --stages 4 --sites nvlink
//
// The device figures are assumptions written here, not measurements: an 8 x 80 GB NVLink site
// (a sustained 300 TFLOP/s a device, 360 GB/s ring bus bandwidth, 30 us a collective, AdamW at
// 1e11 parameters/s) and an 8 x 48 GB PCIe site (180 TFLOP/s, 20 GB/s, 50 us, 2.7e10).
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "model/config.h"
#include "scheduler/shard_plan.h"

namespace longhaul::scheduler {
namespace {

struct Model {
  std::string name;
  model::ModelConfig config;
  int microbatch_size = 8, seq_len = 1024, microbatches = 16;
};

model::ModelConfig Llama(int layers, int channels, int heads, int kv_heads, int intermediate) {
  model::ModelConfig c = model::MakeConfig(layers, channels, heads, 128256, 8192);
  c.family = model::Family::kLlama;
  c.num_kv_heads = kv_heads;
  c.head_dim = channels / heads;
  c.intermediate_size = intermediate;
  c.rope_theta = 500000;
  c.tied_embeddings = false;
  return c;
}

bool MakeModel(const std::string& name, Model* m) {
  m->name = name;
  if (name == "xl") {  // GPT-2 XL, 1.56B parameters
    m->config = model::MakeConfig(48, 1600, 25, 50257, 1024);
  } else if (name == "llama8b") {  // Llama 3 8B's shape
    m->config = Llama(32, 4096, 32, 8, 14336);
    m->seq_len = 2048;
  } else if (name == "llama70b") {  // Llama 3 70B's shape
    m->config = Llama(80, 8192, 64, 8, 28672);
    m->seq_len = 2048;
  } else {
    return false;
  }
  return true;
}

bool MakeSite(const std::string& name, SiteDevices* d) {
  d->count = 8;
  if (name == "nvlink") {
    d->memory_bytes = int64_t(80) << 30;
    d->flops = 300e12;
    d->collective_bytes_per_second = 360e9;
    d->collective_latency_seconds = 30e-6;
    d->optimizer_params_per_second = 1e11;
  } else if (name == "pcie") {
    d->memory_bytes = int64_t(48) << 30;
    d->flops = 180e12;
    d->collective_bytes_per_second = 20e9;
    d->collective_latency_seconds = 50e-6;
    d->optimizer_params_per_second = 2.7e10;
  } else {
    return false;
  }
  return true;
}

std::string Cell(const StatusOr<ShardPlan>& plan, const ShardPlan* best) {
  if (!plan.ok()) return "no plan | | | |";
  const ShardEstimate& e = plan->estimate;
  char ratio[64] = "";
  if (best != nullptr && e.fits) {
    std::snprintf(ratio, sizeof ratio, "%.3fx", e.step_seconds() / best->estimate.step_seconds());
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "%.1f GB%s | %.3f s | %.1f GB | %s", double(e.peak_bytes) / 1e9,
                e.fits ? "" : " (does not fit)", e.step_seconds(), e.collective_bytes / 1e9, ratio);
  return buf;
}

int Run(const std::vector<std::string>& models, const std::vector<std::string>& sites, int stages) {
  std::printf(
      "| model | stage (layers) | site | plan | peak a device | step | collectives a device | "
      "step vs the search |\n|---|---|---|---|---|---|---|---|\n");
  for (const std::string& model_name : models) {
    Model m;
    if (!MakeModel(model_name, &m)) {
      std::fprintf(stderr, "shard_bench: unknown model '%s' (xl, llama8b, llama70b)\n",
                   model_name.c_str());
      return 2;
    }
    const int L = m.config.num_layers;
    if (stages < 1 || stages > L) {
      std::fprintf(stderr, "shard_bench: --stages %d is outside [1, %d] for %s\n", stages, L,
                   model_name.c_str());
      return 2;
    }
    for (const std::string& site_name : sites) {
      SiteDevices d;
      if (!MakeSite(site_name, &d)) {
        std::fprintf(stderr, "shard_bench: unknown site '%s' (nvlink, pcie)\n", site_name.c_str());
        return 2;
      }
      // The first stage (the embedding) and the last (the head) of an even split.
      for (int stage : {0, stages - 1}) {
        StageShape s;
        s.config = m.config;
        s.layer_begin = L * stage / stages;
        s.layer_end = L * (stage + 1) / stages;
        s.microbatch_size = m.microbatch_size;
        s.seq_len = m.seq_len;
        s.microbatches = m.microbatches;
        s.slots = stages - stage;  // 1F1B: warm-ups + 1
        const auto best = ChooseSharding(s, d);
        const std::string where = model_name + " | " + std::to_string(stage) + " of " +
                                  std::to_string(stages) + " (" + std::to_string(s.layer_begin) +
                                  "-" + std::to_string(s.layer_end - 1) + ") | " + site_name;
        for (ShardMode mode : {ShardMode::kReplicate, ShardMode::kZero1, ShardMode::kZero3}) {
          std::printf("| %s | all %s | %s |\n", where.c_str(), ShardModeName(mode),
                      Cell(UniformSharding(s, d, mode), best.ok() ? &*best : nullptr).c_str());
        }
        if (best.ok()) {
          std::printf("| %s | **search**: %s | %s |\n", where.c_str(), best->Summary().c_str(),
                      Cell(best, nullptr).c_str());
        } else {
          std::printf("| %s | search: %s | | | | |\n", where.c_str(),
                      std::string(best.status().message()).c_str());
        }
      }
    }
  }
  return 0;
}

}  // namespace
}  // namespace longhaul::scheduler

int main(int argc, char** argv) {
  CLI::App app{"The per-tensor sharding search against uniform sharding on the cost model (OSDP)"};
  std::vector<std::string> models = {"xl", "llama8b", "llama70b"};
  std::vector<std::string> sites = {"nvlink", "pcie"};
  int stages = 4;
  app.add_option("--models", models, "xl, llama8b and/or llama70b")->delimiter(',');
  app.add_option("--sites", sites, "nvlink (8 x 80 GB) and/or pcie (8 x 48 GB)")->delimiter(',');
  app.add_option("--stages", stages, "Pipeline stages the model is split into, evenly")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return longhaul::scheduler::Run(models, sites, stages);
}
