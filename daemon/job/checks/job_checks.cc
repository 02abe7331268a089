// Edge checks for job messages from peers; see job_checks.h.
#include "daemon/job/checks/job_checks.h"

#include <cmath>
#include <set>

#include "common/layer_range.h"
#include "common/names.h"
#include "daemon/job/spec/stage_grid.h"
#include "daemon/job/sync/gossip_round.h"
#include "daemon/job/sync/replica_membership.h"
#include "daemon/job/sync/sync_routes.h"

namespace longhaul::daemon {
namespace {

// At most `n` characters of `s`, for messages about hostile values.
std::string Clip(std::string_view s, size_t n = 64) {
  std::string out;
  for (char c : s.substr(0, n)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > n) out += "...";
  return out;
}

std::string Str(uint64_t v) { return std::to_string(v); }

// Text a peer sends that the status, the CLI's tables and /metrics show: bounded, and no
// control characters (a terminal escape in `longhaul status` is not a codec name).
bool Showable(std::string_view s, size_t max) {
  if (s.size() > max) return false;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
  }
  return true;
}

}  // namespace

Status CheckJobId(std::string_view id) {
  if (IsJobId(id)) return absl::OkStatus();
  return absl::InvalidArgumentError("invalid job id '" + Clip(id) + "' (" + Str(id.size()) +
                                    " bytes): use 1-128 letters, digits, '.', '_' and '-', "
                                    "starting with a letter or digit");
}

Status CheckSiteNameField(std::string_view name, std::string_view field) {
  if (IsSiteName(name)) return absl::OkStatus();
  return absl::InvalidArgumentError(std::string(field) + ": invalid site name '" + Clip(name) +
                                    "': use 1-63 lowercase letters, digits and '-'");
}

Status CheckPlan(const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
                 const JobSpec& spec, std::string_view field) {
  const std::string f(field);
  const int n = stages.size();
  if (n < 1 || n > kMaxStages) {
    return absl::InvalidArgumentError(f + ": " + Str(n) + " stages, allowed 1.." + Str(kMaxStages));
  }
  // replicas: auto leaves the count to the planner: the last stage's replica says it.
  const uint64_t replicas = spec.replicas > 0 ? static_cast<uint64_t>(spec.replicas)
                                              : uint64_t{stages[n - 1].replica()} + 1;
  if (replicas < 1 || replicas > static_cast<uint64_t>(kMaxReplicas) ||
      replicas > static_cast<uint64_t>(n) || stages[n - 1].replica() + 1 != replicas) {
    return absl::InvalidArgumentError(f + ": " + Str(n) + " stages do not form " +
                                      (spec.replicas > 0 ? "the job's " : "") + Str(replicas) +
                                      " replicas (the last stage's replica is " +
                                      Str(stages[n - 1].replica()) + ")");
  }
  // Each replica's stages together, replicas ascending from 0 (stage_grid.h); replicas may
  // be split differently.
  for (int i = 0; i < n; ++i) {
    const uint32_t r = stages[i].replica(), prev = i > 0 ? stages[i - 1].replica() : 0;
    if ((i == 0 && r != 0) || (r != prev && r != prev + 1)) {
      return absl::InvalidArgumentError(f + "[" + Str(i) + "]: replica " + Str(r) +
                                        " after replica " + Str(prev) +
                                        " (each replica's stages together, in replica order)");
    }
  }
  const StageGrid grid = StageGrid::OfPlan(static_cast<int>(replicas), stages);
  const uint32_t layers = static_cast<uint32_t>(spec.job.model.num_layers);
  std::set<std::string> sites;
  uint32_t next = 0;
  for (int i = 0; i < n; ++i) {
    const v1::StageInfo& s = stages[i];
    RETURN_IF_ERROR(CheckSiteNameField(s.site(), f + "[" + Str(i) + "].site"));
    if (!sites.insert(s.site()).second) {
      return absl::InvalidArgumentError(f + "[" + Str(i) + "]: site '" + s.site() +
                                        "' runs another stage of the job already");
    }
    if (grid.first(i)) next = 0;
    if (s.layer_begin() != next || s.layer_end() <= s.layer_begin() || s.layer_end() > layers) {
      return absl::InvalidArgumentError(f + "[" + Str(i) + "]: layers " +
                                        LayerRange(s.layer_begin(), s.layer_end()) +
                                        " do not continue the plan at layer " + Str(next) +
                                        " within the model's " + Str(layers) + " layers");
    }
    // Its replica's microbatches: the same on each of its stages; the job's count where the
    // job gives them (0: a plan written before they were recorded), from 1 to the job's
    // batch_size / microbatch_size (the fastest replica's) when the planner paces them.
    const uint32_t m = s.microbatches(),
                   first = stages[grid.flat(grid.replica(i), 0)].microbatches(),
                   job_m = static_cast<uint32_t>(spec.microbatches(grid.replica(i)));
    if (m != first || (!spec.paced && m != 0 && m != job_m) ||
        (spec.paced && (m == 0 || m > job_m))) {
      return absl::InvalidArgumentError(
          f + "[" + Str(i) + "]: " + Str(m) + " microbatches per step for replica " +
          Str(grid.replica(i)) + " (its first stage: " + Str(first) +
          "; the job's: " + (spec.paced ? "paced, 1.." : "") + Str(job_m) + ")");
    }
    next = s.layer_end();
    if (grid.last(i) && next != layers) {
      return absl::InvalidArgumentError(f + ": replica " + Str(grid.replica(i)) +
                                        "'s stages cover layers " + LayerRange(0, next) +
                                        ", the model has " + LayerRange(0, layers));
    }
  }
  return absl::OkStatus();
}

Status CheckAssignment(const v1::StageAssignment& a, const JobSpec& spec, std::string_view self) {
  RETURN_IF_ERROR(CheckJobId(a.job_id()));
  const std::string job = "job " + a.job_id();
  RETURN_IF_ERROR(CheckSiteNameField(a.coordinator(), job + ": coordinator"));
  RETURN_IF_ERROR(CheckPlan(a.stages(), spec, job + ": stages"));
  if (a.stage() >= static_cast<uint32_t>(a.stages_size()) || a.stages(a.stage()).site() != self) {
    return absl::InvalidArgumentError(job + ": stage " + Str(a.stage()) +
                                      " is not assigned to site '" + std::string(self) + "'");
  }
  if (a.resume_step() > static_cast<uint64_t>(spec.job.steps)) {
    return absl::InvalidArgumentError(job + ": resume_step " + Str(a.resume_step()) +
                                      " is past the job's " + Str(spec.job.steps) + " steps");
  }
  if (a.migrate_from_size() > 0) {
    RETURN_IF_ERROR(CheckPlan(a.migrate_from(), spec, job + ": migrate_from"));
  }
  // Rings where the job asks for them (or lets the planner choose) and the plan's holders
  // agree on them: else the members would wait on frames no one sends.
  if (a.sync_ring() &&
      (spec.sync.reduce == fleet::SyncReduce::kGather ||
       !RingsAgree(StageGrid::OfPlan(spec.replicas, a.stages()), spec.job.model))) {
    return absl::InvalidArgumentError(
        job + ": syncs around rings, but " +
        (spec.sync.reduce == fleet::SyncReduce::kGather
             ? std::string("the job's sync.reduce is gather")
             : std::string("the plan's replicas hold the tied embedding differently (one stage "
                           "against two or more): no ring agrees")));
  }
  if (a.gossip_links_size() > 0) {
    if (spec.sync.reduce != fleet::SyncReduce::kGossip) {
      return absl::InvalidArgumentError(job + ": gossip_links, but the job's sync.reduce is " +
                                        std::string(fleet::SyncReduceName(spec.sync.reduce)));
    }
    const StageGrid grid = StageGrid::OfPlan(
        a.replicas() > 0 ? static_cast<int>(a.replicas()) : spec.replicas, a.stages());
    const ReplicaList dropped(a.dropped_replicas().begin(), a.dropped_replicas().end());
    std::vector<bool> live;
    for (int r = 0; r < grid.replicas; ++r) live.push_back(!Contains(dropped, r));
    RETURN_IF_ERROR(Annotate(CheckGossipLinks(a.gossip_links(), grid.replicas, live), job));
  }
  return CheckReplicaMembership(a, spec, job);
}

Status CheckReplicaMembership(const v1::StageAssignment& a, const JobSpec& spec,
                              const std::string& job) {
  if (a.dropped_replicas_size() == 0 && a.rejoining_replicas_size() == 0) {
    return absl::OkStatus();
  }
  const StageGrid grid = StageGrid::OfPlan(spec.replicas, a.stages());
  const ReplicaList dropped(a.dropped_replicas().begin(), a.dropped_replicas().end());
  const ReplicaList rejoining(a.rejoining_replicas().begin(), a.rejoining_replicas().end());
  auto valid = [&](const ReplicaList& list) {
    for (size_t k = 0; k < list.size(); ++k) {
      if (list[k] >= static_cast<uint32_t>(grid.replicas) || (k > 0 && list[k] <= list[k - 1])) {
        return false;
      }
    }
    return true;
  };
  const int source = static_cast<int>(a.rejoin_source());
  bool overlap = false;
  for (uint32_t r : rejoining) overlap = overlap || Contains(dropped, static_cast<int>(r));
  if (spec.sync.mode != fleet::SyncMode::kLocal &&
      spec.sync.on_site_loss != fleet::SiteLoss::kDrop) {
    return absl::InvalidArgumentError(job +
                                      ": replicas dropped or rejoining, but the job's "
                                      "sync.on_site_loss is wait");
  }
  if (!valid(dropped) || !valid(rejoining) || overlap ||
      dropped.size() >= static_cast<size_t>(grid.replicas) ||
      (!rejoining.empty() &&
       (source >= grid.replicas || Contains(dropped, source) || Contains(rejoining, source))) ||
      Contains(dropped, grid.replica(static_cast<int>(a.stage())))) {
    return absl::InvalidArgumentError(
        job + ": replica membership (dropped " + Str(dropped.size()) + ", rejoining " +
        Str(rejoining.size()) + " from replica " + Str(source) + ", stage " + Str(a.stage()) +
        ") does not fit the job's " + Str(grid.replicas) +
        " replicas: indices ascending and in range, none both, one live replica to rejoin from, "
        "and this stage's replica not dropped");
  }
  return absl::OkStatus();
}

Status CheckStepReport(const v1::StepReport& r, int num_stages, uint64_t total_steps) {
  const std::string job = "job " + Clip(r.job_id()) + ": step report";
  if (r.stage() >= static_cast<uint32_t>(num_stages)) {
    return absl::InvalidArgumentError(job + ": stage " + Str(r.stage()) + ", the plan has " +
                                      Str(num_stages));
  }
  if (r.step() > total_steps || r.checkpoint_step() > total_steps ||
      r.checkpoint_step() > r.step() + 1) {
    return absl::InvalidArgumentError(job + ": step " + Str(r.step()) + " / checkpoint_step " +
                                      Str(r.checkpoint_step()) + " out of range for " +
                                      Str(total_steps) + " steps");
  }
  // A validation loss is of the step just reported (or the last, in the final report); not
  // finite is what a diverging run honestly reports, negative is no cross-entropy.
  if (r.val_step() != 0 &&
      (r.val_step() != r.step() || (std::isfinite(r.val_loss()) && r.val_loss() < 0))) {
    return absl::InvalidArgumentError(job + ": validation loss " + std::to_string(r.val_loss()) +
                                      " of step " + Str(r.val_step()) + " in the report of step " +
                                      Str(r.step()));
  }
  if (r.grad_sums_size() > kMaxGradSums) {
    return absl::InvalidArgumentError(job + ": " + Str(r.grad_sums_size()) +
                                      " grad sums, allowed " + Str(kMaxGradSums));
  }
  // Not finite is what a diverging run honestly reports (the clip scale handles it);
  // negative is not a sum of squares.
  for (double g : r.grad_sums()) {
    if (g < 0) {
      return absl::InvalidArgumentError(job + ": a grad sum of squares is " + std::to_string(g));
    }
  }
  // Shown in the job's status and metrics: names and reasons without control characters,
  // and a time that is one.
  for (const v1::LinkUsage& l : r.links()) {
    if (!Showable(l.codec(), 64) || !Showable(l.reason(), 512)) {
      return absl::InvalidArgumentError(job + ": link usage with codec '" + Clip(l.codec()) +
                                        "' and reason '" + Clip(l.reason()) + "'");
    }
  }
  if (r.has_sync()) {
    const v1::SyncReport& s = r.sync();
    if (!Showable(s.codec(), 64) || !std::isfinite(s.seconds()) || s.seconds() < 0) {
      return absl::InvalidArgumentError(job + ": sync report with codec '" + Clip(s.codec()) +
                                        "' and " + std::to_string(s.seconds()) + " s");
    }
  }
  return absl::OkStatus();
}

Status CheckFragmentRequest(const v1::FetchFragmentRequest& r, int num_layers,
                            uint64_t total_steps) {
  RETURN_IF_ERROR(CheckJobId(r.job_id()));
  const bool current = r.layer_begin() == 0 && r.layer_end() == 0;
  if (!current &&
      (r.layer_begin() >= r.layer_end() || r.layer_end() > static_cast<uint32_t>(num_layers))) {
    return absl::InvalidArgumentError("job " + r.job_id() + ": fragment layers " +
                                      LayerRange(r.layer_begin(), r.layer_end()) +
                                      " out of the model's " + LayerRange(0, num_layers));
  }
  if (r.step() > total_steps) {
    return absl::InvalidArgumentError("job " + r.job_id() + ": fragment step " + Str(r.step()) +
                                      " past the job's " + Str(total_steps) + " steps");
  }
  return absl::OkStatus();
}

Status RoleDenied(const std::string& caller, const std::string& job, const std::string& what) {
  return absl::PermissionDeniedError("site '" + caller + "' may not " + what + " of job " + job);
}

bool InPlan(const v1::StageAssignment& a, const std::string& site) {
  for (const auto& s : a.stages()) {
    if (s.site() == site) return true;
  }
  for (const auto& s : a.migrate_from()) {
    if (s.site() == site) return true;
  }
  return false;
}

v1::OuterStep OuterStepProto(const fleet::OuterOptions& outer) {
  v1::OuterStep p;
  p.set_lr(outer.lr);
  p.set_momentum(outer.momentum);
  p.set_nesterov(outer.nesterov);
  return p;
}

Status ApplyOuterStep(const v1::OuterStep& outer, fleet::SyncOptions& sync) {
  // A job file's ranges, checked before the values narrow to float.
  if (!(outer.lr() >= fleet::kMinOuterLr && outer.lr() <= fleet::kMaxOuterLr)) {
    return absl::InvalidArgumentError("sync.outer.lr must be in [1e-9, 100], not " +
                                      std::to_string(outer.lr()));
  }
  if (!(outer.momentum() >= 0 && outer.momentum() <= fleet::kMaxOuterMomentum)) {
    return absl::InvalidArgumentError("sync.outer.momentum must be in [0, 0.999999], not " +
                                      std::to_string(outer.momentum()));
  }
  fleet::SyncOptions with = sync;
  with.outer.lr = outer.lr();
  with.outer.momentum = outer.momentum();
  with.outer.nesterov = outer.nesterov();
  RETURN_IF_ERROR(fleet::ValidateSyncOptions(with));
  sync = with;
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
