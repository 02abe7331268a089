// The placement seam: which site runs which contiguous layer range, in which order. The
// coordinator asks a Placer. The even split below needs nothing but the model and the sites;
// the planner (scheduler/planner.h) also reads the request's workload and its own measured
// profiles, and minimises the predicted step time behind the same interface.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"

namespace longhaul::scheduler {

struct StagePlan {
  std::string site;
  int layer_begin = 0;
  int layer_end = 0;  // one past the last layer

  int layers() const { return layer_end - layer_begin; }
  bool operator==(const StagePlan&) const = default;
};

// What one training step asks of the pipeline, for planners that model the step. The even
// split ignores it. Mirrors the job file (daemon/job/spec/job_spec.h) without depending on it.
struct PipelineWorkload {
  int microbatch_size = 0;  // B: sequences per microbatch; REQUIRES: > 0 for the planner
  int seq_len = 0;          // T; REQUIRES: 0 < T <= model.max_seq_len for the planner
  int microbatches = 1;     // M per step
  // Inter-stage compression, as the job's `compression:` section: "off" (fp32), "fixed"
  // (`codec` on every activation and gradient) or "adaptive" (the controller picks, never
  // past `floor`).
  std::string compression = "adaptive";
  std::string codec = "q8";
  std::string floor = "q4";
  // adaptive: the floor of a cut that carries the subspace-cut variant's coordinates ("": the
  // same as `floor`; the daemon's default is q8 there, daemon/job/spec/job_spec.h).
  std::string coordinate_floor;
  // The site whose daemon coordinates the job (the per-step barrier); "" = the first stage's.
  std::string coordinator;
  // As the job's extra_in_flight (in_flight.h): 0 plain 1F1B, N > 0 that many more warm-ups,
  // kAutoInFlight the WAN-aware warm-ups from the priced links, within each stage's memory.
  static constexpr int kAutoInFlight = -1;
  int extra_in_flight = 0;
};

struct PlacementRequest {
  model::ModelConfig model;
  std::vector<std::string> sites;  // candidate sites, in the job's preferred order
  PipelineWorkload workload;
};

class Placer {
 public:
  virtual ~Placer() = default;
  virtual std::string name() const = 0;
  // Stages in pipeline order; every layer in exactly one stage.
  virtual StatusOr<std::vector<StagePlan>> Place(const PlacementRequest& request) = 0;
};

// Sites in the given order, L layers split as evenly as possible (earlier sites take the
// remainder).
std::unique_ptr<Placer> MakeEvenSplitPlacer();

// OK when `plan` is a pipeline over `num_layers` layers: non-empty, contiguous ranges that
// start at 0, end at num_layers, each on a distinct site. Errors name the bad stage.
Status ValidatePlan(const std::vector<StagePlan>& plan, int num_layers);

// "alpha[0,16) beta[16,48)"
std::string PlanDebugString(const std::vector<StagePlan>& plan);

}  // namespace longhaul::scheduler
