// How a stage's layers are held across a site's CPU devices (model/shard_mode.h): the job's
// `sharding` for every layer, or auto: zero1 (the AdamW state split, the same steps bit for
// bit) where that fits the site's memory, otherwise the cost model's choice per layer
// (scheduler/shard_plan.h) for the site's memory split evenly between its devices.
//
// On CPU devices the collectives are memory copies and compute is shared, so the cost model
// runs with nominal figures (scheduler::NominalCpuDevices): what decides between plans is memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/fragment.h"
#include "model/shard_mode.h"

namespace longhaul::daemon {

struct StageSharding {
  std::vector<model::ShardMode> layer_modes;  // one per layer of the stage
  std::string why;                            // for the log: what chose them
};

// `fo`: the stage's layers, rows, sequence length and slots; `devices` > 1 CPU devices;
// `microbatches` a step; `memory_limit_bytes` the site's (0: none). Where nothing fits, the
// uniform mode of least memory (the caller's memory check then refuses the stage).
StatusOr<StageSharding> ChooseStageSharding(const std::optional<model::ShardMode>& sharding,
                                            const model::ModelConfig& config,
                                            const model::FragmentOptions& fo, int devices,
                                            int microbatches, int64_t memory_limit_bytes);

// Bytes `devices` CPU replicas of the stage hold together with these layer modes.
int64_t CpuReplicaBytes(const model::ModelConfig& config, const model::FragmentOptions& fo,
                        int devices);

}  // namespace longhaul::daemon
