// A job's plan as R pipeline replicas: assignment.stages (and the job record's) hold every
// replica's stages, replica-major, each replica's in pipeline order; replica r's stages are
// the flat indices start[r] .. start[r+1]. Replicas may be split differently (a replica of
// three sites beside one of two): each covers the model's layers once. Pipeline neighbours and
// the tied-embedding partner are within a replica; a stage syncs each parameter slice with
// the stages of the other replicas that hold the same layers (sync_routes.h). One pipeline is
// R = 1, where flat index and position coincide. With `replicas: auto` the job spec leaves R
// to the planner and the plan's stages say it (OfPlan).
#pragma once

#include <algorithm>
#include <utility>
#include <vector>

namespace longhaul::daemon {

struct StageGrid {
  int replicas = 1;
  std::vector<int> start = {0, 1};  // replicas + 1 flat indices: each replica's first, the end
  std::vector<std::pair<int, int>> layers;  // by flat stage, [begin, end); empty: not known
  // False for a model whose output head is its own tensor (the subspace-cut variant): no
  // stage has a tied-embedding partner then.
  bool tied_head = true;

  // `replicas` replicas of equal stage counts (no layers). REQUIRES: replicas >= 1 and
  // flat_count a multiple of it.
  static StageGrid Of(int replicas, int flat_count) {
    StageGrid g;
    g.replicas = std::max(replicas, 1);
    const int per = std::max(flat_count / g.replicas, 1);
    g.start.clear();
    for (int r = 0; r <= g.replicas; ++r) g.start.push_back(r * per);
    return g;
  }
  // The grid of a plan (StageInfo entries): the replicas as the stages' replica fields give
  // them (ascending from 0, each replica's stages together), their layers from the stages;
  // R is the job's replica count when it names one, else (`replicas: auto`) one more than
  // the last stage's replica. A plan whose replica fields do not form that many replicas
  // (CheckPlan refuses it) gets the equal split of Of.
  template <class StageList>
  static StageGrid OfPlan(int spec_replicas, const StageList& stages) {
    const int n = static_cast<int>(stages.size());
    int replicas = spec_replicas;
    if (replicas <= 0) replicas = n > 0 ? static_cast<int>(stages[n - 1].replica()) + 1 : 1;
    if (replicas <= 0 || replicas > n) replicas = 1;
    StageGrid g;
    g.replicas = replicas;
    g.start.assign(1, 0);
    bool formed = n > 0 && stages[0].replica() == 0;
    for (int i = 1; i < n && formed; ++i) {
      const auto prev = stages[i - 1].replica(), cur = stages[i].replica();
      if (cur == prev + 1) {
        g.start.push_back(i);
      } else if (cur != prev) {
        formed = false;
      }
    }
    g.start.push_back(n);
    if (!formed || static_cast<int>(g.start.size()) != replicas + 1) {
      g = Of(replicas, n);
      if (n % g.replicas != 0) g = Of(1, n);
    }
    for (int i = 0; i < n; ++i) {
      g.layers.emplace_back(static_cast<int>(stages[i].layer_begin()),
                            static_cast<int>(stages[i].layer_end()));
    }
    return g;
  }
  int size() const { return start.back(); }
  int replica(int flat) const {
    const auto it = std::upper_bound(start.begin() + 1, start.end() - 1, flat);
    return static_cast<int>(it - (start.begin() + 1));
  }
  int stages(int r) const { return start[r + 1] - start[r]; }  // replica r's
  int position(int flat) const { return flat - start[replica(flat)]; }
  int flat(int replica, int position) const { return start[replica] + position; }
  bool first(int flat) const { return position(flat) == 0; }
  bool last(int flat) const { return flat + 1 == start[replica(flat) + 1]; }
  // Every replica has the same stage count and, where known, the same layers per position:
  // the sync groups are then "the same position of every replica".
  bool aligned() const {
    for (int r = 1; r < replicas; ++r) {
      if (stages(r) != stages(0)) return false;
      for (int p = 0; p < stages(0) && !layers.empty(); ++p) {
        if (layers[flat(r, p)] != layers[flat(0, p)]) return false;
      }
    }
    return true;
  }
  // The previous / next stage of the same replica, or -1 at its ends.
  int prev(int flat) const { return first(flat) ? -1 : flat - 1; }
  int next(int flat) const { return last(flat) ? -1 : flat + 1; }
  // The first and last stage of a multi-stage replica exchange the tied embedding's
  // gradient parts; -1 for the stages in between, for single-stage replicas and without a
  // tied head.
  int tied(int flat) const {
    const int r = replica(flat);
    if (!tied_head || stages(r) < 2) return -1;
    if (first(flat)) return start[r + 1] - 1;
    if (last(flat)) return start[r];
    return -1;
  }
  // Replica r's stage holding `layer` (REQUIRES: layers known), or -1.
  int holder(int r, int layer) const {
    for (int i = start[r]; i < start[r + 1]; ++i) {
      if (layers[i].first <= layer && layer < layers[i].second) return i;
    }
    return -1;
  }
};

}  // namespace longhaul::daemon
