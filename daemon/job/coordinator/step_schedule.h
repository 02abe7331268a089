// The coordinator's view of the running schedule, from one step's reports, and what it
// decides from it for the next step, replica by replica:
// - the WAN-aware warm-ups (job key extra_in_flight: auto; scheduler/in_flight.h);
// - each link's codec budget for the adaptive controllers: the most seconds one tensor may
//   take on that link (serialisation and codec work) before the played step
//   (scheduler/schedule.h, with those warm-ups) grows by more than its share of a tolerance
//   over the same step with that link instant. So a link off the critical path gets a large
//   budget and keeps its fidelity, and one on it is pushed down the ladder even when its
//   transfers "fit" within a microbatch's compute.
// A stage's compute per microbatch is its reported compute over its replica's microbatches
// (a third forward, two thirds backward); boundary k's round trip and wire times come from
// the reports' link usage of stage k towards k + 1 and of k + 1 back (the link monitor's
// rtt and bandwidth, one tensor of the current codec); each stage stays within its reported
// max_warmup, and the stage before it within its max_ahead. Replicas with a report missing
// get plain 1F1B and no budgets.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/job/spec/stage_grid.h"
#include "proto/longhaul.pb.h"
#include "scheduler/in_flight.h"

namespace longhaul::daemon {

// One replica's measured schedule.
struct ReplicaTimes {
  bool complete = false;  // every stage reported, with its neighbours' sites known
  scheduler::InFlightInputs in;
};
// Every replica's, by replica, built once per step for both decisions below. `sites` by flat
// stage; `microbatches` by replica; `reports` by flat stage.
std::vector<ReplicaTimes> MeasuredTimes(const StageGrid& grid,
                                        const std::vector<std::string>& sites,
                                        const std::vector<int>& microbatches,
                                        const std::map<uint32_t, v1::StepReport>& reports);

// The WAN-aware warm-ups of every stage, by flat stage (plain 1F1B for replicas not measured).
std::vector<uint32_t> StepWarmups(const StageGrid& grid, const std::vector<int>& microbatches,
                                  const std::vector<ReplicaTimes>& times);

// The codec budgets, by flat stage: act[i] for stage i's activations to i + 1, grad[i] for
// its gradients to i - 1; 0 where there is none (no such link, a replica not measured).
// `warmups` by flat stage (empty: plain 1F1B); `tolerance`: the step may grow by this
// fraction over all of a replica's links together.
struct StepBudgets {
  std::vector<double> act, grad;
};
// Roughly how many schedule events CodecBudgets plays for this grid (each directed link's
// bisection plays the replica's step about 30 times), to pace it on very large jobs.
double CodecBudgetWork(const StageGrid& grid, const std::vector<int>& microbatches);
StepBudgets CodecBudgets(const StageGrid& grid, const std::vector<ReplicaTimes>& times,
                         const std::vector<uint32_t>& warmups, double tolerance = 0.03);

}  // namespace longhaul::daemon
