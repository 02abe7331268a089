// Coordinator: the attempt supervisor (Run: watch the stages, roll back, resume), status and
// cancel. Setup and restore are in coordinator_setup.cc, the step barrier's waiting side in
// coordinator_report.cc, export in coordinator_export.cc, re-planning in
// coordinator_replan.cc, replica drops and rejoins in coordinator_replicas.cc.
#include "daemon/job/coordinator/coordinator.h"

#include <algorithm>
#include <chrono>

#include "daemon/job/checks/job_checks.h"
#include "daemon/job/coordinator/job_record.h"
#include "daemon/job/sync/gossip_round.h"

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
  MutexLock lock(mu_);
  return TerminalState(record_.state());
}

void Coordinator::RequestShutdown() {
  MutexLock lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

void Coordinator::Shutdown() {
  RequestShutdown();
  if (thread_.joinable()) thread_.join();
}

void Coordinator::PersistLocked() {
  const Status s = WriteJobRecord(*env_.file_env, env_.job_dir + "/job.pb", record_);
  if (!s.ok())
    env_.log->error("job {}: cannot persist: {}", record_.job_id(), std::string(s.message()));
}

void Coordinator::SetState(v1::JobState state, const std::string& detail) {
  MutexLock lock(mu_);
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

std::vector<double> Coordinator::GossipLinksLocked(const StageGrid& grid) const {
  if (spec_.sync.reduce != fleet::SyncReduce::kGossip || grid.replicas < 2) return {};
  std::map<std::pair<std::string, std::string>, double> links = known_links_;
  for (const v1::LinkUsage& l : record_.links()) {
    if (UsableLinkEstimate(l.bandwidth_bytes_per_second())) {
      links[{l.from_site(), l.to_site()}] = l.bandwidth_bytes_per_second();
    }
  }
  const ReplicaList dropped = DroppedLocked();
  std::vector<bool> live;
  for (int r = 0; r < grid.replicas; ++r) live.push_back(!Contains(dropped, r));
  return GossipLinkMatrix(grid, record_.stages(), live,
                          [&](const std::string& from, const std::string& to) {
                            const auto it = links.find({from, to});
                            return it == links.end() ? 0.0 : it->second;
                          });
}

bool Coordinator::AssignAll() {
  v1::StageAssignment a;
  {
    MutexLock lock(mu_);
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
    // Pipeline replicas sitting out are not assigned; rejoining ones copy a live replica.
    const int source = RejoinSource(GridLocked(), DroppedLocked(), RejoiningLocked());
    *a.mutable_dropped_replicas() = record_.dropped_replicas();
    *a.mutable_rejoining_replicas() = record_.rejoining_replicas();
    a.set_rejoin_source(static_cast<uint32_t>(std::max(source, 0)));
    a.set_sync_ring(record_.sync_ring());
    a.set_replicas(record_.replicas());
    if (record_.has_outer()) *a.mutable_outer() = record_.outer();
    const std::vector<double> links = GossipLinksLocked(GridLocked());
    *a.mutable_gossip_links() = {links.begin(), links.end()};
    *record_.mutable_gossip_links() = a.gossip_links();
    record_.clear_gossip_links_epoch();  // a new attempt starts from the assignment's
    record_.clear_gossip_links_from_round();
    links_checked_ = env_.file_env->NowSeconds();
    PersistLocked();
    if (!links.empty()) {
      env_.log->info("job {}: attempt {} gossips over the measured links (Mbit/s, by replica): {}",
                     record_.job_id(), record_.attempt(), GossipLinksDebugString(links));
    }
    attempt_start_ = record_.committed_step();
    barrier_.NewAssignment();
  }
  const StageGrid grid = StageGrid::OfPlan(RecordReplicas(a, spec_), a.stages());
  const ReplicaList dropped(a.dropped_replicas().begin(), a.dropped_replicas().end());
  // Last stage first: every receiver exists before its sender starts. Rejoining replicas
  // after the others: a stage they fetch their state from knows them once it has this
  // assignment (a site that joined the job was in no earlier one).
  const ReplicaList rejoining(a.rejoining_replicas().begin(), a.rejoining_replicas().end());
  std::vector<int> order;
  for (bool joining : {false, true}) {
    for (int i = a.stages_size() - 1; i >= 0; --i) {
      if (!Contains(dropped, grid.replica(i)) && Contains(rejoining, grid.replica(i)) == joining) {
        order.push_back(i);
      }
    }
  }
  for (int i : order) {
    a.set_stage(i);
    transport::Link* ch = env_.channel(a.stages(i).site());
    Status s = ch ? Status() : absl::NotFoundError("unknown site " + a.stages(i).site());
    if (s.ok()) {
      auto r = ch->AssignStage(a, 120);
      if (r.ok()) {
        MutexLock lock(mu_);
        record_.mutable_stages(i)->set_memory_bytes(r->memory_bytes());
        record_.mutable_stages(i)->set_devices(r->devices());
        continue;
      }
      s = r.status();
    }
    StopAttempt();
    {
      MutexLock lock(mu_);
      if (UndoJoinLocked(i, s)) return false;
    }
    if (Contains(rejoining, grid.replica(i))) {
      // A rejoining replica that cannot take its stage sits out again; the others go on. One
      // an operator brought back (add-site of a removed replica's sites) is removed again:
      // retrying it would cost the others a restart each time.
      MutexLock lock(mu_);
      const uint32_t back = record_.returning_replica();
      const bool away = back != 0 && static_cast<int>(back) == grid.replica(i);
      const ReplicaList rejoining = RejoiningLocked(), dropped = Union(DroppedLocked(), rejoining);
      for (uint32_t r : rejoining) rejoin_failures_[r] += away && r == back ? 0 : 1;
      record_.clear_rejoining_replicas();
      *record_.mutable_dropped_replicas() = {dropped.begin(), dropped.end()};
      if (away) {  // removed again; the others rejoining with it sit out, as above
        record_.clear_returning_replica();
        SendAwayLocked(back, "could not come back (stage " + std::to_string(i) + " on site " +
                                 record_.stages(i).site() + ": " + std::string(s.message()) +
                                 "); it is removed again");
        return false;
      }
      record_.set_replica_drops(record_.replica_drops() + static_cast<uint32_t>(rejoining.size()));
      membership_note_ = "replica " + std::to_string(grid.replica(i)) +
                         " could not rejoin (stage " + std::to_string(i) + ": " +
                         std::string(s.message()) + "); the others go on";
      need_assign_ = true;
      record_.set_state(v1::JOB_STATE_RECOVERING);
      record_.set_detail(membership_note_);
      PersistLocked();
      cv_.notify_all();
      return false;
    }
    if (s.code() == absl::StatusCode::kDataLoss) {
      // A stage's checkpoint at the committed step is corrupt: fall back once to the step
      // committed before it (every stage keeps both), else fail at once naming the file.
      MutexLock lock(mu_);
      const uint64_t from = record_.committed_step(), to = record_.previous_committed_step();
      // Replicas rejoining here have no checkpoint before it: they sit out again.
      if (to < from && !record_.rejoining_replicas().empty()) {
        const ReplicaList dropped = Union(DroppedLocked(), RejoiningLocked());
        *record_.mutable_dropped_replicas() = {dropped.begin(), dropped.end()};
        record_.clear_rejoining_replicas();
      }
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
  MutexLock lock(mu_);
  need_assign_ = false;
  record_.clear_joined_replica();  // a replica that joined took its stages
  // ...and one that came back, once it is no longer dropped (assigned whole).
  if (record_.returning_replica() != 0 &&
      !Contains(DroppedLocked(), static_cast<int>(record_.returning_replica()))) {
    record_.clear_returning_replica();
  }
  failed_checks_ = 0;
  record_.set_state(v1::JOB_STATE_RUNNING);
  // How the job was placed (empty for an even placement), or the last replica drop or rejoin.
  record_.set_detail(membership_note_.empty() ? placement_ : membership_note_);
  PersistLocked();
  return true;
}

std::vector<std::string> Coordinator::StageSites() {
  MutexLock lock(mu_);
  return LiveSites(GridLocked(), record_.stages(), DroppedLocked());
}

std::vector<std::string> Coordinator::AllSites() {
  MutexLock lock(mu_);
  return LiveSites(GridLocked(), record_.stages(), {});
}

void Coordinator::StopAttempt() {
  v1::JobCommand stop;
  {
    MutexLock lock(mu_);
    stop.set_job_id(record_.job_id());
    stop.set_attempt(record_.attempt());
    // Stages of this attempt waiting at the barrier are told to stop now: a stage is stopped
    // by joining its thread, and a thread waiting here for a stage that is gone (another
    // replica's, say) would otherwise never return.
    stopped_attempt_ = record_.attempt();
    cv_.notify_all();
  }
  stop.set_kind(v1::JobCommand::KIND_STOP_ATTEMPT);
  for (const auto& st : AllSites()) {
    if (transport::Link* c = env_.channel(st)) (void)c->ControlJob(stop, 3);
  }
}

StatusOr<v1::JobCommandResponse> Coordinator::ControlSite(const std::string& site,
                                                          const v1::JobCommand& command) const {
  transport::Link* c = env_.channel(site);
  if (c == nullptr) return absl::NotFoundError("not a peer");
  return c->ControlJob(command, 3);
}

StatusOr<v1::JobCommandResponse> Coordinator::PingThrough(const std::string& site, uint32_t attempt,
                                                          const std::vector<std::string>& sites) {
  v1::JobCommand ask;
  ask.set_job_id(job_id_);
  ask.set_kind(v1::JobCommand::KIND_PING_FOR);
  ask.set_attempt(attempt);
  ask.set_target_site(site);
  Status last = absl::UnavailableError("no other site of the job to ask");
  int asked = 0;
  for (const auto& other : sites) {
    if (other == site || other == env_.site) continue;
    if (++asked > 2) break;  // two sites that cannot reach it either: it is gone
    auto r = ControlSite(other, ask);
    // Only an answer about the stage of this attempt (a site that runs no stage of the job
    // answers empty): else the next site is asked.
    if (r.ok() && r->attempt() == attempt &&
        (r->running() || r->finished() || !r->error().empty())) {
      r->set_detail(other);  // who reached it
      return r;
    }
    last = r.ok() ? absl::UnavailableError("through site '" + other + "': no stage of attempt " +
                                           std::to_string(attempt) + " there")
                  : Status(r.status().code(),
                           "through site '" + other + "': " + std::string(r.status().message()));
  }
  return last;
}

void Coordinator::ControlSites(const v1::JobCommand& command, const std::vector<std::string>& sites,
                               const std::string& what) const {
  for (const auto& site : sites) {
    if (auto r = ControlSite(site, command); !r.ok()) {
      env_.log->warn("job {}: could not {} on site '{}': {}", job_id_, what, site,
                     std::string(r.status().message()));
    }
  }
}

std::string Coordinator::CheckStages(bool* all_finished, std::vector<std::string>* lost,
                                     bool* permanent) {
  *permanent = false;
  v1::JobCommand ping;
  uint32_t attempt;
  {
    MutexLock lock(mu_);
    ping.set_job_id(record_.job_id());
    attempt = record_.attempt();
  }
  ping.set_kind(v1::JobCommand::KIND_PING);
  ping.set_attempt(attempt);
  *all_finished = true;
  // A site gone (or restarted) is the one to blame; the stages that fail because they lost
  // their peer only if none is.
  std::string first_gone, first_failed;
  std::vector<std::string> gone, failed;
  const std::vector<std::string> sites = StageSites();
  for (const auto& site : sites) {
    transport::Link* c = env_.channel(site);
    std::string problem;
    bool is_gone = true;
    StatusOr<v1::JobCommandResponse> r = absl::NotFoundError("unknown");
    if (c) r = c->ControlJob(ping, 3);
    std::string through;  // another site that reaches it, when this one does not
    if (c && !r.ok() && spec_.sync.reduce == fleet::SyncReduce::kGossip) {
      auto seen = PingThrough(site, attempt, sites);
      if (seen.ok()) {
        through = seen->detail();
        r = std::move(seen);
      }
    }
    {
      MutexLock lock(mu_);
      auto it = reached_through_.find(site);
      if (!through.empty() && it == reached_through_.end()) {
        const std::string note = "site '" + site + "' does not answer the coordinator, but site '" +
                                 through +
                                 "' reaches its stage, which trains on (its reports and "
                                 "checkpoints count once it answers again)";
        env_.log->warn("job {}: {}", job_id_, note);
        AddEventLocked("site_unreachable", note);
        PersistLocked();
        reached_through_[site] = through;
      } else if (through.empty() && it != reached_through_.end()) {
        if (r.ok()) {  // else nobody reaches it now: the check below says so
          AddEventLocked("site_reachable", "site '" + site + "' answers the coordinator again");
          PersistLocked();
        }
        reached_through_.erase(it);
      }
    }
    if (!c) {
      problem = "site '" + site + "' is unknown";
    } else if (!r.ok()) {
      problem = "site '" + site + "' is unreachable: " + std::string(r.status().message());
    } else if (!r->error().empty()) {
      problem = "site '" + site + "' failed: " + r->error();
      is_gone = false;
      if (r->permanent()) {
        // Nothing else matters: every attempt would fail the same way.
        *permanent = true;
        *lost = {site};
        return problem;
      }
    } else if (r->attempt() != attempt || (!r->running() && !r->finished())) {
      problem = "site '" + site + "' lost its stage (restarted?)";
    } else {
      *all_finished = *all_finished && r->finished();
      continue;
    }
    *all_finished = false;
    (is_gone ? gone : failed).push_back(site);
    std::string& first = is_gone ? first_gone : first_failed;
    if (first.empty()) first = problem;
  }
  // Replicas leaving at a step (LeaveAtStep) until it is decided: the others' syncs before it
  // still wait for them, so a leaver gone or failed meanwhile is a problem too (stopped as
  // told, its stage answers for the attempt without an error, which is none).
  std::vector<std::string> leaving;
  {
    MutexLock lock(mu_);
    if (leaving_ && leaving_->attempt == attempt) leaving = leaving_->sites;
  }
  for (const auto& site : leaving) {
    const auto r = ControlSite(site, ping);
    std::string problem;
    if (!r.ok()) {
      problem = "leaving site '" + site + "' is unreachable: " + std::string(r.status().message());
    } else if (!r->error().empty()) {
      problem = "leaving site '" + site + "' failed: " + r->error();
    } else if (r->attempt() != attempt) {
      problem = "leaving site '" + site + "' lost its stage (restarted?)";
    } else {
      continue;
    }
    *all_finished = false;
    gone.push_back(site);
    if (first_gone.empty()) first_gone = problem;
  }
  *lost = gone.empty() ? failed : gone;
  return first_gone.empty() ? first_failed : first_gone;
}

void Coordinator::Run() {
  while (true) {
    bool early = false;  // woken for a membership change before the pause was up
    {
      MutexLock lock(mu_);
      early = cv_.wait_for(
                  mu_, std::chrono::milliseconds(500),
                  [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return shutdown_ || look_now_; }) &&
              look_now_;
      look_now_ = false;
      if (shutdown_) return;
      if (TerminalState(record_.state())) return;
    }
    bool adopt;
    {
      MutexLock lock(mu_);
      adopt = adopt_;
    }
    if (adopt) {
      const bool adopted = AdoptRunningAttempt();
      MutexLock lock(mu_);
      adopt_ = false;  // gossip reports are taken from now on
      if (adopted) continue;
    }
    bool need_assign;
    {
      MutexLock lock(mu_);
      need_assign = need_assign_;
    }
    bool all_finished = false;
    if (!need_assign) {
      std::vector<std::string> lost;
      bool permanent = false;
      const std::string problem = CheckStages(&all_finished, &lost, &permanent);
      if (permanent) {
        env_.log->error("job {}: {}; failing the job (a retry would read the same data)", job_id_,
                        problem);
        StopAttempt();
        MutexLock lock(mu_);
        if (!TerminalState(record_.state())) {  // a cancel that came first stands
          record_.set_state(v1::JOB_STATE_FAILED);
          record_.set_detail(problem);
          PersistLocked();
        }
        cv_.notify_all();
        return;
      }
      if (problem.empty()) {
        StopLeftStages();
        ApplySiteChanges(/*healthy=*/true);
        MaybeRejoin();
        MaybeRefreshGossipLinks();
        bool replan = false;
        {
          MutexLock lock(mu_);
          failed_checks_ = 0;
          // Re-plan at a checkpoint taken after the slowdown was seen.
          replan = replanner_.Due(record_.committed_step(), record_.total_steps());
        }
        if (replan) Replan();
        continue;
      }
      // A look that came early does not count: two missed pings are a failure only a pause
      // apart, as before (an early look then waits for the paused one).
      if (early) continue;
      int failures;
      {
        MutexLock lock(mu_);
        failures = ++failed_checks_;
      }
      if (failures < 2) continue;  // one missed ping is not yet a failure
      if (DropReplicas(lost, problem)) continue;
      env_.log->warn("job {}: {}; rolling back", job_id_, problem);
      StopAttempt();
      {
        MutexLock lock(mu_);
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
      ping.set_job_id(job_id_);
      ping.set_kind(v1::JobCommand::KIND_PING);
      if (!c || !c->ControlJob(ping, 3).ok()) {
        reachable = false;
        waiting = site;
        break;
      }
    }
    // A site removed while the attempt is down (on_site_loss: wait, its site lost, say)
    // leaves now: the job then waits only for the sites it still has.
    if (ApplySiteChanges(/*healthy=*/false)) continue;
    // With on_site_loss: drop a replica whose site does not answer is dropped here too (a
    // site lost while recovering, or while the coordinator itself was down).
    if (!reachable && DropReplicas({waiting}, "site '" + waiting + "' does not answer")) continue;
    if (!reachable) {
      MutexLock lock(mu_);
      record_.set_detail("waiting for site '" + waiting + "' to come back; will resume from step " +
                         std::to_string(record_.committed_step()));
      continue;
    }
    {
      MutexLock lock(mu_);
      if (record_.attempt() >= kMaxAttempts) {
        record_.set_state(v1::JOB_STATE_FAILED);
        record_.set_detail("gave up after " + std::to_string(kMaxAttempts) + " attempts");
        PersistLocked();
        cv_.notify_all();
        return;
      }
      RestartFromCommittedLocked("rollback", "attempt " + std::to_string(record_.attempt() + 1) +
                                                 " resumes from step " +
                                                 std::to_string(record_.committed_step()));
      PersistLocked();
      cv_.notify_all();  // releases barrier waiters of the old attempt
      env_.log->info("job {}: attempt {} resumes from step {}", record_.job_id(), record_.attempt(),
                     record_.committed_step());
    }
    AssignAll();
  }
}

void Coordinator::RestartFromCommittedLocked(const std::string& kind, const std::string& detail) {
  record_.set_attempt(record_.attempt() + 1);
  leaving_.reset();  // leavers of the old attempt: its stop reaches every site (AllSites)
  // Steps after the committed one are redone; forget their losses and times.
  const uint64_t keep = record_.committed_step() - record_.losses_offset();
  while (static_cast<uint64_t>(record_.losses_size()) > keep)
    record_.mutable_losses()->RemoveLast();
  while (static_cast<uint64_t>(record_.step_times_size()) > keep) {
    record_.mutable_step_times()->RemoveLast();
  }
  record_.set_step(record_.committed_step());
  auto* val = record_.mutable_val_losses();
  while (!val->empty() && val->rbegin()->step() > record_.committed_step()) val->RemoveLast();
  val_pending_.clear();
  for (auto& stage : *record_.mutable_stages()) {
    stage.set_syncs(0);                                                // counted by attempt
    stage.set_step(std::min(stage.step(), record_.committed_step()));  // redone from there
  }
  AddEventLocked(kind, detail);
}

void Coordinator::NoteValLossLocked(const v1::StepReport& rep, const StageGrid& grid,
                                    uint32_t live) {
  if (rep.val_step() == 0 || !grid.last(static_cast<int>(rep.stage()))) return;
  for (const auto& v : record_.val_losses()) {
    if (v.step() == rep.val_step()) return;  // measured again after a restart: the first stays
  }
  auto& losses = val_pending_[rep.val_step()];
  losses[rep.stage()] = rep.val_loss();
  if (losses.size() < live) return;
  double sum = 0;
  for (const auto& [stage, loss] : losses) sum += loss;
  v1::ValLoss* v = record_.add_val_losses();
  v->set_step(rep.val_step());
  v->set_loss(sum / static_cast<double>(losses.size()));
  val_pending_.erase(val_pending_.begin(), val_pending_.upper_bound(rep.val_step()));
}

void Coordinator::AddEventLocked(const std::string& kind, const std::string& detail) {
  v1::JobEvent* e = record_.add_events();
  e->set_step(record_.committed_step());
  e->set_unix_seconds(env_.file_env->WallSeconds());
  e->set_kind(kind);
  e->set_detail(detail);
  if (record_.events_size() > kMaxJobEvents) {
    record_.mutable_events()->erase(
        record_.mutable_events()->begin(),
        record_.mutable_events()->begin() + (record_.events_size() - kMaxJobEvents));
  }
}

v1::JobStatus Coordinator::GetStatus(uint32_t max_losses) const {
  MutexLock lock(mu_);
  v1::JobStatus s = record_;
  if (max_losses > 0 && static_cast<uint32_t>(s.losses_size()) > max_losses) {
    const int drop = s.losses_size() - static_cast<int>(max_losses);
    s.mutable_losses()->erase(s.mutable_losses()->begin(), s.mutable_losses()->begin() + drop);
    s.set_losses_offset(s.losses_offset() + drop);
    // Step times run beside the losses (older records may have fewer).
    const int times_drop = std::min(drop, s.step_times_size());
    s.mutable_step_times()->erase(s.mutable_step_times()->begin(),
                                  s.mutable_step_times()->begin() + times_drop);
    // Validation losses of the steps kept, and the newest one always.
    auto* val = s.mutable_val_losses();
    int first = 0;
    while (first + 1 < val->size() && val->Get(first).step() <= s.losses_offset()) ++first;
    val->erase(val->begin(), val->begin() + first);
  }
  return s;
}

StatusOr<v1::JobState> Coordinator::Cancel() {
  {
    MutexLock lock(mu_);
    if (TerminalState(record_.state())) return record_.state();
    record_.set_state(v1::JOB_STATE_CANCELLED);
    record_.set_detail("cancelled by the user at step " + std::to_string(record_.step()));
    PersistLocked();
    cv_.notify_all();
  }
  v1::JobCommand cancel;
  cancel.set_job_id(job_id_);
  cancel.set_kind(v1::JobCommand::KIND_CANCEL);
  for (const auto& site : AllSites()) {
    if (transport::Link* c = env_.channel(site)) (void)c->ControlJob(cancel, 5);
  }
  env_.log->info("job {}: cancelled", job_id_);
  return v1::JOB_STATE_CANCELLED;
}

}  // namespace longhaul::daemon
