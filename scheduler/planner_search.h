// The planner's search around the dynamic programs (internal to the planner): greedy chains
// of sites that seed the in-order DP when there are too many candidates for the DP over
// orders, and local search under the exact cost model.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "scheduler/cost_model.h"

namespace longhaul::scheduler::internal {

struct SearchContext {
  const CostModel* model = nullptr;
  std::vector<int> candidates;  // CostModel site indices the pipeline may use
  bool allow_leaving_out = true;
  bool keep_order = false;  // only layer counts may change (PlannerOptions::keep_order)
  std::chrono::steady_clock::time_point deadline;
  int64_t priced = 0;  // exact evaluations so far

  double Price(const Pipeline& p) {
    ++priced;
    return model->StepSeconds(p);
  }
  bool TimeLeft() const { return std::chrono::steady_clock::now() < deadline; }
};

// Starting pipelines for many candidates: for seeds among the fastest sites and a range of
// stage counts, a chain grown greedily by link cost and speed, split by SolveInOrder. Best
// (exactly priced) first.
std::vector<Pipeline> ChainStarts(SearchContext* ctx, int max_starts);

// First-improvement local search from `start` under the exact model: move a boundary, swap two
// stages' sites, replace a site by an unused one, drop a stage, add an unused site, re-split
// the current order with SolveInOrder. Stops at a local optimum or the deadline.
Pipeline LocalSearch(SearchContext* ctx, Pipeline start);

}  // namespace longhaul::scheduler::internal
