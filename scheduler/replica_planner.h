// Replicated placement: several pipelines on disjoint sites, kept in sync by data parallelism
// across them (fleet/, the job's `replicas` and `sync`), priced by the cost model. Replicas
// are formed greedily: the fastest site left and its best-connected neighbours left (up to a
// cap of 1, 2, 3, 4, 6 or 8 sites, or every site left) are the candidates the planner
// (planner.h) places the next pipeline on; the sites it uses are taken, and so on while a
// pipeline fits. Of every cap and every count n of the replicas it found (best first), the
// one with the most predicted tokens/s wins.
//
// A replica's step is its pipeline's predicted step; the fleet goes at its slowest replica's
// pace (the syncs wait for it). A sync moves each stage's contribution (its layers'
// parameters in the sync codec: bytes_per_value each) to the sites that hold the same layers
// in other replicas:
//   gather: to every other replica's holders, N - 1 flows out of each stage at once;
//   ring:   around the replicas in replica order (fleet/sync_ring.h): 2 (N - 1) / N of the
//           contribution to the next replica's holders, in 2 (N - 1) hops (each a round trip's
//           latency on the critical path);
// a site's flows at once share its uplink (`shared_uplink`: the uplink carries at most its
// fastest link's rate; a flow alone is held to its own link's), and the slowest site's
// sending is the sync's time. `reduce: cheaper` prices both and keeps the faster, as a job's
// `sync.reduce: auto` does. Every `every` steps one sync; with `overlap` k (streaming syncs
// that run behind the next k inner steps, the job's sync.overlap) only the part longer than
// those steps is exposed.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "scheduler/planner.h"

namespace longhaul::scheduler {

// kGossip (fleet/gossip.h): no collective; each stage sends its contribution to the holders
// of its layers in `fanout` other replicas each round, the replicas its fastest links reach
// (the round's draw favours them), in one hop. A round's time is the slowest site's sending of
// those flows; the price also reports the rounds push-sum takes to bring the replicas within
// 1% of their mean over the replica-level link matrix (what the convergence study weighs:
// gossip trades rounds for bytes and waits, it is never chosen by `cheaper`). A tied head's
// wte goes between first stages only; each multi-stage replica's first stage forwards the
// frames of it that it took, one per in-neighbour, to its own last stage (priced as a flow of
// that round, daemon/job/sync/tied_round.h).
enum class SyncReduceCost { kGather, kRing, kCheaper, kGossip };

struct SyncCostOptions {
  int every = 50;                   // inner steps per sync; 1: sync mode step
  double bytes_per_value = 0.5625;  // q4 with an fp32 scale per 64 values; exact: 4
  int overlap = 0;  // inner steps a sync runs behind (0: it blocks); a job's is < every / stagger
  // Phases of a staggered round (sync.stagger): each phase's sync carries 1/stagger of the
  // bytes every `every` steps and hides behind its own `overlap` steps.
  int stagger = 1;
  SyncReduceCost reduce = SyncReduceCost::kGather;
  int fanout = 2;  // gossip: out-neighbours per round
  // A site's sync flows at once share its uplink (false: each flow has its link to itself).
  bool shared_uplink = true;
  // The fraction of the job's steps in a sync warm-up (sync.warmup over the steps): each of
  // them syncs, blocking, before the cadence above takes over.
  double warmup_fraction = 0;
};

struct ReplicaPlanRequest {
  PlacementRequest request;  // the model, the workload of one replica, the candidate sites
  SyncCostOptions sync;
  int max_replicas = 0;      // 0: as many as fit
  bool exact_count = false;  // exactly max_replicas replicas, or none
  // Unaligned: choose the count by paced_tokens_per_second (else lockstep). Aligned: pace the
  // replicas by microbatches (PaceReplicas): a slower replica trains fewer per step, so that
  // none waits for another; the split and count are chosen for those tokens/s.
  bool paced = false;
  // Every replica with the same stage count and layer ranges (AlignReplicas), each sync
  // group the same position in every replica.
  bool aligned = false;
  // Unaligned replicas (each its own split: the runtime syncs each slice with its holders,
  // daemon/job/sync/sync_routes.h) paced by microbatches (PaceReplicas) in lockstep, the count
  // chosen for those tokens/s: what `replica_microbatches: paced` runs.
  bool microbatch_paced = false;
};

struct ReplicaPlan {
  std::vector<PlanResult> replicas;  // each replica's pipeline, best first
  int sites_used = 0;
  double replica_step_seconds = 0;  // the slowest replica's predicted step
  double sync_seconds = 0;          // one sync, the slowest site's sending
  double sync_bytes = 0;            // one sync, all sites together
  bool ring = false;                // the syncs priced (and chosen, reduce: cheaper) as rings
  bool gossip = false;              // the syncs priced as gossip rounds (reduce: gossip)
  double gather_seconds = 0, ring_seconds = 0;  // one sync each way (one not priced: 0)
  double gossip_seconds = 0;                    // one gossip round (priced only for reduce: gossip)
  int gossip_rounds = 0;             // rounds to bring the replicas within 1% of their mean
  double exposed_sync_per_step = 0;  // over the job's steps, a warm-up's among them
  double step_seconds = 0;           // replica step + exposed sync per step
  double tokens_per_second = 0;      // in lockstep: every replica at the slowest one's pace
  // Each replica at its own pace, a sync every `every` steps of the fastest, pseudo-gradients
  // weighted by the tokens each trained (the design for local mode; the runtime steps the
  // replicas in lockstep today).
  double paced_tokens_per_second = 0;
  std::string sync_bottleneck;  // "FROM -> TO" of the slowest sync flow
  // Each replica's microbatches per step when paced by microbatches (the job's
  // replica_microbatches); empty: the workload's for every replica.
  std::vector<int> microbatches;
};

// Fails as Planner::Plan does when not even one pipeline fits.
StatusOr<ReplicaPlan> PlanReplicas(const Planner& planner, const ReplicaPlanRequest& request);

// The replicas made alike: one stage count S and one split for all (the runtime also runs
// replicas split differently; PlanJobReplicas in daemon/job/spec/job_spec.h prices both). The
// splits tried are each replica's own and the even split of each replica's stage count; under
// a split a replica keeps its S sites of most FLOP/s, in its planned order or matched by FLOP/s
// to the stages by layer count, whichever the cost model prices faster, and a replica with
// fewer than S stages or that fits its sites' memory in neither is left out. The split with
// the most replicas per second of the slowest one's step wins. Fails when no split keeps any.
// With `keep_all`, only splits that keep every replica count (an exact replica count). With
// `paced`, the split is chosen for the most replica steps per second summed over the replicas
// (each at its own pace, as PaceReplicas lets them run) rather than the slowest's.
StatusOr<std::vector<PlanResult>> AlignReplicas(const Planner& planner,
                                                const PlacementRequest& request,
                                                const std::vector<PlanResult>& replicas,
                                                bool keep_all = false, bool paced = false);

// Microbatches per replica that let replicas of different speeds step together: under a pace
// (a step time) every replica trains the most microbatches (at least 1, at most the
// workload's M) whose predicted step fits it; the paces tried are each replica's step at M
// (the slowest's: all M, lockstep), and the one with the most microbatches per second of the
// slowest step wins. Each replica's estimate becomes its estimate at its count. By replica.
StatusOr<std::vector<int>> PaceReplicas(const Planner& planner, const PlacementRequest& request,
                                        std::vector<PlanResult>* replicas);

// The replicas in the order whose ring (replica order, fleet/sync_ring.h) has the fastest
// slowest hop, a hop from one replica to the next costing its slowest flow (the parameters
// two stages share over their link): nearest neighbour from replica 0, then 2-opt on the
// slowest hop (then the sum), as PCCL orders its ring from the measured bandwidths. With
// `microbatches` (by replica), those follow their replicas. PlanReplicas keeps this order
// where the syncs go around a ring and it prices faster.
std::vector<PlanResult> OrderForRing(const Profiles& profiles, const model::ModelConfig& model,
                                     std::vector<PlanResult> replicas,
                                     std::vector<int>* microbatches = nullptr);

// The price of given replicas (each a pipeline over its own sites) under `sync`; with
// `microbatches` (by replica), each replica trains its own count per step, in lockstep.
ReplicaPlan PriceReplicas(const Profiles& profiles, const model::ModelConfig& model,
                          const PipelineWorkload& workload, std::vector<PlanResult> replicas,
                          const SyncCostOptions& sync, std::vector<int> microbatches = {});

}  // namespace longhaul::scheduler
