// `longhaul plan`'s sharding report: for each stage on a site with several devices, how its
// tensors are held across them (scheduler/shard_plan.h's search), the peak memory a device
// and the stage's compute, optimizer and collective time a step.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "scheduler/cost_model.h"
#include "scheduler/placement.h"
#include "scheduler/profiles.h"
#include "scheduler/shard_plan.h"

namespace longhaul::cli {

struct StageSharding {
  int stage = 0;
  std::string site;
  int layer_begin = 0, layer_end = 0;
  int devices = 1;
  int64_t device_memory_bytes = 0;
  StatusOr<scheduler::ShardPlan> plan;
};

// One entry per stage of `estimate` whose site profile has more than one device.
std::vector<StageSharding> ShardStages(const model::ModelConfig& model,
                                       const scheduler::PipelineWorkload& workload,
                                       const scheduler::Profiles& profiles,
                                       const scheduler::StepEstimate& estimate);

// A table (nothing when `stages` is empty).
void PrintSharding(const std::vector<StageSharding>& stages, std::ostream& out);
nlohmann::json ShardingJson(const std::vector<StageSharding>& stages);

}  // namespace longhaul::cli
