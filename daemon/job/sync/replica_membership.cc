// Replica membership decisions (replica_membership.h).
#include "daemon/job/sync/replica_membership.h"

#include <algorithm>
#include <set>

namespace longhaul::daemon {

bool Contains(const ReplicaList& replicas, int replica) {
  return replica >= 0 && std::find(replicas.begin(), replicas.end(),
                                   static_cast<uint32_t>(replica)) != replicas.end();
}

std::vector<int> LiveStages(const StageGrid& grid, const ReplicaList& dropped) {
  std::vector<int> live;
  for (int i = 0; i < grid.size(); ++i) {
    if (!Contains(dropped, grid.replica(i))) live.push_back(i);
  }
  return live;
}

std::vector<std::string> LiveSites(const StageGrid& grid,
                                   const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
                                   const ReplicaList& dropped) {
  std::vector<std::string> sites;
  for (int i : LiveStages(grid, dropped)) {
    if (i >= stages.size()) break;
    const std::string& site = stages.Get(i).site();
    if (std::find(sites.begin(), sites.end(), site) == sites.end()) sites.push_back(site);
  }
  return sites;
}

ReplicaList ReplicasToDrop(const StageGrid& grid,
                           const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
                           const ReplicaList& dropped, const ReplicaList& rejoining,
                           const std::vector<std::string>& lost_sites) {
  ReplicaList drop;
  int survivors = 0;  // live, not rejoining, not dropped now
  for (int r = 0; r < grid.replicas; ++r) {
    if (Contains(dropped, r)) continue;
    bool lost = false;
    for (int p = 0; p < grid.stages(r); ++p) {
      const int i = grid.flat(r, p);
      if (i < stages.size() && std::find(lost_sites.begin(), lost_sites.end(),
                                         stages.Get(i).site()) != lost_sites.end()) {
        lost = true;
        break;
      }
    }
    if (lost) {
      drop.push_back(static_cast<uint32_t>(r));
    } else if (!Contains(rejoining, r)) {
      ++survivors;
    }
  }
  if (survivors == 0) drop.clear();  // none could go on
  return drop;
}

bool RejoinDue(uint64_t committed, uint64_t attempt_start, uint64_t total_steps) {
  return committed > attempt_start && committed < total_steps;
}

uint64_t NextCheckpointStep(uint64_t committed, int64_t every) {
  if (every <= 0) return UINT64_MAX;
  const uint64_t e = static_cast<uint64_t>(every);
  return (committed / e + 1) * e;
}

bool MembershipChangeDue(uint64_t committed, uint64_t asked,
                         const std::vector<uint64_t>& replica_steps, int64_t every,
                         uint64_t total) {
  if (committed > asked || replica_steps.empty()) return true;
  const uint64_t next = NextCheckpointStep(committed, every);
  if (next >= total) return true;
  uint64_t redone = 0, slowest = UINT64_MAX;
  for (uint64_t s : replica_steps) {
    redone += s > committed ? s - committed : 0;
    slowest = std::min(slowest, s);
  }
  const uint64_t missed = next > slowest ? next - slowest : 0;
  return redone <= missed;
}

ReplicaList Union(const ReplicaList& a, const ReplicaList& b) {
  ReplicaList u = a;
  for (uint32_t r : b) {
    if (!Contains(u, static_cast<int>(r))) u.push_back(r);
  }
  std::sort(u.begin(), u.end());
  return u;
}

std::string ReplicaNames(const ReplicaList& replicas) {
  std::string s = replicas.size() == 1 ? "replica " : "replicas ";
  for (size_t i = 0; i < replicas.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(replicas[i]);
  }
  return s;
}

int RejoinSource(const StageGrid& grid, const ReplicaList& dropped, const ReplicaList& rejoining) {
  for (int r = 0; r < grid.replicas; ++r) {
    if (!Contains(dropped, r) && !Contains(rejoining, r)) return r;
  }
  return -1;
}

StatusOr<google::protobuf::RepeatedPtrField<v1::StageInfo>> PlanAddedReplica(
    const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
    const std::vector<std::string>& sites, int layers, uint32_t microbatches,
    const std::vector<int>& ends) {
  if (sites.empty()) return absl::InvalidArgumentError("no site to add");
  if (!ends.empty()) {
    bool split = ends.size() == sites.size() && ends.back() == layers;
    for (size_t k = 0; split && k < ends.size(); ++k) split = ends[k] > (k ? ends[k - 1] : 0);
    if (!split) {
      return absl::InvalidArgumentError(
          "a new replica's stages on " + std::to_string(sites.size()) +
          " sites must split the model's " + std::to_string(layers) +
          " layers in order, each at least one (" + std::to_string(ends.size()) + " ends given)");
    }
  }
  if (static_cast<int64_t>(sites.size()) > layers) {
    return absl::InvalidArgumentError(std::to_string(sites.size()) +
                                      " sites for a new replica of a model of " +
                                      std::to_string(layers) + " layers: at most one a layer");
  }
  std::set<std::string> taken;
  for (const auto& s : stages) taken.insert(s.site());
  for (size_t k = 0; k < sites.size(); ++k) {
    if (taken.count(sites[k])) {
      return absl::AlreadyExistsError("site '" + sites[k] + "' runs a stage of the job already");
    }
    if (std::find(sites.begin(), sites.begin() + static_cast<std::ptrdiff_t>(k), sites[k]) !=
        sites.begin() + static_cast<std::ptrdiff_t>(k)) {
      return absl::InvalidArgumentError("site '" + sites[k] + "' is named twice");
    }
  }
  google::protobuf::RepeatedPtrField<v1::StageInfo> plan = stages;
  const uint32_t replica = stages.empty() ? 0 : stages.Get(stages.size() - 1).replica() + 1;
  const int n = static_cast<int>(sites.size()), per = layers / n, extra = layers % n;
  int begin = 0;
  for (int k = 0; k < n; ++k) {
    const int end = ends.empty() ? begin + per + (k < extra ? 1 : 0) : ends[static_cast<size_t>(k)];
    v1::StageInfo* s = plan.Add();
    s->set_index(static_cast<uint32_t>(plan.size() - 1));
    s->set_site(sites[static_cast<size_t>(k)]);
    s->set_layer_begin(static_cast<uint32_t>(begin));
    s->set_layer_end(static_cast<uint32_t>(end));
    s->set_replica(replica);
    s->set_microbatches(microbatches);
    begin = end;
  }
  return plan;
}

StatusOr<int> ReturningReplica(const StageGrid& grid,
                               const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
                               const ReplicaList& dropped, const ReplicaList& removed,
                               const std::vector<std::string>& sites) {
  auto replica_of = [&](const std::string& site) {
    for (int i = 0; i < grid.size() && i < stages.size(); ++i) {
      if (stages.Get(i).site() == site) return grid.replica(i);
    }
    return -1;
  };
  int back = -1;
  for (size_t k = 0; k < sites.size(); ++k) {
    if (std::find(sites.begin(), sites.begin() + static_cast<std::ptrdiff_t>(k), sites[k]) !=
        sites.begin() + static_cast<std::ptrdiff_t>(k)) {
      return absl::InvalidArgumentError("site '" + sites[k] + "' is named twice");
    }
    const int r = replica_of(sites[k]);
    if (r < 0) continue;
    if (!Contains(removed, r)) {
      return absl::AlreadyExistsError(
          "site '" + sites[k] + "' runs a stage of replica " + std::to_string(r) +
          " of the job already" +
          (Contains(dropped, r) ? " (it sits out, dropped, and rejoins by itself once its sites "
                                  "answer; remove-site takes it out)"
                                : ""));
    }
    if (back >= 0 && r != back) {
      return absl::InvalidArgumentError("sites of removed replicas " + std::to_string(back) +
                                        " and " + std::to_string(r) +
                                        " named together: bring one replica back at a time");
    }
    back = r;
  }
  if (back < 0) return -1;
  std::vector<std::string> own;  // the removed replica's sites, in pipeline order
  for (int p = 0; p < grid.stages(back); ++p) own.push_back(stages.Get(grid.flat(back, p)).site());
  const bool same = own.size() == sites.size() &&
                    std::all_of(sites.begin(), sites.end(), [&](const std::string& s) {
                      return std::find(own.begin(), own.end(), s) != own.end();
                    });
  if (!same) {
    std::string names;
    for (const auto& s : own) names += (names.empty() ? "'" : ", '") + s + "'";
    return absl::InvalidArgumentError(
        "replica " + std::to_string(back) + " was removed from the job; it comes back with all " +
        std::to_string(own.size()) + " of its sites and no other: " + names);
  }
  return back;
}

StatusOr<ReplicaList> ReplicasToRemove(
    const StageGrid& grid, const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
    const ReplicaList& dropped, const ReplicaList& rejoining, const ReplicaList& removed,
    const std::vector<std::string>& sites) {
  if (sites.empty()) return absl::InvalidArgumentError("no site to remove");
  ReplicaList leave;
  for (const std::string& site : sites) {
    int replica = -1;
    for (int i = 0; i < grid.size() && i < stages.size(); ++i) {
      if (stages.Get(i).site() == site) replica = grid.replica(i);
    }
    if (replica < 0) {
      return absl::NotFoundError("site '" + site + "' runs no stage of the job");
    }
    if (Contains(removed, replica)) {
      return absl::FailedPreconditionError("site '" + site + "': its replica " +
                                           std::to_string(replica) + " was removed already");
    }
    leave = Union(leave, {static_cast<uint32_t>(replica)});
  }
  for (int r = 0; r < grid.replicas; ++r) {
    if (!Contains(dropped, r) && !Contains(rejoining, r) && !Contains(leave, r)) return leave;
  }
  return absl::FailedPreconditionError(
      "removing " + std::string(sites.size() == 1 ? "site '" + sites[0] + "'" : "those sites") +
      " would leave no replica training (the others are dropped or still rejoining)");
}

}  // namespace longhaul::daemon
