// Rebalance: the live re-plan after a straggler is detected. Keeps the running pipeline's
// sites and order and moves layers between them: the contiguous split that minimises the
// slowest stage's compute, from each site's measured seconds per layer. (The full planner,
// planner.h, also reorders and drops sites from link and compute profiles; moving layers is
// what a running job can do at a step boundary without new links.)
#pragma once

#include <vector>

#include "common/status.h"
#include "scheduler/placement.h"

namespace longhaul::scheduler {

struct RebalanceResult {
  std::vector<StagePlan> stages;
  double bottleneck_seconds = 0;  // slowest stage's predicted compute per step
  double current_bottleneck_seconds = 0;
};

// `seconds_per_layer[k]` is stage k's measured compute per step divided by its layers. Every
// stage keeps at least one layer. REQUIRES: sizes match; each value > 0.
StatusOr<RebalanceResult> Rebalance(const std::vector<StagePlan>& current,
                                    const std::vector<double>& seconds_per_layer);

}  // namespace longhaul::scheduler
