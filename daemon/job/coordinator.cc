// Coordinator: the attempt supervisor (Run: watch the stages, roll back, resume), the step
// barrier's waiting side (OnReport), status and cancel. Setup and restore are in
// coordinator_setup.cc, export in coordinator_export.cc, re-planning in replanner.h.
#include "daemon/job/coordinator.h"

#include <chrono>

#include "daemon/job/job_checks.h"
#include "daemon/job/job_record.h"
#include "daemon/job/sync_groups.h"
#include "scheduler/replan.h"

namespace longhaul::daemon {
namespace {

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

Coordinator::~Coordinator() { Shutdown(); }

bool Coordinator::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return TerminalState(record_.state());
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
  if (TerminalState(record_.state())) return;
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
    barrier_.NewAssignment();
  }
  // Last stage first: every receiver exists before its sender starts.
  for (int i = a.stages_size() - 1; i >= 0; --i) {
    a.set_stage(i);
    transport::Link* ch = env_.channel(a.stages(i).site());
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
        if (transport::Link* c = env_.channel(st.site())) {
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
    // Stages of this attempt waiting at the barrier are told to stop now: a stage is stopped
    // by joining its thread, and a thread waiting here for a stage that is gone (another
    // replica's, say) would otherwise never return.
    stopped_attempt_ = record_.attempt();
    cv_.notify_all();
  }
  stop.set_kind(v1::JobCommand::KIND_STOP_ATTEMPT);
  for (const auto& st : StageSites()) {
    if (transport::Link* c = env_.channel(st)) (void)c->ControlJob(stop, 3);
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
    transport::Link* c = env_.channel(site);
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
      if (TerminalState(record_.state())) return;
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
          replan = replanner_.Due(record_.committed_step(), record_.total_steps());
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
      transport::Link* c = env_.channel(site);
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

void Coordinator::Replan() {
  Replanner::Snapshot snapshot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snapshot = replanner_.Take(record_, spec_, env_.site);
  }
  const std::optional<Replanner::Move> move = replanner_.Plan(snapshot);
  if (!move) {
    std::lock_guard<std::mutex> lock(mu_);
    replanner_.Declined();
    return;
  }
  const std::vector<scheduler::StagePlan>& next = move->next;
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
    record_.set_predicted_step_seconds(move->predicted_step_seconds);
    record_.set_replans(record_.replans() + 1);
    record_.set_attempt(record_.attempt() + 1);
    const uint64_t keep = record_.committed_step() - record_.losses_offset();
    while (static_cast<uint64_t>(record_.losses_size()) > keep) {
      record_.mutable_losses()->RemoveLast();
    }
    record_.set_step(record_.committed_step());
    record_.set_detail("re-planned at step " + std::to_string(migrate_step_) + ": " +
                       replanner_.reason() + move->moved + "; now " +
                       scheduler::PlanDebugString(next));
    replanner_.Applied();
    PersistLocked();
    cv_.notify_all();
    env_.log->warn("job {}: {}", record_.job_id(), record_.detail());
  }
  AssignAll();
  std::lock_guard<std::mutex> lock(mu_);
  if (record_.state() == v1::JOB_STATE_RUNNING) {
    record_.set_detail("re-planned at step " + std::to_string(migrate_step_) + ": " +
                       replanner_.reason() + move->moved);
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
  if (rep.attempt() != record_.attempt() || TerminalState(record_.state()) ||
      stopped_attempt_ == rep.attempt()) {
    stop.set_detail(TerminalState(record_.state()) ? "job " + v1::JobState_Name(record_.state())
                                                   : "attempt superseded");
    return stop;
  }
  const uint32_t n = record_.stages_size();
  const uint64_t committed = barrier_.NoteCheckpoint(rep.stage(), rep.checkpoint_step(), n);
  if (committed > record_.committed_step()) {
    record_.set_previous_committed_step(record_.committed_step());
    record_.set_committed_step(committed);
    if (committed > migrate_step_) migrate_from_.Clear();
    PersistLocked();
  }
  if (rep.step() >= record_.total_steps()) {  // a stage finished
    if (barrier_.NoteFinished(rep.stage(), n) &&
        record_.committed_step() >= record_.total_steps()) {
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
  const StageGrid grid = StageGrid::OfPlan(spec_.replicas, record_.stages());
  if (const auto* reports =
          barrier_.Add(rep, n, record_.committed_step(), static_cast<uint32_t>(grid.replicas))) {
    // The step is decided. Progress: the loss is the mean over the replicas' last stages,
    // the tokens their sum.
    const v1::StepReport& last = reports->rbegin()->second;
    double loss = 0;
    uint64_t tokens = 0;
    for (const auto& [stage, r] : *reports) {
      if (!grid.last(static_cast<int>(stage))) continue;
      loss += r.loss();
      tokens += r.tokens();
    }
    loss /= grid.replicas;
    const double now = NowUnix();
    const double step_time = last_step_time_ > 0 ? now - last_step_time_ : last.step_seconds();
    last_step_time_ = now;
    record_.set_step(rep.step() + 1);
    record_.set_loss(loss);
    record_.add_losses(loss);
    record_.set_step_seconds(step_time);
    if (step_time > 0) record_.set_tokens_per_second(tokens / step_time);
    record_.set_eta_seconds(step_time * (record_.total_steps() - record_.step()));
    replanner_.Observe(*reports, record_);
    record_.clear_links();
    for (const auto& [stage, r] : *reports) {
      v1::StageInfo* s = record_.mutable_stages(stage);
      s->set_compute_seconds(r.compute_seconds());
      s->set_wait_seconds(r.wait_seconds());
      s->set_step_seconds(r.step_seconds());
      for (const auto& l : r.links()) *record_.add_links() = l;
    }
    SetSyncGroups(*reports, grid, &record_);
    PersistLocked();
    barrier_.Prune(rep.attempt(), rep.step());
    cv_.notify_all();
  }
  v1::StepDecision decision;
  StepBarrier::State state;
  cv_.wait(lock, [&] {
    state = barrier_.Lookup(rep.attempt(), rep.step(), &decision);
    return shutdown_ || record_.attempt() != rep.attempt() || TerminalState(record_.state()) ||
           stopped_attempt_ == rep.attempt() || state != StepBarrier::State::kGathering;
  });
  if (shutdown_ || record_.attempt() != rep.attempt() || TerminalState(record_.state()) ||
      stopped_attempt_ == rep.attempt() || state != StepBarrier::State::kDecided) {
    stop.set_detail("attempt ended");
    return stop;
  }
  return decision;
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
    if (TerminalState(record_.state())) return record_.state();
    record_.set_state(v1::JOB_STATE_CANCELLED);
    record_.set_detail("cancelled by the user at step " + std::to_string(record_.step()));
    PersistLocked();
    cv_.notify_all();
  }
  v1::JobCommand cancel;
  cancel.set_job_id(record_.job_id());
  cancel.set_kind(v1::JobCommand::KIND_CANCEL);
  for (const auto& site : StageSites()) {
    if (transport::Link* c = env_.channel(site)) (void)c->ControlJob(cancel, 5);
  }
  env_.log->info("job {}: cancelled", record_.job_id());
  return v1::JOB_STATE_CANCELLED;
}

}  // namespace longhaul::daemon
