// Re-planning around stragglers: what the runtime needs to move a running job to a better
// plan at a step boundary. Measured profiles in (a straggler event scales its site's FLOP/s;
// fresh link estimates replace the planned ones), a decision out: the new plan, both plans'
// predicted step times under the measured profiles, and the layers that change site with the
// bytes each move carries (parameters and AdamW moments, fp32) and how long it should take.
// The move is worth it when the predicted gain over `horizon_steps` pays for the migration
// and the gain is at least `min_gain` (hysteresis against noise).
//
// Applying it (the runtime's part): at a step boundary, pause after the optimizer step, send
// each LayerMove's slices over the Peer API (the tied embedding and its moments when the
// first or last site changes; the data loader's state with the first stage), rebuild the
// fragments, and resume; the losses do not change because fp32 state moves exactly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/planner.h"
#include "scheduler/straggler.h"

namespace longhaul::scheduler {

// A contiguous run of layers, or a non-layer tensor, that changes site.
struct LayerMove {
  std::string what;  // "layers 12..15", "wte+wpe (first stage)", "wte+lnf (last stage)"
  int layer_begin = 0, layer_end = 0;  // layers; both 0 for embedding moves
  std::string from_site, to_site;
  int64_t bytes = 0;   // parameters + AdamW m and v, fp32
  double seconds = 0;  // over the from -> to link, alone
};

struct ReplanOptions {
  double min_gain = 0.05;      // the new plan must be predicted at least this much faster
  double horizon_steps = 200;  // steps over which the migration must pay for itself
};

struct ReplanDecision {
  bool apply = false;
  std::vector<StagePlan> plan;     // the new plan (the current one when !apply)
  StepEstimate current, proposed;  // both under the measured profiles
  std::vector<LayerMove> moves;
  // Moves over different links run concurrently: the longest link's total.
  double migration_seconds = 0;
  std::string explanation;
};

// The profiles after a straggler event: the slowed site's FLOP/s divided by the slowdown
// (a "step" event changes no site; refresh links from the link monitor instead).
Profiles ApplyStraggler(const Profiles& profiles, const StragglerEvent& event);

// The profiles as measured: each stage's site FLOP/s (and AdamW rate) scaled by the plan's
// predicted compute over the median measured compute of that stage in `recent` (several
// steps of StageMeasurements; a stage with none keeps its profile).
Profiles FromMeasurements(const Profiles& profiles, const StepEstimate& plan,
                          const std::vector<StageMeasurement>& recent);

// Replaces links (both known to `profiles`) with fresh estimates.
Profiles WithLinks(const Profiles& profiles, const std::vector<LinkProfile>& links);

// What moves, and its cost under `model`'s links, going from `current` to `next`.
std::vector<LayerMove> LayerMoves(const CostModel& model, const std::vector<StagePlan>& current,
                                  const std::vector<StagePlan>& next);

// Plans `request` afresh with `measured` profiles and decides whether to switch from
// `current`.
StatusOr<ReplanDecision> Replan(const PlacementRequest& request, const Profiles& measured,
                                const std::vector<StagePlan>& current,
                                const PlannerOptions& planner = {},
                                const ReplanOptions& options = {});

}  // namespace longhaul::scheduler
