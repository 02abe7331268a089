// ChooseStageSharding; see stage_sharding.h.
#include "daemon/job/stage/stage_sharding.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/replicated_fragment.h"
#include "scheduler/shard_plan.h"

namespace longhaul::daemon {

int64_t CpuReplicaBytes(const model::ModelConfig& config, const model::FragmentOptions& fo,
                        int devices) {
  int64_t total = 0;
  for (const auto& r : model::ReplicatedFragment::EstimateMemory(config, fo, devices)) {
    total += r.total();
  }
  return total;
}

StatusOr<StageSharding> ChooseStageSharding(const std::optional<model::ShardMode>& sharding,
                                            const model::ModelConfig& config,
                                            const model::FragmentOptions& fo, int devices,
                                            int microbatches, int64_t memory_limit_bytes) {
  const size_t layers = static_cast<size_t>(fo.end - fo.begin);
  StageSharding out;
  if (sharding.has_value()) {
    out.layer_modes.assign(layers, *sharding);
    out.why = absl::StrCat("the job's sharding: ", model::ShardModeName(*sharding));
    return out;
  }
  model::FragmentOptions o = fo;
  o.layer_modes.assign(layers, model::ShardMode::kZero1);
  const int64_t zero1 = CpuReplicaBytes(config, o, devices);
  out.layer_modes = o.layer_modes;
  out.why = "zero1 (auto)";
  if (memory_limit_bytes <= 0 || zero1 <= memory_limit_bytes) return out;
  const scheduler::StageShape shape{config,     fo.begin,     fo.end,  fo.batch_size,
                                    fo.seq_len, microbatches, fo.slots};
  const scheduler::SiteDevices d =
      scheduler::NominalCpuDevices(devices, memory_limit_bytes / devices);
  // The uniform mode of least memory (working buffers can make zero3 the dearest).
  auto least = [&] {
    std::vector<model::ShardMode> best;
    int64_t best_bytes = -1;
    for (int k = 0; k < model::kNumShardModes; ++k) {
      o.layer_modes.assign(layers, model::ShardMode(k));
      const int64_t bytes = CpuReplicaBytes(config, o, devices);
      if (best_bytes < 0 || bytes < best_bytes) best = o.layer_modes, best_bytes = bytes;
    }
    return best;
  };
  auto plan = scheduler::ChooseSharding(shape, d);
  if (!plan.ok()) {
    // Nothing fits: the least memory, which the memory check refuses, naming the need.
    out.layer_modes = least();
    out.why = absl::StrCat(model::ShardModeName(out.layer_modes.front()),
                           " (auto; nothing fits: ", plan.status().message(), ")");
    return out;
  }
  out.layer_modes.clear();
  for (size_t g = 0; g < plan->groups.size(); ++g) {
    if (plan->groups[g].layer) out.layer_modes.push_back(plan->modes[g]);
  }
  o.layer_modes = out.layer_modes;
  out.why =
      absl::StrCat("the cost model's (auto; zero1 needs ", zero1 >> 20, " MiB, the site allows ",
                   memory_limit_bytes >> 20, " MiB): ", plan->Summary());
  if (CpuReplicaBytes(config, o, devices) > memory_limit_bytes) {
    // The plan's devices are even shares of the memory; the replicas' rows need not be.
    out.layer_modes = least();
    out.why = absl::StrCat(out.why, "; over the memory by the replicas' uneven rows, so ",
                           model::ShardModeName(out.layer_modes.front()), " for every layer");
  }
  return out;
}

}  // namespace longhaul::daemon
