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

Status JobHost::FetchFragment(const v1::FetchFragmentRequest& req, const std::string& caller,
                              const transport::TensorSink& sink) {
  RETURN_IF_ERROR(CheckJobId(req.job_id()));
  const std::string dir = JobDir(req.job_id());
  // The site's latest assignment for the job names who may fetch: the coordinator (export)
  // and the sites of its plan or the plan it migrates from (layer moves).
  ASSIGN_OR_RETURN(v1::StageAssignment a,
                   ReadStageAssignment(*options_.env.files, dir + "/stage.pb"));
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
                   ReadStageState(*options_.env.files,
                                  StageCheckpointPath(dir, req.step(), begin, end), begin, end));
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
    ASSIGN_OR_RETURN(
        SyncState sync,
        ReadSyncState(*options_.env.files, SyncCheckpointPath(dir, req.step(), begin, end),
                      req.step(), static_cast<int64_t>(s.params.size()), sizes, tied));
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
  std::shared_ptr<const StageAdmission> admission;
  {
    MutexLock lock(mu_);
    if (stage->cancelled) {
      return absl::FailedPreconditionError("job '" + id + "' was cancelled; late frame dropped");
    }
    admission = stage->admission;
  }
  if (!admission) {
    return absl::UnavailableError("job '" + id + "' is being assigned on site '" + options_.site +
                                  "'");
  }
  RETURN_IF_ERROR(admission->Check(first, head, caller));
  return stage->inbox->CheckKey(KeyOf(first));
}

Status JobHost::Deliver(const v1::TensorFrame& first, std::vector<uint8_t> payload,
                        const std::string& caller) {
  RETURN_IF_ERROR(CheckIncoming(first, payload, caller));
  std::shared_ptr<Stage> stage = FindStage(first.job_id());
  if (!stage) return absl::NotFoundError("job '" + first.job_id() + "' ended meanwhile");
  std::shared_ptr<const StageAdmission> admission;
  {
    MutexLock lock(mu_);
    admission = stage->admission;
  }
  if (!admission) return absl::NotFoundError("job '" + first.job_id() + "' ended meanwhile");
  // Whole now: the frame's sizes and checksum (its header's fields passed CheckIncoming).
  RETURN_IF_ERROR(admission->CheckWhole(first, payload, caller));
  ReceivedTensor t;
  t.from_site = caller;
  t.payload = std::move(payload);
  return stage->inbox->Put(KeyOf(first), std::move(t));
}

}  // namespace longhaul::daemon
