// Coordinator::Replan: a straggler's layers moved at the committed step (the decision is the
// Replanner's, replanner.h): the attempt stops, the plan changes, every stage restarts with
// the old plan to migrate from.
#include "daemon/job/coordinator/coordinator.h"
#include "scheduler/replan.h"

namespace longhaul::daemon {

void Coordinator::Replan() {
  Replanner::Snapshot snapshot;
  {
    MutexLock lock(mu_);
    snapshot = replanner_.Take(record_, spec_, env_.site);
  }
  // Planning takes a while, so it runs without mu_: Plan is const and reads only the snapshot
  // and the Replanner's constant members (replanner.h).
  const std::optional<Replanner::Move> move = ABSL_TS_UNCHECKED_READ(replanner_).Plan(snapshot);
  if (!move) {
    MutexLock lock(mu_);
    replanner_.Declined();
    return;
  }
  const std::vector<scheduler::StagePlan>& next = move->next;
  StopAttempt();
  {
    MutexLock lock(mu_);
    migrate_from_ = record_.stages();
    migrate_step_ = record_.committed_step();
    for (size_t k = 0; k < next.size(); ++k) {
      v1::StageInfo* s = record_.mutable_stages(k);
      s->set_layer_begin(next[k].layer_begin);
      s->set_layer_end(next[k].layer_end);
    }
    record_.set_predicted_step_seconds(move->predicted_step_seconds);
    record_.set_replans(record_.replans() + 1);
    record_.set_detail("re-planned at step " + std::to_string(migrate_step_) + ": " +
                       replanner_.reason() + move->moved + "; now " +
                       scheduler::PlanDebugString(next));
    RestartFromCommittedLocked("replan", record_.detail());
    replanner_.Applied();
    PersistLocked();
    cv_.notify_all();
    env_.log->warn("job {}: {}", record_.job_id(), record_.detail());
  }
  AssignAll();
  MutexLock lock(mu_);
  if (record_.state() == v1::JOB_STATE_RUNNING) {
    record_.set_detail("re-planned at step " + std::to_string(migrate_step_) + ": " +
                       replanner_.reason() + move->moved);
  }
}

}  // namespace longhaul::daemon
