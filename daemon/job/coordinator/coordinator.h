// Coordinator: the daemon a job was submitted to drives it. It places the job's layers on
// its sites (through the Placer seam; an even split for now), assigns every site its stage,
// runs the per-step barrier (global gradient-norm clipping, loss, committed checkpoints),
// watches the stages, and recovers: when a site or link fails it stops the attempt, waits
// until every site answers again, and restarts all stages from the last committed step
// under a new attempt number (frames of older attempts are dropped); with pipeline replicas
// and sync.on_site_loss: drop it drops the replicas of a lost site instead and lets the others
// go on (in sync mode step training the dropped ones' microbatches too), until the site
// answers and they rejoin. Its record is persisted
// in the data directory, so a restarted coordinator picks its jobs up where they stood.
#pragma once

#include <spdlog/logger.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/file_env.h"
#include "common/mutex.h"
#include "common/status.h"
#include "daemon/job/coordinator/replanner.h"
#include "daemon/job/coordinator/step_barrier.h"
#include "daemon/job/site/site_profile.h"
#include "daemon/job/spec/job_spec.h"
#include "daemon/job/sync/replica_membership.h"
#include "daemon/transport/link.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

struct CoordinatorEnv {
  std::string site;                                             // this daemon
  std::function<transport::Link*(const std::string&)> channel;  // null for an unknown site
  std::string job_dir;                                          // this job's directory here
  std::shared_ptr<spdlog::logger> log;
  // The job record's disk (job.pb, job.yaml) and clock (WallSeconds: its submission, step
  // times and events). REQUIRES: not null.
  FileEnv* file_env = FileEnv::Default();
  // Gossip jobs: how often (seconds, the file env's clock) the coordinator compares the links'
  // newest estimates with the matrix the running attempt draws from, and sends a new one when
  // a link's rate moved by kGossipLinksMoved or more (MaybeRefreshGossipLinks).
  double gossip_links_check_seconds = 30;
};

// A gossip attempt's new link matrix draws the rounds this many rounds past the furthest stage's
// (its stages are told first; one that has drawn that round already refuses, and the attempt
// restarts from the committed step), plus the rounds that twice the time asking the stages for
// their steps took would cover.
inline constexpr uint64_t kGossipLinksLeadRounds = 3;

// The replica count of a job's record or assignment: its own where sites joined or left the
// job since it was submitted (ChangeJobSites), else the job file's.
template <class Record>
int RecordReplicas(const Record& r, const JobSpec& spec) {
  return r.replicas() > 0 ? static_cast<int>(r.replicas()) : spec.replicas;
}

// The job timeline keeps this many events (the newest).
inline constexpr int kMaxJobEvents = 200;
// A dropped replica that fails to rejoin this many times sits out the rest of the job.
inline constexpr int kMaxRejoinFailures = 3;

class Coordinator {
 public:
  // A new job: validates it against the sites, places it, persists it, starts driving it.
  static StatusOr<std::unique_ptr<Coordinator>> Submit(CoordinatorEnv env, JobSpec spec,
                                                       const std::string& job_id);
  // A job found in the data directory after a restart.
  static StatusOr<std::unique_ptr<Coordinator>> Restore(CoordinatorEnv env);
  ~Coordinator();

  // The barrier: blocks until every stage reported this step (or the attempt ends).
  // `caller` must be the site that runs report.stage (PermissionDenied otherwise).
  StatusOr<v1::StepDecision> OnReport(const v1::StepReport& report, const std::string& caller)
      ABSL_LOCKS_EXCLUDED(mu_);
  v1::JobStatus GetStatus(uint32_t max_losses) const ABSL_LOCKS_EXCLUDED(mu_);
  // Completed, failed or cancelled.
  bool finished() const ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<v1::JobState> Cancel() ABSL_LOCKS_EXCLUDED(mu_);
  // Streams the model at the last committed step: one checkpoint file (format "llmc", file
  // "") or a Hugging Face directory (format "hf", dtype "f32" or "bf16"), file by file.
  using ExportSink =
      std::function<Status(const std::string& file, const std::string& bytes, uint64_t total)>;
  Status Export(const std::string& format, const std::string& dtype, const ExportSink& sink)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Sites joining or leaving the running job (ChangeJobSitesRequest, coordinator_sites.cc):
  // checked and persisted here, made by the monitor thread at its next check of a healthy
  // attempt. One change at a time; errors name the site and what stands in the way.
  StatusOr<v1::ChangeJobSitesResponse> ChangeSites(const std::vector<std::string>& add,
                                                   const std::vector<std::string>& remove)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Site `site` (the authenticated caller) volunteers for the job (JobCommand.KIND_VOLUNTEER):
  // if the job file lists it under `volunteers`, it joins as ChangeSites({site}) adds it, or
  // is in the job already. Returns what was done. PermissionDenied: not a volunteer of the
  // job; FailedPrecondition: the job ended, or the site's replica was removed from it
  // (neither is worth asking again: a removed replica comes back only when an operator names
  // its sites to ChangeSites); Unavailable: another change is under way (ask again).
  StatusOr<std::string> Volunteer(const std::string& site) ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& id() const { return job_id_; }
  const std::string& name() const { return spec_.job.name; }
  // Whether the job file lists `site` under `volunteers`.
  bool TakesVolunteer(const std::string& site) const {
    return std::find(spec_.volunteers.begin(), spec_.volunteers.end(), site) !=
           spec_.volunteers.end();
  }
  // Stops the monitor thread (daemon shutdown); the job stays persisted as it is.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);
  // Releases every caller waiting at the step barrier (they are told to stop) and tells the
  // monitor thread to end, without waiting for it: the first half of Shutdown, so that local
  // stages blocked at the barrier can be stopped before the coordinator is joined.
  void RequestShutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  Coordinator(CoordinatorEnv env, JobSpec spec, std::string job_id)
      : env_(std::move(env)),
        spec_(std::move(spec)),
        job_id_(std::move(job_id)),
        replanner_(spec_.replan, env_.log),
        barrier_(spec_.job.optimizer.grad_clip) {}
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Assigns every stage for the current attempt; false on failure (state updated).
  bool AssignAll() ABSL_LOCKS_EXCLUDED(mu_);
  // Pings every live stage; returns "" when all run the current attempt, else what is wrong
  // (the first problem), with every site that has one in *lost: those unreachable or without
  // their stage, or failing if none is.
  // `*permanent`: a stage failed on the job's input data, which no retry can fix.
  // A gossip job's stage whose site the coordinator cannot reach is asked through another
  // live site (PingThrough) before it counts as gone: a link down between the coordinator's
  // site and one site does not drop a replica the others still train with.
  std::string CheckStages(bool* all_finished, std::vector<std::string>* lost, bool* permanent)
      ABSL_LOCKS_EXCLUDED(mu_);
  // `site`'s stage as another of `sites` (not this one, not `site`) sees it
  // (JobCommand.KIND_PING_FOR), the first that answers; the last error when none does.
  StatusOr<v1::JobCommandResponse> PingThrough(const std::string& site, uint32_t attempt,
                                               const std::vector<std::string>& sites)
      ABSL_LOCKS_EXCLUDED(mu_);
  void StopAttempt() ABSL_LOCKS_EXCLUDED(mu_);
  // `command` to `site`'s daemon, 3 s at most (NotFound "not a peer" for a site it cannot
  // reach: the caller names the site).
  StatusOr<v1::JobCommandResponse> ControlSite(const std::string& site,
                                               const v1::JobCommand& command) const;
  // `command` to each of `sites`, each failure logged: "could not `what` on site ...".
  void ControlSites(const v1::JobCommand& command, const std::vector<std::string>& sites,
                    const std::string& what) const;
  void SetState(v1::JobState state, const std::string& detail) ABSL_LOCKS_EXCLUDED(mu_);
  // The sites of the live replicas' stages.
  std::vector<std::string> StageSites() ABSL_LOCKS_EXCLUDED(mu_);
  // Every stage's, dropped replicas' too.
  std::vector<std::string> AllSites() ABSL_LOCKS_EXCLUDED(mu_);
  // Replica membership (coordinator_replicas.cc, replica_membership.h): drops the replicas
  // with a stage on a lost site and restarts the others from the committed step (true), when
  // the job's on_site_loss is drop and some replica is left; rejoins the dropped ones at a
  // later committed step once all their sites answer.
  bool DropReplicas(const std::vector<std::string>& lost, const std::string& problem)
      ABSL_LOCKS_EXCLUDED(mu_);
  void MaybeRejoin() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether dropped replica `r` rejoins by itself (MaybeRejoin): not `removed` (`longhaul job
  // remove-site`, until add-site names its sites again) and not failed to rejoin too often.
  bool MayRejoinLocked(uint32_t r, const ReplicaList& removed) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gossip: when a link's rate moved since the running attempt's matrix was drawn (checked
  // every env_.gossip_links_check_seconds of a healthy attempt), every live stage is told the
  // new matrix for the rounds from kGossipLinksLeadRounds past the furthest one's
  // (JobCommand.KIND_GOSSIP_LINKS, the next epoch); the record keeps it. A stage that cannot
  // take it (it drew that round already, or its site cannot be told) restarts the attempt
  // from the committed step, with the new matrix.
  void MaybeRefreshGossipLinks() ABSL_LOCKS_EXCLUDED(mu_);
  // Makes the change ChangeSites persisted: RemoveSites, or AddSites when the attempt is
  // `healthy` (a join waits for one). Whether it made one.
  bool ApplySiteChanges(bool healthy) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a join or comeback asked for at committed step `asked` is made now rather than
  // just after the next commit (MembershipChangeDue: whichever redoes fewer steps).
  bool MembershipChangeDueLocked(uint64_t asked) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stages `gone` (flat) left the running attempt (`dropped`: every dropped replica now):
  // forgotten in the barrier and the pending validation losses, and the steps and checkpoint
  // that waited only for them decided and committed over the others (the job completed if
  // they were all it waited for).
  void ForgetStagesLocked(const std::vector<uint32_t>& gone, const ReplicaList& dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why no site may join or leave job `job` now (it ended, or a change is under way: one at a
  // time), FailedPrecondition; else OK. `removing`: a removal, which may come while a join
  // waits for its commit (a site lost meanwhile must be able to leave).
  Status ChangeRefusedLocked(const std::string& job, bool removing = false) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Notes `leave` as removed for good (dropped, no longer rejoining), counts them; returns
  // every dropped replica now.
  ReplicaList RecordRemovalLocked(const ReplicaList& leave) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stage of the assignment that adds the joined replica (record_.joined_replica, kept
  // across a coordinator restart) could not be assigned (`stage`, `why`): the new replica
  // leaves again for good and the others restart without it (a site that is not a peer of the
  // job's sites, say, never fails the job). False when no replica is joining.
  bool UndoJoinLocked(int stage, const Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `replica` (joining or coming back) could not take its stages, `why`: removed (again), the
  // event noted, and every stage left assigned again.
  void SendAwayLocked(uint32_t replica, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The removed replica `replica` comes back on its own sites (ChangeSites naming them all,
  // ReturningReplica): no longer removed, it sits out as a dropped replica does and rejoins
  // from a live replica's state at the next committed step its sites answer at (MaybeRejoin).
  v1::ChangeJobSitesResponse ReturnReplicaLocked(int replica, const std::vector<std::string>& sites)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddSites(const std::vector<std::string>& sites) ABSL_LOCKS_EXCLUDED(mu_);
  // `healthy`: the attempt runs (a gather or ring job's replicas then leave at a step, the
  // others going on; see LeaveAtStep). Else, and with streaming syncs, the others restart from
  // the committed step.
  void RemoveSites(const std::vector<std::string>& sites, bool healthy) ABSL_LOCKS_EXCLUDED(mu_);
  // A gather or ring job's replicas `leave` (their stages `gone`, flat; their sites) leave
  // the running attempt without a rollback: their removal goes into the decision of the next
  // step, which no waiter gets before every staying stage (on `staying`) was told to refuse
  // their frames from that step on (JobCommand.KIND_REMOVE_REPLICAS with from_step); the
  // stages left drop them from that step's sync (StepDecision.removed_replicas). A staying
  // stage that cannot be told: the attempt restarts from the committed step without them.
  // False, nothing done, when the attempt no longer runs or has no step left to decide (the
  // caller restarts the others without them).
  bool LeaveAtStep(const ReplicaList& leave, const std::vector<uint32_t>& gone,
                   const std::vector<std::string>& leave_sites,
                   const std::vector<std::string>& staying) ABSL_LOCKS_EXCLUDED(mu_);
  // Once the step of a LeaveAtStep is decided (the others finished the syncs before it), the
  // leaving stages still running are stopped.
  void StopLeftStages() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a report of (attempt, step) waits for LeaveAtStep's staying stages to be told.
  bool LeaveHeldLocked(uint32_t attempt, uint64_t step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return leaving_ && leaving_->held && leaving_->attempt == attempt && step >= leaving_->step;
  }
  // Whether `rep` is a leaving replica's (LeaveAtStep, not stopped yet) of a step before the
  // one it leaves at: its part in the syncs before it still counts, so it gets that step's
  // decision, not a stop.
  bool LeaverBeforeItsStepLocked(const v1::StepReport& rep, int replica) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return leaving_ && leaving_->attempt == rep.attempt() && rep.step() < leaving_->step &&
           Contains(leaving_->replicas, replica);
  }
  // The plan with a new replica on `sites` (in that order), checked as every site will check
  // it: with `ends` (one per site) the planner's split, else the layers split evenly.
  StatusOr<google::protobuf::RepeatedPtrField<v1::StageInfo>> PlanJoinLocked(
      const std::vector<std::string>& sites, const std::vector<int>& ends = {}) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // placement: planned: the joining replica over `sites` as the planner places one pipeline
  // (each site profiled for the job's shapes: the order, the split, the sites left out).
  StatusOr<PlannedPlacement> PlaceJoiningReplica(const std::vector<std::string>& sites) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Notes `drop` (replicas not dropped yet) as dropped, counts the drops and a rejoin failed
  // for each of them that was rejoining; returns every dropped replica now.
  ReplicaList RecordDropLocked(const ReplicaList& drop) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A gossip job's coordinator restarted (Restore): the replicas whose stages all still run
  // the record's attempt (they step without it) go on as they are; the others are dropped
  // without stopping anyone, to rejoin as after any drop. False, and nothing changed, when
  // no replica is whole or on_site_loss is not drop: the job rolls back as after any restart.
  bool AdoptRunningAttempt() ABSL_LOCKS_EXCLUDED(mu_);
  StageGrid GridLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return StageGrid::OfPlan(RecordReplicas(record_, spec_), record_.stages());
  }
  ReplicaList RemovedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return {record_.removed_replicas().begin(), record_.removed_replicas().end()};
  }
  ReplicaList DroppedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return {record_.dropped_replicas().begin(), record_.dropped_replicas().end()};
  }
  ReplicaList RejoiningLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return {record_.rejoining_replicas().begin(), record_.rejoining_replicas().end()};
  }
  // Moves layers away from a straggler at the committed step, if that helps.
  void Replan() ABSL_LOCKS_EXCLUDED(mu_);
  void PersistLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NotifyAll();
  // A new attempt from the committed step: bumps the attempt, forgets the losses and step
  // times of the steps to be redone and notes the event (kind, detail) on the job's timeline.
  void RestartFromCommittedLocked(const std::string& kind, const std::string& detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completed once all `n` live stages ran the last step and it is committed.
  void MaybeCompleteLocked(uint32_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A step every live stage has checkpointed: committed, if later than the committed one.
  void NoteCommittedLocked(uint64_t committed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `rep` to its step's barrier (`n` live stages) and, when it is the last report of the
  // step, decides the step: progress, losses, sync groups, the next step's schedule.
  void FileStepLocked(const v1::StepReport& rep, const StageGrid& grid, uint32_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Files a last stage's validation loss; once every live replica's is in, their mean.
  void NoteValLossLocked(const v1::StepReport& rep, const StageGrid& grid, uint32_t live)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A gossip attempt's link matrix (StageAssignment.gossip_links) from the newest link
  // estimates (the record's last reported links, else known_links_); empty when some link is
  // unknown or the job does not gossip.
  std::vector<double> GossipLinksLocked(const StageGrid& grid) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Notes an event at the committed step, keeping the newest kMaxJobEvents.
  void AddEventLocked(const std::string& kind, const std::string& detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // env_, spec_ and job_id_ are set at construction and never change: read without mu_.
  CoordinatorEnv env_;
  JobSpec spec_;
  const std::string job_id_;  // record_.job_id()
  mutable Mutex mu_;
  std::condition_variable_any cv_;  // waits on mu_
  // Straggler detection and re-planning. Plan runs without mu_: it is const and reads only its
  // snapshot and the planner's constant members (see Replan).
  Replanner replanner_ ABSL_GUARDED_BY(mu_);
  v1::JobStatus record_ ABSL_GUARDED_BY(mu_);
  bool need_assign_ ABSL_GUARDED_BY(mu_) = true;
  // Restore of a gossip job: AdoptRunningAttempt first, gossip reports refused until then.
  bool adopt_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // The monitor thread looks now rather than after its pause: a membership change waits on a
  // commit that came (NoteCommittedLocked), or one was asked for that is made at once.
  bool look_now_ ABSL_GUARDED_BY(mu_) = false;
  // Sites the coordinator cannot reach whose stages another site reaches (CheckStages), and
  // through which site: logged as they come and go.
  std::map<std::string, std::string> reached_through_ ABSL_GUARDED_BY(mu_);
  int failed_checks_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t stopped_attempt_ ABSL_GUARDED_BY(mu_) = 0;  // StopAttempt was called for this attempt
  StepBarrier barrier_ ABSL_GUARDED_BY(mu_);
  double last_step_time_ ABSL_GUARDED_BY(mu_) = 0;
  std::string placement_ ABSL_GUARDED_BY(mu_);  // the planner's summary, kept in the detail
  // The newest estimate of each site link, (from, to) -> bytes/s: the planner's at submit, then
  // each decided step's reports (a stage's own links only), kept when a stage stops reporting
  // (a dropped replica's): a gossip attempt's link matrix (GossipLinksLocked).
  std::map<std::pair<std::string, std::string>, double> known_links_ ABSL_GUARDED_BY(mu_);
  // The plan before the move.
  google::protobuf::RepeatedPtrField<v1::StageInfo> migrate_from_ ABSL_GUARDED_BY(mu_);
  uint64_t migrate_step_ ABSL_GUARDED_BY(mu_) = 0;
  // The committed step the current attempt started from.
  uint64_t attempt_start_ ABSL_GUARDED_BY(mu_) = 0;
  double links_checked_ ABSL_GUARDED_BY(mu_) = 0;  // MaybeRefreshGossipLinks's last look
  uint64_t last_rejoin_try_ ABSL_GUARDED_BY(mu_) = 0;
  // The committed step when the sites joining now were asked for (MembershipChangeDueLocked).
  uint64_t join_asked_at_ ABSL_GUARDED_BY(mu_) = 0;
  bool join_now_ ABSL_GUARDED_BY(mu_) = false;  // the add-site's answer said it is made now
  // No rejoin before this committed step (AdoptRunningAttempt: what the replicas checkpointed
  // while the coordinator was away).
  uint64_t rejoin_after_ ABSL_GUARDED_BY(mu_) = 0;
  // By replica: dropped again while rejoining.
  std::map<uint32_t, int> rejoin_failures_ ABSL_GUARDED_BY(mu_);
  // A gather or ring job's replicas leaving the running attempt at a step (LeaveAtStep):
  // named in the decision of `step` of `attempt`, whose waiters are held while `held`; their
  // stages on `sites` are stopped once it is decided (StopLeftStages).
  struct Leaving {
    uint32_t attempt = 0;
    uint64_t step = 0;
    ReplicaList replicas;
    std::vector<std::string> sites;
    bool held = true;
  };
  std::optional<Leaving> leaving_ ABSL_GUARDED_BY(mu_);
  // Sites a planned join is profiling and placing (ChangeSites, before the change is
  // persisted): a second join of them waits until it ends.
  std::set<std::string> placing_ ABSL_GUARDED_BY(mu_);
  // The replica AddSites added, until an assignment with it succeeds (-1: none).
  std::string membership_note_ ABSL_GUARDED_BY(mu_);  // the last drop or rejoin, kept in the detail
  // Validation losses reported by the live replicas' last stages, by step and stage, until
  // every live replica's is in.
  std::map<uint64_t, std::map<uint32_t, double>> val_pending_ ABSL_GUARDED_BY(mu_);
  // Started by Submit or Restore, joined by Shutdown.
  std::thread thread_;
};

}  // namespace longhaul::daemon
