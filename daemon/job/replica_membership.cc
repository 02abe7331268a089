// Replica membership decisions (replica_membership.h).
#include "daemon/job/replica_membership.h"

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
                           const ReplicaList& dropped, const std::vector<std::string>& lost_sites) {
  ReplicaList drop;
  int live = 0;
  for (int r = 0; r < grid.replicas; ++r) {
    if (Contains(dropped, r)) continue;
    ++live;
    for (int p = 0; p < grid.stages; ++p) {
      const int i = grid.flat(r, p);
      if (i < stages.size() && std::find(lost_sites.begin(), lost_sites.end(),
                                         stages.Get(i).site()) != lost_sites.end()) {
        drop.push_back(static_cast<uint32_t>(r));
        break;
      }
    }
  }
  if (static_cast<int>(drop.size()) >= live) drop.clear();  // none would be left
  return drop;
}

bool RejoinDue(uint64_t committed, uint64_t attempt_start, int every, uint64_t total_steps) {
  return every > 0 && committed > attempt_start && committed < total_steps &&
         committed % static_cast<uint64_t>(every) == 0;
}

int RejoinSource(int replicas, const ReplicaList& dropped, const ReplicaList& rejoining) {
  for (int r = 0; r < replicas; ++r) {
    if (!Contains(dropped, r) && !Contains(rejoining, r)) return r;
  }
  return -1;
}

}  // namespace longhaul::daemon
