// Coordinator::OnReport: the step barrier's waiting side. Every live stage reports each step;
// the last report decides it (clipping scales, the committed step, the job's progress and
// sync groups) and every caller returns with the decision, or with stop when its attempt
// ended or its replica was dropped. A gossip job's stages do not wait: their reports are
// filed and answered at once.
#include <algorithm>
#include <cmath>

#include "daemon/job/checks/job_checks.h"
#include "daemon/job/coordinator/coordinator.h"
#include "daemon/job/coordinator/data_sources.h"
#include "daemon/job/coordinator/job_record.h"
#include "daemon/job/coordinator/step_schedule.h"
#include "daemon/job/sync/gossip_round.h"
#include "daemon/job/sync/sync_groups.h"
#include "daemon/job/sync/sync_routes.h"

namespace longhaul::daemon {

StatusOr<v1::StepDecision> Coordinator::OnReport(const v1::StepReport& rep,
                                                 const std::string& caller) {
  MutexLock lock(mu_);
  // Only the site that runs a stage reports for it, within the job's steps.
  RETURN_IF_ERROR(CheckStepReport(rep, record_.stages_size(), record_.total_steps()));
  if (record_.stages(rep.stage()).site() != caller) {
    return absl::PermissionDeniedError("site '" + caller + "' may not report for stage " +
                                       std::to_string(rep.stage()) + " of job " + record_.job_id() +
                                       " (site '" + record_.stages(rep.stage()).site() +
                                       "' runs it)");
  }
  const bool gossip = spec_.sync.reduce == fleet::SyncReduce::kGossip;
  // A gossip stage's report is filed and answered at once with the committed step (see below).
  auto filed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::StepDecision d;
    d.set_grad_scale(1);
    d.set_committed_step(record_.committed_step());
    return d;
  };
  if (gossip && adopt_) {
    // Restored, and not yet sure which replicas ran on (AdoptRunningAttempt): the report is
    // sent again shortly (step_reporter.h), and counted against the live stages then.
    return absl::UnavailableError("job " + record_.job_id() +
                                  ": its coordinator is restarting; report again");
  }
  v1::StepDecision stop;
  stop.set_stop(true);
  if (rep.attempt() != record_.attempt() || TerminalState(record_.state()) ||
      stopped_attempt_ == rep.attempt()) {
    stop.set_detail(TerminalState(record_.state()) ? "job " + v1::JobState_Name(record_.state())
                                                   : "attempt superseded");
    return stop;
  }
  const StageGrid grid = GridLocked();
  const ReplicaList dropped = DroppedLocked();
  // The stop a dropped replica's report gets. A removed replica's names it, so that its stage
  // stops as told to, not as failed (StageRunner::TakeLeaving).
  const int replica = grid.replica(static_cast<int>(rep.stage()));
  auto out = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool removed = Contains(RemovedLocked(), replica);
    stop.set_detail("replica " + std::to_string(replica) +
                    (removed ? " was removed from the job" : " is dropped"));
    if (removed) stop.add_removed_replicas(static_cast<uint32_t>(replica));
    return stop;
  };
  if (Contains(dropped, replica)) {
    // A leaver's report sent again for a step before the one it leaves at (its answer was
    // lost): that step's decision, decided already, so that it does its part in the sync.
    v1::StepDecision before;
    if (LeaverBeforeItsStepLocked(rep, replica) &&
        barrier_.Lookup(rep.attempt(), rep.step(), &before) == StepBarrier::State::kDecided) {
      return before;
    }
    return out();
  }
  const uint32_t live_replicas =
      static_cast<uint32_t>(grid.replicas) - static_cast<uint32_t>(dropped.size());
  v1::StageInfo* reporter = record_.mutable_stages(rep.stage());
  reporter->set_step(std::min(rep.step() + 1, record_.total_steps()));
  if (rep.has_sync()) reporter->set_syncs(rep.sync().syncs());
  NoteValLossLocked(rep, grid, live_replicas);
  // The barrier counts the live replicas' stages only.
  const uint32_t n = static_cast<uint32_t>(LiveStages(grid, dropped).size());
  const uint64_t committed = barrier_.NoteCheckpoint(rep.stage(), rep.checkpoint_step(), n);
  NoteCommittedLocked(committed);
  if (rep.step() >= record_.total_steps()) {  // a stage finished
    barrier_.NoteFinished(rep.stage(), n);
    MaybeCompleteLocked(n);
    v1::StepDecision d;
    d.set_grad_scale(1);
    d.set_committed_step(record_.committed_step());
    return d;
  }
  // Gossip: a report of a step decided already (sent again after the coordinator was away)
  // changes nothing; it is filed and answered.
  if (gossip && grid.replicas > 1 && rep.step() < record_.step()) return filed();
  FileStepLocked(rep, grid, n);
  // Gossip jobs have no barrier here at all: their stages clip by their replica's own norm
  // (StageRunner::ReplicaClipScale) and report behind their steps (step_reporter.h), so a
  // report is filed and answered at once with what the stage needs to know (the committed
  // step); the step's whole decision (progress, status) is made above when the last replica's
  // report of it is in.
  if (gossip && grid.replicas > 1) return filed();
  v1::StepDecision decision;
  StepBarrier::State state;
  // A decided step is held while replicas leave at it (LeaveAtStep) until the stages left
  // refuse the leavers' frames of it.
  cv_.wait(mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    state = barrier_.Lookup(rep.attempt(), rep.step(), &decision);
    return shutdown_ || record_.attempt() != rep.attempt() || TerminalState(record_.state()) ||
           stopped_attempt_ == rep.attempt() ||
           (state != StepBarrier::State::kGathering && !LeaveHeldLocked(rep.attempt(), rep.step()));
  });
  if (shutdown_ || record_.attempt() != rep.attempt() || TerminalState(record_.state()) ||
      stopped_attempt_ == rep.attempt() || state != StepBarrier::State::kDecided) {
    stop.set_detail("attempt ended");
    return stop;
  }
  // It left while this report waited, at this step or one before (a leaver's report of an
  // earlier step gets its decision: the others' sync of that step waits for it).
  if (Contains(DroppedLocked(), replica) && !LeaverBeforeItsStepLocked(rep, replica)) {
    return out();
  }
  return decision;
}

void Coordinator::MaybeCompleteLocked(uint32_t n) {
  if (!barrier_.AllFinished(n) || record_.committed_step() < record_.total_steps() ||
      TerminalState(record_.state())) {
    return;
  }
  record_.set_state(v1::JOB_STATE_COMPLETED);  // the detail (placement, re-plan) stays
  PersistLocked();
  env_.log->info("job {}: completed, final loss {:.4f}", record_.job_id(), record_.loss());
  cv_.notify_all();
}

void Coordinator::NoteCommittedLocked(uint64_t committed) {
  if (committed <= record_.committed_step()) return;
  record_.set_previous_committed_step(record_.committed_step());
  record_.set_committed_step(committed);
  if (committed > migrate_step_) migrate_from_.Clear();
  if (committed > attempt_start_) record_.clear_rejoining_replicas();  // rejoined for good
  // A join, a comeback or a rejoin waits for a commit: made at once, fewer steps are redone.
  bool waiting = record_.joining_sites_size() > 0;
  const ReplicaList removed = RemovedLocked();
  for (uint32_t r : record_.dropped_replicas()) waiting = waiting || MayRejoinLocked(r, removed);
  if (waiting) {
    look_now_ = true;
    cv_.notify_all();
  }
  PersistLocked();
}

void Coordinator::FileStepLocked(const v1::StepReport& rep, const StageGrid& grid, uint32_t n) {
  std::vector<int> replica_of;
  for (int i = 0; i < grid.size(); ++i) replica_of.push_back(grid.replica(i));
  const auto* reports = barrier_.Add(rep, n, record_.committed_step(),
                                     static_cast<uint32_t>(grid.replicas), 0, &replica_of);
  if (reports == nullptr) return;
  {
    // The step is decided. Progress: the loss is the mean over the live replicas' last stages
    // weighted by their microbatches (each reports the mean over its own), the tokens what
    // the job gives them (not what a report claims).
    const v1::StepReport& last = reports->rbegin()->second;
    double loss = 0;
    uint64_t microbatches = 0;
    const std::vector<int> counts =
        AttemptMicrobatches(spec_, grid.replicas, record_.stages(), record_.dropped_replicas());
    for (const auto& [stage, r] : *reports) {
      if (!grid.last(static_cast<int>(stage))) continue;
      const int m = counts[static_cast<size_t>(grid.replica(static_cast<int>(stage)))];
      loss += static_cast<double>(r.loss()) * m;
      microbatches += static_cast<uint64_t>(m);
    }
    loss /= static_cast<double>(std::max<uint64_t>(microbatches, 1));
    const uint64_t tokens = microbatches * static_cast<uint64_t>(spec_.job.microbatch_size) *
                            static_cast<uint64_t>(spec_.job.seq_len);
    const double now = env_.file_env->WallSeconds();
    const double step_time = last_step_time_ > 0 ? now - last_step_time_ : last.step_seconds();
    last_step_time_ = now;
    record_.set_step(rep.step() + 1);
    record_.set_loss(loss);
    record_.add_losses(loss);
    record_.add_step_times(step_time);
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
      for (const auto& l : r.links()) {
        // A stage speaks for its own site's links only.
        if (l.from_site() != s->site()) continue;
        *record_.add_links() = l;
        if (UsableLinkEstimate(l.bandwidth_bytes_per_second())) {
          known_links_[{l.from_site(), l.to_site()}] = l.bandwidth_bytes_per_second();
        }
      }
    }
    SetSyncGroups(*reports, SyncGroupsOf(grid, spec_.job.model),
                  spec_.sync.reduce == fleet::SyncReduce::kGossip, &record_);
    SetDataSources(*reports, grid, spec_.job, &record_);
    // The next step's schedule from this step's measurements (step_schedule.h): the
    // WAN-aware warm-ups, and the adaptive controllers' budgets priced on that schedule.
    if (v1::StepDecision* d = barrier_.MutableDecision(rep.attempt(), rep.step())) {
      // Replicas leaving at this step (LeaveAtStep): the stages left drop them from its sync.
      if (leaving_ && leaving_->attempt == rep.attempt() && leaving_->step == rep.step()) {
        for (uint32_t r : leaving_->replicas) d->add_removed_replicas(r);
      }
      std::vector<std::string> sites;
      for (const auto& s : record_.stages()) sites.push_back(s.site());
      // Built once for both decisions, and only when one of them needs it.
      const bool auto_warmups = spec_.extra_in_flight == JobSpec::kAutoInFlight;
      const bool adaptive = spec_.compression == CompressionMode::kAdaptive;
      const std::vector<ReplicaTimes> times = auto_warmups || adaptive
                                                  ? MeasuredTimes(grid, sites, counts, *reports)
                                                  : std::vector<ReplicaTimes>{};
      std::vector<uint32_t> warmups;
      if (auto_warmups) {
        warmups = StepWarmups(grid, counts, times);
        for (uint32_t w : warmups) d->add_warmups(w);
      } else if (spec_.extra_in_flight > 0) {
        for (int r = 0; r < grid.replicas; ++r) {
          const int m = static_cast<size_t>(r) < counts.size() ? counts[r] : 1;
          for (int w : scheduler::ExtraWarmups(grid.stages(r), m, spec_.extra_in_flight)) {
            warmups.push_back(static_cast<uint32_t>(w));
          }
        }
      }
      // Pricing plays every link's step ~30 times: on very large jobs (hundreds of replicas,
      // thousands of microbatches) only every few steps, the stages keeping their budgets
      // in between (a decision without budgets leaves them).
      const double work = CodecBudgetWork(grid, counts);
      const uint64_t stride = static_cast<uint64_t>(std::max(1.0, std::ceil(work / 2e6)));
      if (adaptive && rep.step() % stride == 0) {
        const StepBudgets b = CodecBudgets(grid, times, warmups);
        for (size_t i = 0; i < b.act.size(); ++i) {
          d->add_act_budgets(b.act[i]);
          d->add_grad_budgets(b.grad[i]);
        }
      }
    }
    PersistLocked();
    barrier_.Prune(rep.attempt(), rep.step());
    cv_.notify_all();
  }
}

}  // namespace longhaul::daemon
