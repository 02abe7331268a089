// The planner's dynamic programs (internal to the planner). Both price a pipeline with a
// surrogate of the cost model that decomposes stage by stage, built from the very same
// primitives (CostModel::Forward, Activation, ...): a 1F1B step of M microbatches takes
// about (M - 1) P + R0 + tail, where R_i is the round trip of one microbatch from stage i
// to the end and back (compute, codecs, wire and latency), P the steady period
// max(stage cycles, link wire times, R_i / (S - i)) -- stage i keeps S - i microbatches in
// flight -- and the tail the tied-embedding exchange and the barrier. The programs run
// back to front, so a suffix knows R_i and how many stages it has; each state keeps a small
// Pareto set of (P, R) labels.
//
//   SolveAnyOrder:  Held-Karp style over (set of sites used, first site of the suffix,
//                   layers covered): every subset, every order, every split. For <= ~8 sites.
//   SolveInOrder:   a fixed site order, every split: the heuristic's inner step.
//
// Both return, for every (stage count, first site, last site), the best pipeline under the
// surrogate, so the planner can re-price a handful of them exactly.
#pragma once

#include <vector>

#include "scheduler/cost_model.h"

namespace longhaul::scheduler::internal {

struct DpCandidate {
  Pipeline pipeline;
  double surrogate_seconds = 0;
};

struct DpOptions {
  bool allow_subsets = true;  // SolveAnyOrder: pipelines may leave sites out
  // Labels more than this fraction above the best surrogate step found are pruned.
  double slack = 0.2;
  int max_labels = 6;  // per state
};

// `candidates` index CostModel sites. REQUIRES: candidates.size() <= 16.
std::vector<DpCandidate> SolveAnyOrder(const CostModel& model, const std::vector<int>& candidates,
                                       const DpOptions& options = {});

// Every site of `order`, in that order.
std::vector<DpCandidate> SolveInOrder(const CostModel& model, const std::vector<int>& order,
                                      const DpOptions& options = {});

// The surrogate step time of a pipeline (for tests and diagnostics); kInfeasible when a stage
// does not fit.
double SurrogateSeconds(const CostModel& model, const Pipeline& p);

}  // namespace longhaul::scheduler::internal
