// Straggler detection: each stage's measured step components (what StageRunner reports per
// step: compute, wait, step seconds) are compared with a reference, and a sustained slowdown
// -- not a single slow step -- raises an event that calls for re-planning.
//
// The test is a one-sided CUSUM on x = log(measured / reference): S = max(0, S + min(x - k,
// clip)), firing when S > threshold, with k = log(min_slowdown) / 2 (halfway, in log space,
// between "as planned" and the smallest slowdown worth a re-plan). Noise around the reference
// drifts S back to 0; a sustained slowdown by a factor f >= min_slowdown adds about
// min(log f - k, clip) per step, so it fires within ceil(threshold / that) steps; the clip
// keeps any single outlier (a GC pause, a retransmit) from firing on its own: it takes more
// than threshold / clip consecutive slow steps. The reference is the median of the first
// warmup steps after (re)planning, so a cost model that is off by a constant does not fire;
// the plan's own prediction serves when warmup_steps is 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "scheduler/cost_model.h"

namespace longhaul::scheduler {

struct StragglerOptions {
  int warmup_steps = 5;       // observations whose median sets the reference; 0: the plan's
  double min_slowdown = 1.5;  // REQUIRES: > 1
  double threshold = 1.5;     // REQUIRES: > 0
  double clip = 0.375;        // largest contribution of one step; REQUIRES: > 0
  int estimate_window = 4;    // recent steps whose geometric mean estimates the slowdown
};

// The CUSUM over one series.
class ChangeDetector {
 public:
  // reference <= 0: learn it from the first warmup_steps observations.
  explicit ChangeDetector(const StragglerOptions& options = {}, double reference = 0);
  // Adds an observation; true when the test fires at it (and every later one until Reset).
  bool Observe(double value);
  void Reset(double reference = 0);

  bool fired() const { return fired_; }
  double statistic() const { return statistic_; }
  double reference() const { return reference_; }  // 0 while still learning it
  // Geometric mean of the recent observations over the reference.
  double slowdown() const;

 private:
  StragglerOptions options_;
  double reference_ = 0;
  std::vector<double> warmup_, recent_;
  double statistic_ = 0;
  bool fired_ = false;
};

// One stage's figures for one step, as in v1::StepReport.
struct StageMeasurement {
  int stage = 0;
  uint64_t step = 0;
  double compute_seconds = 0;  // forward + backward + optimizer, including any throttle
  double wait_seconds = 0;     // receiving and at the barrier
  double step_seconds = 0;
};

struct StragglerEvent {
  int stage = 0;
  std::string site;
  uint64_t step = 0;
  // "compute": the stage's own compute slowed (its site is the straggler); "step": the step
  // as a whole slowed with no stage computing slower (a link, most likely).
  std::string component;
  double slowdown = 1;  // measured / reference, over the recent steps
  std::string explanation;
};

// Detectors for every stage's compute and for the step time of a plan.
class StragglerMonitor {
 public:
  // `plan` is the cost model's estimate of the plan being run (its stages and step time).
  explicit StragglerMonitor(const StepEstimate& plan, const StragglerOptions& options = {});
  // Every stage's measurement of one step (the coordinator has them all at the barrier).
  // Returns an event the first time a detector fires: the stage whose compute slowed most,
  // else the step as a whole. Nothing more until Reset.
  std::optional<StragglerEvent> Observe(const std::vector<StageMeasurement>& step);
  // After re-planning: new plan, fresh detectors.
  void Reset(const StepEstimate& plan);

 private:
  StragglerOptions options_;
  StepEstimate plan_;
  std::vector<ChangeDetector> compute_;
  ChangeDetector step_;
  bool reported_ = false;
};

}  // namespace longhaul::scheduler
