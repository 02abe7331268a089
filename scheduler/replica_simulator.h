// Pipeline replicas replayed over traces (the simulator's counterpart of PriceReplicas,
// replica_planner.h): each replica's pipeline is simulated step by step (simulator.h: 1F1B,
// its links' bandwidth traces, compute jitter, with its own microbatches); the replicas step in
// lockstep, each step as long as the slowest replica's (the runtime's barrier); after every
// `every`-th step and the last, one sync priced as PriceReplicas prices it (gathered or around
// a ring, a site's flows sharing its uplink) on the links as the traces set them when the sync
// starts. A blocking sync (overlap 0, and always the last) adds its time; a streamed one
// (overlap k) only what runs past the next k steps. Staggered (sync.stagger P), each phase's
// sync is its share of the parameters (fleet::PhaseShares) of that price, at its phase's
// steps.
//
// An approximation, said plainly: each replica's pipeline runs on its own clock from the
// start (a sync delays when the fleet reads the traces for later syncs, not what the
// replicas' pipelines saw), and a sync's flows see the bandwidth of its start throughout.
#pragma once

#include <vector>

#include "common/status.h"
#include "scheduler/cost_model.h"
#include "scheduler/planner.h"
#include "scheduler/replica_planner.h"
#include "scheduler/simulator.h"

namespace longhaul::scheduler {

struct ReplicaSimulation {
  std::vector<double> step_end_seconds;  // the fleet's clock after each step, syncs included
  int syncs = 0;
  double sync_seconds = 0;     // the syncs' time on the links, all of them
  double exposed_seconds = 0;  // of it, what the replicas waited for
  double tokens = 0;           // all replicas, all steps
  double start_seconds = 0;
  // Mean step time over steps [from, end), and all tokens over the whole run.
  double MeanStepSeconds(int from = 1) const;
  double tokens_per_second() const;
  // Tokens/s between the first and the last step (the last step's sync always blocks: over a
  // short replay it would weigh far more than in a long job).
  double steady_tokens_per_second() const;
};

// `microbatches`: by replica (paced), else the workload's for each. REQUIRES: replicas name
// sites of `profiles`.
StatusOr<ReplicaSimulation> SimulateReplicas(
    const Profiles& profiles, const model::ModelConfig& model, const PipelineWorkload& workload,
    const std::vector<PlanResult>& replicas, const SyncCostOptions& sync,
    const SimulatorOptions& options, const std::vector<int>& microbatches = {},
    const CostModelOptions& cost_options = {});

}  // namespace longhaul::scheduler
