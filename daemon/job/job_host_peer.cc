// JobHost's Peer API: the job calls other daemons make, each authorized for the job it names
// and checked at the edge (job_checks.h) before anything is allocated, written or started.
// The roles (docs/SECURITY.md): a job's coordinator assigns, stops, cancels and pings its
// stages; its stage sites report steps (to the coordinator) and fetch fragments for layer
// moves; the coordinator fetches them for export; tensors come only from a neighbouring
// stage's site (the first and last stage are neighbours for the tied embedding).
#include <sys/sysinfo.h>

#include <filesystem>
#include <fstream>
#include <new>
#include <sstream>

#include "compression/codec.h"
#include "compression/frame.h"
#include "daemon/job/job_checks.h"
#include "daemon/job/job_host.h"
#include "daemon/job/site_backend.h"
#include "daemon/job/stage_checkpoint.h"
#include "model/file_io.h"
#include "model/fragment.h"

namespace longhaul::daemon {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

StatusOr<v1::StageAssignment> ReadAssignment(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("no stage assignment at " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  v1::StageAssignment a;
  if (!a.ParseFromString(ss.str())) return absl::DataLossError(path + ": malformed");
  if (a.stage() >= static_cast<uint32_t>(a.stages_size())) {
    return absl::DataLossError(path + ": stage index out of its plan");
  }
  return a;
}

Status Denied(const std::string& caller, const std::string& job, const std::string& what) {
  return absl::PermissionDeniedError("site '" + caller + "' may not " + what + " of job " + job);
}

// Whether `site` runs a stage in the assignment's plan or in the plan it migrates from.
bool InPlan(const v1::StageAssignment& a, const std::string& site) {
  for (const auto& s : a.stages()) {
    if (s.site() == site) return true;
  }
  for (const auto& s : a.migrate_from()) {
    if (s.site() == site) return true;
  }
  return false;
}

// Physical memory, the bound on a calibration when the site sets no memory limit.
int64_t PhysicalMemory() {
  struct sysinfo si {};
  if (sysinfo(&si) != 0) return int64_t{1} << 34;
  return static_cast<int64_t>(si.totalram) * si.mem_unit;
}

}  // namespace

std::string JobHost::KnownCoordinator(const std::string& job_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (coordinators_.count(job_id)) return options_.site;
    auto it = stages_.find(job_id);
    if (it != stages_.end()) return it->second->assignment.coordinator();
  }
  std::error_code ec;
  if (std::filesystem::exists(JobDir(job_id) + "/job.pb", ec)) return options_.site;
  auto a = ReadAssignment(JobDir(job_id) + "/stage.pb");
  return a.ok() ? a->coordinator() : "";
}

StatusOr<v1::AssignResponse> JobHost::AssignStage(const v1::StageAssignment& a,
                                                  const std::string& caller) {
  RETURN_IF_ERROR(CheckJobId(a.job_id()));
  const std::string& id = a.job_id();
  if (caller != a.coordinator()) {
    return Denied(caller, id, "assign stages on behalf of coordinator '" + a.coordinator() + "'");
  }
  const std::string known = KnownCoordinator(id);
  if (!known.empty() && known != caller) {
    return Denied(caller, id, "assign stages (its coordinator is '" + known + "')");
  }
  ASSIGN_OR_RETURN(JobSpec spec, ParseJob(a.job_yaml(), "job " + id));
  RETURN_IF_ERROR(CheckAssignment(a, spec, options_.site));

  std::lock_guard<std::mutex> assign_lock(assign_mu_);  // one assignment at a time
  std::shared_ptr<Stage> stage;
  std::shared_ptr<StageRunner> previous;
  int64_t others_bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return absl::UnavailableError("site is shutting down");
    size_t live = 0;
    for (const auto& [other_id, st] : stages_) {
      if (other_id == id || !st->runner) continue;
      const StageRunnerStatus s = st->runner->status();
      if (s.finished || !s.error.empty()) continue;
      ++live;
      others_bytes += st->runner->memory_bytes();
    }
    if (live >= options_.max_jobs) {
      return absl::ResourceExhaustedError("site '" + options_.site + "' runs " +
                                          std::to_string(live) + " stages, its limit");
    }
    auto& slot = stages_[id];
    if (!slot) {
      slot = std::make_shared<Stage>();
      slot->inbox = std::make_unique<Inbox>(options_.inbox_capacity_bytes);
    } else if (slot->runner && slot->runner->attempt() > a.attempt()) {
      return absl::FailedPreconditionError(
          "job " + id + ": assignment for attempt " + std::to_string(a.attempt()) +
          ", the stage runs attempt " + std::to_string(slot->runner->attempt()));
    }
    stage = slot;
    previous.swap(stage->runner);  // a previous attempt: stopped below, outside mu_
  }
  if (previous) previous->Stop();
  previous.reset();
  stage->inbox->StartAttempt(a.attempt(), a.resume_step());
  {
    std::lock_guard<std::mutex> lock(mu_);
    stage->cancelled = false;
    stage->assignment = a;
    stage->B = spec.job.microbatch_size;
    stage->T = spec.job.seq_len;
    stage->C = spec.job.model.channels;
    stage->Vp = spec.job.model.padded_vocab_size;
    stage->M = spec.job.microbatches();
    stage->steps = spec.job.steps;
  }

  StageRunnerContext ctx;
  ctx.site = options_.site;
  ctx.assignment = a;
  ctx.spec = std::move(spec);
  ctx.job_dir = JobDir(id);
  ctx.inbox = stage->inbox.get();
  ctx.coordinator = Channel(a.coordinator());
  if (!ctx.coordinator) {
    return absl::NotFoundError("job " + id + ": coordinator '" + a.coordinator() +
                               "' is not a peer of site '" + options_.site + "'");
  }
  const int i = static_cast<int>(a.stage()), n = a.stages_size();
  if (i > 0) ctx.to_prev = MakeSender(a.stages(i - 1).site());
  if (i + 1 < n) ctx.to_next = MakeSender(a.stages(i + 1).site());
  if (n > 1 && (i == 0 || i == n - 1))
    ctx.to_tied = MakeSender(a.stages(i == 0 ? n - 1 : 0).site());
  if ((i > 0 && !ctx.to_prev) || (i + 1 < n && !ctx.to_next) ||
      (n > 1 && (i == 0 || i == n - 1) && !ctx.to_tied)) {
    return absl::FailedPreconditionError(
        "job " + id + ": site '" + options_.site +
        "' must have every neighbouring stage's site (and, on the first and last stage, each "
        "other) among its peers");
  }
  ctx.backends = SiteBackends(options_.devices, ctx.spec.job.backend);
  ctx.monitor = monitor_;
  ctx.log = log_;
  ctx.throttle = throttle_;
  ctx.host_device_codecs = options_.host_device_codecs;
  ctx.channel = [this](const std::string& site) { return Channel(site); };
  ctx.heartbeat_seconds = options_.heartbeat_seconds;
  std::error_code ec;
  std::filesystem::create_directories(ctx.job_dir, ec);
  if (ec)
    return absl::InternalError("job " + id + ": cannot create " + ctx.job_dir + ": " +
                               ec.message());
  // The site's memory limit covers every stage it runs, not each one alone.
  int64_t limit = options_.memory_limit_bytes;
  if (limit > 0) {
    limit -= others_bytes;
    if (limit <= 0) {
      return absl::ResourceExhaustedError("site '" + options_.site + "': its other stages use " +
                                          std::to_string(others_bytes >> 20) +
                                          " MiB, all its memory limit allows");
    }
  }
  ASSIGN_OR_RETURN(auto runner, StageRunner::Create(std::move(ctx), limit));
  RETURN_IF_ERROR(model::WriteFileAtomically(JobDir(id) + "/stage.pb", a.SerializeAsString()));
  v1::AssignResponse r;
  r.set_memory_bytes(runner->memory_bytes());
  r.set_devices(runner->devices());
  std::shared_ptr<StageRunner> started(std::move(runner));
  started->Start();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stage->runner = started;
  }
  log_->info("job {}: running stage {} (layers {}..{}), attempt {}, from step {}", id, i,
             a.stages(i).layer_begin(), a.stages(i).layer_end(), a.attempt(), a.resume_step());
  return r;
}

StatusOr<v1::StepDecision> JobHost::ReportStep(const v1::StepReport& r, const std::string& caller) {
  RETURN_IF_ERROR(CheckJobId(r.job_id()));
  Coordinator* c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = coordinators_.find(r.job_id());
    if (it == coordinators_.end()) {
      return absl::NotFoundError("site '" + options_.site + "' does not coordinate job " +
                                 r.job_id());
    }
    c = it->second.get();
  }
  return c->OnReport(r, caller);
}

StatusOr<v1::JobCommandResponse> JobHost::ControlJob(const v1::JobCommand& c,
                                                     const std::string& caller) {
  RETURN_IF_ERROR(CheckJobId(c.job_id()));
  std::shared_ptr<Stage> stage = FindStage(c.job_id());
  v1::JobCommandResponse r;
  if (!stage) return r;  // nothing here (for a ping: not running)
  std::shared_ptr<StageRunner> runner;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stage->assignment.coordinator() != caller) {
      return Denied(
          caller, c.job_id(),
          "control the stages (its coordinator is '" + stage->assignment.coordinator() + "')");
    }
    runner = stage->runner;
  }
  switch (c.kind()) {
    case v1::JobCommand::KIND_PING: {
      if (runner) {
        const StageRunnerStatus s = runner->status();
        r.set_running(s.running);
        r.set_finished(s.finished);
        r.set_error(s.error);
        r.set_step(s.step);
        r.set_checkpoint_step(s.checkpoint_step);
        r.set_attempt(runner->attempt());
      }
      return r;
    }
    case v1::JobCommand::KIND_STOP_ATTEMPT:
    case v1::JobCommand::KIND_CANCEL: {
      std::lock_guard<std::mutex> assign_lock(assign_mu_);
      std::shared_ptr<StageRunner> stopping;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stage->runner &&
            (c.kind() == v1::JobCommand::KIND_CANCEL || stage->runner->attempt() <= c.attempt())) {
          stopping.swap(stage->runner);
        }
        if (c.kind() == v1::JobCommand::KIND_CANCEL) stage->cancelled = true;
      }
      if (stopping) stopping->Stop();
      if (c.kind() == v1::JobCommand::KIND_CANCEL) {
        stage->inbox->Close("job " + c.job_id() + " was cancelled");
        log_->info("job {}: cancelled; stage stopped", c.job_id());
      }
      return r;
    }
    default:
      return absl::InvalidArgumentError("job " + c.job_id() + ": unknown job command " +
                                        std::to_string(c.kind()));
  }
}

StatusOr<v1::SiteProfileReply> JobHost::ProfileSite(const v1::ProfileSiteRequest& req,
                                                    const std::string& caller) {
  ASSIGN_OR_RETURN(JobSpec spec, ParseJob(req.job_yaml(), "job from site '" + caller + "'"));
  // A calibration runs one layer on this site's devices: refuse shapes whose layer does not
  // fit the site's memory limit (or, without one, half its memory) before allocating.
  const model::Job& job = spec.job;
  model::FragmentOptions fo;
  fo.begin = job.model.num_layers >= 3 ? 1 : 0;
  fo.end = fo.begin + 1;
  fo.batch_size = job.microbatch_size;
  fo.seq_len = job.seq_len;
  fo.slots = 1;
  const int64_t need = model::Fragment::EstimateMemory(job.model, fo).total();
  const int64_t limit =
      options_.memory_limit_bytes > 0 ? options_.memory_limit_bytes : PhysicalMemory() / 2;
  if (need > limit) {
    return absl::ResourceExhaustedError(
        "site '" + options_.site + "': one layer of this job needs " + std::to_string(need >> 20) +
        " MiB to calibrate, the site allows " + std::to_string(limit >> 20) + " MiB");
  }
  std::vector<std::string> peers;
  for (const auto& [name, address] : options_.peers) peers.push_back(name);
  bool busy = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, stage] : stages_) {
      if (stage->runner && stage->runner->status().running) busy = true;
    }
  }
  StatusOr<v1::SiteProfileReply> r = absl::InternalError("not profiled");
  try {
    r = profiler_->Profile(spec, throttle_->load(), *monitor_, peers, busy);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("site '" + options_.site +
                                        "': out of memory calibrating this job's layer");
  }
  if (r.ok() && r->calibration_seconds() > 0 && log_) {
    log_->info(
        "calibrated {} for {}x{} tokens per microbatch at C={}: {:.2f} ms per layer "
        "(forward + backward), {:.1f} GFLOP/s",
        r->backend(), spec.job.microbatch_size, spec.job.seq_len, spec.job.model.channels,
        1e3 * r->seconds_per_layer(), r->flops() / 1e9);
  }
  return r;
}

Status JobHost::FetchFragment(const v1::FetchFragmentRequest& req, const std::string& caller,
                              const transport::TensorSink& sink) {
  RETURN_IF_ERROR(CheckJobId(req.job_id()));
  const std::string dir = JobDir(req.job_id());
  // The site's latest assignment for the job names who may fetch: the coordinator (export)
  // and the sites of its plan or the plan it migrates from (layer moves).
  ASSIGN_OR_RETURN(v1::StageAssignment a, ReadAssignment(dir + "/stage.pb"));
  if (caller != a.coordinator() && !InPlan(a, caller)) {
    return Denied(caller, req.job_id(), "fetch fragments (it is not one of the job's sites)");
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
      h.set_raw_size(count * sizeof(float));
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
    t.payload.assign(s.loader_state.begin(), s.loader_state.end());
    RETURN_IF_ERROR(sink(std::move(t)));
  }
  return absl::OkStatus();
}

Status JobHost::CheckIncoming(const v1::TensorFrame& first, const std::string& caller) {
  RETURN_IF_ERROR(CheckJobId(first.job_id()));
  const std::string& id = first.job_id();
  std::shared_ptr<Stage> stage = FindStage(id);
  if (!stage) {
    return absl::NotFoundError("no job '" + id + "' runs on site '" + options_.site + "'");
  }
  uint32_t me, n;
  int64_t B, T, C, Vp, M, steps;
  std::string from_site;
  {
    std::lock_guard<std::mutex> lock(mu_);
    B = stage->B, T = stage->T, C = stage->C, Vp = stage->Vp, M = stage->M, steps = stage->steps;
    if (stage->cancelled) {
      return absl::FailedPreconditionError("job '" + id + "' was cancelled; late frame dropped");
    }
    me = stage->assignment.stage();
    n = static_cast<uint32_t>(stage->assignment.stages_size());
    if (first.from_stage() < n) from_site = stage->assignment.stages(first.from_stage()).site();
  }
  const uint32_t from = first.from_stage();
  const bool tied = first.kind() == v1::TENSOR_KIND_WEIGHT_GRAD && n > 1 &&
                    ((me == 0 && from == n - 1) || (me == n - 1 && from == 0));
  const bool neighbour =
      (first.kind() == v1::TENSOR_KIND_ACTIVATION_GRAD && from == me + 1) ||
      ((first.kind() == v1::TENSOR_KIND_ACTIVATION || first.kind() == v1::TENSOR_KIND_TARGETS) &&
       me > 0 && from == me - 1);
  if (first.to_stage() != me || from >= n || from_site != caller || !(tied || neighbour)) {
    return Denied(caller, id,
                  "send " + v1::TensorKind_Name(first.kind()) + " from stage " +
                      std::to_string(from) + " to stage " + std::to_string(first.to_stage()) +
                      " (this site runs stage " + std::to_string(me) + " of " + std::to_string(n) +
                      ")");
  }
  std::vector<int64_t> expected;
  switch (first.kind()) {
    case v1::TENSOR_KIND_ACTIVATION:
    case v1::TENSOR_KIND_ACTIVATION_GRAD:
      expected = {B, T, C};
      break;
    case v1::TENSOR_KIND_TARGETS:
      expected = {B, T};
      break;
    default:
      expected = {Vp, C};
  }
  const std::vector<int64_t> shape(first.shape().begin(), first.shape().end());
  if (shape != expected) {
    return absl::InvalidArgumentError("job " + id + ": " + v1::TensorKind_Name(first.kind()) +
                                      " from " + caller + " has shape " + ShapeString(shape) +
                                      ", this stage expects " + ShapeString(expected));
  }
  uint64_t raw = sizeof(float);
  for (int64_t d : expected) raw *= static_cast<uint64_t>(d);
  // An encoding may exceed the raw size by its headers and incompressible zstd blocks.
  const uint64_t max_encoded = raw + raw / 64 + (64 << 10);
  if (first.raw_size() != raw || first.encoded_size() > max_encoded) {
    return absl::InvalidArgumentError(
        "job " + id + ": " + v1::TensorKind_Name(first.kind()) + " from " + caller + ": raw " +
        std::to_string(first.raw_size()) + " bytes (expected " + std::to_string(raw) +
        "), encoded " + std::to_string(first.encoded_size()) + " (at most " +
        std::to_string(max_encoded) + ")");
  }
  if (first.microbatch() >= static_cast<uint64_t>(std::max<int64_t>(1, M)) ||
      first.tensor_id() != 0 || first.step() >= static_cast<uint64_t>(steps)) {
    return absl::InvalidArgumentError("job " + id + ": tensor " + KeyOf(first).DebugString() +
                                      " from " + caller + " is outside the job (" +
                                      std::to_string(M) + " microbatches, " +
                                      std::to_string(steps) + " steps)");
  }
  return stage->inbox->CheckKey(KeyOf(first));
}

Status JobHost::Deliver(const v1::TensorFrame& first, std::vector<uint8_t> payload,
                        const std::string& caller) {
  RETURN_IF_ERROR(CheckIncoming(first, caller));
  std::shared_ptr<Stage> stage = FindStage(first.job_id());
  if (!stage) return absl::NotFoundError("job '" + first.job_id() + "' ended meanwhile");
  ReceivedTensor t;
  t.from_site = caller;
  t.shape.assign(first.shape().begin(), first.shape().end());
  t.payload = std::move(payload);
  return stage->inbox->Put(KeyOf(first), std::move(t));
}

}  // namespace longhaul::daemon
