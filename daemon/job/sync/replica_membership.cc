// Replica membership decisions (replica_membership.h).
#include "daemon/job/sync/replica_membership.h"

#include <algorithm>

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

ReplicaList Union(const ReplicaList& a, const ReplicaList& b) {
  ReplicaList u = a;
  for (uint32_t r : b) {
    if (!Contains(u, static_cast<int>(r))) u.push_back(r);
  }
  std::sort(u.begin(), u.end());
  return u;
}

int RejoinSource(const StageGrid& grid, const ReplicaList& dropped, const ReplicaList& rejoining) {
  for (int r = 0; r < grid.replicas; ++r) {
    if (!Contains(dropped, r) && !Contains(rejoining, r)) return r;
  }
  return -1;
}

}  // namespace longhaul::daemon
