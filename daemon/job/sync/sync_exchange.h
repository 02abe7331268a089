// SyncExchange: one stage's side of the syncs between pipeline replicas (stage_grid.h).
// AllGather sends this stage's contribution (its gradient in sync mode step, its
// pseudo-gradient in local mode) as one frame per parameter slice (fleet/sync_slices.h),
// encoded with the job's sync codec and error feedback per slice (fleet/sync_reduce.h), to
// the stages of the other replicas that hold the slice (sync_routes.h), takes one frame per
// slice from every other live replica as they arrive, and sums every replica's decoded
// contribution, its own included, in replica order: every holder of a slice computes the same
// bits, so replicas that start identical stay identical, however each is split. A refused send
// (naming the peer) or a stop ends the wait within one heartbeat.
//
// With `ring` (sync.reduce: ring, sync_routes.h RingsAgree) each slice goes around the
// ring of its live holders instead (fleet/sync_ring.h): Start sends the first hop's chunk to
// the ring's next stage, the receiver thread takes each hop's frame from the previous one,
// adds this stage's part, and sends the next hop on; every holder ends with the same bits.
// The receiver takes every hop's frame as it comes (a hop that overtook the one before waits
// in the exchange, not in the bounded inbox) and queues what it sends without blocking (a
// backlog it drains between frames), so a full link can neither stall the ring nor a stop.
//
// With gossip (sync.reduce: gossip, fleet/gossip_node.h) there is no sum: Gossip sends the
// caller's gossip frame of each slice to the holders in this round's out-neighbours only and
// takes each slice's frame from its in-neighbours, checked for the slice; the caller applies
// them (replica_sync.h).
//
// A streaming sync (sync.overlap) is AllGather in two halves: Start sends and takes the
// others' frames on a thread of its own while the stage trains on; Finish waits for what has
// not come yet and sums. The wait in Finish is the sync's exposed time; the rest of its time
// on the links ran behind the steps (hidden). A staggered sync (sync.stagger) covers one
// phase's slices (SyncRoute::phase): only those are sent, taken and summed.
#pragma once

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/file_env.h"
#include "common/mutex.h"
#include "common/status.h"
#include "daemon/job/exchange/inbox.h"
#include "daemon/job/exchange/sender.h"
#include "daemon/job/exchange/stage_exchange.h"
#include "daemon/job/spec/stage_grid.h"
#include "daemon/job/sync/sync_routes.h"
#include "daemon/job/sync/tied_round.h"
#include "fleet/gossip_link_node.h"
#include "fleet/gossip_node.h"
#include "fleet/sync_options.h"
#include "fleet/sync_reduce.h"
#include "fleet/sync_ring.h"
#include "fleet/sync_slices.h"

namespace longhaul::daemon {

struct SyncExchangeOptions {
  std::string site, job_id;
  uint32_t attempt = 0;
  int stage = 0;  // this stage's flat index
  StageGrid grid;
  std::vector<SyncRoute> routes;           // the fragment's slices (SyncRoutes)
  std::map<int, LinkSender*> to_stage;     // by flat stage: the live stages routes send to
  std::map<int, std::string> stage_sites;  // by flat stage: the sites of those stages
  std::vector<bool> live;                  // by replica; false: dropped (empty: all live)
  bool ring = false;                       // reduce around rings (else gather)
  std::string codec;                       // a fixed sync codec (fleet/sync_options.h)
  // A slice SetCodec leaves at `codec`, the one it started with (-1: none): the tied
  // embedding under the adaptive sync codec, whose copies on a replica's first and last
  // stage must take the same steps while each stage chooses from its own links.
  int pinned_slice = -1;
  int model_slices = 0;  // ParameterLayout::num_slices (for the seeds)
  Inbox* inbox = nullptr;
  double heartbeat_seconds = 1.0;
  const std::atomic<bool>* stop = nullptr;
  // The clock (NowSeconds) of the syncs' exposed and hidden seconds (Report, wait_seconds).
  FileEnv* file_env = FileEnv::Default();
  // Gossip: asked of a stage whose frames have not come for gossip_grace_seconds (then
  // every gossip_grace_seconds, or every heartbeat while its answer is kStarting), and of a
  // replica found lost before, at once. Null: never asked; the exchange waits for every frame
  // until stopped.
  std::function<PeerStatus(int stage)> peer_status;
  // Gossip: whether a running sender `stage` left this stage's replica out of the round after
  // `step` (it found this replica lost then, with a link down between them, say), asked after
  // peer_status says kRunning: that round goes on without its frames, which will not come.
  // Null: never asked (a running sender's frames are waited for).
  std::function<bool(int stage, uint64_t step)> skipped_me;
  // Gossip: told of each replica this stage leaves out of a round (*unsent), with the round's
  // step, for skipped_me's answers at the other end. Null: nobody is told.
  std::function<void(int replica, uint64_t step)> on_unsent;
  // Gossip: whether a replica was removed from the job mid-attempt (no ping: the stage's own
  // record). Each exchange counts such a replica lost from its start: sent nothing (its share
  // stays here) and not waited for. Null: none is.
  std::function<bool(int replica)> removed;
  double gossip_grace_seconds = 5;
  // Gossip with sync.tracking: a round's frames carry the sender's drifts (fleet/gossip_node.h;
  // the final average's do not).
  bool gossip_tracking = false;
  // Gossip over compressed links (fleet::GossipSendsLinks): the codec of the rounds'
  // differences; a round's frames are link frames (fleet/gossip_link_node.h), the final
  // average's fp32 gossip frames as ever. None: every frame is a gossip frame.
  std::optional<compression::CodecSpec> gossip_link_codec;
  // Gossip with a tied head: the tied embedding's slice (its index), which a multi-stage
  // replica's first stage alone exchanges (daemon/job/sync/tied_round.h). Such a first stage
  // keeps that slice's frames as they came (a round's, TakeForwarded); such a last stage sends
  // none of it and waits for none, and no stage sends it one. -1: none.
  int tied_slice = -1;
};

class SyncExchange {
 public:
  static StatusOr<std::unique_ptr<SyncExchange>> Create(SyncExchangeOptions options);

  // out = sum over the live members r, in replica order, of weights[r] x decode(the member's
  // frames of `values`), on the slices of `phase` (fleet::kEveryPhase: all; out is 0 on the
  // others); values and out are the fragment's flat arrays. REQUIRES: same sizes, covering
  // every slice; a weight per replica.
  Status AllGather(uint64_t step, std::span<const float> values, std::span<const float> weights,
                   std::span<float> out, int phase = fleet::kEveryPhase);
  // AllGather's halves: Start encodes and sends `values` (the sync of `step`, weighed by
  // `weights`) and takes the others' frames in the background; Finish waits for them and
  // writes the sum. One sync in flight at a time (FailedPrecondition otherwise).
  Status Start(uint64_t step, std::span<const float> values, std::span<const float> weights,
               int phase = fleet::kEveryPhase);
  Status Finish(std::span<float> out);
  bool in_flight() const { return receiver_.joinable(); }
  // One gossip exchange of the sync of `step` (blocking): frames[k], route k's gossip frames,
  // go to the stages of the replicas in `to` that take the slice from this stage: one frame
  // for every one of them, or one per replica (frames[k][r] to replica r; over compressed
  // links each link has its own); none (empty) sends nothing. Each slice's frame comes from
  // the replicas in `from` (ascending), from the stage this stage adds the slice from, checked
  // for the slice. The frames' keys carry `tag` + the sender's replica (a round and the job's
  // final average in the same step differ by it). Over compressed links a round's frames
  // (tag kGossipRoundTag) come as link frames, into *links (by route, by sender as
  // *received's), and *received holds none.
  //
  // Gossip goes on without a replica that is gone (issue 36: no replica waits for another
  // that cannot come, even with the coordinator down): with options.peer_status, a sender
  // whose frames have not all come within the grace is asked for (then every grace); once it
  // is gone, this exchange goes on without its frames. A replica found lost stays lost until
  // its stage runs this attempt again: it is asked for at once in later exchanges, and while
  // it is lost it is sent nothing (its share of what would have been sent stays here:
  // *unsent names those replicas of `to`, for the caller's push-sum weights).
  // *senders: the replicas of `from` whose frames came, ascending; (*received)[k][i] is
  // (*senders)[i]'s frame of route k.
  // `links_epoch`: the epoch of the link matrix the round's graph was drawn from
  // (gossip_round.h), which each frame names (TensorFrame.links_epoch).
  Status Gossip(uint64_t step, uint32_t tag,
                std::span<const std::vector<std::vector<uint8_t>>> frames, std::span<const int> to,
                std::span<const int> from, std::vector<std::vector<fleet::GossipFrame>>* received,
                std::vector<int>* senders, std::vector<int>* unsent,
                std::vector<std::vector<fleet::LinkFrame>>* links = nullptr,
                uint32_t links_epoch = 0);
  // The frames of options.tied_slice the latest gossip round of a first stage took, as they came,
  // by sender (ascending, as *senders); emptied.
  std::vector<std::pair<int, std::vector<uint8_t>>> TakeForwarded() {
    return std::move(forwarded_);
  }
  // Replicas found lost by gossip exchanges so far (each counted once per time it was lost).
  uint64_t gossip_losses() const { return gossip_losses_; }
  // Gather and ring: the replicas `left` are out of every later sync (a removal at a step
  // every member applies alike: StepDecision.removed_replicas). Each ring is the live
  // replicas' again, and this stage sends to their holders no more. FailedPrecondition while a
  // sync is in flight; InvalidArgument for this stage's own replica, one outside the grid, or
  // a ring whose next stage has no sender.
  Status Leave(std::span<const uint32_t> left);
  // Ends a sync in flight (its receiver stops within a heartbeat) and drops what it received.
  void Cancel();
  ~SyncExchange();

  // Encodes the next syncs with `codec` (a fixed sync codec), each slice's residual carried
  // over, the pinned slice excepted; `reason` is the usage's explanation (the adaptive
  // choice's). FailedPrecondition while a sync is in flight (its receiver encodes, on a ring).
  Status SetCodec(const std::string& codec, const std::string& reason);
  const std::string& codec() const { return o_.codec; }

  // The error-feedback residuals, by slice (for the stage checkpoint), and their restore.
  // REQUIRES: no sync in flight (a ring's receiver encodes).
  std::vector<std::vector<float>> residuals() const;
  Status RestoreResiduals(std::vector<std::vector<float>> residuals);

  // What this stage sent to each stage it sends to (their sites, by stage).
  std::vector<OutboundUsage> Usage() const ABSL_LOCKS_EXCLUDED(mu_);
  // The stages a sync sends to (every other live holder when gathering, the next one around
  // each ring) and the share of the fragment's encoded bytes each gets: 1, or 2 (L - 1) / L
  // on a ring of L (what the adaptive sync codec prices).
  std::vector<int> SendsTo() const;
  double SentShare() const;
  // The values of the fragment's slices that a sync of `phase` carries.
  int64_t PhaseValues(int phase) const;
  double wait_seconds() const { return wait_seconds_; }
  // The syncs so far: how many, their time (encode, send, wait, decode, sum), the bytes sent.
  v1::SyncReport Report() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  explicit SyncExchange(SyncExchangeOptions options) : o_(std::move(options)) {}
  Status SendError() const;
  // Queues `frame` of route k's slice for stage `to`: microbatch is the sender's replica
  // (gather) or the ring hop.
  // From the receiver thread (`backlog`): onto backlog_ and as much of it as fits queued.
  Status Send(uint64_t step, size_t k, uint32_t microbatch, int to, std::vector<uint8_t> frame,
              bool backlog = false, uint32_t links_epoch = 0);
  Status DrainBacklog();
  Status StartRing(uint64_t step, std::span<const float> values, float weight, int phase,
                   std::vector<TensorKey>* wanted);
  // One frame taken by the receiver: decoded into decoded_ (gather), or kept until the ring's
  // hops before it are in, then each hop taken in order and the next one sent (ring).
  Status TakeGathered(const TensorKey& key, const ReceivedTensor& t);
  Status TakeRing(const TensorKey& key, ReceivedTensor t);
  Status TakeGossip(const TensorKey& key, const ReceivedTensor& t);
  // Whether `route`'s slice is the tied embedding and `stage` a multi-stage replica's last
  // stage, which takes it from its first (options.tied_slice).
  bool Relays(const SyncRoute& route, int stage) const {
    return route.slice.index == o_.tied_slice && ReplaysTied(o_.grid, stage);
  }
  // Each route's ring over the live replicas (places_). FailedPrecondition for a ring without
  // its next sender.
  Status PlaceRings();
  // A usage entry (usage_) for each stage a sync sends to that has none yet; a stage no longer
  // sent to keeps its own, with the bytes it was sent.
  void NoteUsage() ABSL_LOCKS_EXCLUDED(mu_);
  // peer_status of `stage` (kRunning without it).
  PeerStatus StatusOf(int stage) const;
  // Gossip: whether no frame of `replica` came yet this exchange; whether every stage of it
  // that `wanted` still waits for left this replica out of the round after `step` (skipped_me).
  bool NothingFrom(int replica) const;
  bool SkippedByAll(int replica, const std::vector<TensorKey>& wanted, uint64_t step) const;
  // The receiver's look at the senders it still waits for (gossip): the gone ones' keys out
  // of `wanted`, into gossip_skipped_. Whether one of those left is not known yet (kStarting).
  bool DropLostSenders(std::vector<TensorKey>* wanted);
  void Receive(std::vector<TensorKey> wanted);  // the receiver thread
  void Join();

  SyncExchangeOptions o_;
  std::vector<std::unique_ptr<fleet::ContributionEncoder>> encoders_;  // by slice
  // The sync in flight: every member's decoded contribution by replica (this stage's from its
  // own frames), filled by the receiver thread until it ends with receive_status_.
  std::vector<std::vector<float>> decoded_;
  std::vector<float> weights_;  // the sync in flight's, by replica
  // A gossip exchange in flight: its key tag, the replicas it takes frames from, and their
  // frames by route, by position in gossip_from_.
  bool gossip_ = false;
  uint32_t gossip_tag_ = 0;
  std::vector<int> gossip_from_;
  std::vector<std::vector<std::optional<fleet::GossipFrame>>> gossip_in_;
  std::vector<std::vector<std::optional<fleet::LinkFrame>>> gossip_link_in_;  // link frames
  std::vector<int> gossip_skipped_;  // this exchange's senders found lost
  // options.tied_slice's frames as they came: by position in gossip_from_ (the receiver's),
  // then by sender of the frames taken (TakeForwarded).
  std::vector<std::vector<uint8_t>> gossip_raw_;
  std::vector<std::pair<int, std::vector<uint8_t>>> forwarded_;
  std::vector<bool> lost_;  // by replica: found lost by an exchange, not back since
  uint64_t gossip_losses_ = 0;
  // A ring sync in flight: this stage's values and the sum, one member per route, the routes'
  // rings (from Create).
  std::vector<float> ring_values_, ring_out_;
  std::vector<std::optional<fleet::RingMember>> ring_;  // by route; none: not in the phase
  std::vector<RingPlace> places_;
  std::vector<std::map<int, ReceivedTensor>> early_;    // by route: hops ahead of the next
  std::deque<std::pair<int, OutgoingTensor>> backlog_;  // (to stage, tensor), receiver only
  std::thread receiver_;
  std::atomic<bool> cancel_{false};
  Status receive_status_;
  // begin_: Start called; started_at_: its frames queued (encoding and queueing are exposed);
  // received_at_: the receiver's end.
  double begin_ = 0, started_at_ = 0, received_at_ = 0;
  bool blocking_ = false;    // AllGather: Start and Finish at once
  double wait_seconds_ = 0;  // the stage's thread only (Finish, wait_seconds())
  mutable Mutex mu_;
  std::map<int, OutboundUsage> usage_ ABSL_GUARDED_BY(mu_);  // by flat stage sent to
  uint64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
  double sync_seconds_ ABSL_GUARDED_BY(mu_) = 0;  // exposed: the stage waiting in syncs
  // A streaming sync's time on the links behind the steps.
  double hidden_seconds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace longhaul::daemon
