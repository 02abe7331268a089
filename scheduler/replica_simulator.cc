// Replicas replayed over traces, synced every `every` steps (see replica_simulator.h).
#include "scheduler/replica_simulator.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fleet/sync_slices.h"
#include "model/layout.h"

namespace longhaul::scheduler {
namespace {

// The profiles with every traced link at its bandwidth at time `t`; `link_of[i]`: the index
// in profiles.links of traces[i]'s link (-1: none).
Profiles ProfilesAt(const Profiles& profiles, const std::vector<LinkTrace>& traces,
                    const std::vector<int>& link_of, double t) {
  Profiles p = profiles;
  for (size_t i = 0; i < traces.size(); ++i) {
    if (link_of[i] < 0) continue;
    bool found = false;
    double bw = 0;
    for (const TracePoint& point : traces[i].bandwidth) {
      if (point.time_seconds > t) break;
      bw = point.value;
      found = true;
    }
    // Before the trace's first point: the profile's; a point of 0 is the link down.
    if (found) p.links[static_cast<size_t>(link_of[i])].bandwidth_bytes_per_second = bw;
  }
  return p;
}

}  // namespace

double ReplicaSimulation::MeanStepSeconds(int from) const {
  const int n = static_cast<int>(step_end_seconds.size());
  if (n == 0 || from >= n) return 0;
  const double begin = from == 0 ? start_seconds : step_end_seconds[static_cast<size_t>(from - 1)];
  return (step_end_seconds.back() - begin) / (n - from);
}

double ReplicaSimulation::steady_tokens_per_second() const {
  const size_t n = step_end_seconds.size();
  if (n < 3) return tokens_per_second();
  const double wall = step_end_seconds[n - 2] - step_end_seconds[0];
  return wall > 0 ? tokens / static_cast<double>(n) * static_cast<double>(n - 2) / wall : 0;
}

double ReplicaSimulation::tokens_per_second() const {
  const double wall = step_end_seconds.empty() ? 0 : step_end_seconds.back() - start_seconds;
  return wall > 0 ? tokens / wall : 0;
}

StatusOr<ReplicaSimulation> SimulateReplicas(
    const Profiles& profiles, const model::ModelConfig& model, const PipelineWorkload& workload,
    const std::vector<PlanResult>& replicas, const SyncCostOptions& sync,
    const SimulatorOptions& options, const std::vector<int>& microbatches,
    const CostModelOptions& cost_options) {
  if (replicas.empty()) return absl::InvalidArgumentError("simulate replicas: none given");
  if (!microbatches.empty() && microbatches.size() != replicas.size()) {
    return absl::InvalidArgumentError(absl::StrCat("simulate replicas: microbatches for ",
                                                   microbatches.size(), " of ", replicas.size(),
                                                   " replicas"));
  }
  ReplicaSimulation out;
  out.start_seconds = options.start_seconds;
  std::vector<SimulationResult> runs;
  for (size_t r = 0; r < replicas.size(); ++r) {
    PipelineWorkload w = workload;
    if (!microbatches.empty()) w.microbatches = microbatches[r];
    ASSIGN_OR_RETURN(const CostModel cm, CostModel::Create(model, w, profiles, cost_options));
    SimulatorOptions o = options;
    o.seed = options.seed + r;  // each replica its own jitter
    auto run = Simulate(cm, replicas[r].stages, o);
    if (!run.ok()) return Annotate(run.status(), absl::StrCat("replica ", r));
    out.tokens +=
        static_cast<double>(w.microbatch_size) * w.seq_len * w.microbatches * options.steps;
    runs.push_back(*std::move(run));
  }
  std::map<std::pair<std::string, std::string>, int> index;
  for (size_t i = 0; i < profiles.links.size(); ++i) {
    index[{profiles.links[i].from, profiles.links[i].to}] = static_cast<int>(i);
  }
  std::vector<int> link_of;
  for (const LinkTrace& trace : options.links) {
    auto it = index.find({trace.from, trace.to});
    link_of.push_back(it == index.end() ? -1 : it->second);
  }
  const int every = std::max(1, sync.every);
  const int stagger = std::clamp(sync.stagger, 1, every);
  // One sync in flight at a time: a phase's finishes before the next phase's starts.
  const int overlap = std::clamp(sync.overlap, 0, std::max(0, every / stagger - 1));
  const std::vector<double> shares = fleet::PhaseShares(model::ParameterLayout(model), stagger);
  double t = options.start_seconds;
  bool pending = false;
  double pending_end = 0;
  int pending_done = 0;
  for (int s = 0; s < options.steps; ++s) {
    double step = 0;
    for (const SimulationResult& run : runs) {
      if (static_cast<size_t>(s) < run.steps.size()) step = std::max(step, run.steps[s].seconds());
    }
    t += step;
    const int done = s + 1;
    // A streamed sync lands `overlap` steps after it started (or at the last step).
    if (pending && (done == pending_done + overlap || done == options.steps)) {
      if (pending_end > t) {
        out.exposed_seconds += pending_end - t;
        t = pending_end;
      }
      pending = false;
    }
    // A staggered round's phase p syncs its share of the parameters after the steps
    // k every + p every / stagger (fleet::LocalSyncAt); every phase after the last.
    int phase = -1;
    for (int p = 0; p < stagger; ++p) {
      if (done % every == p * every / stagger) phase = p;
    }
    if (replicas.size() > 1 && (phase >= 0 || done == options.steps)) {
      const double seconds = PriceReplicas(ProfilesAt(profiles, options.links, link_of, t), model,
                                           workload, replicas, sync, microbatches)
                                 .sync_seconds *
                             (done == options.steps ? 1.0 : shares[static_cast<size_t>(phase)]);
      ++out.syncs;
      out.sync_seconds += seconds;
      if (overlap == 0 || done == options.steps) {
        out.exposed_seconds += seconds;
        t += seconds;
      } else {
        pending = true;
        pending_end = t + seconds;
        pending_done = done;
      }
    }
    out.step_end_seconds.push_back(t);
  }
  return out;
}

}  // namespace longhaul::scheduler
