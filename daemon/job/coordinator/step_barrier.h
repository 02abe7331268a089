// The coordinator's per-step barrier, as bookkeeping: each stage's newest durable checkpoint
// (the job's committed step is their minimum), which stages have finished, and the reports
// of each (attempt, step) until every stage is in; then one decision for all of them: the
// global gradient-norm clipping scale and the committed step. Not locked and never blocks:
// the coordinator holds its lock around each call and waits on its own condition variable.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

class StepBarrier {
 public:
  explicit StepBarrier(float grad_clip) : grad_clip_(grad_clip) {}

  // Stage `stage` holds a durable checkpoint of step `step`. The committed step: the oldest
  // newest checkpoint over all `stages` stages, 0 while one has not reported any.
  uint64_t NoteCheckpoint(uint32_t stage, uint64_t step, uint32_t stages);

  // Stage `stage` ran its last step; whether all `stages` stages have.
  bool NoteFinished(uint32_t stage, uint32_t stages);

  // Adds a report. When it is the last of its (attempt, step) to arrive, decides the step
  // (committed_step: the job's, to pass on) and returns every stage's report of it, by stage;
  // otherwise nullptr. The pointer lives until the next call. With `replicas` pipeline
  // replicas of `per_replica` stages each (stage_grid.h; 0: stages / replicas), each replica's
  // clipping scale comes from its own stages' sums (replica_grad_scales; grad_scale is replica
  // 0's); `stages` counts the reports expected, fewer than all when replicas are dropped.
  // `replica_of` (by stage), where given, says each stage's replica instead (replicas split
  // differently).
  const std::map<uint32_t, v1::StepReport>* Add(const v1::StepReport& report, uint32_t stages,
                                                uint64_t committed_step, uint32_t replicas = 1,
                                                uint32_t per_replica = 0,
                                                const std::vector<int>* replica_of = nullptr);

  // The barrier of (attempt, step): still gathering, decided (then *decision is set), or
  // gone (pruned: its attempt ended or it is long past).
  // The decision of (attempt, step) once decided, to add to before any waiter reads it (the
  // coordinator's lock held); null otherwise.
  v1::StepDecision* MutableDecision(uint32_t attempt, uint64_t step) {
    auto it = barriers_.find({attempt, step});
    return it != barriers_.end() && it->second.decided ? &it->second.decision : nullptr;
  }

  enum class State { kGathering, kDecided, kGone };
  State Lookup(uint32_t attempt, uint64_t step, v1::StepDecision* decision) const;

  // Every stage is (re)assigned: forget which reported checkpoints and finished (each stage
  // reports again under its new assignment).
  void NewAssignment() {
    checkpoint_.clear();
    finished_.clear();
  }

  // Stages that left the attempt (a replica removed while the others run on): forgets their
  // checkpoints, whether they finished, and their reports in the barriers not decided yet.
  void Forget(const std::vector<uint32_t>& stages);
  // One report of each undecided barrier of `attempt` that holds at least `stages` reports
  // (complete once stages left), by ascending step: Add it again to decide its barrier.
  std::vector<v1::StepReport> Complete(uint32_t attempt, uint32_t stages) const;
  // Whether `stages` stages have run their last step (NoteFinished).
  bool AllFinished(uint32_t stages) const { return finished_.size() >= stages; }
  // The committed step over `stages` stages, as NoteCheckpoint gives it.
  uint64_t Committed(uint32_t stages) const;

  // Forgets the barriers of attempts before `attempt` and the decided ones of steps more than
  // two before `step` (none has a waiter left; a gossip replica stepping behind the others
  // still gathers its own).
  void Prune(uint32_t attempt, uint64_t step);

 private:
  struct Barrier {
    std::map<uint32_t, v1::StepReport> reports;
    bool decided = false;
    v1::StepDecision decision;
  };
  const float grad_clip_;
  std::map<std::pair<uint32_t, uint64_t>, Barrier> barriers_;
  std::map<uint32_t, uint64_t> checkpoint_;  // stage -> newest durable checkpoint
  std::map<uint32_t, bool> finished_;
};

}  // namespace longhaul::daemon
