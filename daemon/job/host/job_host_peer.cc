// JobHost's Peer API, its control calls: what other daemons ask of a job, each authorized for
// the job it names and checked at the edge (job_checks.h) before anything is allocated,
// written or started. The roles (docs/SECURITY.md): a job's coordinator assigns, stops,
// cancels and pings its stages; its stage sites report steps (to the coordinator). The data
// calls (tensors in, fragments out) are in job_host_data.cc.
#include <sys/sysinfo.h>

#include <new>

#include "absl/strings/str_join.h"
#include "common/layer_range.h"
#include "daemon/job/checks/job_checks.h"
#include "daemon/job/host/job_host.h"
#include "daemon/job/site/site_backend.h"
#include "daemon/job/spec/stage_grid.h"
#include "daemon/job/state/stage_checkpoint.h"
#include "daemon/job/sync/replica_membership.h"
#include "daemon/job/sync/sync_routes.h"
#include "fleet/sync_slices.h"
#include "model/file_io.h"
#include "model/fragment.h"
#include "model/layout.h"

namespace longhaul::daemon {
namespace {

// Physical memory, the bound on a calibration when the site sets no memory limit.
int64_t PhysicalMemory() {
  struct sysinfo si {};
  if (sysinfo(&si) != 0) return int64_t{1} << 34;
  return static_cast<int64_t>(si.totalram) * si.mem_unit;
}

}  // namespace

StatusOr<std::string> JobHost::KnownCoordinator(const std::string& job_id) {
  {
    MutexLock lock(mu_);
    if (coordinators_.count(job_id)) return options_.site;
    auto it = stages_.find(job_id);
    if (it != stages_.end()) return it->second->assignment.coordinator();
  }
  if (options_.env.files->Exists(JobDir(job_id) + "/job.pb")) return options_.site;
  StatusOr<v1::StageAssignment> a =
      ReadStageAssignment(*options_.env.files, JobDir(job_id) + "/stage.pb");
  if (absl::IsNotFound(a.status())) return std::string();
  RETURN_IF_ERROR(a.status());
  return a->coordinator();
}

StatusOr<v1::AssignResponse> JobHost::AssignStage(const v1::StageAssignment& a,
                                                  const std::string& caller) {
  RETURN_IF_ERROR(CheckJobId(a.job_id()));
  const std::string& id = a.job_id();
  if (caller != a.coordinator()) {
    return RoleDenied(caller, id,
                      "assign stages on behalf of coordinator '" + a.coordinator() + "'");
  }
  // A stage record this site cannot read names no coordinator: refused (fails closed), or any
  // peer could claim the job's checkpoints here.
  StatusOr<std::string> record = KnownCoordinator(id);
  if (!record.ok()) {
    return absl::FailedPreconditionError("job " + id + ": site '" + options_.site +
                                         "' cannot read its record of the job, so it does not "
                                         "know its coordinator (" +
                                         std::string(record.status().message()) + ")");
  }
  const std::string known = *record;
  if (!known.empty() && known != caller) {
    return RoleDenied(caller, id, "assign stages (its coordinator is '" + known + "')");
  }
  ASSIGN_OR_RETURN(JobSpec spec, ParseJob(a.job_yaml(), "job " + id));
  // Sites joined or left the job since it was submitted: the plan has this many replicas
  // (CheckAssignment checks that the stages form them).
  if (a.replicas() > 0)
    spec.replicas = static_cast<int>(std::min<uint32_t>(a.replicas(), kMaxReplicas + 1));
  // The outer step the coordinator resolved when the job was submitted, over this site's own
  // reading of the job file (a site of another version may default otherwise).
  if (a.has_outer()) {
    RETURN_IF_ERROR(Annotate(ApplyOuterStep(a.outer(), spec.sync),
                             "job " + id + ": the outer step from coordinator '" + caller + "'"));
  }
  RETURN_IF_ERROR(CheckAssignment(a, spec, options_.site));

  MutexLock assign_lock(assign_mu_);  // one assignment at a time
  std::shared_ptr<Stage> stage;
  std::shared_ptr<StageRunner> previous;
  int64_t others_bytes = 0;
  {
    MutexLock lock(mu_);
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
  // Streaming syncs: the frames of the sync a resumed stage starts again may come from another
  // replica before this stage's runner exists; the inbox keeps them from the start.
  stage->inbox->SetSyncLag(spec.sync.mode == fleet::SyncMode::kLocal
                               ? static_cast<uint64_t>(std::max(0, spec.sync.overlap))
                               : 0);
  stage->inbox->StartAttempt(a.attempt(), a.resume_step());
  {
    MutexLock lock(mu_);
    stage->cancelled = false;
    stage->assignment = a;
    stage->admission = std::make_shared<const StageAdmission>(options_.site, a, spec);
    stage->steps = spec.job.steps;
    stage->name = spec.job.name;
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
  const int i = static_cast<int>(a.stage());
  StageGrid grid = StageGrid::OfPlan(ctx.spec.replicas, a.stages());
  grid.tied_head = model::TiedHead(ctx.spec.job.model);
  bool all_peers = true;
  auto sender_to = [&](int stage_index) -> std::unique_ptr<LinkSender> {
    if (stage_index < 0) return nullptr;
    auto sender = MakeSender(a.stages(stage_index).site());
    all_peers = all_peers && sender != nullptr;
    return sender;
  };
  ctx.to_prev = sender_to(grid.prev(i));
  ctx.to_next = sender_to(grid.next(i));
  ctx.to_tied = sender_to(grid.tied(i));
  // No sender to a dropped replica's stage (replica_membership.h): it is not in the group.
  const ReplicaList dropped(a.dropped_replicas().begin(), a.dropped_replicas().end());
  if (grid.replicas > 1) {
    for (const SyncRoute& route : SyncRoutes(grid, ctx.spec.job.model, i)) {
      for (int peer : route.to) {
        if (!Contains(dropped, grid.replica(peer)) && ctx.to_sync.count(peer) == 0) {
          ctx.to_sync[peer] = sender_to(peer);
        }
      }
    }
  }
  if (!all_peers) {
    return absl::FailedPreconditionError(
        "job " + id + ": site '" + options_.site +
        "' must have every neighbouring stage's site (on the first and last stage, each other; "
        "with replicas, the stages of the other replicas holding the same layers) among its peers");
  }
  ctx.backends = SiteBackends(options_.devices, ctx.spec.job.backend);
  ctx.monitor = monitor_;
  ctx.log = log_;
  ctx.throttle = throttle_;
  ctx.channel = [this](const std::string& site) { return Channel(site); };
  ctx.heartbeat_seconds = options_.heartbeat_seconds;
  ctx.env = options_.env;
  if (Status s = options_.env.files->CreateDirectories(ctx.job_dir); !s.ok()) {
    return Status(s.code(), "job " + id + ": " + std::string(s.message()));
  }
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
  // What extra activation slots may grow a stage to (extra_in_flight auto): within the site's
  // limit; without one, half the machine's memory on the CPU, and none on GPUs (the site does
  // not know their memory: setting memory_limit_mb lets them use it).
  const bool on_gpu = OnGpu(ctx.backends.empty() ? ctx.spec.job.backend : ctx.backends[0]);
  ctx.in_flight_memory_bytes = limit > 0 ? limit
                               : on_gpu  ? 0
                                        : std::max<int64_t>(0, PhysicalMemory() / 2 - others_bytes);
  ASSIGN_OR_RETURN(auto runner, StageRunner::Create(std::move(ctx), limit));
  RETURN_IF_ERROR(WriteStageAssignment(*options_.env.files, JobDir(id) + "/stage.pb", a));
  v1::AssignResponse r;
  r.set_memory_bytes(runner->memory_bytes());
  r.set_devices(runner->devices());
  std::shared_ptr<StageRunner> started(std::move(runner));
  started->Start();
  {
    MutexLock lock(mu_);
    stage->runner = started;
  }
  log_->info(
      "job {}: running stage {} (layers {}, coordinated by site '{}'), attempt {}, from "
      "step {}",
      id, i, LayerRange(a.stages(i).layer_begin(), a.stages(i).layer_end()), a.coordinator(),
      a.attempt(), a.resume_step());
  return r;
}

StatusOr<v1::StepDecision> JobHost::ReportStep(const v1::StepReport& r, const std::string& caller) {
  RETURN_IF_ERROR(CheckJobId(r.job_id()));
  std::shared_ptr<Coordinator> c = FindCoordinator(r.job_id());
  if (!c) {
    return absl::NotFoundError("site '" + options_.site + "' does not coordinate job " +
                               r.job_id());
  }
  return c->OnReport(r, caller);
}

StatusOr<v1::JobCommandResponse> JobHost::Volunteer(const std::string& job,
                                                    const std::string& caller) {
  // The job by its id, else the running job of that name that lists the caller among its
  // volunteers (what a peer learns of other jobs: that one runs under that name).
  std::shared_ptr<Coordinator> c = FindCoordinator(job);
  if (c == nullptr) {
    std::vector<std::shared_ptr<Coordinator>> named;
    {
      MutexLock lock(mu_);
      for (const auto& [id, co] : coordinators_) {
        if (co->name() == job) named.push_back(co);
      }
    }
    bool running = false;
    std::vector<std::string> taking;
    for (const auto& co : named) {
      if (co->finished()) continue;
      running = true;
      if (!co->TakesVolunteer(caller)) continue;
      c = co;
      taking.push_back(co->id());
    }
    if (taking.size() > 1) {
      return absl::FailedPreconditionError(
          "site '" + options_.site + "' runs " + std::to_string(taking.size()) + " jobs named '" +
          job + "' that take site '" + caller + "' (" + absl::StrJoin(taking, ", ") +
          "): volunteer for one by its id");
    }
    if (c == nullptr && running) {
      return absl::PermissionDeniedError("site '" + caller +
                                         "' is not one of the volunteers of job '" + job +
                                         "' at site '" + options_.site + "'");
    }
    if (c == nullptr) {
      return absl::NotFoundError("site '" + options_.site + "' coordinates no running job '" + job +
                                 "' (by id or name)");
    }
  }
  ASSIGN_OR_RETURN(std::string detail, c->Volunteer(caller));
  v1::JobCommandResponse r;
  r.set_detail(detail);
  return r;
}

StatusOr<v1::JobCommandResponse> JobHost::ControlJob(const v1::JobCommand& c,
                                                     const std::string& caller) {
  RETURN_IF_ERROR(CheckJobId(c.job_id()));
  if (c.kind() == v1::JobCommand::KIND_VOLUNTEER) return Volunteer(c.job_id(), caller);
  std::shared_ptr<Stage> stage = FindStage(c.job_id());
  v1::JobCommandResponse r;
  if (!stage) return r;  // nothing here (for a ping: not running)
  std::shared_ptr<StageRunner> runner;
  {
    MutexLock lock(mu_);
    // A ping tells only how the stage stands: the job's other stage sites may ask too (a
    // gossip round asks after a late neighbour, sync_exchange.h). Every other command is
    // the coordinator's.
    bool peer = false;
    for (const auto& st : stage->assignment.stages()) peer = peer || st.site() == caller;
    if (stage->assignment.coordinator() != caller &&
        !(c.kind() == v1::JobCommand::KIND_PING && peer)) {
      return RoleDenied(
          caller, c.job_id(),
          "control the stages (its coordinator is '" + stage->assignment.coordinator() + "')");
    }
    runner = stage->runner;
    if (!runner) r.set_attempt(stage->stopped_attempt);  // stopped there, or never assigned
  }
  switch (c.kind()) {
    case v1::JobCommand::KIND_PING: {
      if (runner) {
        const StageRunnerStatus s = runner->status();
        r.set_running(s.running);
        r.set_finished(s.finished);
        r.set_error(s.error);
        r.set_permanent(s.permanent);
        r.set_step(s.step);
        r.set_checkpoint_step(s.checkpoint_step);
        r.set_attempt(runner->attempt());
        // A gossip peer waiting for this stage's frames of a round: were they left out?
        if (c.gossip_step() > 0) {
          r.set_gossip_skipped(runner->Unsent(c.gossip_replica(), c.gossip_step() - 1));
        }
      }
      return r;
    }
    case v1::JobCommand::KIND_STOP_ATTEMPT:
    case v1::JobCommand::KIND_CANCEL: {
      MutexLock assign_lock(assign_mu_);
      std::shared_ptr<StageRunner> stopping;
      {
        MutexLock lock(mu_);
        if (stage->runner &&
            (c.kind() == v1::JobCommand::KIND_CANCEL || stage->runner->attempt() <= c.attempt())) {
          stopping.swap(stage->runner);
          stage->stopped_attempt = stopping->attempt();
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
    case v1::JobCommand::KIND_REMOVE_REPLICAS: {
      // Removed replicas' frames refused from from_step on (gossip: at once, and gone in the
      // stage's rounds; gather and ring: their syncs from that step's decision on). A stage of
      // another attempt already has (or will have) them in its assignment's dropped list.
      const ReplicaList removed(c.removed_replicas().begin(), c.removed_replicas().end());
      MutexLock lock(mu_);
      if (!stage->runner || !stage->admission || stage->runner->attempt() != c.attempt() ||
          stage->admission->attempt() != c.attempt()) {
        return r;
      }
      ASSIGN_OR_RETURN(stage->admission, stage->admission->WithRemoved(removed, c.from_step()));
      if (c.from_step() == 0) stage->runner->RemoveReplicas(removed);
      log_->info("job {}: {} removed; their frames {} are refused", c.job_id(),
                 ReplicaNames(removed),
                 c.from_step() == 0 ? std::string("from now on")
                                    : "of step " + std::to_string(c.from_step()) + " on");
      return r;
    }
    case v1::JobCommand::KIND_PING_FOR: {
      // The coordinator cannot reach target_site: this site asks it over its own link. Only a
      // site that runs a stage of the job here, and never this site itself.
      RETURN_IF_ERROR(CheckSiteNameField(c.target_site(), "job " + c.job_id() + ": target_site"));
      std::string target;
      {
        MutexLock lock(mu_);
        for (const auto& st : stage->assignment.stages()) {
          if (st.site() == c.target_site() && st.site() != options_.site) target = st.site();
        }
      }
      if (target.empty()) {
        return absl::InvalidArgumentError("job " + c.job_id() + ": site '" + c.target_site() +
                                          "' runs no other stage of the job to ping from site '" +
                                          options_.site + "'");
      }
      transport::Link* link = Channel(target);
      if (link == nullptr) {
        return absl::UnavailableError("site '" + options_.site + "' has no link to site '" +
                                      target + "'");
      }
      v1::JobCommand ping;
      ping.set_job_id(c.job_id());
      ping.set_kind(v1::JobCommand::KIND_PING);
      ping.set_attempt(c.attempt());
      auto answer = link->ControlJob(ping, 2);
      if (!answer.ok()) {
        return absl::UnavailableError("site '" + options_.site + "' cannot reach site '" + target +
                                      "' either: " + std::string(answer.status().message()));
      }
      v1::JobCommandResponse out;  // the stage's state only
      out.set_running(answer->running());
      out.set_finished(answer->finished());
      out.set_attempt(answer->attempt());
      out.set_step(answer->step());
      out.set_checkpoint_step(answer->checkpoint_step());
      out.set_error(answer->error().substr(0, 4096));
      out.set_permanent(answer->permanent());
      return out;
    }
    case v1::JobCommand::KIND_GOSSIP_LINKS: {
      // A new link matrix for the rounds from from_round on: the stage takes it only for rounds
      // it has not drawn (else the coordinator restarts the attempt), then its admission checks
      // frames of those rounds against it.
      MutexLock lock(mu_);
      if (!stage->runner || !stage->admission || stage->runner->attempt() != c.attempt() ||
          stage->admission->attempt() != c.attempt()) {
        return absl::FailedPreconditionError("job " + c.job_id() + ": site '" + options_.site +
                                             "' runs no stage of attempt " +
                                             std::to_string(c.attempt()));
      }
      std::vector<double> links(c.gossip_links().begin(), c.gossip_links().end());
      RETURN_IF_ERROR(stage->runner->SetGossipLinks(c.links_epoch(), c.from_round(), links));
      ASSIGN_OR_RETURN(stage->admission, stage->admission->WithGossipLinks(
                                             c.links_epoch(), c.from_round(), std::move(links)));
      log_->info("job {}: gossip rounds from {} on draw from links epoch {}: {}", c.job_id(),
                 c.from_round(), c.links_epoch(),
                 GossipLinksDebugString({c.gossip_links().begin(), c.gossip_links().end()}));
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
  if (req.links_only()) {
    v1::SiteProfileReply r;
    r.set_site(options_.site);
    for (const auto& [name, address] : options_.peers) *r.add_links() = monitor_->Outbound(name);
    return r;
  }
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
    MutexLock lock(mu_);
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

}  // namespace longhaul::daemon
