// Coordinator: sites joining and leaving a running job (`longhaul job add-site`,
// `remove-site`; ChangeJobSitesRequest). ChangeSites checks the change and persists it;
// the monitor thread makes it at its next check of a healthy attempt (ApplySiteChanges):
// - Added sites form one new replica (layers split evenly among them in the order given, or
//   with placement: planned as the planner places one pipeline over them, each profiled for
//   the job: its order, its split, a site left out that would slow it) that takes a live
//   replica's state at the committed step, as a rejoining replica does (replica_membership.h):
//   every stage is assigned again from the committed step, the new replica syncing from its
//   first outer step on, its data a shard of its own (the job's data cut one way more). It is
//   made just after the next commit, where nothing is redone, unless making it now redoes
//   fewer replica-steps than the new replica would wait (MembershipChangeDue); a comeback
//   likewise.
// - A removed site's replica leaves (dropped, not to rejoin by itself: add-site naming all its
//   sites brings it back, ReturnReplicaLocked), and the others are
//   not stopped (nothing is redone). A gossip job's leaving stages stop, and the others' rounds
//   go on without them as without any replica that is gone. A gather or ring job's syncs wait
//   for every member, so the leavers go at a step that every stage left learns alike: the
//   next step's decision (LeaveAtStep). With streaming syncs (sync.overlap, one in flight
//   across steps), or while the attempt is down, the others restart from the committed step
//   without it instead.
#include <algorithm>
#include <thread>

#include "daemon/job/checks/job_checks.h"
#include "daemon/job/coordinator/coordinator.h"
#include "daemon/job/coordinator/job_record.h"
#include "daemon/job/sync/sync_routes.h"

namespace longhaul::daemon {
namespace {

std::string SiteNames(const std::vector<std::string>& sites) {
  std::string s = sites.size() == 1 ? "site " : "sites ";
  for (size_t i = 0; i < sites.size(); ++i) s += (i ? ", " : "") + sites[i];
  return s;
}

template <class List>
std::vector<std::string> Strings(const List& list) {
  return {list.begin(), list.end()};
}

}  // namespace

StatusOr<PlannedPlacement> Coordinator::PlaceJoiningReplica(
    const std::vector<std::string>& sites) const {
  JobSpec spec = spec_;  // the new replica alone: one pipeline over the joining sites
  spec.sites = sites;
  spec.replicas = 1;
  spec.replica_stages.clear();
  spec.replica_microbatches.clear();
  spec.paced = false;
  // The coordinator is no candidate and busy with the job: the planner prices the barrier
  // as if the new replica's first site coordinated ("").
  auto p = PlanPlacement(spec, "", env_.channel);
  if (!p.ok()) return Annotate(p.status(), "placing the new replica");
  return p;
}

StatusOr<google::protobuf::RepeatedPtrField<v1::StageInfo>> Coordinator::PlanJoinLocked(
    const std::vector<std::string>& sites, const std::vector<int>& ends) const {
  const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages = record_.stages();
  // The new replica's microbatches: the job's for it, or a paced job's first replica's.
  const StageGrid grid = GridLocked();
  const uint32_t first = stages.Get(0).microbatches();
  const uint32_t microbatches =
      first == 0 || spec_.paced ? first : static_cast<uint32_t>(spec_.microbatches(grid.replicas));
  ASSIGN_OR_RETURN(auto plan,
                   PlanAddedReplica(stages, sites, spec_.job.model.num_layers, microbatches, ends));
  JobSpec spec = spec_;
  spec.replicas = grid.replicas + 1;
  RETURN_IF_ERROR(CheckPlan(plan, spec, "the plan with " + SiteNames(sites)));
  const StageGrid next = StageGrid::OfPlan(spec.replicas, plan);
  if (record_.sync_ring() && !RingsAgree(next, spec_.job.model)) {
    return absl::InvalidArgumentError(
        "the job syncs around rings, which need every replica to hold the tied embedding as the "
        "others do (one stage each, or two or more each): give " +
        std::to_string(grid.stages(0)) + " sites for the new replica, as replica 0 has");
  }
  return plan;
}

Status Coordinator::ChangeRefusedLocked(const std::string& job, bool removing) const {
  if (TerminalState(record_.state())) {
    return absl::FailedPreconditionError(job + " is " + v1::JobState_Name(record_.state()) +
                                         ": no site joins or leaves it");
  }
  if (leaving_) {
    return absl::FailedPreconditionError(job + ": a change is under way already (" +
                                         ReplicaNames(leaving_->replicas) + " leaving at step " +
                                         std::to_string(leaving_->step) +
                                         "); ask again once that step is decided");
  }
  if ((record_.joining_sites_size() > 0 && !removing) || record_.leaving_sites_size() > 0) {
    return absl::FailedPreconditionError(
        job + ": a change is under way already (" +
        (record_.leaving_sites_size() > 0
             ? SiteNames(Strings(record_.leaving_sites())) + " leaving"
             : SiteNames(Strings(record_.joining_sites())) + " joining") +
        "); ask again once it shows in the job's events");
  }
  return absl::OkStatus();
}

void Coordinator::ForgetStagesLocked(const std::vector<uint32_t>& gone,
                                     const ReplicaList& dropped) {
  const StageGrid grid = GridLocked();
  barrier_.Forget(gone);
  for (auto& [step, losses] : val_pending_) {
    for (uint32_t stage : gone) losses.erase(stage);
  }
  const uint32_t n = static_cast<uint32_t>(LiveStages(grid, dropped).size());
  for (const v1::StepReport& rep : barrier_.Complete(record_.attempt(), n)) {
    FileStepLocked(rep, grid, n);
  }
  NoteCommittedLocked(barrier_.Committed(n));
  MaybeCompleteLocked(n);
}

StatusOr<v1::ChangeJobSitesResponse> Coordinator::ChangeSites(
    const std::vector<std::string>& add, const std::vector<std::string>& remove) {
  const std::string job = "job " + job_id_;
  if (add.empty() == remove.empty()) {
    return absl::InvalidArgumentError(job + ": name sites to add or sites to remove (not both)");
  }
  for (const auto& site : add.empty() ? remove : add) {
    RETURN_IF_ERROR(CheckSiteNameField(site, job + ": site"));
  }
  if (spec_.sync.mode != fleet::SyncMode::kLocal) {
    return absl::FailedPreconditionError(
        job +
        ": sites join or leave jobs with pipeline replicas in sync.mode local (this one "
        "runs sync.mode " +
        std::string(fleet::SyncModeName(spec_.sync.mode)) +
        ", where a replica more or less would change every step's batch)");
  }
  for (const auto& site : add) {
    if (!env_.channel(site)) {
      return absl::NotFoundError(job + ": site '" + site + "' is not a peer of coordinator '" +
                                 env_.site + "' (add it to the peers of every site of the job)");
    }
  }
  if (!add.empty()) {  // a removed replica's sites, all named: it comes back as it was
    MutexLock lock(mu_);
    RETURN_IF_ERROR(ChangeRefusedLocked(job));
    auto back =
        ReturningReplica(GridLocked(), record_.stages(), DroppedLocked(), RemovedLocked(), add);
    if (!back.ok()) return Annotate(back.status(), job);
    if (*back >= 0) {
      // It rejoins at a committed step before the job's last, later than the attempt's start
      // (MaybeRejoin: the one committed now, or a later checkpoint): refused when none can be.
      const int64_t every = spec_.job.checkpoint.every;
      const uint64_t next = NextCheckpointStep(record_.committed_step(), every);
      if (!RejoinDue(record_.committed_step(), attempt_start_, record_.total_steps()) &&
          next >= record_.total_steps()) {
        return absl::FailedPreconditionError(
            job + ": replica " + std::to_string(*back) +
            " could come back only at a committed step before the job's last (" +
            std::to_string(record_.total_steps()) + "), and " +
            (every > 0 ? "its next checkpoint is step " + std::to_string(next)
                       : std::string("it takes no checkpoints (checkpoint.every 0)")));
      }
      return ReturnReplicaLocked(*back, add);
    }
  }
  // placement: planned: the planner places the new replica over the sites given (profiling
  // them takes a calibration run each: before the lock, which the stages' reports need).
  std::vector<std::string> join_sites = add;  // the new replica's, in pipeline order
  std::vector<int> join_ends;                 // their stages' last layers (empty: even)
  std::string placed;                         // the planner's summary
  if (!add.empty() && spec_.planned) {
    {  // what refuses the join anyway, before each site's calibration run (asked again below)
      MutexLock lock(mu_);
      RETURN_IF_ERROR(ChangeRefusedLocked(job));
      for (const auto& site : add) {
        if (placing_.count(site) > 0) {
          return absl::FailedPreconditionError(job + ": a change is under way already (site '" +
                                               site + "' is being profiled to join)");
        }
      }
      placing_.insert(add.begin(), add.end());
    }
    auto p = PlaceJoiningReplica(add);
    {
      MutexLock lock(mu_);
      for (const auto& site : add) placing_.erase(site);
    }
    if (!p.ok()) return Annotate(p.status(), job);
    join_sites.clear();
    for (const scheduler::StagePlan& st : p->stages) {
      join_sites.push_back(st.site);
      join_ends.push_back(st.layer_end);
    }
    placed = p->summary;
  }
  MutexLock lock(mu_);
  RETURN_IF_ERROR(ChangeRefusedLocked(job, /*removing=*/add.empty()));
  const StageGrid grid = GridLocked();
  v1::ChangeJobSitesResponse response;
  if (!add.empty()) {
    auto plan = PlanJoinLocked(join_sites, join_ends);
    if (!plan.ok()) return Annotate(plan.status(), job);
    *record_.mutable_joining_sites() = {add.begin(), add.end()};
    record_.clear_joining_plan();
    if (!join_ends.empty()) {  // the planner's: kept for AddSites (and a restart before it)
      for (int i = plan->size() - static_cast<int>(join_sites.size()); i < plan->size(); ++i) {
        *record_.add_joining_plan() = plan->Get(i);
      }
    }
    join_asked_at_ = record_.committed_step();
    const bool now = MembershipChangeDueLocked(join_asked_at_);
    join_now_ = now;  // as the answer says, at the monitor's next look (at once)
    look_now_ = look_now_ || now;
    response.add_replicas(static_cast<uint32_t>(grid.replicas));
    response.set_detail(
        SiteNames(join_sites) + (join_sites.size() == 1 ? " joins" : " join") + " as replica " +
        std::to_string(grid.replicas) + ": every stage starts again from " +
        (now ? "the committed step (" + std::to_string(record_.committed_step()) + ")"
             : "the next committed step (checkpoint step " +
                   std::to_string(
                       NextCheckpointStep(record_.committed_step(), spec_.job.checkpoint.every)) +
                   "), so that the live replicas redo few steps") +
        ", the new replica from a live replica's state" +
        (placed.empty() ? std::string() : " (" + placed + ")"));
  } else {
    auto r = ReplicasToRemove(grid, record_.stages(), DroppedLocked(), RejoiningLocked(),
                              RemovedLocked(), remove);
    if (!r.ok()) return Annotate(r.status(), job);
    const ReplicaList leave = *std::move(r);
    *record_.mutable_leaving_sites() = {remove.begin(), remove.end()};
    *response.mutable_replicas() = {leave.begin(), leave.end()};
    response.set_detail(
        ReplicaNames(leave) + " leave" + (leave.size() == 1 ? "s" : "") +
        " (add-site of all its sites brings it back)" +
        (spec_.sync.reduce == fleet::SyncReduce::kGossip
             ? ": the other replicas go on without stopping"
         : spec_.sync.overlap == 0
             ? ": the other replicas go on without it from the next step"
             : ": the other replicas start again from the committed step without it (their "
               "syncs stream across steps)"));
  }
  PersistLocked();
  cv_.notify_all();
  env_.log->info("{}: {}", job, response.detail());
  return response;
}

StatusOr<std::string> Coordinator::Volunteer(const std::string& site) {
  const std::string job = "job " + job_id_;
  RETURN_IF_ERROR(CheckSiteNameField(site, job + ": volunteer"));
  if (!TakesVolunteer(site)) {
    // Not the job's list: a peer learns no more of the job than that.
    return absl::PermissionDeniedError(job + ": site '" + site +
                                       "' is not one of the job's volunteers");
  }
  // A change under way (ChangeRefusedLocked's, or a planned join being profiled), the site's
  // own included, is worth asking again after: why, or OK when none is.
  auto busy = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    RETURN_IF_ERROR(ChangeRefusedLocked(job));
    if (placing_.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        job + ": a change is under way already (" +
        SiteNames(std::vector<std::string>(placing_.begin(), placing_.end())) +
        " being profiled to join)");
  };
  auto again = [&](const Status& s) { return absl::UnavailableError(std::string(s.message())); };
  {
    MutexLock lock(mu_);
    const StageGrid grid = GridLocked();
    for (int i = 0; i < grid.size() && i < record_.stages_size(); ++i) {
      if (record_.stages(i).site() != site) continue;
      const int replica = grid.replica(i);
      if (Contains(RemovedLocked(), replica)) {
        return absl::FailedPreconditionError(
            job + ": site '" + site + "' left it (replica " + std::to_string(replica) +
            " was removed) and does not volunteer again; an operator brings the replica back "
            "with `longhaul job add-site` and all its sites");
      }
      return "site '" + site + "' runs a stage of replica " + std::to_string(replica) + " of " +
             job + " already";
    }
    const Status refused = busy();
    if (!refused.ok()) return TerminalState(record_.state()) ? refused : again(refused);
  }
  auto r = ChangeSites({site}, {});
  if (!r.ok()) {
    MutexLock lock(mu_);
    if (!TerminalState(record_.state()) && !busy().ok()) {
      return again(r.status());  // another change came first
    }
    // Anything else (not a peer of the coordinator, a plan that cannot hold it, a calibration
    // that failed) is this join's answer: asking again would only redo it.
    return absl::FailedPreconditionError(std::string(r.status().message()));
  }
  env_.log->info("{}: site '{}' volunteered: {}", job, site, r->detail());
  return r->detail();
}

bool Coordinator::ApplySiteChanges(bool healthy) {
  std::vector<std::string> joining, leaving;
  {
    MutexLock lock(mu_);
    joining = Strings(record_.joining_sites());
    leaving = Strings(record_.leaving_sites());
  }
  if (!leaving.empty()) {
    RemoveSites(leaving, healthy);
    return true;
  }
  if (!joining.empty() && healthy) {
    {
      MutexLock lock(mu_);
      if (!join_now_ && !MembershipChangeDueLocked(join_asked_at_)) return false;  // next commit
    }
    AddSites(joining);
    return true;
  }
  return false;
}

bool Coordinator::MembershipChangeDueLocked(uint64_t asked) const {
  // The attempt is down: it restarts from the committed step anyway, redoing what it must.
  if (need_assign_ || record_.state() == v1::JOB_STATE_RECOVERING) return true;
  const StageGrid grid = GridLocked();
  const ReplicaList dropped = DroppedLocked();
  std::vector<uint64_t> steps;  // each live replica's furthest stage
  for (int r = 0; r < grid.replicas; ++r) {
    if (Contains(dropped, r)) continue;
    uint64_t step = 0;
    for (int p = 0; p < grid.stages(r); ++p) {
      const int i = grid.flat(r, p);
      if (i < record_.stages_size()) step = std::max(step, record_.stages(i).step());
    }
    steps.push_back(step);
  }
  return MembershipChangeDue(record_.committed_step(), asked, steps, spec_.job.checkpoint.every,
                             record_.total_steps());
}

v1::ChangeJobSitesResponse Coordinator::ReturnReplicaLocked(int replica,
                                                            const std::vector<std::string>& sites) {
  const uint32_t r = static_cast<uint32_t>(replica);
  ReplicaList removed;
  for (uint32_t x : record_.removed_replicas()) {
    if (x != r) removed.push_back(x);
  }
  *record_.mutable_removed_replicas() = {removed.begin(), removed.end()};
  const ReplicaList dropped = Union(DroppedLocked(), {r});  // sits out until it rejoins
  *record_.mutable_dropped_replicas() = {dropped.begin(), dropped.end()};
  rejoin_failures_.erase(r);
  // MaybeRejoin tries at the committed step it finds, or at the next one when that redoes
  // fewer steps.
  const bool now = MembershipChangeDueLocked(record_.committed_step()) &&
                   RejoinDue(record_.committed_step(), attempt_start_, record_.total_steps());
  last_rejoin_try_ = now ? UINT64_MAX : record_.committed_step();
  look_now_ = look_now_ || now;
  record_.set_returning_replica(r);  // removed again if its stages cannot be assigned
  record_.set_replicas_added(record_.replicas_added() + 1);
  const std::string note =
      SiteNames(sites) + (sites.size() == 1 ? " comes" : " come") + " back as replica " +
      std::to_string(replica) + " (removed before): it rejoins from a live replica's state at " +
      (now ? std::string("the committed step its sites answer at")
           : "the next committed step its sites answer at (checkpoints every " +
                 std::to_string(spec_.job.checkpoint.every) + " steps)") +
      ", every stage starting again there";
  AddEventLocked("site_added", note);
  PersistLocked();
  cv_.notify_all();
  env_.log->info("job {}: {}", job_id_, note);
  v1::ChangeJobSitesResponse response;
  response.add_replicas(r);
  response.set_detail(note);
  return response;
}

ReplicaList Coordinator::RecordRemovalLocked(const ReplicaList& leave) {
  const ReplicaList removed = Union(RemovedLocked(), leave),
                    dropped = Union(DroppedLocked(), leave);
  ReplicaList rejoining;
  for (uint32_t r : record_.rejoining_replicas()) {
    if (!Contains(leave, static_cast<int>(r))) rejoining.push_back(r);
  }
  *record_.mutable_removed_replicas() = {removed.begin(), removed.end()};
  *record_.mutable_dropped_replicas() = {dropped.begin(), dropped.end()};
  *record_.mutable_rejoining_replicas() = {rejoining.begin(), rejoining.end()};
  record_.set_replicas_removed(record_.replicas_removed() + static_cast<uint32_t>(leave.size()));
  return dropped;
}

bool Coordinator::UndoJoinLocked(int stage, const Status& why) {
  if (record_.joined_replica() == 0 ||
      static_cast<int>(record_.joined_replica()) >= GridLocked().replicas) {
    return false;
  }
  const uint32_t replica = record_.joined_replica();
  record_.clear_joined_replica();
  SendAwayLocked(replica, "could not join (stage " + std::to_string(stage) + " on site " +
                              record_.stages(stage).site() + ": " + std::string(why.message()) +
                              "); it is out");
  return true;
}

void Coordinator::SendAwayLocked(uint32_t replica, const std::string& why) {
  RecordRemovalLocked({replica});
  membership_note_ = ReplicaNames({replica}) + " " + why + ", the others go on";
  AddEventLocked("site_removed", membership_note_);
  need_assign_ = true;
  record_.set_state(v1::JOB_STATE_RECOVERING);
  record_.set_detail(membership_note_);
  PersistLocked();
  cv_.notify_all();
  env_.log->warn("job {}: {}", job_id_, membership_note_);
}

void Coordinator::AddSites(const std::vector<std::string>& asked) {
  google::protobuf::RepeatedPtrField<v1::StageInfo> plan;
  std::vector<std::string> sites = asked;  // the new replica's: the planner's where it placed it
  {
    MutexLock lock(mu_);
    // The planner's plan (ChangeSites), when it places the sites asked for only; else they
    // split the layers evenly.
    std::vector<std::string> planned;
    std::vector<int> ends;
    for (const v1::StageInfo& st : record_.joining_plan()) {
      planned.push_back(st.site());
      ends.push_back(static_cast<int>(st.layer_end()));
    }
    const bool ours = std::all_of(planned.begin(), planned.end(), [&](const std::string& s) {
      return std::find(asked.begin(), asked.end(), s) != asked.end();
    });
    if (!planned.empty() && ours) {
      sites = std::move(planned);
    } else {
      ends.clear();
    }
    auto p = PlanJoinLocked(sites, ends);
    if (!p.ok()) {  // the job changed since it was asked (a replan, say)
      record_.clear_joining_sites();
      record_.clear_joining_plan();
      AddEventLocked("site_added",
                     SiteNames(sites) + " could not join: " + std::string(p.status().message()));
      PersistLocked();
      return;
    }
    plan = *std::move(p);
  }
  StopAttempt();
  {
    MutexLock lock(mu_);
    if (TerminalState(record_.state())) return;
    const uint32_t replica = static_cast<uint32_t>(GridLocked().replicas);
    *record_.mutable_stages() = std::move(plan);
    record_.set_replicas(replica + 1);
    // From the committed step, the new replica takes a live replica's state (at step 0
    // every replica starts from the job's initial model), and does not count in its first
    // sync (it trained nothing before it).
    const ReplicaList rejoining = Union(RejoiningLocked(), {replica});
    *record_.mutable_rejoining_replicas() = {rejoining.begin(), rejoining.end()};
    record_.set_joined_replica(replica);
    join_now_ = false;
    record_.set_replicas_added(record_.replicas_added() + 1);
    record_.clear_joining_sites();
    record_.clear_joining_plan();
    const int source = RejoinSource(GridLocked(), DroppedLocked(), RejoiningLocked());
    membership_note_ =
        SiteNames(sites) + " joined as replica " + std::to_string(replica) + " at step " +
        std::to_string(record_.committed_step()) +
        (record_.committed_step() > 0 ? " from replica " + std::to_string(source) + "'s state"
                                      : std::string());
    RestartFromCommittedLocked("site_added", membership_note_);
    record_.set_detail(membership_note_);
    PersistLocked();
    cv_.notify_all();
    env_.log->warn("job {}: {}", job_id_, membership_note_);
  }
  AssignAll();
}

void Coordinator::RemoveSites(const std::vector<std::string>& sites, bool healthy) {
  ReplicaList leave;
  std::vector<uint32_t> gone;  // the leaving replicas' stages (flat indices)
  std::vector<std::string> leave_sites;
  const bool gossip = spec_.sync.reduce == fleet::SyncReduce::kGossip;
  v1::JobCommand stop;
  std::vector<std::string> staying;  // the live stages' sites, each once
  {
    MutexLock lock(mu_);
    const StageGrid grid = GridLocked();
    auto r = ReplicasToRemove(grid, record_.stages(), DroppedLocked(), RejoiningLocked(),
                              RemovedLocked(), sites);
    if (!r.ok()) {  // replicas were dropped since it was asked: none would be left
      record_.clear_leaving_sites();
      AddEventLocked("site_removed",
                     SiteNames(sites) + " could not leave: " + std::string(r.status().message()));
      PersistLocked();
      return;
    }
    leave = *std::move(r);
    for (uint32_t replica : leave) {
      for (int p = 0; p < grid.stages(static_cast<int>(replica)); ++p) {
        const int i = grid.flat(static_cast<int>(replica), p);
        gone.push_back(static_cast<uint32_t>(i));
        leave_sites.push_back(record_.stages(i).site());
      }
    }
    stop.set_job_id(job_id_);
    stop.set_attempt(record_.attempt());
    const ReplicaList dropped = DroppedLocked();
    for (int i = 0; i < record_.stages_size(); ++i) {
      const int replica = grid.replica(i);
      const std::string& site = record_.stages(i).site();
      if (Contains(dropped, replica) || Contains(leave, replica) ||
          std::find(staying.begin(), staying.end(), site) != staying.end()) {
        continue;
      }
      staying.push_back(site);
    }
  }
  // Whether the attempt still runs with a step left to decide, LeaveAtStep sees under its lock.
  const bool at_step = !gossip && healthy && spec_.sync.overlap == 0;
  if (at_step && LeaveAtStep(leave, gone, leave_sites, staying)) return;
  if (gossip) {
    // The live stages refuse the leaving replicas' frames from now on and count them gone in
    // their rounds (JobCommand.KIND_REMOVE_REPLICAS), whether or not the stops below arrive.
    v1::JobCommand remove = stop;
    remove.set_kind(v1::JobCommand::KIND_REMOVE_REPLICAS);
    *remove.mutable_removed_replicas() = {leave.begin(), leave.end()};
    ControlSites(remove, staying, "tell the stage that " + ReplicaNames(leave) + " left");
    // Only the leaving replicas stop; the others' rounds go on without them.
    stop.set_kind(v1::JobCommand::KIND_STOP_ATTEMPT);
    ControlSites(stop, leave_sites, "stop the leaving stage");
  } else {
    StopAttempt();
  }
  {
    MutexLock lock(mu_);
    if (TerminalState(record_.state())) return;
    const ReplicaList dropped = RecordRemovalLocked(leave);
    record_.clear_leaving_sites();
    membership_note_ = ReplicaNames(leave) + " (" + SiteNames(leave_sites) + ") left at step " +
                       std::to_string(gossip ? record_.step() : record_.committed_step()) +
                       (gossip ? "; the others went on" : "; the others resume from it");
    if (gossip) {
      AddEventLocked("site_removed", membership_note_);
      // The attempt goes on without the leaving stages.
      ForgetStagesLocked(gone, dropped);
    } else {
      RestartFromCommittedLocked("site_removed", membership_note_);
    }
    record_.set_detail(membership_note_);
    PersistLocked();
    cv_.notify_all();
    env_.log->warn("job {}: {}", job_id_, membership_note_);
  }
  if (!gossip) AssignAll();
}

bool Coordinator::LeaveAtStep(const ReplicaList& leave, const std::vector<uint32_t>& gone,
                              const std::vector<std::string>& leave_sites,
                              const std::vector<std::string>& staying) {
  v1::JobCommand tell;
  {
    MutexLock lock(mu_);
    if (TerminalState(record_.state())) return true;
    // Still running with a step left to decide (the stages may have reported on since
    // RemoveSites looked): else the others restart without the leavers (false).
    if (record_.state() != v1::JOB_STATE_RUNNING || need_assign_ ||
        stopped_attempt_ == record_.attempt() || record_.step() >= record_.total_steps()) {
      return false;
    }
    // The next step to decide: the stages left run its sync without the leaving replicas.
    // Its reports wait (LeaveHeldLocked) until every staying stage refuses their frames of it:
    // a ring's frames of that step go around the shorter ring, which the receivers check.
    const uint64_t at = record_.step();
    const uint32_t attempt = record_.attempt();
    leaving_ = Leaving{attempt, at, leave, leave_sites, /*held=*/true};
    record_.clear_leaving_sites();
    // A step that waited only for the leaving stages is decided now (its decision names them).
    ForgetStagesLocked(gone, RecordRemovalLocked(leave));
    membership_note_ = ReplicaNames(leave) + " (" + SiteNames(leave_sites) + ") left at step " +
                       std::to_string(at) + "; the others went on";
    AddEventLocked("site_removed", membership_note_);
    record_.set_detail(membership_note_);
    PersistLocked();
    env_.log->warn("job {}: {}", job_id_, membership_note_);
    tell.set_job_id(job_id_);
    tell.set_attempt(attempt);
    tell.set_kind(v1::JobCommand::KIND_REMOVE_REPLICAS);
    *tell.mutable_removed_replicas() = {leave.begin(), leave.end()};
    tell.set_from_step(at);
  }
  // Every staying site at once (their reports of the step wait meanwhile), each tried three
  // times.
  std::vector<Status> told(staying.size());
  {
    std::vector<std::thread> tellers;
    for (size_t k = 0; k < staying.size(); ++k) {
      tellers.emplace_back([this, &tell, &staying, &told, k] {
        for (int tries = 0; tries < 3; ++tries) {
          told[k] = ControlSite(staying[k], tell).status();
          if (told[k].ok()) break;
        }
      });
    }
    for (std::thread& t : tellers) t.join();
  }
  std::string failed;  // the first staying site that could not be told, and why
  for (size_t k = 0; k < staying.size() && failed.empty(); ++k) {
    if (!told[k].ok()) failed = "site '" + staying[k] + "': " + std::string(told[k].message());
  }
  if (failed.empty()) {
    MutexLock lock(mu_);
    if (leaving_) leaving_->held = false;
    cv_.notify_all();  // the held reports return with the decision naming the leavers
    return true;
  }
  // A stage left not knowing would refuse the shorter ring's frames or wait for the leavers':
  // everyone restarts from the committed step without them instead.
  env_.log->warn("job {}: could not tell {} that {} left; restarting from the committed step",
                 job_id_, failed, ReplicaNames(leave));
  StopAttempt();  // every site's, the leaving ones' too
  {
    MutexLock lock(mu_);
    leaving_.reset();
    if (TerminalState(record_.state())) return true;
    RestartFromCommittedLocked(
        "rollback", ReplicaNames(leave) + " left, but " + failed + " could not be told: attempt " +
                        std::to_string(record_.attempt() + 1) + " resumes from step " +
                        std::to_string(record_.committed_step()));
    PersistLocked();
    cv_.notify_all();
  }
  AssignAll();
  return true;
}

void Coordinator::StopLeftStages() {
  v1::JobCommand stop;
  std::vector<std::string> sites;
  {
    MutexLock lock(mu_);
    if (!leaving_ || leaving_->held) return;
    // Not before the step is decided: the leavers' part in the syncs before it may still run.
    if (record_.attempt() == leaving_->attempt && record_.step() <= leaving_->step &&
        !TerminalState(record_.state())) {
      return;
    }
    stop.set_job_id(job_id_);
    stop.set_attempt(leaving_->attempt);
    stop.set_kind(v1::JobCommand::KIND_STOP_ATTEMPT);
    sites = std::move(leaving_->sites);
    leaving_.reset();
  }
  ControlSites(stop, sites, "stop the leaving stage");
}

}  // namespace longhaul::daemon
