// JobHost's data calls (job_host.h): tensors arriving from a neighbouring stage's site,
// checked at the edge before any payload is buffered and then filed in the job's inbox; and
// a stage checkpoint served to the sites that may fetch it (layer moves, export) as fp32
// frames in slices.
#include <algorithm>

#include "compression/codec.h"
#include "compression/frame.h"
#include "daemon/job/checks/job_checks.h"
#include "daemon/job/host/job_host.h"
#include "daemon/job/spec/stage_grid.h"
#include "daemon/job/state/fragment_slices.h"
#include "daemon/job/state/stage_checkpoint.h"
#include "daemon/job/state/sync_checkpoint.h"
#include "daemon/job/sync/replica_membership.h"
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

Status JobHost::FetchFragment(const v1::FetchFragmentRequest& req, const std::string& caller,
                              const transport::TensorSink& sink) {
  RETURN_IF_ERROR(CheckJobId(req.job_id()));
  const std::string dir = JobDir(req.job_id());
  // The site's latest assignment for the job names who may fetch: the coordinator (export)
  // and the sites of its plan or the plan it migrates from (layer moves).
  ASSIGN_OR_RETURN(v1::StageAssignment a, ReadStageAssignment(dir + "/stage.pb"));
  if (caller != a.coordinator() && !InPlan(a, caller)) {
    return RoleDenied(caller, req.job_id(), "fetch fragments (it is not one of the job's sites)");
  }
  ASSIGN_OR_RETURN(JobSpec spec,
                   ParseJobSpec(a.job_yaml(), "job " + req.job_id(), options_.data_dir));
  RETURN_IF_ERROR(CheckFragmentRequest(req, spec.job.model.num_layers, spec.job.steps));
  int begin = static_cast<int>(req.layer_begin()), end = static_cast<int>(req.layer_end());
  if (end == 0) {  // the layers of this site's current assignment
    begin = static_cast<int>(a.stages(a.stage()).layer_begin());
    end = static_cast<int>(a.stages(a.stage()).layer_end());
  }
  ASSIGN_OR_RETURN(StageState s,
                   ReadStageState(StageCheckpointPath(dir, req.step(), begin, end), begin, end));
  // One float array as fp32 frames of at most kFragmentSliceFloats values, in order.
  ASSIGN_OR_RETURN(auto fp32, compression::MakeCodec("fp32"));
  auto send = [&](v1::TensorKind kind, uint32_t id, const std::vector<float>& values) -> Status {
    uint64_t offset = 0;
    do {
      const uint64_t count = std::min<uint64_t>(kFragmentSliceFloats, values.size() - offset);
      transport::WireTensor t;
      v1::TensorFrame& h = t.header;
      h.set_job_id(req.job_id());
      h.set_step(s.step);
      h.set_kind(kind);
      h.set_tensor_id(id);
      h.set_element_offset(offset);
      h.set_from_site(options_.site);
      const int64_t shape[] = {static_cast<int64_t>(count)};
      RETURN_IF_ERROR(
          compression::EncodeFrame(*fp32, {values.data() + offset, count}, shape, {}, &t.payload));
      RETURN_IF_ERROR(sink(std::move(t)));
      offset += count;
    } while (offset < values.size());
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(send(v1::TENSOR_KIND_PARAMETERS, 0, s.params));
  if (req.include_state()) {
    RETURN_IF_ERROR(send(v1::TENSOR_KIND_OPTIMIZER_STATE, 1, s.m));
    RETURN_IF_ERROR(send(v1::TENSOR_KIND_OPTIMIZER_STATE, 2, s.v));
    transport::WireTensor t;
    t.header.set_job_id(req.job_id());
    t.header.set_step(s.step);
    t.header.set_kind(v1::TENSOR_KIND_LOADER_STATE);
    t.header.set_from_site(options_.site);
    t.payload = SealLoaderState(s.loader_state);
    RETURN_IF_ERROR(sink(std::move(t)));
  }
  if (req.include_sync_state()) {  // a rejoining replica's stage: the outer step's state
    std::vector<int64_t> sizes;
    for (const auto& slice : fleet::SyncSlices(model::FragmentLayout(spec.job.model, begin, end))) {
      sizes.push_back(slice.size);
    }
    const int64_t tied =
        static_cast<int64_t>(spec.job.model.padded_vocab_size) * spec.job.model.channels;
    ASSIGN_OR_RETURN(SyncState sync,
                     ReadSyncState(SyncCheckpointPath(dir, req.step(), begin, end), req.step(),
                                   static_cast<int64_t>(s.params.size()), sizes, tied));
    if (sync.anchor.empty()) {
      return absl::FailedPreconditionError("job " + req.job_id() + ": the sync state of step " +
                                           std::to_string(req.step()) + " on site '" +
                                           options_.site + "' has no outer-step anchor");
    }
    RETURN_IF_ERROR(send(v1::TENSOR_KIND_OPTIMIZER_STATE, 3, sync.anchor));
    RETURN_IF_ERROR(send(v1::TENSOR_KIND_OPTIMIZER_STATE, 4, sync.momentum));
  }
  return absl::OkStatus();
}

Status JobHost::CheckIncoming(const v1::TensorFrame& first, std::span<const uint8_t> head,
                              const std::string& caller) {
  RETURN_IF_ERROR(CheckJobId(first.job_id()));
  const std::string& id = first.job_id();
  std::shared_ptr<Stage> stage = FindStage(id);
  if (!stage) {
    // Unavailable, so the sender retries: the same stage of another pipeline replica may start
    // sending before the coordinator has assigned this site its stage (a site that lost its
    // stage is found by the coordinator's pings, which stop the sender).
    return absl::UnavailableError("no job '" + id + "' runs on site '" + options_.site +
                                  "' (not assigned yet, or gone)");
  }
  uint32_t me, n;
  int64_t B, T, C, Vp, M, steps;
  model::ModelConfig config;
  int layer_begin = 0, layer_end = 0;
  std::string from_site;
  std::vector<SyncRoute> routes;
  bool ring = false;
  fleet::SyncOptions sync;
  uint32_t assigned_attempt = 0;
  StageGrid grid;
  ReplicaList dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    B = stage->B, T = stage->T, C = stage->C, Vp = stage->Vp, M = stage->M, steps = stage->steps;
    if (first.kind() == v1::TENSOR_KIND_SYNC) routes = stage->routes;
    ring = stage->ring;
    sync = stage->sync;
    assigned_attempt = stage->assignment.attempt();
    grid = StageGrid::OfPlan(stage->replicas, stage->assignment.stages());
    config = stage->model;
    grid.tied_head = model::TiedHead(config);
    dropped.assign(stage->assignment.dropped_replicas().begin(),
                   stage->assignment.dropped_replicas().end());
    if (stage->cancelled) {
      return absl::FailedPreconditionError("job '" + id + "' was cancelled; late frame dropped");
    }
    me = stage->assignment.stage();
    n = static_cast<uint32_t>(stage->assignment.stages_size());
    if (me < n) {
      layer_begin = static_cast<int>(stage->assignment.stages(me).layer_begin());
      layer_end = static_cast<int>(stage->assignment.stages(me).layer_end());
    }
    if (first.from_stage() < n) from_site = stage->assignment.stages(first.from_stage()).site();
  }
  const uint32_t from = first.from_stage();
  const int self = static_cast<int>(me), sender = static_cast<int>(from);
  if (first.kind() == v1::TENSOR_KIND_SYNC) {
    // A sync frame of the next attempt is checked against that attempt's plan and members
    // (a ring changes with them): Unavailable until this site has it, and the sender retries.
    if (first.attempt() > assigned_attempt) {
      return absl::UnavailableError("job '" + id + "': sync frame of attempt " +
                                    std::to_string(first.attempt()) + ", site '" + options_.site +
                                    "' runs attempt " + std::to_string(assigned_attempt) +
                                    " (not assigned yet)");
    }
    if (first.attempt() < assigned_attempt) {
      return absl::FailedPreconditionError("job '" + id + "': stale sync frame of attempt " +
                                           std::to_string(first.attempt()) + " (site '" +
                                           options_.site + "' runs attempt " +
                                           std::to_string(assigned_attempt) + "); dropped");
    }
    if (from < n && Contains(dropped, grid.replica(sender))) {
      return RoleDenied(caller, id,
                        "send sync contributions for replica " +
                            std::to_string(grid.replica(sender)) + " (dropped in this attempt)");
    }
    std::vector<bool> live;
    for (int r = 0; r < grid.replicas; ++r) live.push_back(!Contains(dropped, r));
    return CheckSyncIncoming(first, head, caller, grid, self, steps, from_site, routes, ring, sync,
                             live, stage->inbox.get());
  }
  const bool tied =
      first.kind() == v1::TENSOR_KIND_WEIGHT_GRAD && from < n && grid.tied(self) == sender;
  const bool neighbour =
      from < n &&
      ((first.kind() == v1::TENSOR_KIND_ACTIVATION_GRAD && grid.next(self) == sender) ||
       ((first.kind() == v1::TENSOR_KIND_ACTIVATION || first.kind() == v1::TENSOR_KIND_TARGETS) &&
        grid.prev(self) == sender));
  if (first.to_stage() != me || from >= n || from_site != caller || !(tied || neighbour)) {
    return RoleDenied(caller, id,
                      "send " + v1::TensorKind_Name(first.kind()) + " from stage " +
                          std::to_string(from) + " to stage " + std::to_string(first.to_stage()) +
                          " (this site runs stage " + std::to_string(me) + " of " +
                          std::to_string(n) + ")");
  }
  std::vector<int64_t> expected;
  switch (first.kind()) {
    // The stream's width where it enters and leaves this stage: K coordinates across the
    // subspace-cut variant's constrained cuts, C elsewhere.
    case v1::TENSOR_KIND_ACTIVATION:
      expected = {B, T, model::StreamWidth(config, layer_begin)};
      break;
    case v1::TENSOR_KIND_ACTIVATION_GRAD:
      expected = {B, T, model::StreamWidth(config, layer_end)};
      break;
    case v1::TENSOR_KIND_TARGETS:  // the subspace-cut variant's: each sequence's T + 1 tokens
      expected = {B, model::Subspace(config) ? T + 1 : T};
      break;
    default:
      expected = {Vp, C};
  }
  RETURN_IF_ERROR(
      CheckFrameHead(first, head, expected,
                     "job " + id + ": " + v1::TensorKind_Name(first.kind()) + " from " + caller));
  if (first.microbatch() >= static_cast<uint64_t>(std::max<int64_t>(1, M)) ||
      first.tensor_id() != 0 || first.step() >= static_cast<uint64_t>(steps)) {
    return absl::InvalidArgumentError("job " + id + ": tensor " + KeyOf(first).DebugString() +
                                      " from " + caller + " is outside the job (" +
                                      std::to_string(M) + " microbatches, " +
                                      std::to_string(steps) + " steps)");
  }
  return stage->inbox->CheckKey(KeyOf(first));
}

Status JobHost::CheckSyncIncoming(const v1::TensorFrame& first, std::span<const uint8_t> head,
                                  const std::string& caller, const StageGrid& grid, int self,
                                  int64_t steps, const std::string& from_site,
                                  const std::vector<SyncRoute>& routes, bool ring,
                                  const fleet::SyncOptions& sync, const std::vector<bool>& live,
                                  Inbox* inbox) {
  const std::string& id = first.job_id();
  const int me = static_cast<int>(first.to_stage()), from = static_cast<int>(first.from_stage());
  // Only a stage of another replica that this stage takes the slice from (sync_routes.h); on a
  // ring, only the slice's predecessor.
  const SyncRoute* route = nullptr;
  for (const auto& r : routes) {
    if (static_cast<uint32_t>(r.slice.index) == first.tensor_id()) route = &r;
  }
  const bool known = first.from_stage() < static_cast<uint32_t>(grid.size());
  const int from_replica = known ? grid.replica(from) : -1;
  RingPlace place;
  if (ring && route != nullptr) place = RingOf(*route, live, self);
  const bool member =
      grid.replicas > 1 && known && from != self && from_replica != grid.replica(self) &&
      (route == nullptr || route->source[static_cast<size_t>(from_replica)] == from) &&
      (!ring || route == nullptr || (place.position >= 0 && place.prev() == from));
  if (me != self || !member || from_site != caller) {
    return RoleDenied(caller, id,
                      "send sync contributions from stage " + std::to_string(first.from_stage()) +
                          " to stage " + std::to_string(first.to_stage()) +
                          " (this site runs stage " + std::to_string(self) + " of " +
                          std::to_string(grid.size()) + ", " + std::to_string(grid.replicas) +
                          (ring ? " replicas, syncs around rings)" : " replicas)"));
  }
  const fleet::SyncSlice* slice = route == nullptr ? nullptr : &route->slice;
  // Gather: one frame of the whole slice per replica (the microbatch names it); ring: one per
  // hop (the microbatch), each a chunk of the slice.
  int64_t values = slice == nullptr ? 0 : slice->size;
  bool valid = slice != nullptr && first.step() < static_cast<uint64_t>(steps);
  if (valid && sync.mode == fleet::SyncMode::kLocal) {
    // Local mode syncs after a phase's sync steps and the last: the slice's, none between.
    const fleet::LocalSyncAction due =
        fleet::LocalSyncAt(sync, first.step() + 1, static_cast<uint64_t>(steps));
    valid = (due.start || due.blocking) && fleet::InPhase(route->phase, due.phase);
  }
  if (valid && ring) {
    const int hop = static_cast<int>(std::min<uint64_t>(first.microbatch(), 1u << 30));
    valid = hop < fleet::RingHops(place.size());
    if (valid) {
      values = fleet::RingChunkOf(slice->size, place.size(),
                                  fleet::RingReceiveChunk(place.size(), place.position, hop))
                   .size();
    }
  } else if (valid) {
    valid = first.microbatch() == static_cast<uint32_t>(from_replica);
  }
  if (!valid) {
    return absl::InvalidArgumentError(
        "job " + id + ": sync tensor " + KeyOf(first).DebugString() + " from " + caller +
        (ring ? " names a hop outside its ring" : " names another replica") +
        ", a slice this stage does not hold or a step at which that slice does not sync");
  }
  RETURN_IF_ERROR(CheckFrameHead(
      first, head, {values},
      "job " + id + ": sync slice " + std::to_string(slice->index) + " from " + caller));
  return inbox->CheckKey(KeyOf(first));
}

Status JobHost::Deliver(const v1::TensorFrame& first, std::vector<uint8_t> payload,
                        const std::string& caller) {
  RETURN_IF_ERROR(CheckIncoming(first, payload, caller));
  // Whole now: the frame's sizes and checksum (its header's fields passed CheckIncoming).
  if (StatusOr<compression::FrameHeader> h = compression::ParseFrameHeader(payload); !h.ok()) {
    return absl::DataLossError("job " + first.job_id() + ": tensor " + KeyOf(first).DebugString() +
                               " from " + caller + ": " + std::string(h.status().message()));
  }
  std::shared_ptr<Stage> stage = FindStage(first.job_id());
  if (!stage) return absl::NotFoundError("job '" + first.job_id() + "' ended meanwhile");
  ReceivedTensor t;
  t.from_site = caller;
  t.payload = std::move(payload);
  return stage->inbox->Put(KeyOf(first), std::move(t));
}

}  // namespace longhaul::daemon
