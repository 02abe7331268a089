// A job's plan as R pipeline replicas of S stages each: assignment.stages (and the job
// record's) hold R x S entries, replica-major, so the flat index i is stage i % S of replica
// i / S. Pipeline neighbours and the tied-embedding partner are within a replica; the sync
// group of a flat stage is the same position in every replica, in replica order. One
// pipeline is R = 1, where flat index and position coincide. With `replicas: auto` the job
// spec leaves R to the planner and the plan's stages say it (OfPlan).
#pragma once

#include <vector>

namespace longhaul::daemon {

struct StageGrid {
  int replicas = 1;
  int stages = 1;  // per replica

  // REQUIRES: replicas >= 1 and flat_count a multiple of it.
  static StageGrid Of(int replicas, int flat_count) {
    return {replicas, replicas > 0 ? flat_count / replicas : flat_count};
  }
  // The grid of a plan (StageInfo entries, replica-major): the job's replica count when it
  // names one, else (`replicas: auto`, the planner chose) one more than the last stage's
  // replica. CheckPlan (job_checks.h) checks that every stage's replica agrees.
  template <class StageList>
  static StageGrid OfPlan(int spec_replicas, const StageList& stages) {
    const int n = static_cast<int>(stages.size());
    int replicas = spec_replicas;
    if (replicas <= 0) {
      replicas = n > 0 ? static_cast<int>(stages[n - 1].replica()) + 1 : 1;
    }
    if (replicas <= 0 || replicas > n) replicas = 1;  // CheckPlan refuses such a plan
    return Of(replicas, n);
  }
  int size() const { return replicas * stages; }
  int replica(int flat) const { return flat / stages; }
  int position(int flat) const { return flat % stages; }
  int flat(int replica, int position) const { return replica * stages + position; }
  bool first(int flat) const { return position(flat) == 0; }
  bool last(int flat) const { return position(flat) == stages - 1; }
  // The previous / next stage of the same replica, or -1 at its ends.
  int prev(int flat) const { return first(flat) ? -1 : flat - 1; }
  int next(int flat) const { return last(flat) ? -1 : flat + 1; }
  // The first and last stage of a multi-stage replica exchange the tied embedding's
  // gradient parts; -1 for the stages in between and for single-stage replicas.
  int tied(int flat) const {
    if (stages < 2) return -1;
    if (first(flat)) return flat + stages - 1;
    if (last(flat)) return flat - (stages - 1);
    return -1;
  }
  // The stages holding the same layers in every replica (flat's own included), by replica.
  std::vector<int> group(int flat) const {
    std::vector<int> g;
    for (int r = 0; r < replicas; ++r) g.push_back(this->flat(r, position(flat)));
    return g;
  }
};

}  // namespace longhaul::daemon
