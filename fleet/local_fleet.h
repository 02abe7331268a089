// N pipeline replicas of one model trained in one process and kept in sync the way a job's
// sync groups keep them over the network (sync_options.h, sync_reduce.h, outer_optimizer.h):
// the single-process stand-in for a fleet, as model::FragmentChain is for one pipeline. The
// convergence study of replicated training runs on it, and it is the oracle the daemon's
// replicated jobs are tested against.
//
// Replica r is a FragmentChain on its own backend reading shard r of the data (data_loader.h:
// blocks of one step's windows), so a step of the N replicas reads what one pipeline with N
// times the microbatches would. Each sync encodes, per replica and parameter slice (each
// whole non-layer tensor and each layer's slice of a per-layer tensor, layout.h), one frame
// with that replica's ContributionEncoder for the slice (error feedback per sender and
// tensor; a sparsifier keeps its fraction of every slice, not of the model), and sums the
// decoded frames in replica order; the traffic counts the bytes an all-gather of those
// frames puts on the links (every frame to every other replica). With sync.reduce ring each
// slice goes around a ring of the replicas instead (sync_ring.h), every hop's frame counted.
//
//   step:  gradients (each replica's with dloss 1 / (B T x all replicas' microbatches))
//          summed before one clipped AdamW step that every replica takes identically: one
//          model, the union batch.
//   local: each replica takes ordinary steps (its own clipping and AdamW state); after every
//          `every`-th step and the last, the token-weighted mean pseudo-gradient (TokenWeights)
//          goes through the outer step and every replica continues from the new anchor.
//          With sync.overlap k the sync starts there and ends k steps later (each replica
//          then continues from the new anchor plus what its k steps moved), as the daemons'
//          streaming syncs do. With sync.stagger P each sync covers one phase's slices
//          (SlicePhase), at that phase's steps (LocalSyncAt), and the outer step and the
//          rebase touch only those slices.
//          With sync.reduce gossip there is no anchor and no outer step: at each sync every
//          replica mixes its parameters with sync.fanout out-neighbours drawn that round from
//          the link matrix (gossip_mixer.h: a sparse push-sum round, the codec's top-k
//          fraction of each slice sent as fp32 shares), so the replicas stay close, not equal;
//          after the last step one exact average (an all-gather of the parameters, counted)
//          leaves them equal. With sync.tracking each replica's local steps also apply its
//          correction, and the rounds mix the replicas' drifts beside their parameters
//          (gradient tracking, gossip_node.h). With a dense lossy sync.codec (q4: a job's
//          `reduce: gossip, codec: q4`) the rounds send every coordinate as each link's
//          compressed difference instead (gossip_links.h; the daemons' stages run the same
//          nodes).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "fleet/gossip_links.h"
#include "fleet/gossip_mixer.h"
#include "fleet/outer_optimizer.h"
#include "fleet/sync_options.h"
#include "fleet/sync_reduce.h"
#include "fleet/sync_slices.h"
#include "kernels/ops.h"
#include "model/chain.h"
#include "model/config.h"
#include "model/data_loader.h"
#include "model/optimizer.h"
#include "model/token_data.h"

namespace longhaul::fleet {

struct LocalFleetOptions {
  int replicas = 1;      // N
  int fragments = 1;     // K per replica (the result does not depend on it)
  int batch_size = 1;    // B: sequences per microbatch
  int seq_len = 1;       // T
  int microbatches = 1;  // M per replica and step
  // Each replica's microbatches per step when they differ (a slower replica training fewer);
  // empty: `microbatches` each. Shard r then reads blocks of B x M_r windows of rounds of
  // B x (their sum).
  std::vector<int> replica_microbatches;
  int microbatches_of(int r) const {
    return replica_microbatches.empty() ? microbatches
                                        : replica_microbatches[static_cast<size_t>(r)];
  }
  uint64_t seed = 0;  // the data order (every shard of the same permutation)
  SyncOptions sync;   // with a fixed codec
  // Gossip: the links' bandwidths by (sender, receiver), N x N (empty: every link the same),
  // and the fraction of the up links that are missing in each round (drawn per round from
  // `seed`: a graph that changes from round to round).
  std::vector<std::vector<double>> bandwidth;
  double missing_links = 0;
  // Skewed shards (the Create that takes the token stream): replica r reads only the r-th of
  // N equal contiguous parts of the stream (its windows shuffled), not its share of every
  // block of one permutation: replicas on different data, as sites with their own corpora
  // are. Every part needs seq_len + 1 tokens.
  bool skewed_shards = false;
};

struct FleetStepResult {
  float loss = 0;  // mean over every replica's microbatches
  bool synced = false;
  // Gossip: the consensus distance (gossip.h) of the replicas' parameters before the step's
  // round (after its local steps); -1 when the step had no round.
  double consensus = -1;
};

// What the syncs put on the links so far.
struct FleetTraffic {
  uint64_t syncs = 0;
  uint64_t wire_bytes = 0;   // gather: sum over frames of frame bytes x (N - 1) receivers;
                             // ring: every hop's frames
  uint64_t raw_bytes = 0;    // the same count for fp32 values (4 bytes each, no header)
  uint64_t tokens = 0;       // trained by all replicas together
  uint64_t final_bytes = 0;  // gossip: of wire_bytes, the final exact average's
  double codec_seconds = 0;
};

class LocalFleet {
 public:
  // `ops`: one backend per replica (N), outliving the fleet.
  static StatusOr<std::unique_ptr<LocalFleet>> Create(const model::ModelConfig& config,
                                                      std::shared_ptr<const model::TokenData> train,
                                                      const LocalFleetOptions& options,
                                                      const std::vector<kernels::Ops*>& ops);
  // The same with each replica's windows from `windows` (called once per replica: a job's
  // data.train through model/job_windows.h, say).
  using WindowFactory = std::function<StatusOr<std::unique_ptr<model::WindowSource>>()>;
  static StatusOr<std::unique_ptr<LocalFleet>> Create(const model::ModelConfig& config,
                                                      const WindowFactory& windows,
                                                      const LocalFleetOptions& options,
                                                      const std::vector<kernels::Ops*>& ops);

  // The same initial parameters on every replica (and as the first anchor).
  void InitParameters(uint64_t seed);
  // One step of every replica; `step` is 0-based.
  StatusOr<FleetStepResult> TrainStep(const model::OptimizerOptions& optimizer, int step,
                                      int total_steps);

  int size() const { return static_cast<int>(replicas_.size()); }
  model::FragmentChain& replica(int r) { return *replicas_[r].chain; }
  const FleetTraffic& traffic() const { return traffic_; }
  // The largest |difference| between any replica's parameters and replica 0's (0 after a
  // sync, and always in step mode); NaN when any difference is NaN.
  float MaxDivergence() const;

 private:
  // Replica r's windows: `windows(r)`, sharded as the options say (skewed: read whole).
  using ReplicaWindows = std::function<StatusOr<std::unique_ptr<model::WindowSource>>(int)>;
  static StatusOr<std::unique_ptr<LocalFleet>> CreateWith(const model::ModelConfig& config,
                                                          const ReplicaWindows& windows,
                                                          const LocalFleetOptions& options,
                                                          const std::vector<kernels::Ops*>& ops);
  struct Replica {
    std::unique_ptr<model::FragmentChain> chain;
    std::unique_ptr<model::DataLoader> loader;
    std::vector<std::unique_ptr<ContributionEncoder>> encoders;  // one per slice
  };
  LocalFleet(const model::ModelConfig& config, const LocalFleetOptions& options)
      : config_(config), options_(options) {}
  StatusOr<FleetStepResult> StepMode(const model::OptimizerOptions& optimizer, int step,
                                     int total_steps);
  StatusOr<FleetStepResult> LocalMode(const model::OptimizerOptions& optimizer, int step,
                                      int total_steps);
  // A gossip round after `done` of `total` steps (a sync step), or the final average.
  Status GossipSync(uint64_t done, uint64_t total, FleetStepResult* result);
  // Round `round`'s link matrix: options_.bandwidth with options_.missing_links of it down.
  std::vector<std::vector<double>> RoundLinks(uint64_t round) const;
  // Encodes each replica's `contributions[r]` (the slices of `phase`), sums the decoded
  // frames with weights[r] into *sum (those slices), and counts the traffic.
  Status Reduce(const std::vector<std::vector<float>>& contributions,
                const std::vector<float>& weights, uint64_t seed, int phase,
                std::vector<float>* sum);
  // The outer step of the sync after step `done` (OuterStepAt) with `mean` on the slices of
  // `phase`.
  void OuterStep(uint64_t done, int phase, const std::vector<float>& mean);
  std::vector<int> Microbatches() const;  // by replica

  model::ModelConfig config_;
  LocalFleetOptions options_;
  std::vector<Replica> replicas_;
  std::vector<SyncSlice> slices_;  // of the whole model
  std::vector<int> phases_;        // by slice: SlicePhase
  OuterOptimizer outer_;
  // A streaming sync in flight (sync.overlap): each replica's parameters when it started,
  // and the mean pseudo-gradient its frames carry.
  std::vector<std::vector<float>> started_;
  std::vector<float> pending_mean_;
  int pending_phase_ = kEveryPhase;
  FleetTraffic traffic_;
  std::unique_ptr<GossipRounds> gossip_;  // sync.reduce gossip
  uint64_t gossip_rounds_ = 0;
};

}  // namespace longhaul::fleet
