// JobHost (job_host.h): the job side of a daemon: its links to other sites, the jobs it
// coordinates, restoring them after a restart, and the Control API's job calls. The Peer
// API's job calls are in job_host_peer.cc.
#include "daemon/job/host/job_host.h"

#include <fstream>
#include <random>
#include <sstream>

#include "daemon/job/checks/job_checks.h"
#include "daemon/job/site/site_backend.h"
#include "daemon/job/spec/job_paths.h"
#include "daemon/job/state/stage_checkpoint.h"
#include "model/file_io.h"

namespace longhaul::daemon {
namespace {

// This daemon's own site, reached by direct calls: the coordinator's own stage goes through
// the same job calls as every other.
class LocalLink final : public transport::Link {
 public:
  LocalLink(std::string site, JobHost* host) : site_(std::move(site)), host_(host) {}
  const std::string& site() const override { return site_; }
  StatusOr<v1::HelloResponse> Hello(const v1::HelloRequest&, double) override {
    return NoLinkToSelf();
  }
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest&, double) override {
    return NoLinkToSelf();
  }
  StatusOr<v1::ProbeResult> Probe(const transport::ProbeRequest&) override {
    return NoLinkToSelf();
  }
  StatusOr<v1::AssignResponse> AssignStage(const v1::StageAssignment& a, double) override {
    return host_->AssignStage(a, site_);
  }
  StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand& c, double) override {
    return host_->ControlJob(c, site_);
  }
  StatusOr<v1::StepDecision> ReportStep(const v1::StepReport& r, double) override {
    return host_->ReportStep(r, site_);
  }
  StatusOr<v1::SiteProfileReply> ProfileSite(const v1::ProfileSiteRequest& req, double) override {
    return host_->ProfileSite(req, site_);
  }
  Status FetchFragment(const v1::FetchFragmentRequest& req,
                       const transport::TensorSink& sink) override {
    return host_->FetchFragment(req, site_, sink);
  }
  Status SendTensor(const transport::WireTensor& t, double) override {
    v1::TensorFrame header = t.header;
    header.set_encoded_size(t.payload.size());
    header.set_chunk_count(1);
    RETURN_IF_ERROR(host_->CheckIncoming(header, t.payload, site_));
    return host_->Deliver(header, t.payload, site_);
  }

 private:
  Status NoLinkToSelf() const {
    return absl::UnimplementedError("site '" + site_ + "' keeps no link to itself");
  }
  std::string site_;
  JobHost* host_;
};

}  // namespace

JobHost::JobHost(JobHostOptions options, LinkMonitor* monitor, std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), monitor_(monitor), log_(std::move(log)) {
  profiler_ =
      std::make_unique<SiteProfiler>(options_.site, options_.devices, options_.memory_limit_bytes);
  throttle_->store(options_.throttle_seconds);
  channels_[options_.site] = std::make_unique<LocalLink>(options_.site, this);
  if (options_.dial) {
    for (const auto& [name, address] : options_.peers) {
      if (auto link = options_.dial(name)) channels_[name] = std::move(link);
    }
  }
}

JobHost::~JobHost() { Shutdown(); }

void JobHost::Shutdown() {
  std::map<std::string, std::shared_ptr<Coordinator>> coordinators;
  std::map<std::string, std::shared_ptr<Stage>> stages;
  {
    MutexLock lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
    coordinators.swap(coordinators_);
    stages.swap(stages_);
  }
  // Barrier waiters first (a local stage may wait there for a report that never comes),
  // then the stages, then the coordinators' threads.
  for (auto& [id, c] : coordinators) c->RequestShutdown();
  for (auto& [id, s] : stages) {
    s->inbox->Close("daemon shutting down");
    StopRunner(s.get());
  }
  for (auto& [id, c] : coordinators) c->Shutdown();
}

// REQUIRES: job_id passed CheckJobId (job_checks.h), so the directory stays in data_dir.
std::string JobHost::JobDir(const std::string& job_id) const {
  return options_.data_dir + "/jobs/" + job_id;
}

std::shared_ptr<Coordinator> JobHost::FindCoordinator(const std::string& job_id) {
  MutexLock lock(mu_);
  auto it = coordinators_.find(job_id);
  return it == coordinators_.end() ? nullptr : it->second;
}

std::shared_ptr<JobHost::Stage> JobHost::FindStage(const std::string& job_id) {
  MutexLock lock(mu_);
  auto it = stages_.find(job_id);
  return it == stages_.end() ? nullptr : it->second;
}

void JobHost::StopRunner(Stage* stage) {
  std::shared_ptr<StageRunner> runner;
  {
    MutexLock lock(mu_);
    runner.swap(stage->runner);
  }
  if (runner) runner->Stop();
}

StatusOr<JobSpec> JobHost::ParseJob(const std::string& yaml, const std::string& source) {
  // No base folder: a submitted job names its files by absolute path (the CLI makes the job
  // file's relative paths absolute, model/job_file_paths.h); a relative one is refused.
  ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(yaml, source, ""));
  std::vector<std::string> roots = options_.data_roots;
  if (roots.empty()) roots.push_back(options_.data_dir);
  RETURN_IF_ERROR(CheckJobPaths(spec, roots, options_.site));
  return spec;
}

transport::Link* JobHost::Channel(const std::string& site) {
  MutexLock lock(mu_);
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
  transport::Link* link = peer == options_.site ? nullptr : Channel(peer);
  if (link == nullptr) return nullptr;
  LinkSenderOptions o;
  o.site = options_.site;
  o.peer = peer;
  o.file_env = options_.env.files;
  return std::make_unique<LinkSender>(o, link, monitor_, log_);
}

void JobHost::RestoreJobs() {
  FileEnv& files = *options_.env.files;
  const std::string jobs_dir = options_.data_dir + "/jobs";
  StatusOr<std::vector<std::string>> names = files.ListDirectory(jobs_dir);
  if (!names.ok()) {
    if (!absl::IsNotFound(names.status())) {
      log_->error("cannot list the jobs to restore: {}", std::string(names.status().message()));
    }
    return;
  }
  for (const std::string& dir_id : *names) {
    const std::string dir = jobs_dir + "/" + dir_id;
    if (!files.Exists(dir + "/job.pb")) continue;
    CoordinatorEnv env{options_.site, [this](const std::string& s) { return Channel(s); },
                       dir,           log_,
                       &files,        options_.gossip_links_check_seconds};
    auto c = Coordinator::Restore(env);
    if (!c.ok()) {
      // Listed as failed with the reason, not dropped: the operator sees what was lost.
      log_->error("cannot restore job in {}: {}", dir, std::string(c.status().message()));
      v1::JobStatus broken;
      broken.set_job_id(dir_id);
      broken.set_state(v1::JOB_STATE_FAILED);
      broken.set_coordinator(options_.site);
      broken.set_detail("cannot restore the job after a restart: " +
                        std::string(c.status().message()));
      MutexLock lock(mu_);
      unrestorable_[dir_id] = broken;
      continue;
    }
    const std::string id = (*c)->GetStatus(1).job_id();
    if (id != dir_id) {
      log_->error("job record in {} names job '{}'; ignored", dir, id);
      continue;
    }
    MutexLock lock(mu_);
    coordinators_[id] = std::move(*c);
  }
}

std::vector<v1::LinkUsage> JobHost::LocalLinkUsage() {
  std::vector<std::pair<std::string, std::shared_ptr<Stage>>> stages;
  {
    MutexLock lock(mu_);
    for (const auto& [id, st] : stages_) stages.emplace_back(id, st);
  }
  std::vector<v1::LinkUsage> out;
  for (const auto& [id, st] : stages) {
    std::shared_ptr<StageRunner> runner;
    {
      MutexLock lock(mu_);
      runner = st->runner;
    }
    if (!runner) continue;
    for (const OutboundUsage& o : runner->status().outbound) {
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
  ASSIGN_OR_RETURN(JobSpec spec, ParseJob(request.job_yaml(), source));
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%06x", rd() & 0xffffff);
  const std::string id = spec.job.name + "-" + suffix;
  RETURN_IF_ERROR(CheckJobId(id));
  {
    MutexLock lock(mu_);
    if (coordinators_.size() >= options_.max_jobs) {
      return absl::ResourceExhaustedError("site '" + options_.site + "' already coordinates " +
                                          std::to_string(coordinators_.size()) +
                                          " jobs, its limit");
    }
  }
  CoordinatorEnv env{options_.site,      [this](const std::string& s) { return Channel(s); },
                     JobDir(id),         log_,
                     options_.env.files, options_.gossip_links_check_seconds};
  ASSIGN_OR_RETURN(auto c, Coordinator::Submit(env, std::move(spec), id));
  MutexLock lock(mu_);
  coordinators_[id] = std::move(c);
  v1::SubmitJobResponse r;
  r.set_job_id(id);
  r.set_coordinator(options_.site);
  return r;
}

Status JobHost::NotCoordinatedHere(const std::string& job_id) {
  const std::string coordinator = KnownCoordinator(job_id).value_or("");
  if (coordinator.empty() || coordinator == options_.site) {
    return absl::NotFoundError("no job '" + job_id + "' is coordinated by site '" + options_.site +
                               "' (longhaul jobs lists them)");
  }
  std::string stage;
  {
    MutexLock lock(mu_);
    if (auto it = stages_.find(job_id); it != stages_.end()) {
      stage = ", which runs its stage " + std::to_string(it->second->assignment.stage());
    }
  }
  return absl::NotFoundError("job " + job_id + " is coordinated by site '" + coordinator +
                             "', not by site '" + options_.site + "'" + stage + "; ask its daemon");
}

StatusOr<v1::JobStatus> JobHost::GetJob(const std::string& job_id, uint32_t max_losses) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  {
    MutexLock lock(mu_);
    if (auto it = coordinators_.find(job_id); it != coordinators_.end()) {
      return it->second->GetStatus(max_losses);
    }
    if (auto b = unrestorable_.find(job_id); b != unrestorable_.end()) return b->second;
  }
  return NotCoordinatedHere(job_id);
}

v1::ListJobsResponse JobHost::ListJobs(uint32_t max_losses) {
  v1::ListJobsResponse r;
  {
    MutexLock lock(mu_);
    for (const auto& [id, c] : coordinators_) *r.add_jobs() = c->GetStatus(max_losses);
    for (const auto& [id, broken] : unrestorable_) *r.add_jobs() = broken;
  }
  for (auto& s : HostedStages()) *r.add_hosted_stages() = std::move(s);
  return r;
}

std::vector<v1::HostedStage> JobHost::HostedStages() {
  struct Held {
    v1::StageAssignment assignment;
    std::string name;
    std::shared_ptr<StageRunner> runner;
    bool cancelled;
    int64_t steps;
  };
  std::vector<std::pair<std::string, Held>> held;
  {
    MutexLock lock(mu_);
    for (const auto& [id, st] : stages_) {
      if (st->assignment.coordinator() == options_.site || st->assignment.job_id().empty()) {
        continue;  // coordinated here: ListJobs has the job
      }
      held.push_back({id, {st->assignment, st->name, st->runner, st->cancelled, st->steps}});
    }
  }
  std::vector<v1::HostedStage> out;
  for (const auto& [id, h] : held) {
    const v1::StageAssignment& a = h.assignment;
    v1::HostedStage s;
    s.set_job_id(id);
    s.set_name(h.name);
    s.set_coordinator(a.coordinator());
    s.set_stage(a.stage());
    s.set_stages(static_cast<uint32_t>(a.stages_size()));
    if (static_cast<int>(a.stage()) < a.stages_size()) {
      const v1::StageInfo& info = a.stages(static_cast<int>(a.stage()));
      s.set_layer_begin(info.layer_begin());
      s.set_layer_end(info.layer_end());
      s.set_replica(info.replica());
    }
    s.set_attempt(a.attempt());
    s.set_total_steps(static_cast<uint64_t>(std::max<int64_t>(0, h.steps)));
    s.set_step(a.resume_step());
    if (h.cancelled) {
      s.set_state("cancelled");
    } else if (!h.runner) {
      s.set_state("stopped");
    }
    if (h.runner) {
      const StageRunnerStatus st = h.runner->status();
      s.set_step(st.step);
      s.set_error(st.error);
      if (!h.cancelled) {
        s.set_state(st.finished ? "finished" : !st.error.empty() ? "failed" : "running");
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

StatusOr<v1::CancelJobResponse> JobHost::Cancel(const std::string& job_id) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  std::shared_ptr<Coordinator> c = FindCoordinator(job_id);
  if (c == nullptr) return NotCoordinatedHere(job_id);
  ASSIGN_OR_RETURN(v1::JobState state, c->Cancel());
  v1::CancelJobResponse r;
  r.set_state(state);
  return r;
}

StatusOr<v1::ChangeJobSitesResponse> JobHost::ChangeSites(
    const v1::ChangeJobSitesRequest& request) {
  RETURN_IF_ERROR(CheckJobId(request.job_id()));
  // Hostile sizes stop here: a job has at most kMaxStages stages to add or remove.
  if (request.add_size() > kMaxStages || request.remove_size() > kMaxStages) {
    return absl::InvalidArgumentError("job " + request.job_id() + ": " +
                                      std::to_string(request.add_size() + request.remove_size()) +
                                      " sites in one change, at most " +
                                      std::to_string(kMaxStages));
  }
  std::shared_ptr<Coordinator> c = FindCoordinator(request.job_id());
  if (c == nullptr) return NotCoordinatedHere(request.job_id());
  return c->ChangeSites({request.add().begin(), request.add().end()},
                        {request.remove().begin(), request.remove().end()});
}

Status JobHost::Export(const std::string& job_id, const std::string& format,
                       const std::string& dtype, const Coordinator::ExportSink& sink) {
  RETURN_IF_ERROR(CheckJobId(job_id));
  std::shared_ptr<Coordinator> c = FindCoordinator(job_id);
  if (c == nullptr) return NotCoordinatedHere(job_id);
  return c->Export(format, dtype, sink);
}

}  // namespace longhaul::daemon
