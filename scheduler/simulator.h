// A discrete-event simulator of a pipeline plan over profiles and traces: link bandwidth
// over time (piecewise constant per directed link) and site compute slowdowns over time (a
// straggler). It runs what StageRunner runs, step after step: the 1F1B order, one FIFO sender
// per directed link whose transfers take as long as the bandwidth trace allows, and a
// compression::Controller per outbound link that decides every send from its own bandwidth
// estimate (an EWMA of the rates its transfers achieved, as the link monitor's passive
// measurements), the stage's EWMA compute budget (50 ms before the first backward) and its
// hysteresis; the tied-embedding exchange, the coordinator's barrier and the optimizer step.
// Each stage reports per step what a StepReport carries (compute, wait, step seconds), so the
// output feeds the straggler monitor.
//
// On steady links (and with the controller settled) it plays the same schedule as the cost
// model, which tests check; with traces it shows what the cost model cannot: codec switches,
// queues building behind a slowed link, a straggler's effect over time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/cost_model.h"
#include "scheduler/straggler.h"

namespace longhaul::scheduler {

struct TracePoint {
  double time_seconds = 0;  // from this time on (simulation clock)...
  double value = 0;         // ...this value
};

// Bandwidth (bytes/s) of one directed link; before its first point the profile's.
struct LinkTrace {
  std::string from, to;
  std::vector<TracePoint> bandwidth;
};

// Compute slowdown of one site (1 = as profiled, 2 = twice as slow), e.g. a throttled GPU.
struct ComputeTrace {
  std::string site;
  std::vector<TracePoint> slowdown;
};

struct SimulatorOptions {
  int steps = 10;
  double start_seconds = 0;  // clock at the first step (traces use absolute times)
  std::vector<LinkTrace> links;
  std::vector<ComputeTrace> compute;
  // Log-normal noise (sigma) on every op's compute time; 0: none.
  double compute_jitter = 0;
  uint64_t seed = 1;
  // Weight of a transfer's achieved rate in its link's bandwidth estimate (1: the last one).
  double bandwidth_alpha = 0.5;
};

struct SimulatedStep {
  uint64_t step = 0;
  double start_seconds = 0, end_seconds = 0;  // barrier decision to barrier decision
  std::vector<StageMeasurement> stages;
  // Per boundary: the codecs of the last activations and gradients sent across it.
  std::vector<std::string> activation_codecs, gradient_codecs;
  double seconds() const { return end_seconds - start_seconds; }
};

struct SimulationResult {
  std::vector<SimulatedStep> steps;
  // Mean step time over steps [from, end).
  double MeanStepSeconds(int from = 1) const;
  double end_seconds() const { return steps.empty() ? 0 : steps.back().end_seconds; }
};

// Simulates `plan` (sites of the model's profiles) for options.steps steps. The model supplies
// compute and codec prices and the controller (its options and ladder), so both agree.
StatusOr<SimulationResult> Simulate(const CostModel& model, const std::vector<StagePlan>& plan,
                                    const SimulatorOptions& options);

}  // namespace longhaul::scheduler
