// The coordinator's side of the WAN-aware schedule (job key extra_in_flight: auto): from one
// step's reports, each stage's warm-up forwards for the next step (scheduler/in_flight.h),
// replica by replica. A stage's compute per microbatch is its reported compute over its
// replica's microbatches; boundary k's round trip and wire times come from the reports' link
// usage (the link monitor's rtt and bandwidth, the mean wire bytes per tensor so far) of
// stage k towards k + 1 and of k + 1 back; each stage stays within its reported max_warmup,
// and the stage before it within its max_ahead.
// Stages of dropped replicas, or whose reports are missing, get plain 1F1B's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/job/stage_grid.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

// `sites` by flat stage; `microbatches` by replica; `reports` by flat stage.
std::vector<uint32_t> StepWarmups(const StageGrid& grid, const std::vector<std::string>& sites,
                                  const std::vector<int>& microbatches,
                                  const std::map<uint32_t, v1::StepReport>& reports);

}  // namespace longhaul::daemon
