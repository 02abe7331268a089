// StageAdmission: what one stage of one job attempt accepts from its peers, decided once from
// its assignment and job spec: who may send it which tensor (its pipeline neighbours'
// activations, targets and gradients, the tied partner's embedding gradient, the sync frames
// of the other replicas its routes name, or its ring predecessor's hops), the shape each must
// have, and the steps and microbatches inside the attempt. The job host asks it about every
// tensor on its first chunk, before the rest of the payload is buffered, so a wrong peer
// cannot make the site allocate; nothing else keeps a copy of these shapes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/job/spec/job_spec.h"
#include "daemon/job/spec/stage_grid.h"
#include "daemon/job/sync/gossip_round.h"
#include "daemon/job/sync/sync_routes.h"
#include "fleet/sync_options.h"
#include "model/config.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

class StageAdmission {
 public:
  // REQUIRES: `assignment` passed CheckAssignment against `spec` (job_checks.h).
  // `site`: this site, as errors name it.
  StageAdmission(const std::string& site, const v1::StageAssignment& assignment,
                 const JobSpec& spec);

  uint32_t attempt() const { return attempt_; }

  // This admission with the replicas `removed` out of the job for good (the coordinator's
  // KIND_REMOVE_REPLICAS, mid-attempt): every frame of a step from `from_step` on from one of
  // their stages is refused (from 0: every frame), and a ring's sync frames of those steps go
  // around the rings of the replicas left. The gossip rounds' graphs stay the attempt's (every
  // stage draws them alike; a removed replica is gone in them). A replica removed before keeps
  // the earlier step. INVALID_ARGUMENT for a replica outside the plan or this stage's own.
  StatusOr<std::shared_ptr<const StageAdmission>> WithRemoved(std::span<const uint32_t> removed,
                                                              uint64_t from_step = 0) const;
  // This admission with the coordinator's link matrix epoch `epoch` drawing the gossip rounds
  // from `from_round` on (KIND_GOSSIP_LINKS, once the stage took it: StageRunner::
  // SetGossipLinks). A round's frame is checked against the graph of the epoch in force at its
  // round, and must name that epoch; one naming a later epoch than this admission knows is
  // UNAVAILABLE (the sender retries: this site is told next). INVALID_ARGUMENT for an epoch out
  // of order.
  StatusOr<std::shared_ptr<const StageAdmission>> WithGossipLinks(uint32_t epoch,
                                                                  uint64_t from_round,
                                                                  std::vector<double> links) const;
  int64_t steps() const { return steps_; }

  // The tensor whose first chunk `head` (the start of its payload: the compression frame's
  // header) and metadata `first` came from `caller`, the site the transport established.
  // PERMISSION_DENIED naming the caller and the role for a sender that may not send it;
  // UNAVAILABLE for a sync frame of a later attempt (the sender retries once this site has
  // it); FAILED_PRECONDITION for one of an earlier attempt; INVALID_ARGUMENT for a shape, size,
  // step, microbatch, slice or hop outside the stage; DATA_LOSS for a header that does not
  // parse. Whether the inbox still takes the key is the inbox's to say (Inbox::CheckKey).
  Status Check(const v1::TensorFrame& first, std::span<const uint8_t> head,
               const std::string& caller) const;
  // The whole payload of a tensor that passed Check: a compression frame's sizes and checksum,
  // or a gossip job's sync frame (fleet/gossip_node.h) decoded and checked for its slice.
  // DATA_LOSS or INVALID_ARGUMENT naming the tensor and the caller.
  Status CheckWhole(const v1::TensorFrame& first, std::span<const uint8_t> payload,
                    const std::string& caller) const;

 private:
  Status CheckSync(const v1::TensorFrame& first, std::span<const uint8_t> head,
                   const std::string& caller, const std::string& from_site) const;
  // TENSOR_KIND_TIED_ROUND: from the tied embedding's other holder of a gossip job only, a
  // view (daemon/job/sync/tied_round.h) of its exact size after a sync step, or the first
  // stage's copy to the last.
  Status CheckTiedRound(const v1::TensorFrame& first, std::span<const uint8_t> head,
                        const std::string& caller) const;
  // Whether a gossip sync frame carries drifts (GossipFrameTracked).
  bool Tracked(const v1::TensorFrame& first) const {
    return GossipFrameTracked(sync_.tracking, first.microbatch(), grid_.replicas);
  }
  // Whether a gossip sync frame is a round's over compressed links (fleet/gossip_link_node.h;
  // the final average's are fp32 gossip frames whatever the codec).
  bool LinkFrame(const v1::TensorFrame& first) const {
    return GossipLinkRoundFrame(link_codec_.has_value(), first.microbatch(), grid_.replicas);
  }

  std::string site_, job_id_;
  uint32_t attempt_ = 0;
  v1::StageAssignment assignment_;  // the plan: each stage's site and layers
  StageGrid grid_;
  int self_ = 0;  // this stage's flat index
  int layer_begin_ = 0, layer_end_ = 0;
  // M: this replica's microbatch ids per step, the validation pass's included.
  int64_t B_ = 0, T_ = 0, C_ = 0, Vp_ = 0, M_ = 0, steps_ = 0;
  model::ModelConfig model_;       // cut widths and what the targets frame holds
  std::vector<SyncRoute> routes_;  // the fragment's sync slices (with replicas)
  size_t slices_ = 0;              // the model's parameter slices (a grad-sums frame's count)
  std::vector<bool> live_;         // by replica: not dropped in this attempt
  // By replica: removed from the job as of this step (WithRemoved); UINT64_MAX: not removed.
  std::vector<uint64_t> removed_from_;
  // Whether replica r's frames of `step` are refused as a removed replica's.
  bool RemovedAt(int r, uint64_t step) const {
    return step >= removed_from_[static_cast<size_t>(r)];
  }
  // The replicas in the syncs of `step`: live in this attempt and not removed as of it.
  std::vector<bool> LiveAt(uint64_t step) const;
  bool ring_ = false;        // syncs go around rings (sync.reduce: ring)
  fleet::SyncOptions sync_;  // when each slice syncs
  // Gossip over compressed links: the codec of the rounds' differences (GossipSendsLinks).
  std::optional<compression::CodecSpec> link_codec_;
  uint64_t seed_ = 0;                // the job's: gossip rounds' graphs (gossip_round.h)
  GossipLinkSchedule gossip_links_;  // the measured links by round (gossip_round.h)
};

}  // namespace longhaul::daemon
