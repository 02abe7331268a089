#include "daemon/job/coordinator.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_join.h"
#include "compression/controller.h"
#include "daemon/job/fragment_chunks.h"
#include "daemon/job/job_checks.h"
#include "daemon/job/job_record.h"
#include "daemon/job/site_profile.h"
#include "model/checkpoint.h"
#include "model/file_io.h"
#include "model/layout.h"
#include "model/optimizer.h"
#include "scheduler/placement.h"
#include "scheduler/planner.h"
#include "scheduler/replan.h"

namespace longhaul::daemon {
namespace {

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool Terminal(v1::JobState s) {
  return s == v1::JOB_STATE_COMPLETED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

// Errors that retrying will not fix.
bool Permanent(const Status& s) {
  return s.code() == absl::StatusCode::kInvalidArgument ||
         s.code() == absl::StatusCode::kResourceExhausted ||
         s.code() == absl::StatusCode::kFailedPrecondition ||
         s.code() == absl::StatusCode::kNotFound || s.code() == absl::StatusCode::kUnimplemented;
}

// How many rollbacks a job may take before it is declared failed.
constexpr uint32_t kMaxAttempts = 50;

}  // namespace

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Submit(CoordinatorEnv env, JobSpec spec,
                                                           const std::string& job_id) {
  for (const auto& site : spec.sites) {
    if (!env.channel(site)) {
      return absl::InvalidArgumentError(spec.job.source + ": sites: unknown site '" + site +
                                        "' (neither this site nor one of its peers)");
    }
  }
  {
    ASSIGN_OR_RETURN(auto controller, compression::Controller::Create());
    auto floor = controller.FindRung(spec.floor);
    if (!floor.ok()) return Annotate(floor.status(), spec.job.source + ": compression.floor");
    auto codec = controller.FindRung(spec.codec);
    if (!codec.ok()) return Annotate(codec.status(), spec.job.source + ": compression.codec");
  }
  std::vector<scheduler::StagePlan> plan;
  std::string placement;
  double predicted = 0;
  std::map<std::string, int64_t> site_memory;
  if (spec.planned) {
    auto planned = PlanPlacement(spec, env.site, env.channel);
    if (!planned.ok()) return Annotate(planned.status(), spec.job.source);
    plan = planned->stages;
    placement = planned->summary;
    predicted = planned->predicted_step_seconds;
    site_memory = planned->memory_limits;
    env.log->info("job {}: {}", job_id, placement);
  } else {
    ASSIGN_OR_RETURN(
        plan, scheduler::MakeEvenSplitPlacer()->Place(PlacementRequestFor(spec, spec.sites)));
  }

  std::unique_ptr<Coordinator> c(new Coordinator(std::move(env), std::move(spec)));
  v1::JobStatus& r = c->record_;
  r.set_job_id(job_id);
  r.set_name(c->spec_.job.name);
  r.set_state(v1::JOB_STATE_PENDING);
  r.set_total_steps(c->spec_.job.steps);
  r.set_coordinator(c->env_.site);
  r.set_submitted_unix(NowUnix());
  r.set_attempt(1);
  r.set_detail(placement);
  c->placement_ = placement;
  c->site_memory_ = site_memory;
  r.set_predicted_step_seconds(predicted);
  for (size_t i = 0; i < plan.size(); ++i) {
    v1::StageInfo* s = r.add_stages();
    s->set_index(i);
    s->set_site(plan[i].site);
    s->set_layer_begin(plan[i].layer_begin);
    s->set_layer_end(plan[i].layer_end);
  }
  std::error_code ec;
  std::filesystem::create_directories(c->env_.job_dir, ec);
  RETURN_IF_ERROR(model::WriteFileAtomically(c->env_.job_dir + "/job.yaml", c->spec_.yaml));
  {
    std::lock_guard<std::mutex> lock(c->mu_);
    c->PersistLocked();
  }
  // The first assignment is synchronous, so that a job no site can run (too large for a
  // site's memory, a backend a site lacks) is refused to the submitter right away.
  if (!c->AssignAll()) {
    std::lock_guard<std::mutex> lock(c->mu_);
    if (c->record_.state() == v1::JOB_STATE_FAILED) {
      return absl::FailedPreconditionError(c->record_.detail());
    }
  }
  c->thread_ = std::thread([raw = c.get()] { raw->Run(); });
  c->env_.log->info("job {} ({}): {} stage(s) on {}, {} steps", job_id, c->spec_.job.name,
                    plan.size(), absl::StrJoin(c->spec_.sites, ","), c->spec_.job.steps);
  return c;
}

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Restore(CoordinatorEnv env) {
  ASSIGN_OR_RETURN(v1::JobStatus record, ReadJobRecord(env.job_dir + "/job.pb"));
  if (record.stages_size() < 1 || record.stages_size() > kMaxStages) {
    return absl::DataLossError(env.job_dir + "/job.pb: " + std::to_string(record.stages_size()) +
                               " stages");
  }
  std::ifstream in(env.job_dir + "/job.yaml");
  std::stringstream yaml;
  yaml << in.rdbuf();
  const std::string base = std::filesystem::path(env.job_dir).parent_path().parent_path();
  ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(yaml.str(), env.job_dir + "/job.yaml", base));
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(env), std::move(spec)));
  c->record_ = record;
  if (!Terminal(record.state())) {
    c->record_.set_state(v1::JOB_STATE_RECOVERING);
    c->record_.set_detail("coordinator restarted; resuming from step " +
                          std::to_string(record.committed_step()));
    c->need_assign_ = true;
    c->env_.log->info("job {}: {}", record.job_id(), c->record_.detail());
  }
  c->thread_ = std::thread([raw = c.get()] { raw->Run(); });
  return c;
}

Coordinator::~Coordinator() { Shutdown(); }

bool Coordinator::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Terminal(record_.state());
}

void Coordinator::RequestShutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

void Coordinator::Shutdown() {
  RequestShutdown();
  if (thread_.joinable()) thread_.join();
}

void Coordinator::PersistLocked() {
  const Status s = WriteJobRecord(env_.job_dir + "/job.pb", record_);
  if (!s.ok())
    env_.log->error("job {}: cannot persist: {}", record_.job_id(), std::string(s.message()));
}

void Coordinator::SetState(v1::JobState state, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  if (Terminal(record_.state())) return;
  if (record_.state() != state || record_.detail() != detail) {
    env_.log->info("job {}: {}{}{}", record_.job_id(), v1::JobState_Name(state),
                   detail.empty() ? "" : ": ", detail);
  }
  record_.set_state(state);
  record_.set_detail(detail);
  PersistLocked();
  cv_.notify_all();
}

bool Coordinator::AssignAll() {
  v1::StageAssignment a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    a.set_job_id(record_.job_id());
    a.set_job_yaml(spec_.yaml);
    a.set_coordinator(env_.site);
    a.set_attempt(record_.attempt());
    *a.mutable_stages() = record_.stages();
    a.set_resume_step(record_.committed_step());
    // Until a checkpoint under the new plan is committed, every (re)start moves the layers
    // from the stages of the old plan.
    if (!migrate_from_.empty() && record_.committed_step() == migrate_step_) {
      *a.mutable_migrate_from() = migrate_from_;
    }
    stage_final_.clear();
    stage_checkpoint_.clear();
  }
  // Last stage first: every receiver exists before its sender starts.
  for (int i = a.stages_size() - 1; i >= 0; --i) {
    a.set_stage(i);
    SiteChannel* ch = env_.channel(a.stages(i).site());
    Status s = ch ? Status() : absl::NotFoundError("unknown site " + a.stages(i).site());
    if (s.ok()) {
      auto r = ch->AssignStage(a, 120);
      if (r.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        record_.mutable_stages(i)->set_memory_bytes(r->memory_bytes());
        record_.mutable_stages(i)->set_devices(r->devices());
        continue;
      }
      s = r.status();
    }
    StopAttempt();
    if (s.code() == absl::StatusCode::kDataLoss) {
      // A stage's checkpoint at the committed step is corrupt: fall back once to the step
      // committed before it (every stage keeps both), else fail at once naming the file.
      std::lock_guard<std::mutex> lock(mu_);
      const uint64_t from = record_.committed_step(), to = record_.previous_committed_step();
      // (Not across a layer move: the step before it was checkpointed under the old plan.)
      if (to < from && migrate_from_.empty()) {
        record_.set_committed_step(to);
        record_.set_previous_committed_step(to);
        need_assign_ = true;
        record_.set_state(v1::JOB_STATE_RECOVERING);
        record_.set_detail("stage " + std::to_string(i) + ": " + std::string(s.message()) +
                           "; falling back to the checkpoint of step " + std::to_string(to));
        env_.log->warn("job {}: {}", record_.job_id(), record_.detail());
        PersistLocked();
        cv_.notify_all();
        return false;
      }
    }
    if (Permanent(s) || s.code() == absl::StatusCode::kDataLoss) {
      SetState(v1::JOB_STATE_FAILED, std::string(s.message()));
      for (const auto& st : a.stages()) {
        if (SiteChannel* c = env_.channel(st.site())) {
          v1::JobCommand cancel;
          cancel.set_job_id(a.job_id());
          cancel.set_kind(v1::JobCommand::KIND_CANCEL);
          (void)c->ControlJob(cancel, 5);
        }
      }
    } else {
      SetState(v1::JOB_STATE_RECOVERING,
               "cannot assign stage " + std::to_string(i) + ": " + std::string(s.message()));
    }
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  need_assign_ = false;
  failed_checks_ = 0;
  record_.set_state(v1::JOB_STATE_RUNNING);
  record_.set_detail(placement_);  // how the job was placed (empty for an even placement)
  PersistLocked();
  return true;
}

std::vector<std::string> Coordinator::StageSites() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> sites;
  for (const auto& s : record_.stages()) sites.push_back(s.site());
  return sites;
}

void Coordinator::StopAttempt() {
  v1::JobCommand stop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop.set_job_id(record_.job_id());
    stop.set_attempt(record_.attempt());
  }
  stop.set_kind(v1::JobCommand::KIND_STOP_ATTEMPT);
  for (const auto& st : StageSites()) {
    if (SiteChannel* c = env_.channel(st)) (void)c->ControlJob(stop, 3);
  }
}

std::string Coordinator::CheckStages(bool* all_finished) {
  v1::JobCommand ping;
  uint32_t attempt;
  std::vector<std::string> sites;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ping.set_job_id(record_.job_id());
    attempt = record_.attempt();
    for (const auto& s : record_.stages()) sites.push_back(s.site());
  }
  ping.set_kind(v1::JobCommand::KIND_PING);
  ping.set_attempt(attempt);
  *all_finished = true;
  for (const auto& site : sites) {
    SiteChannel* c = env_.channel(site);
    if (!c) return "site '" + site + "' is unknown";
    auto r = c->ControlJob(ping, 3);
    if (!r.ok()) return "site '" + site + "' is unreachable: " + std::string(r.status().message());
    if (!r->error().empty()) return "site '" + site + "' failed: " + r->error();
    if (r->attempt() != attempt || (!r->running() && !r->finished())) {
      return "site '" + site + "' lost its stage (restarted?)";
    }
    *all_finished = *all_finished && r->finished();
  }
  return "";
}

void Coordinator::Run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(500), [&] { return shutdown_; });
      if (shutdown_) return;
      if (Terminal(record_.state())) return;
    }
    bool need_assign;
    {
      std::lock_guard<std::mutex> lock(mu_);
      need_assign = need_assign_;
    }
    bool all_finished = false;
    if (!need_assign) {
      const std::string problem = CheckStages(&all_finished);
      if (problem.empty()) {
        bool replan = false;
        {
          std::lock_guard<std::mutex> lock(mu_);
          failed_checks_ = 0;
          // Re-plan at a checkpoint taken after the slowdown was seen.
          replan = replan_pending_ && record_.committed_step() > replan_detected_step_ &&
                   record_.committed_step() < record_.total_steps();
        }
        if (replan) Replan();
        continue;
      }
      int failures;
      {
        std::lock_guard<std::mutex> lock(mu_);
        failures = ++failed_checks_;
      }
      if (failures < 2) continue;  // one missed ping is not yet a failure
      env_.log->warn("job {}: {}; rolling back", record_.job_id(), problem);
      StopAttempt();
      {
        std::lock_guard<std::mutex> lock(mu_);
        need_assign_ = true;
      }
      SetState(v1::JOB_STATE_RECOVERING, problem);
      continue;
    }
    // Recovering: every site must answer before the job restarts from the committed step.
    bool reachable = true;
    std::string waiting;
    for (const auto& site : StageSites()) {
      SiteChannel* c = env_.channel(site);
      v1::JobCommand ping;
      ping.set_job_id(record_.job_id());
      ping.set_kind(v1::JobCommand::KIND_PING);
      if (!c || !c->ControlJob(ping, 3).ok()) {
        reachable = false;
        waiting = site;
        break;
      }
    }
    if (!reachable) {
      std::lock_guard<std::mutex> lock(mu_);
      record_.set_detail("waiting for site '" + waiting + "' to come back; will resume from step " +
                         std::to_string(record_.committed_step()));
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (record_.attempt() >= kMaxAttempts) {
        record_.set_state(v1::JOB_STATE_FAILED);
        record_.set_detail("gave up after " + std::to_string(kMaxAttempts) + " attempts");
        PersistLocked();
        cv_.notify_all();
        return;
      }
      record_.set_attempt(record_.attempt() + 1);
      // Steps after the committed one are redone; forget their losses.
      const uint64_t keep = record_.committed_step() - record_.losses_offset();
      while (static_cast<uint64_t>(record_.losses_size()) > keep)
        record_.mutable_losses()->RemoveLast();
      record_.set_step(record_.committed_step());
      PersistLocked();
      cv_.notify_all();  // releases barrier waiters of the old attempt
      env_.log->info("job {}: attempt {} resumes from step {}", record_.job_id(), record_.attempt(),
                     record_.committed_step());
    }
    AssignAll();
  }
}

void Coordinator::WatchForStragglersLocked(const std::map<uint32_t, v1::StepReport>& reports) {
  const size_t n = record_.stages_size();
  if (n < 2 || !spec_.replan) return;
  if (detectors_.size() != n) {
    scheduler::StragglerOptions o;
    o.warmup_steps = 3;
    detectors_.assign(n, scheduler::ChangeDetector(o));
    recent_compute_.assign(n, {});
  }
  // Every stage's detector sees the step; when several fire, the slowest stage is named.
  int worst = -1;
  uint64_t step = 0;
  for (const auto& [stage, r] : reports) {
    if (stage >= n) continue;
    auto& recent = recent_compute_[stage];
    recent.push_back(std::max(r.compute_seconds(), 1e-6));
    if (recent.size() > 3) recent.erase(recent.begin());
    step = r.step();
    for (const v1::LinkUsage& l : r.links()) recent_links_[{l.from_site(), l.to_site()}] = l;
    if (detectors_[stage].Observe(std::max(r.compute_seconds(), 1e-6)) &&
        (worst < 0 || detectors_[stage].slowdown() > detectors_[worst].slowdown())) {
      worst = static_cast<int>(stage);
    }
  }
  auto reason = [&](int stage, uint64_t since) {
    char why[256];
    std::snprintf(why, sizeof why,
                  "stage %d on %s computes %.1fx slower than its first steps (since step %llu)",
                  stage, record_.stages(stage).site().c_str(), detectors_[stage].slowdown(),
                  static_cast<unsigned long long>(since));
    return std::string(why);
  };
  if (replan_pending_) {
    // Until the re-plan runs, name the stage that has slowed down most of those detected (a
    // noisy stage can fire a step before the real straggler does).
    for (size_t k = 0; k < n; ++k) {
      if (detectors_[k].fired() && static_cast<int>(k) != replan_stage_ &&
          detectors_[k].slowdown() > detectors_[replan_stage_].slowdown()) {
        replan_stage_ = static_cast<int>(k);
        replan_reason_ = reason(replan_stage_, replan_detected_step_);
      }
    }
    return;
  }
  if (worst < 0) return;
  replan_pending_ = true;
  replan_detected_step_ = step + 1;
  replan_stage_ = worst;
  replan_reason_ = reason(worst, step + 1);
  env_.log->warn("job {}: straggler: {}; re-planning at the next checkpoint", record_.job_id(),
                 replan_reason_);
}

namespace {

// The re-plan's profiles: each stage's site FLOP/s from its measured compute (a nominal
// rate scaled by the cost model's predicted over the measured compute), each link's bandwidth
// and RTT from the stages' latest reports (the link monitors' estimates).
StatusOr<scheduler::Profiles> MeasuredProfiles(
    const scheduler::PlacementRequest& request, const std::vector<scheduler::StagePlan>& current,
    const std::vector<scheduler::StageMeasurement>& recent,
    const std::map<std::pair<std::string, std::string>, v1::LinkUsage>& links,
    const std::map<std::string, int64_t>& memory) {
  constexpr double kNominalFlops = 1e12;
  scheduler::Profiles nominal;
  for (const auto& site : request.sites) {
    auto m = memory.find(site);  // the sites' limits as profiled at submit (0: none known)
    nominal.sites.push_back({site, kNominalFlops, m == memory.end() ? 0 : m->second, 0});
  }
  for (const auto& from : request.sites) {
    for (const auto& to : request.sites) {
      if (from == to) continue;
      scheduler::LinkProfile l{from, to, kUnmeasuredLinkBandwidth, 0};
      if (auto it = links.find({from, to}); it != links.end()) {
        if (it->second.bandwidth_bytes_per_second() > 0) {
          l.bandwidth_bytes_per_second = it->second.bandwidth_bytes_per_second();
        }
        l.rtt_seconds = std::max(0.0, it->second.rtt_seconds());
      }
      nominal.links.push_back(l);
    }
  }
  ASSIGN_OR_RETURN(const scheduler::CostModel model, scheduler::Planner(nominal).Model(request));
  ASSIGN_OR_RETURN(const scheduler::StepEstimate estimate, model.Estimate(current));
  return scheduler::FromMeasurements(nominal, estimate, recent);
}

}  // namespace

void Coordinator::Replan() {
  std::vector<scheduler::StagePlan> current;
  std::vector<scheduler::StageMeasurement> recent;
  scheduler::PlacementRequest request;
  std::map<std::pair<std::string, std::string>, v1::LinkUsage> links;
  std::map<std::string, int64_t> memory;
  {
    std::lock_guard<std::mutex> lock(mu_);
    replan_pending_ = false;
    std::vector<std::string> sites;
    for (int k = 0; k < record_.stages_size(); ++k) {
      const auto& s = record_.stages(k);
      current.push_back({s.site(), int(s.layer_begin()), int(s.layer_end())});
      sites.push_back(s.site());
      for (double v : recent_compute_[k]) recent.push_back({k, 0, v, 0, 0});
    }
    request = PlacementRequestFor(spec_, sites);
    request.workload.coordinator = env_.site;
    links = recent_links_;
    memory = site_memory_;
  }
  // The planner, on what was measured, restricted to what a running job can do at a step
  // boundary: the same sites in the same order, layers moved between them.
  scheduler::PlanResult plan;
  scheduler::StepEstimate now;
  Status planned = [&]() -> Status {
    ASSIGN_OR_RETURN(const scheduler::Profiles measured,
                     MeasuredProfiles(request, current, recent, links, memory));
    scheduler::PlannerOptions options;
    options.keep_order = true;
    options.time_budget_seconds = 1;
    const scheduler::Planner planner(measured, options);
    ASSIGN_OR_RETURN(plan, planner.Plan(request));
    ASSIGN_OR_RETURN(const scheduler::CostModel model, planner.Model(request));
    ASSIGN_OR_RETURN(now, model.Estimate(current));
    return absl::OkStatus();
  }();
  if (!planned.ok() || plan.stages.size() != current.size() || plan.stages == current ||
      plan.estimate.step_seconds > 0.9 * now.step_seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& d : detectors_) d.Reset();
    if (!planned.ok()) {
      env_.log->warn("job {}: re-planning failed ({}); keeping the plan", record_.job_id(),
                     std::string(planned.message()));
    } else {
      env_.log->info(
          "job {}: re-planning would not help (predicted {:.3f} s/step now, {:.3f} s "
          "with {}); keeping the plan",
          record_.job_id(), now.step_seconds, plan.estimate.step_seconds,
          scheduler::PlanDebugString(plan.stages));
    }
    return;
  }
  env_.log->info(
      "job {}: the cost model predicts {:.3f} s/step now and {:.3f} s/step with {} "
      "(bottleneck: {})",
      record_.job_id(), now.step_seconds, plan.estimate.step_seconds,
      scheduler::PlanDebugString(plan.stages), plan.estimate.bottleneck_description);
  const std::vector<scheduler::StagePlan>& next = plan.stages;
  // Name the slowest stage (measured compute per layer) of those that give up layers: the
  // detector that fired first can be a noisy one.
  std::vector<double> per_layer(current.size(), 0);
  for (const auto& m : recent) per_layer[m.stage] += m.compute_seconds / current[m.stage].layers();
  int off = -1;
  for (size_t k = 0; k < next.size(); ++k) {
    if (next[k].layers() < current[k].layers() && (off < 0 || per_layer[k] > per_layer[off])) {
      off = static_cast<int>(k);
    }
  }
  const std::string moved =
      off >= 0 ? "; layers move off stage " + std::to_string(off) + " on " + current[off].site : "";
  StopAttempt();
  {
    std::lock_guard<std::mutex> lock(mu_);
    migrate_from_ = record_.stages();
    migrate_step_ = record_.committed_step();
    for (size_t k = 0; k < next.size(); ++k) {
      v1::StageInfo* s = record_.mutable_stages(k);
      s->set_layer_begin(next[k].layer_begin);
      s->set_layer_end(next[k].layer_end);
    }
    record_.set_predicted_step_seconds(plan.estimate.step_seconds);
    record_.set_replans(record_.replans() + 1);
    record_.set_attempt(record_.attempt() + 1);
    const uint64_t keep = record_.committed_step() - record_.losses_offset();
    while (static_cast<uint64_t>(record_.losses_size()) > keep) {
      record_.mutable_losses()->RemoveLast();
    }
    record_.set_step(record_.committed_step());
    record_.set_detail("re-planned at step " + std::to_string(migrate_step_) + ": " +
                       replan_reason_ + moved + "; now " + scheduler::PlanDebugString(next));
    for (auto& d : detectors_) d.Reset();
    for (auto& recent : recent_compute_) recent.clear();
    replan_pending_ = false;  // reports that arrived while planning fired the old detectors
    PersistLocked();
    cv_.notify_all();
    env_.log->warn("job {}: {}", record_.job_id(), record_.detail());
  }
  AssignAll();
  std::lock_guard<std::mutex> lock(mu_);
  if (record_.state() == v1::JOB_STATE_RUNNING) {
    record_.set_detail("re-planned at step " + std::to_string(migrate_step_) + ": " +
                       replan_reason_ + moved);
  }
}

StatusOr<v1::StepDecision> Coordinator::OnReport(const v1::StepReport& rep,
                                                 const std::string& caller) {
  std::unique_lock<std::mutex> lock(mu_);
  // Only the site that runs a stage reports for it, within the job's steps.
  RETURN_IF_ERROR(CheckStepReport(rep, record_.stages_size(), record_.total_steps()));
  if (record_.stages(rep.stage()).site() != caller) {
    return absl::PermissionDeniedError("site '" + caller + "' may not report for stage " +
                                       std::to_string(rep.stage()) + " of job " + record_.job_id() +
                                       " (site '" + record_.stages(rep.stage()).site() +
                                       "' runs it)");
  }
  v1::StepDecision stop;
  stop.set_stop(true);
  if (rep.attempt() != record_.attempt() || Terminal(record_.state())) {
    stop.set_detail(Terminal(record_.state()) ? "job " + v1::JobState_Name(record_.state())
                                              : "attempt superseded");
    return stop;
  }
  const uint32_t n = record_.stages_size();
  uint64_t& ck = stage_checkpoint_[rep.stage()];
  ck = std::max(ck, rep.checkpoint_step());
  if (stage_checkpoint_.size() == n) {
    uint64_t committed = UINT64_MAX;
    for (const auto& [stage, step] : stage_checkpoint_) committed = std::min(committed, step);
    if (committed > record_.committed_step()) {
      record_.set_previous_committed_step(record_.committed_step());
      record_.set_committed_step(committed);
      if (committed > migrate_step_) migrate_from_.Clear();
      PersistLocked();
    }
  }
  if (rep.step() >= record_.total_steps()) {  // a stage finished
    stage_final_[rep.stage()] = true;
    if (stage_final_.size() == n && record_.committed_step() >= record_.total_steps()) {
      record_.set_state(v1::JOB_STATE_COMPLETED);  // the detail (placement, re-plan) stays
      PersistLocked();
      env_.log->info("job {}: completed, final loss {:.4f}", record_.job_id(), record_.loss());
      cv_.notify_all();
    }
    v1::StepDecision d;
    d.set_grad_scale(1);
    d.set_committed_step(record_.committed_step());
    return d;
  }
  const auto key = std::make_pair(rep.attempt(), rep.step());
  Barrier& b = barriers_[key];
  b.reports[rep.stage()] = rep;
  if (b.reports.size() == n && !b.decided) {
    std::vector<double> sums;
    for (const auto& [stage, r] : b.reports) {
      model::AddSliceSums({r.grad_sums().begin(), r.grad_sums().end()}, &sums);
    }
    const float norm = model::GradNorm(sums);
    b.decision.set_grad_scale(model::ClipScale(norm, spec_.job.optimizer.grad_clip));
    b.decision.set_committed_step(record_.committed_step());
    b.decided = true;
    // Progress.
    const v1::StepReport& last = b.reports.rbegin()->second;
    const double now = NowUnix();
    const double step_time = last_step_time_ > 0 ? now - last_step_time_ : last.step_seconds();
    last_step_time_ = now;
    record_.set_step(rep.step() + 1);
    record_.set_loss(last.loss());
    record_.add_losses(last.loss());
    record_.set_step_seconds(step_time);
    if (step_time > 0) record_.set_tokens_per_second(last.tokens() / step_time);
    record_.set_eta_seconds(step_time * (record_.total_steps() - record_.step()));
    WatchForStragglersLocked(b.reports);
    record_.clear_links();
    for (const auto& [stage, r] : b.reports) {
      v1::StageInfo* s = record_.mutable_stages(stage);
      s->set_compute_seconds(r.compute_seconds());
      s->set_wait_seconds(r.wait_seconds());
      s->set_step_seconds(r.step_seconds());
      for (const auto& l : r.links()) *record_.add_links() = l;
    }
    PersistLocked();
    // Barriers two steps back have no waiters left.
    for (auto it = barriers_.begin(); it != barriers_.end();) {
      it = (it->first.first < rep.attempt() || it->first.second + 2 < rep.step())
               ? barriers_.erase(it)
               : std::next(it);
    }
    cv_.notify_all();
  }
  cv_.wait(lock, [&] {
    auto it = barriers_.find(key);
    return shutdown_ || record_.attempt() != rep.attempt() || Terminal(record_.state()) ||
           it == barriers_.end() || it->second.decided;
  });
  auto it = barriers_.find(key);
  if (shutdown_ || record_.attempt() != rep.attempt() || Terminal(record_.state()) ||
      it == barriers_.end()) {
    stop.set_detail("attempt ended");
    return stop;
  }
  return it->second.decision;
}

v1::JobStatus Coordinator::GetStatus(uint32_t max_losses) const {
  std::lock_guard<std::mutex> lock(mu_);
  v1::JobStatus s = record_;
  if (max_losses > 0 && static_cast<uint32_t>(s.losses_size()) > max_losses) {
    const int drop = s.losses_size() - static_cast<int>(max_losses);
    s.mutable_losses()->erase(s.mutable_losses()->begin(), s.mutable_losses()->begin() + drop);
    s.set_losses_offset(s.losses_offset() + drop);
  }
  return s;
}

StatusOr<v1::JobState> Coordinator::Cancel() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Terminal(record_.state())) return record_.state();
    record_.set_state(v1::JOB_STATE_CANCELLED);
    record_.set_detail("cancelled by the user at step " + std::to_string(record_.step()));
    PersistLocked();
    cv_.notify_all();
  }
  v1::JobCommand cancel;
  cancel.set_job_id(record_.job_id());
  cancel.set_kind(v1::JobCommand::KIND_CANCEL);
  for (const auto& site : StageSites()) {
    if (SiteChannel* c = env_.channel(site)) (void)c->ControlJob(cancel, 5);
  }
  env_.log->info("job {}: cancelled", record_.job_id());
  return v1::JOB_STATE_CANCELLED;
}

Status Coordinator::Export(
    const std::function<Status(const std::string& bytes, uint64_t total)>& sink) {
  v1::JobStatus r = GetStatus(1);
  if (r.committed_step() == 0) {
    return absl::FailedPreconditionError("job " + r.job_id() + " has no committed checkpoint yet");
  }
  const model::GPT2Config& config = spec_.job.model;
  std::vector<float> params(model::NumParameters(config));
  for (const auto& st : r.stages()) {
    model::FragmentLayout layout(config, st.layer_begin(), st.layer_end());
    FragmentArray flat;
    flat.values.resize(layout.total());
    SiteChannel* c = env_.channel(st.site());
    if (!c) return absl::NotFoundError("unknown site " + st.site());
    v1::FetchFragmentRequest req;
    req.set_job_id(r.job_id());
    req.set_step(r.committed_step());
    req.set_layer_begin(st.layer_begin());
    req.set_layer_end(st.layer_end());
    RETURN_IF_ERROR(c->FetchFragment(req, [&](const v1::TensorFrame& f) -> Status {
      if (f.kind() != v1::TENSOR_KIND_PARAMETERS) return absl::OkStatus();
      return PlaceChunk(f, &flat, st.site());
    }));
    RETURN_IF_ERROR(CheckComplete(flat, st.site(), "parameters"));
    layout.InsertIntoModel(flat.values.data(), params.data());
  }
  const std::string path = env_.job_dir + "/export.bin";
  RETURN_IF_ERROR(model::WriteCheckpoint(path, config, params.data()));
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  std::filesystem::remove(path);
  const size_t chunk = 1 << 20;
  for (size_t off = 0; off < bytes.size(); off += chunk) {
    RETURN_IF_ERROR(sink(bytes.substr(off, chunk), bytes.size()));
  }
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
