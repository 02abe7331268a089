// ReplicaSync: one stage's part in keeping a job's pipeline replicas in sync (`replicas: N`,
// fleet/sync_options.h). It owns what that takes from step to step: the sync group's exchange
// (SyncExchange, with the sync codec's error-feedback residuals), the adaptive sync codec's
// choice, local mode's outer step (fleet::OuterOptimizer: anchor and momentum) with a
// streaming sync's start state, and the token weights of each replica's pseudo-gradient. The
// stage runner calls it at three points of a step and hands it the stage's fragment, whose
// parameters and gradients it reads and writes; nothing else keeps a copy of its state.
//
//   sync mode step:  SyncGradients after the backward pass (the replicas' gradients summed).
//   local mode:      OuterStep after the optimizer step (a streaming sync due to finish, then
//                    a blocking sync at a sync step); StartSync after the step's checkpoint
//                    (a streaming sync, sync.overlap).
//   gossip:          OuterStep at a sync step runs a push-sum round instead of the group's
//                    outer step (fleet/gossip_node.h; a given sync.outer is each replica's own
//                    before its mix): the round's graph from the job's seed and the
//                    round, this stage's frames to its out-neighbours' stages, theirs from its
//                    in-neighbours, and after the last step one exact average over the live
//                    replicas, as the fleet simulator does (fleet/local_fleet.h). Over
//                    compressed links (sync.codec q4 and the like, fleet::GossipSendsLinks)
//                    each out-neighbour gets its own frame: the difference from the copy
//                    that link holds (fleet/gossip_link_node.h).
//
// Its durable part goes into the sync state beside each stage checkpoint (Save; Restore, or
// Fresh when nothing is carried: a first step, a layer move, a rejoin). A gossip stage keeps
// no group outer step: the state's anchor holds each coordinate's value when last sent and its
// momentum the push-sum weights (its own outer step, tracking: fields of their own); over
// compressed links the node's whole state (its weights and its links' copies) goes in a field
// of its own, the anchor and momentum empty.
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/file_env.h"
#include "common/mutex.h"
#include "common/status.h"
#include "daemon/job/exchange/inbox.h"
#include "daemon/job/exchange/sender.h"
#include "daemon/job/spec/stage_grid.h"
#include "daemon/job/state/sync_checkpoint.h"
#include "daemon/job/sync/gossip_round.h"
#include "daemon/job/sync/sync_codec.h"
#include "daemon/job/sync/sync_exchange.h"
#include "daemon/job/sync/tied_round.h"
#include "daemon/link_monitor.h"
#include "fleet/gossip.h"
#include "fleet/gossip_link_node.h"
#include "fleet/gossip_node.h"
#include "fleet/outer_optimizer.h"
#include "fleet/sync_options.h"
#include "model/config.h"
#include "model/replicated_fragment.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

struct ReplicaSyncOptions {
  std::string site;
  // This attempt's: the stage, the plan, the dropped and rejoining replicas, the ring.
  v1::StageAssignment assignment;
  StageGrid grid;
  fleet::SyncOptions sync;  // the job's sync block
  model::ModelConfig model;
  uint64_t steps = 0;                             // the job's
  uint64_t seed = 0;                              // the job's (gossip draws its graphs from it)
  std::vector<int> microbatches;                  // each replica's per step (AttemptMicrobatches)
  model::ReplicatedFragment* fragment = nullptr;  // the stage's; outlives this object
  // By flat stage: the senders to the other replicas' stages this stage's routes send to
  // (null: a dropped replica's, which sits out the attempt).
  std::map<int, LinkSender*> to_stage;
  Inbox* inbox = nullptr;          // the job's; keeps a streaming sync's frames
  LinkMonitor* monitor = nullptr;  // outbound link estimates, for the adaptive codec
  std::shared_ptr<spdlog::logger> log;
  double heartbeat_seconds = 1.0;
  const std::atomic<bool>* stop = nullptr;
  // The clock (NowSeconds) of the adaptive codec's windows and of the syncs' seconds
  // (SyncExchange's): a fake in tests.
  FileEnv* file_env = FileEnv::Default();
  // Gossip: how a peer stage stands (SyncExchangeOptions::peer_status), asked after five
  // heartbeats without its frames. Null: the rounds wait for every frame.
  std::function<PeerStatus(int stage)> peer_status;
  // Gossip: SyncExchangeOptions::skipped_me and on_unsent (a sender that left a replica out of a
  // round says so when asked). Null: neither.
  std::function<bool(int stage, uint64_t step)> skipped_me;
  std::function<void(int replica, uint64_t step)> on_unsent;
  // Gossip: a replica removed mid-attempt (SyncExchangeOptions::removed).
  std::function<bool(int replica)> removed;
  // Gossip: the link matrix round `round` draws its graph from (gossip_round.h: the
  // assignment's, or one the coordinator sent since), asked once as the round starts; the
  // caller notes the round drawn. Null: the assignment's for every round.
  std::function<GossipLinkEpoch(uint64_t round)> links_at;
  // Gossip on a multi-stage replica's first or last stage with a tied head: the link to the
  // tied embedding's other holder (tied_round.h). `tied_send` sends `bytes` of the sync after
  // `step` (`what`: kTiedView, kTiedFrames) and `tied_receive` takes the other's as they came;
  // `tied_values` sends the first stage's tied embedding to the last, or takes it there into
  // `values`. Null: no other holder.
  std::function<Status(uint64_t step, uint32_t what, std::vector<uint8_t> bytes)> tied_send;
  std::function<StatusOr<std::vector<uint8_t>>(uint64_t step, uint32_t what)> tied_receive;
  std::function<Status(uint64_t step, std::span<float> values)> tied_values;
};

class ReplicaSync {
 public:
  // REQUIRES: grid.replicas >= 2, a fragment, an inbox, a monitor and a file env.
  static StatusOr<std::unique_ptr<ReplicaSync>> Create(ReplicaSyncOptions options);
  ~ReplicaSync();

  bool local() const { return o_.sync.mode == fleet::SyncMode::kLocal; }
  bool gossip() const { return o_.sync.reduce == fleet::SyncReduce::kGossip; }
  // Every replica's microbatches per step, summed (sync mode step divides the loss by it).
  int union_microbatches() const { return union_microbatches_; }
  const std::vector<float>& token_weights() const { return token_weights_; }
  // The floats of each slice's error-feedback residual, as the sync state stores them.
  std::vector<int64_t> ResidualSizes() const;
  // The bytes of the gossip link state the sync state stores (0 unless over compressed links).
  uint64_t LinkStateBytes() const { return links_ ? links_->StateBytes() : 0; }

  // Nothing carried: local mode's first anchor is the fragment's parameters now. `resync`: not
  // the job's start (a layer move): over compressed links the peers' copies of this stage's
  // links are not its own, and every link starts again from key frames.
  void Fresh(bool resync = false);
  // From the sync state of a stage checkpoint at `step`.
  Status Restore(SyncState state, uint64_t step);
  // A rejoining replica's outer state, taken from a live replica (its anchor and momentum).
  Status RestoreOuter(std::vector<float> anchor, std::vector<float> momentum);
  // Into the sync state beside a stage checkpoint: anchor and momentum (local mode) and the
  // residuals (none when every one is empty).
  void Save(SyncState* state) const;

  // Sync mode step: the fragment's gradients become the live replicas' sum.
  // `compute_seconds`: this step's compute (the adaptive codec's budget).
  Status SyncGradients(uint64_t step, double compute_seconds);
  // Gossip with sync.tracking, after each optimizer step (of learning rate `lr`), before
  // OuterStep: the replica's correction moves the fragment on (fleet::GossipNode::Correct).
  void Correct(float lr);
  // Local mode, after the optimizer step of `step` that took `compute_seconds` of compute.
  Status OuterStep(uint64_t step, double compute_seconds);
  // Local mode with sync.overlap, after the checkpoint of `step`. `resumed`: started again by
  // an attempt resuming from that checkpoint (a rejoining replica's zero pseudo-gradient
  // then does not count).
  Status StartSync(uint64_t step, double compute_seconds, bool resumed);
  // Gather and ring, local mode: the replicas `left` are out of this step's sync and every
  // later one (StepDecision.removed_replicas, applied before OuterStep): the pseudo-gradient
  // weights are the replicas left's, the rings theirs. FailedPrecondition for a gossip or
  // step-mode job, or with a streaming sync in flight.
  Status Leave(std::span<const uint32_t> left);
  // Ends a streaming sync in flight (its receiver too).
  void Cancel();

  double wait_seconds() const;
  std::vector<OutboundUsage> Usage() const;
  v1::SyncReport Report() const;

 private:
  explicit ReplicaSync(ReplicaSyncOptions options) : o_(std::move(options)) {}
  Status Init();
  // sync: {codec: adaptive}: the codec of the next sync of `phase` for `compute_seconds` of
  // compute until the one after (sync_codec.h).
  Status ChooseCodec(double compute_seconds, int phase);
  // The inner steps' compute until the next sync, from one step's.
  double ComputeUntilNextSync(uint64_t step, double step_compute_seconds) const;
  // Gossip: the sketch of the parameters (Report's), the push-sum round of the sync after
  // `step`, then, after the job's last step, the exact average.
  Status GossipSync(uint64_t step);
  // GossipSync's round over compressed links, on `params` (the fragment's, in place), its
  // graph drawn from links epoch `links_epoch`, which its frames name.
  // `removed`: the replicas removed as this stage knows them (TakeRemovals).
  Status LinkRound(uint64_t step, uint64_t round, const fleet::GossipGraph& graph,
                   uint32_t links_epoch, std::vector<float>& params, const std::string& where,
                   uint64_t removed);
  // The job's end: one exact average over the live replicas. `frame(k)` is this stage's dense
  // gossip frame of slice k (its values and weights); every live replica's goes to every other
  // (keys tagged past the round's), and each slice's frames, this stage's own through the same
  // checks, go in replica order to `average(k, frames)` (the tied embedding's those both its
  // holders took). `params`: the fragment's, which the average writes.
  Status FinalAverage(
      uint64_t step, const std::string& where, std::span<float> params,
      const std::function<std::vector<uint8_t>(size_t k)>& frame,
      const std::function<Status(size_t k, std::span<const fleet::GossipFrame* const>)>& average);
  // Gossip, after the exchange of the round after `step`, whose frames came from `senders` and
  // did not go to `unsent`, with `removed` replicas removed as this stage sees them. With
  // another holder of the tied embedding (tied_k_), the two swap views and the first sends the
  // frames of the embedding it took (tied_round.h), `hash` its copy's before the round: what
  // both apply to it, and on the last stage those frames, decoded for the slice as this
  // stage's own exchange decodes them (agreed.came's, in its order).
  struct TiedSwap {
    TiedAgreement agreed;
    std::vector<fleet::LinkFrame> link_frames;      // over compressed links
    std::vector<fleet::GossipFrame> gossip_frames;  // fp32 shares
  };
  StatusOr<TiedSwap> SwapTied(uint64_t step, uint64_t hash, const std::vector<int>& senders,
                              const std::vector<int>& unsent, uint64_t removed);
  // The hash of the tied embedding in `params` (0 without another holder).
  uint64_t TiedHashOf(std::span<const float> params) const;
  // The first stage's tied embedding (in `params`) goes to the last, which takes it: after the
  // final average (the first stage's), and after a round whose views' hashes differed
  // (`mend`: counted and logged).
  Status SendTied(uint64_t step, std::span<float> params, const std::string& where, bool mend);
  // Gossip with tracking: every correction 0 again once more replicas are removed than the
  // last round saw (`removed`: as agreed with the tied embedding's other holder).
  void TakeRemovals(uint64_t removed);
  // The fragment's slices that a sync of `phase` (fleet::LocalSyncAction) covers.
  std::vector<fleet::SyncSlice> PhaseSlices(int phase) const;
  std::string Where() const;

  ReplicaSyncOptions o_;
  int stage_ = 0;
  int union_microbatches_ = 1;
  std::vector<float> token_weights_;  // local mode's pseudo-gradient weights, by replica
  std::unique_ptr<SyncExchange> exchange_;
  std::vector<SyncRoute> routes_;  // this stage's slices and their holders
  std::vector<bool> live_;         // by replica: not dropped in this attempt
  uint64_t removed_seen_ = 0;      // gossip: replicas removed mid-attempt, as the last round saw
  // Gossip with another holder of the tied embedding: its slice's index in routes_ (else -1),
  // and whether this stage is the first (which gossips it; the last replays its rounds).
  int tied_k_ = -1;
  bool tied_first_ = false;
  std::vector<double> gossip_links_;         // the assignment's (gossip_round.h); empty: alike
  std::optional<fleet::GossipNode> gossip_;  // sync.reduce gossip with fp32 shares
  // sync.reduce gossip over compressed links (fleet::GossipSendsLinks), in place of gossip_.
  std::unique_ptr<fleet::LinkGossipNode> links_;
  std::optional<compression::CodecSpec> link_codec_;  // links_'s (the exchange's)
  uint64_t stale_seen_ = 0;                           // links_'s stale frames already logged
  std::optional<SyncCodecChooser> codec_;             // sync: {codec: adaptive}
  fleet::OuterOptimizer outer_;                       // local mode
  // A streaming sync in flight: the parameters at its start (its weights went with it to
  // SyncExchange::Start).
  std::vector<float> started_;
  // Gossip: the sketch of the stage's parameters before its latest round, and the steps done
  // then (Report sends them for the consensus distance).
  mutable Mutex sketch_mu_;
  std::vector<double> sketch_ ABSL_GUARDED_BY(sketch_mu_);
  uint64_t sketch_step_ ABSL_GUARDED_BY(sketch_mu_) = 0;
  // Over compressed links: links_'s counts after its latest round (Report's, another thread's).
  uint64_t key_frames_ ABSL_GUARDED_BY(sketch_mu_) = 0;
  uint64_t frames_skipped_ ABSL_GUARDED_BY(sketch_mu_) = 0;
  // Rounds after which the last stage took the first's copy of the tied embedding (SendTied).
  uint64_t tied_mends_ ABSL_GUARDED_BY(sketch_mu_) = 0;
};

}  // namespace longhaul::daemon
