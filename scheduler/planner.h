// The planner: a Placer that chooses which of the candidate sites run the pipeline, in which
// order, and the contiguous layer split, to minimise the step time the cost model predicts
// (cost_model.h) within every site's memory. It may leave a site out when using it would slow
// the pipeline down (a slow site, or one behind a slow or distant link).
//
//   Up to exact_max_sites candidates: a dynamic program over every subset, order and split
//   (planner_dp.h) under a stage-by-stage surrogate of the cost model; the best pipeline of
//   every (stage count, first site, last site) is then priced exactly and polished by local
//   search. On random instances of up to 7 sites this is within 1% of exhaustive search
//   (test/scheduler/planner_test.cc).
//   Beyond: greedy site chains from many seeds and stage counts, each split by the in-order
//   dynamic program, then the dynamic program over orders on the best pipeline's
//   neighbourhood, then local search (move a boundary, swap, replace, drop or add a site),
//   all within time_budget_seconds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/cost_model.h"
#include "scheduler/placement.h"
#include "scheduler/profiles.h"

namespace longhaul::scheduler {

struct PlannerOptions {
  CostModelOptions cost;
  // Candidate counts up to this are planned by the DP over orders. REQUIRES: <= 12.
  int exact_max_sites = 8;
  // false: every candidate site runs a stage.
  bool allow_leaving_out_sites = true;
  // true: every candidate runs a stage, in the request's order; only the split is chosen
  // (exactly, by the in-order dynamic program). What a running job can switch to by moving
  // layers between the sites it already uses.
  bool keep_order = false;
  // Wall-clock budget of the heuristic and of local search (never the exact DP).
  double time_budget_seconds = 3;
};

struct PlanResult {
  std::vector<StagePlan> stages;
  StepEstimate estimate;
  std::string method;                     // "exact" or "heuristic"
  std::vector<std::string> unused_sites;  // candidates left out
  int64_t plans_priced = 0;               // exact cost-model evaluations
  double planning_seconds = 0;
};

class Planner final : public Placer {
 public:
  explicit Planner(Profiles profiles, PlannerOptions options = {})
      : profiles_(std::move(profiles)), options_(std::move(options)) {}

  std::string name() const override { return "planner"; }
  // The stages of Plan(request).
  StatusOr<std::vector<StagePlan>> Place(const PlacementRequest& request) override;
  // Fails when a candidate has no profile, a pair of candidates no link, or no placement fits
  // (ResourceExhausted, saying how much memory the model needs).
  StatusOr<PlanResult> Plan(const PlacementRequest& request) const;
  // The cost model over the request's candidates (and coordinator), as Plan prices plans:
  // for pricing other plans (the current one, an even split) the same way.
  StatusOr<CostModel> Model(const PlacementRequest& request) const;

  const Profiles& profiles() const { return profiles_; }
  const PlannerOptions& options() const { return options_; }

 private:
  Profiles profiles_;
  PlannerOptions options_;
};

std::unique_ptr<Placer> MakePlanner(Profiles profiles, PlannerOptions options = {});

}  // namespace longhaul::scheduler
