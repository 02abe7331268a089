// StepBarrier: reports in, one clipping decision out (step_barrier.h).
#include "daemon/job/coordinator/step_barrier.h"

#include <algorithm>
#include <vector>

#include "model/optimizer.h"

namespace longhaul::daemon {

uint64_t StepBarrier::NoteCheckpoint(uint32_t stage, uint64_t step, uint32_t stages) {
  uint64_t& newest = checkpoint_[stage];
  newest = std::max(newest, step);
  return Committed(stages);
}

uint64_t StepBarrier::Committed(uint32_t stages) const {
  if (checkpoint_.empty() || checkpoint_.size() < stages) return 0;
  uint64_t committed = UINT64_MAX;
  for (const auto& [s, ck] : checkpoint_) committed = std::min(committed, ck);
  return committed;
}

void StepBarrier::Forget(const std::vector<uint32_t>& stages) {
  for (uint32_t stage : stages) {
    checkpoint_.erase(stage);
    finished_.erase(stage);
    for (auto& [key, b] : barriers_) {
      if (!b.decided) b.reports.erase(stage);
    }
  }
}

std::vector<v1::StepReport> StepBarrier::Complete(uint32_t attempt, uint32_t stages) const {
  std::vector<v1::StepReport> out;
  for (const auto& [key, b] : barriers_) {
    if (key.first == attempt && !b.decided && !b.reports.empty() && b.reports.size() >= stages) {
      out.push_back(b.reports.begin()->second);
    }
  }
  return out;
}

bool StepBarrier::NoteFinished(uint32_t stage, uint32_t stages) {
  finished_[stage] = true;
  return finished_.size() == stages;
}

const std::map<uint32_t, v1::StepReport>* StepBarrier::Add(const v1::StepReport& report,
                                                           uint32_t stages, uint64_t committed_step,
                                                           uint32_t replicas, uint32_t per_replica,
                                                           const std::vector<int>* replica_of) {
  Barrier& b = barriers_[{report.attempt(), report.step()}];
  b.reports[report.stage()] = report;
  if (b.reports.size() != stages || b.decided) return nullptr;
  replicas = std::max<uint32_t>(replicas, 1);
  if (per_replica == 0) per_replica = std::max<uint32_t>(stages / replicas, 1);
  std::vector<std::vector<double>> sums(replicas);
  for (const auto& [stage, r] : b.reports) {
    uint32_t replica = stage / per_replica;
    if (replica_of != nullptr && stage < replica_of->size()) {
      replica = static_cast<uint32_t>((*replica_of)[stage]);
    }
    model::AddSliceSums({r.grad_sums().begin(), r.grad_sums().end()},
                        &sums[std::min(replica, replicas - 1)]);
  }
  for (uint32_t i = 0; i < replicas; ++i) {
    const float scale = model::ClipScale(model::GradNorm(sums[i]), grad_clip_);
    if (i == 0) b.decision.set_grad_scale(scale);
    if (replicas > 1) b.decision.add_replica_grad_scales(scale);
  }
  b.decision.set_committed_step(committed_step);
  b.decided = true;
  return &b.reports;
}

StepBarrier::State StepBarrier::Lookup(uint32_t attempt, uint64_t step,
                                       v1::StepDecision* decision) const {
  auto it = barriers_.find({attempt, step});
  if (it == barriers_.end()) return State::kGone;
  if (!it->second.decided) return State::kGathering;
  *decision = it->second.decision;
  return State::kDecided;
}

void StepBarrier::Prune(uint32_t attempt, uint64_t step) {
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    const bool old =
        it->first.first < attempt || (it->second.decided && it->first.second + 2 < step);
    it = old ? barriers_.erase(it) : std::next(it);
  }
}

}  // namespace longhaul::daemon
