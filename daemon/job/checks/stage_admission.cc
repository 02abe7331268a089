// StageAdmission (stage_admission.h): the stage's expectations taken from its assignment and
// job spec once, and the checks of a tensor's first chunk against them.
#include "daemon/job/checks/stage_admission.h"

#include <algorithm>

#include "compression/frame.h"
#include "daemon/job/checks/job_checks.h"
#include "daemon/job/exchange/grad_sums_frame.h"
#include "daemon/job/exchange/inbox.h"
#include "daemon/job/sync/gossip_round.h"
#include "daemon/job/sync/replica_membership.h"
#include "daemon/job/sync/tied_round.h"
#include "fleet/gossip_link_node.h"
#include "fleet/gossip_node.h"
#include "fleet/sync_ring.h"
#include "fleet/sync_slices.h"
#include "model/layout.h"

namespace longhaul::daemon {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// The compression frame header at the start of `head` (a tensor's first chunk) against
// what the receiving stage expects: its fields valid, the shape `expected`, and the encoded
// size the transport announced exactly the frame's, within what that shape can take.
// DataLoss naming `what` for a header that does not parse, InvalidArgument for one that names
// another shape or size.
Status CheckFrameHead(const v1::TensorFrame& first, std::span<const uint8_t> head,
                      const std::vector<int64_t>& expected, const std::string& what) {
  uint64_t count = 1;
  for (int64_t d : expected) count *= static_cast<uint64_t>(d);
  // A header that does not parse is data loss (corrupted in transit: the sender may retry, as
  // for a checksum that fails once the tensor is whole); one that parses but names another
  // shape or size is the sender's error. Nothing is allocated here, so the default limits.
  StatusOr<compression::FrameHeader> h = compression::ParseFrameHeaderPrefix(head);
  if (!h.ok()) return absl::DataLossError(what + ": " + std::string(h.status().message()));
  if (h->shape != expected) {
    return absl::InvalidArgumentError(what + " has shape " + ShapeString(h->shape) +
                                      ", this stage expects " + ShapeString(expected));
  }
  // An encoding may exceed the raw size by its headers and incompressible zstd blocks.
  const uint64_t raw = count * sizeof(float), max_encoded = raw + raw / 64 + (64 << 10);
  const uint64_t framed = h->header_size + h->payload_size;
  if (h->payload_size > max_encoded || first.encoded_size() != framed) {
    return absl::InvalidArgumentError(
        what + ": frame of " + std::to_string(h->header_size) + " + " +
        std::to_string(h->payload_size) + " bytes for " + std::to_string(raw) + " raw (at most " +
        std::to_string(max_encoded) + "), announced as " + std::to_string(first.encoded_size()));
  }
  return absl::OkStatus();
}

}  // namespace

StageAdmission::StageAdmission(const std::string& site, const v1::StageAssignment& assignment,
                               const JobSpec& spec)
    : site_(site),
      job_id_(assignment.job_id()),
      attempt_(assignment.attempt()),
      assignment_(assignment),
      self_(static_cast<int>(assignment.stage())),
      B_(spec.job.microbatch_size),
      T_(spec.job.seq_len),
      C_(spec.job.model.channels),
      Vp_(spec.job.model.padded_vocab_size),
      steps_(spec.job.steps),
      model_(spec.job.model),
      ring_(assignment.sync_ring()),
      sync_(spec.sync),
      seed_(spec.job.seed) {
  grid_ = StageGrid::OfPlan(spec.replicas, assignment.stages());
  grid_.tied_head = model::TiedHead(model_);
  if (self_ >= 0 && self_ < assignment.stages_size()) {
    layer_begin_ = static_cast<int>(assignment.stages(self_).layer_begin());
    layer_end_ = static_cast<int>(assignment.stages(self_).layer_end());
  }
  const ReplicaList dropped(assignment.dropped_replicas().begin(),
                            assignment.dropped_replicas().end());
  for (int r = 0; r < grid_.replicas; ++r) live_.push_back(!Contains(dropped, r));
  removed_from_.assign(live_.size(), UINT64_MAX);
  gossip_links_ =
      GossipLinkSchedule({assignment.gossip_links().begin(), assignment.gossip_links().end()});
  if (fleet::GossipSendsLinks(sync_)) {
    if (auto codec = fleet::GossipLinkCodec(sync_.codec); codec.ok()) link_codec_ = *codec;
  }
  // Its replica's microbatches, training and validation.
  M_ = AttemptMicrobatches(
           spec, grid_.replicas, assignment.stages(),
           assignment.dropped_replicas())[static_cast<size_t>(grid_.replica(self_))] +
       ValBatches(spec.job);
  if (grid_.replicas > 1) routes_ = SyncRoutes(grid_, model_, self_, spec.sync.stagger);
  slices_ = static_cast<size_t>(model::ParameterLayout(model_).num_slices());
}

StatusOr<std::shared_ptr<const StageAdmission>> StageAdmission::WithRemoved(
    std::span<const uint32_t> removed, uint64_t from_step) const {
  auto next = std::make_shared<StageAdmission>(*this);
  for (uint32_t r : removed) {
    if (r >= removed_from_.size() || static_cast<int>(r) == grid_.replica(self_)) {
      return absl::InvalidArgumentError(
          "job '" + job_id_ + "' on site '" + site_ + "': cannot remove replica " +
          std::to_string(r) + " (" + std::to_string(removed_from_.size()) +
          " replicas, this stage's " + std::to_string(grid_.replica(self_)) + ")");
    }
    next->removed_from_[r] = std::min(next->removed_from_[r], from_step);
  }
  return std::shared_ptr<const StageAdmission>(std::move(next));
}

StatusOr<std::shared_ptr<const StageAdmission>> StageAdmission::WithGossipLinks(
    uint32_t epoch, uint64_t from_round, std::vector<double> links) const {
  auto next = std::make_shared<StageAdmission>(*this);
  RETURN_IF_ERROR(Annotate(next->gossip_links_.Add(epoch, from_round, std::move(links)),
                           "job '" + job_id_ + "' on site '" + site_ + "'"));
  return std::shared_ptr<const StageAdmission>(std::move(next));
}

std::vector<bool> StageAdmission::LiveAt(uint64_t step) const {
  std::vector<bool> live = live_;
  for (size_t r = 0; r < live.size(); ++r)
    live[r] = live[r] && !RemovedAt(static_cast<int>(r), step);
  return live;
}

Status StageAdmission::Check(const v1::TensorFrame& first, std::span<const uint8_t> head,
                             const std::string& caller) const {
  const std::string& id = job_id_;
  const uint32_t me = static_cast<uint32_t>(self_);
  const uint32_t n = static_cast<uint32_t>(assignment_.stages_size());
  const uint32_t from = first.from_stage();
  const int self = self_, sender = static_cast<int>(from);
  const std::string from_site = from < n ? assignment_.stages(static_cast<int>(from)).site() : "";
  if (from < n && RemovedAt(grid_.replica(sender), first.step())) {
    return RoleDenied(caller, id,
                      "send frames for replica " + std::to_string(grid_.replica(sender)) +
                          " (removed from the job)");
  }
  if (first.kind() == v1::TENSOR_KIND_SYNC) {
    // A sync frame of the next attempt is checked against that attempt's plan and members
    // (a ring changes with them): Unavailable until this site has it, and the sender retries.
    if (first.attempt() > attempt_) {
      return absl::UnavailableError("job '" + id + "': sync frame of attempt " +
                                    std::to_string(first.attempt()) + ", site '" + site_ +
                                    "' runs attempt " + std::to_string(attempt_) +
                                    " (not assigned yet)");
    }
    if (first.attempt() < attempt_) {
      return absl::FailedPreconditionError(
          "job '" + id + "': stale sync frame of attempt " + std::to_string(first.attempt()) +
          " (site '" + site_ + "' runs attempt " + std::to_string(attempt_) + "); dropped");
    }
    if (from < n && !live_[static_cast<size_t>(grid_.replica(sender))]) {
      return RoleDenied(caller, id,
                        "send sync contributions for replica " +
                            std::to_string(grid_.replica(sender)) + " (dropped in this attempt)");
    }
    return CheckSync(first, head, caller, from_site);
  }
  if (first.kind() == v1::TENSOR_KIND_TIED_ROUND) return CheckTiedRound(first, head, caller);
  const bool tied =
      first.kind() == v1::TENSOR_KIND_WEIGHT_GRAD && from < n && grid_.tied(self) == sender;
  // A gossip replica's stages pass their gradient sums toward its first stage and the
  // replica's whole sums back (grad_sums_frame.h).
  const bool grad_sums =
      first.kind() == v1::TENSOR_KIND_GRAD_SUMS || first.kind() == v1::TENSOR_KIND_GRAD_TOTAL;
  const bool gossip = sync_.reduce == fleet::SyncReduce::kGossip && grid_.replicas > 1;
  const bool neighbour =
      from < n &&
      (((first.kind() == v1::TENSOR_KIND_ACTIVATION_GRAD ||
         (gossip && first.kind() == v1::TENSOR_KIND_GRAD_SUMS)) &&
        grid_.next(self) == sender) ||
       ((first.kind() == v1::TENSOR_KIND_ACTIVATION || first.kind() == v1::TENSOR_KIND_TARGETS ||
         (gossip && first.kind() == v1::TENSOR_KIND_GRAD_TOTAL)) &&
        grid_.prev(self) == sender));
  if (first.to_stage() != me || from >= n || from_site != caller || !(tied || neighbour)) {
    return RoleDenied(caller, id,
                      "send " + v1::TensorKind_Name(first.kind()) + " from stage " +
                          std::to_string(from) + " to stage " + std::to_string(first.to_stage()) +
                          " (this site runs stage " + std::to_string(me) + " of " +
                          std::to_string(n) + ")");
  }
  if (grad_sums) {
    const size_t bytes = GradSumsFrameBytes(slices_);
    if (first.encoded_size() != bytes || first.microbatch() != 0 || first.tensor_id() != 0 ||
        first.step() >= static_cast<uint64_t>(steps_)) {
      return absl::InvalidArgumentError(
          "job " + id + ": " + v1::TensorKind_Name(first.kind()) + " " +
          KeyOf(first).DebugString() + " from " + caller + " of " +
          std::to_string(first.encoded_size()) + " bytes: a grad-sums frame of this model is " +
          std::to_string(bytes) + " bytes, microbatch 0, tensor 0, within the job's " +
          std::to_string(steps_) + " steps");
    }
    return absl::OkStatus();
  }
  std::vector<int64_t> expected;
  switch (first.kind()) {
    // The stream's width where it enters and leaves this stage: K coordinates across the
    // subspace-cut variant's constrained cuts, C elsewhere.
    case v1::TENSOR_KIND_ACTIVATION:
      expected = {B_, T_, model::StreamWidth(model_, layer_begin_)};
      break;
    case v1::TENSOR_KIND_ACTIVATION_GRAD:
      expected = {B_, T_, model::StreamWidth(model_, layer_end_)};
      break;
    case v1::TENSOR_KIND_TARGETS:  // the subspace-cut variant's: each sequence's T + 1 tokens
      expected = {B_, model::Subspace(model_) ? T_ + 1 : T_};
      break;
    default:
      expected = {Vp_, C_};
  }
  RETURN_IF_ERROR(
      CheckFrameHead(first, head, expected,
                     "job " + id + ": " + v1::TensorKind_Name(first.kind()) + " from " + caller));
  if (first.microbatch() >= static_cast<uint64_t>(std::max<int64_t>(1, M_)) ||
      first.tensor_id() != 0 || first.step() >= static_cast<uint64_t>(steps_)) {
    return absl::InvalidArgumentError("job " + id + ": tensor " + KeyOf(first).DebugString() +
                                      " from " + caller + " is outside the job (" +
                                      std::to_string(M_) + " microbatches, " +
                                      std::to_string(steps_) + " steps)");
  }
  return absl::OkStatus();
}

Status StageAdmission::CheckTiedRound(const v1::TensorFrame& first, std::span<const uint8_t> head,
                                      const std::string& caller) const {
  const std::string& id = job_id_;
  const uint32_t n = static_cast<uint32_t>(assignment_.stages_size());
  const int sender = static_cast<int>(first.from_stage());
  // Only the tied embedding's other holder (this replica's other end) of a gossip job, from its
  // own site.
  const bool gossip = sync_.reduce == fleet::SyncReduce::kGossip && grid_.replicas > 1;
  if (!gossip || first.from_stage() >= n || grid_.tied(self_) != sender ||
      first.to_stage() != static_cast<uint32_t>(self_) ||
      assignment_.stages(sender).site() != caller) {
    return RoleDenied(caller, id,
                      "send TENSOR_KIND_TIED_ROUND from stage " +
                          std::to_string(first.from_stage()) + " to stage " +
                          std::to_string(first.to_stage()) + " (this site runs stage " +
                          std::to_string(self_) + " of " + std::to_string(n) +
                          (gossip ? "" : ", not a gossip job") + ")");
  }
  const std::string what = "job " + id + ": " + KeyOf(first).DebugString() + " from " + caller;
  const uint64_t step = first.step();
  // After a round: a sync step of the job's (the last one included, whose final average the
  // first stage's copy follows).
  const bool round = step < static_cast<uint64_t>(steps_) && first.tensor_id() == 0 &&
                     fleet::LocalSyncAt(sync_, step + 1, static_cast<uint64_t>(steps_)).blocking;
  if (!round) {
    return absl::InvalidArgumentError(what + ": not after a sync step of the job's " +
                                      std::to_string(steps_) + ", or not tensor 0");
  }
  switch (first.microbatch()) {
    case kTiedView: {
      const size_t bytes = TiedRoundViewBytes(grid_.replicas);
      if (first.encoded_size() != bytes) {
        return absl::InvalidArgumentError(what + ": a view of " + std::to_string(grid_.replicas) +
                                          " replicas is " + std::to_string(bytes) + " bytes, not " +
                                          std::to_string(first.encoded_size()));
      }
      return absl::OkStatus();
    }
    case kTiedFrames:
    case kTiedValues: {
      // From the first stage to the last only.
      if (!grid_.first(sender)) {
        return absl::InvalidArgumentError(what +
                                          ": the tied embedding's frames and copy go from a "
                                          "replica's first stage to its last");
      }
      if (first.microbatch() == kTiedValues) return CheckFrameHead(first, head, {Vp_, C_}, what);
      ASSIGN_OR_RETURN(const uint64_t frame,
                       GossipRoundFrameMaxBytes(sync_, static_cast<uint64_t>(Vp_ * C_)));
      const uint64_t most = TiedFramesMaxBytes(grid_.replicas, frame);
      if (first.encoded_size() > most) {
        return absl::InvalidArgumentError(
            what + ": the tied embedding's frames of " + std::to_string(first.encoded_size()) +
            " bytes, more than a round's can take (" + std::to_string(most) + ")");
      }
      return absl::OkStatus();
    }
    default:
      break;
  }
  return absl::InvalidArgumentError(what + ": microbatch " + std::to_string(first.microbatch()) +
                                    " is none of a view's (0), the frames' (1) or the tied "
                                    "embedding's (2)");
}

Status StageAdmission::CheckWhole(const v1::TensorFrame& first, std::span<const uint8_t> payload,
                                  const std::string& caller) const {
  const std::string what =
      "job " + job_id_ + ": tensor " + KeyOf(first).DebugString() + " from " + caller + ": ";
  if (first.kind() == v1::TENSOR_KIND_TIED_ROUND && first.microbatch() == kTiedView) {
    const auto view =
        DecodeTiedRoundView(payload, grid_.replicas, grid_.replica(self_), first.step());
    return view.ok() ? absl::OkStatus()
                     : Status(view.status().code(), what + std::string(view.status().message()));
  }
  if (first.kind() == v1::TENSOR_KIND_TIED_ROUND && first.microbatch() == kTiedFrames) {
    // The container, and each frame for the tied slice as the round's decoder checks it.
    const uint64_t size = static_cast<uint64_t>(Vp_ * C_);
    ASSIGN_OR_RETURN(const uint64_t most, GossipRoundFrameMaxBytes(sync_, size));
    const auto frames =
        DecodeTiedFrames(payload, grid_.replicas, grid_.replica(self_), first.step(), most);
    if (!frames.ok()) {
      return Status(frames.status().code(), what + std::string(frames.status().message()));
    }
    const uint32_t tied =
        static_cast<uint32_t>(model::ParameterLayout(model_).SliceIndex(model::Tensor::kWte, 0));
    for (const auto& [replica, bytes] : *frames) {
      const Status checked = DecodeGossipSliceFrame(bytes, tied, size, link_codec_, sync_.tracking,
                                                    kGossipRoundTag, grid_.replicas)
                                 .status();
      if (!checked.ok()) {
        return Status(checked.code(), what + "replica " + std::to_string(replica) +
                                          "'s frame: " + std::string(checked.message()));
      }
    }
    return absl::OkStatus();
  }
  if (first.kind() == v1::TENSOR_KIND_SYNC && sync_.reduce == fleet::SyncReduce::kGossip) {
    for (const SyncRoute& r : routes_) {
      if (static_cast<uint32_t>(r.slice.index) != first.tensor_id()) continue;
      const Status checked =
          DecodeGossipSliceFrame(payload, static_cast<uint32_t>(r.slice.index),
                                 static_cast<uint64_t>(r.slice.size), link_codec_, sync_.tracking,
                                 first.microbatch(), grid_.replicas)
              .status();
      if (checked.ok()) return absl::OkStatus();
      return Status(checked.code(), what + std::string(checked.message()));
    }
    return absl::InvalidArgumentError(what + "a slice this stage does not hold");
  }
  if (first.kind() == v1::TENSOR_KIND_GRAD_SUMS || first.kind() == v1::TENSOR_KIND_GRAD_TOTAL) {
    const auto sums = DecodeGradSums(payload, slices_);
    return sums.ok() ? absl::OkStatus()
                     : Status(sums.status().code(), what + std::string(sums.status().message()));
  }
  if (StatusOr<compression::FrameHeader> h = compression::ParseFrameHeader(payload); !h.ok()) {
    return absl::DataLossError(what + std::string(h.status().message()));
  }
  return absl::OkStatus();
}

Status StageAdmission::CheckSync(const v1::TensorFrame& first, std::span<const uint8_t> head,
                                 const std::string& caller, const std::string& from_site) const {
  const std::string& id = job_id_;
  const int self = self_;
  const int me = static_cast<int>(first.to_stage()), from = static_cast<int>(first.from_stage());
  // Only a stage of another replica that this stage takes the slice from (sync_routes.h); on a
  // ring, only the slice's predecessor.
  const SyncRoute* route = nullptr;
  for (const auto& r : routes_) {
    if (static_cast<uint32_t>(r.slice.index) == first.tensor_id()) route = &r;
  }
  // In a gossip job a multi-stage replica's last stage takes the tied embedding from its own
  // first stage (daemon/job/sync/tied_round.h), from no other replica.
  if (route != nullptr && sync_.reduce == fleet::SyncReduce::kGossip && ReplaysTied(grid_, self) &&
      route->slice.index == model::ParameterLayout(model_).SliceIndex(model::Tensor::kWte, 0)) {
    return RoleDenied(caller, id,
                      "send the tied embedding's sync frames to stage " + std::to_string(self) +
                          " (a replica's last stage: it takes them from its first)");
  }
  const bool known = first.from_stage() < static_cast<uint32_t>(grid_.size());
  const int from_replica = known ? grid_.replica(from) : -1;
  RingPlace place;
  if (ring_ && route != nullptr) place = RingOf(*route, LiveAt(first.step()), self);
  const bool member =
      grid_.replicas > 1 && known && from != self && from_replica != grid_.replica(self) &&
      (route == nullptr || route->source[static_cast<size_t>(from_replica)] == from) &&
      (!ring_ || route == nullptr || (place.position >= 0 && place.prev() == from));
  if (me != self || !member || from_site != caller) {
    return RoleDenied(caller, id,
                      "send sync contributions from stage " + std::to_string(first.from_stage()) +
                          " to stage " + std::to_string(first.to_stage()) +
                          " (this site runs stage " + std::to_string(self) + " of " +
                          std::to_string(grid_.size()) + ", " + std::to_string(grid_.replicas) +
                          (ring_ ? " replicas, syncs around rings)" : " replicas)"));
  }
  const fleet::SyncSlice* slice = route == nullptr ? nullptr : &route->slice;
  // Gather: one frame of the whole slice per replica (the microbatch names it); ring: one per
  // hop (the microbatch), each a chunk of the slice.
  int64_t values = slice == nullptr ? 0 : slice->size;
  bool valid = slice != nullptr && first.step() < static_cast<uint64_t>(steps_);
  if (valid && sync_.mode == fleet::SyncMode::kLocal) {
    // Local mode syncs after a phase's sync steps and the last: the slice's, none between.
    const fleet::LocalSyncAction due =
        fleet::LocalSyncAt(sync_, first.step() + 1, static_cast<uint64_t>(steps_));
    valid = (due.start || due.blocking) && fleet::InPhase(route->phase, due.phase);
  }
  if (valid && ring_) {
    const int hop = static_cast<int>(std::min<uint64_t>(first.microbatch(), 1u << 30));
    valid = hop < fleet::RingHops(place.size());
    if (valid) {
      values = fleet::RingChunkOf(slice->size, place.size(),
                                  fleet::RingReceiveChunk(place.size(), place.position, hop))
                   .size();
    }
  } else if (valid && sync_.reduce == fleet::SyncReduce::kGossip) {
    // A round's frame from an in-neighbour of this round (the microbatch names the sender's
    // replica), or after the job's last step the final average's (GossipFinalTag + it).
    if (first.microbatch() ==
        GossipFinalTag(grid_.replicas) + static_cast<uint32_t>(from_replica)) {
      if (first.step() + 1 != static_cast<uint64_t>(steps_) ||
          first.encoded_size() != fleet::GossipFrameBytes(static_cast<uint64_t>(slice->size),
                                                          static_cast<uint64_t>(slice->size))) {
        return absl::InvalidArgumentError(
            "job " + id + ": sync tensor " + KeyOf(first).DebugString() + " from " + caller +
            ": a final average's frame is sent after the job's last step (" +
            std::to_string(steps_ - 1) + ") and carries every coordinate of its slice (" +
            std::to_string(fleet::GossipFrameBytes(static_cast<uint64_t>(slice->size),
                                                   static_cast<uint64_t>(slice->size))) +
            " bytes, announced " + std::to_string(first.encoded_size()) + ")");
      }
    } else {
      // The round's graph from the link matrix in force at its round, which the frame names.
      const GossipLinkEpoch& links = gossip_links_.At(GossipRoundOf(sync_, first.step()));
      if (first.links_epoch() > gossip_links_.latest().epoch) {
        return absl::UnavailableError("job " + id + ": sync tensor " + KeyOf(first).DebugString() +
                                      " from " + caller + " was drawn from gossip links epoch " +
                                      std::to_string(first.links_epoch()) + ", which site '" +
                                      site_ + "' has not been told of yet");
      }
      if (first.links_epoch() != links.epoch) {
        return absl::InvalidArgumentError(
            "job " + id + ": sync tensor " + KeyOf(first).DebugString() + " from " + caller +
            " was drawn from gossip links epoch " + std::to_string(first.links_epoch()) +
            "; its round draws from epoch " + std::to_string(links.epoch) + " (from round " +
            std::to_string(links.from_round) + ")");
      }
      const fleet::GossipGraph g = GossipRoundGraph(sync_, live_, seed_, first.step(), links.links);
      const std::vector<int>& out = g.out[static_cast<size_t>(from_replica)];
      valid = first.microbatch() == static_cast<uint32_t>(from_replica) &&
              std::find(out.begin(), out.end(), grid_.replica(self)) != out.end();
    }
  } else if (valid) {
    valid = first.microbatch() == static_cast<uint32_t>(from_replica);
  }
  if (!valid) {
    return absl::InvalidArgumentError(
        "job " + id + ": sync tensor " + KeyOf(first).DebugString() + " from " + caller +
        (ring_ ? " names a hop outside its ring"
         : sync_.reduce == fleet::SyncReduce::kGossip
             ? " is not from an in-neighbour of this gossip round"
             : " names another replica") +
        ", a slice this stage does not hold or a step at which that slice does not sync");
  }
  if (LinkFrame(first)) {
    // A round's frame over compressed links: no larger than a key frame of the slice.
    const std::string where =
        "job " + id + ": sync slice " + std::to_string(slice->index) + " from " + caller;
    ASSIGN_OR_RETURN(
        const uint64_t most,
        fleet::MaxLinkFrameBytes(*link_codec_, static_cast<uint64_t>(slice->size), sync_.tracking));
    if (first.encoded_size() > most) {
      return absl::InvalidArgumentError(
          where + ": a gossip link frame of " + std::to_string(first.encoded_size()) +
          " bytes, more than the slice's largest (" + std::to_string(most) + ")");
    }
    return Annotate(fleet::CheckLinkFrameHeader(head, static_cast<uint32_t>(slice->index),
                                                static_cast<uint64_t>(slice->size), sync_.tracking),
                    where);
  }
  if (sync_.reduce == fleet::SyncReduce::kGossip) {
    return Annotate(
        fleet::CheckGossipFrameHeader(head, static_cast<uint32_t>(slice->index),
                                      static_cast<uint64_t>(slice->size), first.encoded_size(),
                                      Tracked(first)),
        "job " + id + ": sync slice " + std::to_string(slice->index) + " from " + caller);
  }
  RETURN_IF_ERROR(CheckFrameHead(
      first, head, {values},
      "job " + id + ": sync slice " + std::to_string(slice->index) + " from " + caller));
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
