#include "daemon/job/job_host.h"

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "daemon/job/site_backend.h"
#include "daemon/job/stage_checkpoint.h"
#include "daemon/peer_security.h"
#include "model/file_io.h"

namespace longhaul::daemon {
namespace {

// This daemon's own site, reached by direct calls.
class LocalSiteChannel final : public SiteChannel {
 public:
  LocalSiteChannel(std::string site, JobHost* host) : site_(std::move(site)), host_(host) {}
  const std::string& site() const override { return site_; }
  StatusOr<v1::AssignResponse> AssignStage(const v1::StageAssignment& a, double) override {
    return host_->AssignStage(a);
  }
  StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand& c, double) override {
    return host_->ControlJob(c);
  }
  StatusOr<v1::StepDecision> ReportStep(const v1::StepReport& r, double) override {
    return host_->ReportStep(r);
  }
  Status FetchFragment(const v1::FetchFragmentRequest& req,
                       const std::function<Status(const v1::TensorFrame&)>& sink) override {
    return host_->FetchFragment(req, sink);
  }
  StatusOr<v1::SiteProfileReply> ProfileSite(const v1::ProfileSiteRequest& req, double) override {
    return host_->ProfileSite(req);
  }

 private:
  std::string site_;
  JobHost* host_;
};

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
  return a;
}

}  // namespace

JobHost::JobHost(JobHostOptions options, LinkMonitor* monitor, std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), monitor_(monitor), log_(std::move(log)) {
  profiler_ =
      std::make_unique<SiteProfiler>(options_.site, options_.devices, options_.memory_limit_bytes);
  throttle_->store(options_.throttle_seconds);
  channels_[options_.site] = std::make_unique<LocalSiteChannel>(options_.site, this);
  for (const auto& [name, address] : options_.peers) {
    auto ch = PeerChannel(options_.tls, name, address);
    if (ch.ok()) channels_[name] = MakeRemoteSiteChannel(name, *ch);
  }
}

JobHost::~JobHost() { Shutdown(); }

void JobHost::Shutdown() {
  std::map<std::string, std::unique_ptr<Coordinator>> coordinators;
  std::map<std::string, std::shared_ptr<Stage>> stages;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    coordinators.swap(coordinators_);
    stages.swap(stages_);
  }
  for (auto& [id, s] : stages) {
    s->inbox->Close("daemon shutting down");
    if (s->runner) s->runner->Stop();
  }
  for (auto& [id, c] : coordinators) c->Shutdown();
}

std::string JobHost::JobDir(const std::string& job_id) const {
  return options_.data_dir + "/jobs/" + job_id;
}

SiteChannel* JobHost::Channel(const std::string& site) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = channels_.find(site);
  return it == channels_.end() ? nullptr : it->second.get();
}

double JobHost::set_throttle(double seconds) {
  const double previous = throttle_->exchange(seconds);
  log_->warn("debug throttle: {} s of extra compute per layer and microbatch (was {})", seconds,
             previous);
  return previous;
}

std::unique_ptr<LinkSender> JobHost::MakeSender(const std::string& peer) {
  auto it = options_.peers.find(peer);
  if (it == options_.peers.end()) return nullptr;
  LinkSenderOptions o;
  o.site = options_.site;
  o.peer = peer;
  o.address = it->second;
  o.tls = options_.tls;
  return std::make_unique<LinkSender>(o, monitor_, log_);
}

void JobHost::RestoreJobs() {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(options_.data_dir + "/jobs", ec)) {
    if (!std::filesystem::exists(e.path() / "job.pb")) continue;
    CoordinatorEnv env{options_.site, [this](const std::string& s) { return Channel(s); },
                       e.path().string(), log_};
    auto c = Coordinator::Restore(env);
    if (!c.ok()) {
      log_->error("cannot restore job in {}: {}", e.path().string(),
                  std::string(c.status().message()));
      continue;
    }
    const std::string id = (*c)->GetStatus(1).job_id();
    std::lock_guard<std::mutex> lock(mu_);
    coordinators_[id] = std::move(*c);
  }
}

std::vector<v1::LinkUsage> JobHost::LocalLinkUsage() {
  std::vector<std::pair<std::string, std::shared_ptr<Stage>>> stages;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, st] : stages_) stages.emplace_back(id, st);
  }
  std::vector<v1::LinkUsage> out;
  std::lock_guard<std::mutex> assign_lock(assign_mu_);  // runners are not swapped meanwhile
  for (const auto& [id, st] : stages) {
    if (!st->runner) continue;
    for (const OutboundUsage& o : st->runner->status().outbound) {
      v1::LinkUsage l;
      l.set_job_id(id);
      l.set_from_site(options_.site);
      l.set_to_site(o.to_site);
      l.set_codec(o.codec);
      l.set_reason(o.reason);
      l.set_raw_bytes(o.raw_bytes);
      l.set_wire_bytes(o.wire_bytes);
      l.set_tensors(o.tensors);
      l.set_device_tensors(o.device_tensors);
      l.set_bandwidth_bytes_per_second(monitor_->Outbound(o.to_site).bandwidth_bytes_per_second());
      if (o.send_seconds > 0) l.set_achieved_bytes_per_second(o.wire_bytes / o.send_seconds);
      out.push_back(std::move(l));
    }
  }
  return out;
}

StatusOr<v1::SubmitJobResponse> JobHost::Submit(const v1::SubmitJobRequest& request) {
  const std::string source = request.source().empty() ? "job" : request.source();
  ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(request.job_yaml(), source, options_.data_dir));
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%06x", rd() & 0xffffff);
  const std::string id = spec.job.name + "-" + suffix;
  CoordinatorEnv env{options_.site, [this](const std::string& s) { return Channel(s); }, JobDir(id),
                     log_};
  ASSIGN_OR_RETURN(auto c, Coordinator::Submit(env, std::move(spec), id));
  std::lock_guard<std::mutex> lock(mu_);
  coordinators_[id] = std::move(c);
  v1::SubmitJobResponse r;
  r.set_job_id(id);
  r.set_coordinator(options_.site);
  return r;
}

StatusOr<v1::SiteProfileReply> JobHost::ProfileSite(const v1::ProfileSiteRequest& req) {
  ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(req.job_yaml(), "job", options_.data_dir));
  std::vector<std::string> peers;
  for (const auto& [name, address] : options_.peers) peers.push_back(name);
  bool busy = false;
  {
    std::lock_guard<std::mutex> assign_lock(assign_mu_);  // runners are not swapped meanwhile
    std::vector<std::shared_ptr<Stage>> stages;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, stage] : stages_) stages.push_back(stage);
    }
    for (const auto& stage : stages) {
      if (stage->runner && stage->runner->status().running) busy = true;
    }
  }
  auto r = profiler_->Profile(spec, throttle_->load(), *monitor_, peers, busy);
  if (r.ok() && r->calibration_seconds() > 0 && log_) {
    log_->info(
        "calibrated {} for {}x{} tokens per microbatch at C={}: {:.2f} ms per layer "
        "(forward + backward), {:.1f} GFLOP/s",
        r->backend(), spec.job.microbatch_size, spec.job.seq_len, spec.job.model.channels,
        1e3 * r->seconds_per_layer(), r->flops() / 1e9);
  }
  return r;
}

StatusOr<v1::JobStatus> JobHost::GetJob(const std::string& job_id, uint32_t max_losses) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = coordinators_.find(job_id);
  if (it == coordinators_.end()) {
    return absl::NotFoundError("no job '" + job_id + "' is coordinated by site '" + options_.site +
                               "' (longhaul jobs lists them)");
  }
  return it->second->GetStatus(max_losses);
}

v1::ListJobsResponse JobHost::ListJobs() {
  std::lock_guard<std::mutex> lock(mu_);
  v1::ListJobsResponse r;
  for (const auto& [id, c] : coordinators_) *r.add_jobs() = c->GetStatus(1);
  return r;
}

StatusOr<v1::CancelJobResponse> JobHost::Cancel(const std::string& job_id) {
  Coordinator* c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = coordinators_.find(job_id);
    if (it == coordinators_.end()) return absl::NotFoundError("no job '" + job_id + "' here");
    c = it->second.get();
  }
  ASSIGN_OR_RETURN(v1::JobState state, c->Cancel());
  v1::CancelJobResponse r;
  r.set_state(state);
  return r;
}

Status JobHost::Export(const std::string& job_id,
                       const std::function<Status(const std::string&, uint64_t)>& sink) {
  Coordinator* c;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = coordinators_.find(job_id);
    if (it == coordinators_.end()) return absl::NotFoundError("no job '" + job_id + "' here");
    c = it->second.get();
  }
  return c->Export(sink);
}

StatusOr<v1::AssignResponse> JobHost::AssignStage(const v1::StageAssignment& a) {
  std::lock_guard<std::mutex> assign_lock(assign_mu_);
  const std::string& id = a.job_id();
  if (a.stage() >= static_cast<uint32_t>(a.stages_size()) ||
      a.stages(a.stage()).site() != options_.site) {
    return absl::InvalidArgumentError("job " + id + ": stage " + std::to_string(a.stage()) +
                                      " is not assigned to site '" + options_.site + "'");
  }
  ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(a.job_yaml(), "job " + id, options_.data_dir));
  std::shared_ptr<Stage> stage;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return absl::UnavailableError("site is shutting down");
    auto& slot = stages_[id];
    if (!slot) {
      slot = std::make_shared<Stage>();
      slot->inbox = std::make_unique<Inbox>(options_.inbox_capacity_bytes);
    }
    stage = slot;
  }
  if (stage->runner) {  // a previous attempt: stop it first
    stage->runner->Stop();
    stage->runner.reset();
  }
  stage->inbox->StartAttempt(a.attempt());
  stage->cancelled = false;
  stage->assignment = a;
  stage->B = spec.job.microbatch_size;
  stage->T = spec.job.seq_len;
  stage->C = spec.job.model.channels;
  stage->Vp = spec.job.model.padded_vocab_size;

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
  std::error_code ec;
  std::filesystem::create_directories(ctx.job_dir, ec);
  ASSIGN_OR_RETURN(auto runner, StageRunner::Create(std::move(ctx), options_.memory_limit_bytes));
  RETURN_IF_ERROR(model::WriteFileAtomically(JobDir(id) + "/stage.pb", a.SerializeAsString()));
  v1::AssignResponse r;
  r.set_memory_bytes(runner->memory_bytes());
  r.set_devices(runner->devices());
  stage->runner = std::move(runner);
  stage->runner->Start();
  log_->info("job {}: running stage {} (layers {}..{}), attempt {}, from step {}", id, i,
             a.stages(i).layer_begin(), a.stages(i).layer_end(), a.attempt(), a.resume_step());
  return r;
}

StatusOr<v1::StepDecision> JobHost::ReportStep(const v1::StepReport& r) {
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
  return c->OnReport(r);
}

StatusOr<v1::JobCommandResponse> JobHost::ControlJob(const v1::JobCommand& c) {
  std::shared_ptr<Stage> stage;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = stages_.find(c.job_id());
    if (it != stages_.end()) stage = it->second;
  }
  v1::JobCommandResponse r;
  if (!stage) return r;  // nothing here (for a ping: not running)
  switch (c.kind()) {
    case v1::JobCommand::KIND_PING: {
      if (stage->runner) {
        const StageRunnerStatus s = stage->runner->status();
        r.set_running(s.running);
        r.set_finished(s.finished);
        r.set_error(s.error);
        r.set_step(s.step);
        r.set_checkpoint_step(s.checkpoint_step);
        r.set_attempt(stage->runner->attempt());
      }
      return r;
    }
    case v1::JobCommand::KIND_STOP_ATTEMPT:
    case v1::JobCommand::KIND_CANCEL: {
      std::lock_guard<std::mutex> assign_lock(assign_mu_);
      if (stage->runner &&
          (c.kind() == v1::JobCommand::KIND_CANCEL || stage->runner->attempt() <= c.attempt())) {
        stage->runner->Stop();
        stage->runner.reset();
      }
      if (c.kind() == v1::JobCommand::KIND_CANCEL) {
        stage->cancelled = true;
        stage->inbox->Close("job " + c.job_id() + " was cancelled");
        log_->info("job {}: cancelled; stage stopped", c.job_id());
      }
      return r;
    }
    default:
      return absl::InvalidArgumentError("unknown job command");
  }
}

Status JobHost::FetchFragment(const v1::FetchFragmentRequest& req,
                              const std::function<Status(const v1::TensorFrame&)>& sink) {
  const std::string dir = JobDir(req.job_id());
  int begin = static_cast<int>(req.layer_begin()), end = static_cast<int>(req.layer_end());
  if (end == 0) {  // the layers of this site's current assignment
    ASSIGN_OR_RETURN(v1::StageAssignment a, ReadAssignment(dir + "/stage.pb"));
    begin = static_cast<int>(a.stages(a.stage()).layer_begin());
    end = static_cast<int>(a.stages(a.stage()).layer_end());
  }
  ASSIGN_OR_RETURN(StageState s,
                   ReadStageState(StageCheckpointPath(dir, req.step(), begin, end), begin, end));
  // Streams one float array in 1 MiB chunks.
  auto send = [&](v1::TensorKind kind, uint32_t id, const std::vector<float>& values) -> Status {
    const size_t bytes = values.size() * sizeof(float), chunk = 1 << 20;
    const char* data = reinterpret_cast<const char*>(values.data());
    size_t off = 0;
    do {
      v1::TensorFrame f;
      f.set_job_id(req.job_id());
      f.set_step(s.step);
      f.set_kind(kind);
      f.set_tensor_id(id);
      f.add_shape(values.size());
      f.set_raw_size(bytes);
      f.set_encoded_size(bytes);
      f.set_chunk_offset(off);
      f.set_payload(data + off, std::min(chunk, bytes - off));
      f.set_from_site(options_.site);
      RETURN_IF_ERROR(sink(f));
      off += chunk;
    } while (off < bytes);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(send(v1::TENSOR_KIND_PARAMETERS, 0, s.params));
  if (req.include_state()) {
    RETURN_IF_ERROR(send(v1::TENSOR_KIND_OPTIMIZER_STATE, 1, s.m));
    RETURN_IF_ERROR(send(v1::TENSOR_KIND_OPTIMIZER_STATE, 2, s.v));
    v1::TensorFrame f;
    f.set_job_id(req.job_id());
    f.set_step(s.step);
    f.set_kind(v1::TENSOR_KIND_LOADER_STATE);
    f.set_payload(s.loader_state);
    f.set_from_site(options_.site);
    RETURN_IF_ERROR(sink(f));
  }
  return absl::OkStatus();
}

Status JobHost::Deliver(const v1::TensorFrame& first, std::vector<uint8_t> payload) {
  std::shared_ptr<Stage> stage;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = stages_.find(first.job_id());
    if (it != stages_.end()) stage = it->second;
  }
  if (!stage) {
    return absl::NotFoundError("no job '" + first.job_id() + "' runs on site '" + options_.site +
                               "'");
  }
  if (stage->cancelled) {
    return absl::FailedPreconditionError("job '" + first.job_id() +
                                         "' was cancelled; late frame dropped");
  }
  std::vector<int64_t> expected;
  switch (first.kind()) {
    case v1::TENSOR_KIND_ACTIVATION:
    case v1::TENSOR_KIND_ACTIVATION_GRAD:
      expected = {stage->B, stage->T, stage->C};
      break;
    case v1::TENSOR_KIND_TARGETS:
      expected = {stage->B, stage->T};
      break;
    case v1::TENSOR_KIND_WEIGHT_GRAD:
      expected = {stage->Vp, stage->C};
      break;
    default:
      return absl::InvalidArgumentError("job " + first.job_id() + ": unexpected tensor kind " +
                                        v1::TensorKind_Name(first.kind()));
  }
  const std::vector<int64_t> shape(first.shape().begin(), first.shape().end());
  if (shape != expected) {
    return absl::InvalidArgumentError("job " + first.job_id() + ": " +
                                      v1::TensorKind_Name(first.kind()) + " from " +
                                      first.from_site() + " has shape " + ShapeString(shape) +
                                      ", this stage expects " + ShapeString(expected));
  }
  if (first.to_stage() != stage->assignment.stage()) {
    return absl::InvalidArgumentError("job " + first.job_id() + ": frame for stage " +
                                      std::to_string(first.to_stage()) + " reached stage " +
                                      std::to_string(stage->assignment.stage()) + " on '" +
                                      options_.site + "'");
  }
  ReceivedTensor t;
  t.from_site = first.from_site();
  t.shape = shape;
  t.payload = std::move(payload);
  return stage->inbox->Put(KeyOf(first), std::move(t));
}

}  // namespace longhaul::daemon
