// SyncRoutes, SyncPeers and SyncGroupsOf; see sync_routes.h.
#include "daemon/job/sync/sync_routes.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "model/layout.h"

namespace longhaul::daemon {
namespace {

std::vector<fleet::SyncSlice> SlicesOf(const StageGrid& grid, const model::ModelConfig& config,
                                       int stage) {
  const auto& [begin, end] = grid.layers[static_cast<size_t>(stage)];
  return fleet::SyncSlices(model::FragmentLayout(config, begin, end));
}

// holders[slice][replica]: the replica's stages holding the slice, in pipeline order.
using Holders = std::map<int, std::vector<std::vector<int>>>;

Holders HoldersOf(const StageGrid& grid, const model::ModelConfig& config) {
  Holders h;
  for (int i = 0; i < grid.size(); ++i) {
    for (const fleet::SyncSlice& s : SlicesOf(grid, config, i)) {
      auto& by_replica = h[s.index];
      by_replica.resize(static_cast<size_t>(grid.replicas));
      by_replica[static_cast<size_t>(grid.replica(i))].push_back(i);
    }
  }
  return h;
}

// The stage of `holders` (one replica's) whose frame `receiver` adds: the one at the same end.
int SourceFor(const StageGrid& grid, const std::vector<int>& holders, int receiver) {
  if (holders.empty()) return -1;
  return grid.first(receiver) ? holders.front() : holders.back();
}

std::vector<SyncRoute> RoutesOf(const Holders& holders, const StageGrid& grid,
                                const model::ModelConfig& config, int self) {
  const int mine = grid.replica(self);
  std::vector<SyncRoute> routes;
  for (const fleet::SyncSlice& s : SlicesOf(grid, config, self)) {
    SyncRoute route;
    route.slice = s;
    const auto& by_replica = holders.at(s.index);
    for (int r = 0; r < grid.replicas; ++r) {
      route.source.push_back(r == mine ? self : SourceFor(grid, by_replica[r], self));
      if (r == mine) continue;
      for (int d : by_replica[r]) {
        if (SourceFor(grid, by_replica[mine], d) == self) route.to.push_back(d);
      }
    }
    routes.push_back(std::move(route));
  }
  return routes;
}

}  // namespace

std::vector<SyncRoute> SyncRoutes(const StageGrid& grid, const model::ModelConfig& config, int self,
                                  int stagger) {
  std::vector<SyncRoute> routes = RoutesOf(HoldersOf(grid, config), grid, config, self);
  const model::ParameterLayout layout(config);
  for (SyncRoute& route : routes)
    route.phase = fleet::SlicePhase(layout, route.slice.index, stagger);
  return routes;
}

bool RingsAgree(const StageGrid& grid, const model::ModelConfig& config) {
  if (grid.replicas < 2) return false;
  const Holders holders = HoldersOf(grid, config);
  std::vector<std::vector<SyncRoute>> routes;
  for (int i = 0; i < grid.size(); ++i) routes.push_back(RoutesOf(holders, grid, config, i));
  for (int i = 0; i < grid.size(); ++i) {
    for (const SyncRoute& mine : routes[static_cast<size_t>(i)]) {
      for (int s : mine.source) {
        if (s < 0) return false;
        bool same = false;
        for (const SyncRoute& theirs : routes[static_cast<size_t>(s)]) {
          if (theirs.slice.index == mine.slice.index) same = theirs.source == mine.source;
        }
        if (!same) return false;
      }
    }
  }
  return true;
}

RingPlace RingOf(const SyncRoute& route, const std::vector<bool>& live, int self) {
  RingPlace ring;
  for (size_t r = 0; r < route.source.size(); ++r) {
    if (!live.empty() && !live[r]) continue;
    if (route.source[r] == self) ring.position = ring.size();
    ring.members.push_back(route.source[r]);
  }
  return ring;
}

std::vector<int> SyncPeers(const std::vector<SyncRoute>& routes, int self) {
  std::vector<int> peers;
  for (const SyncRoute& r : routes) {
    for (int s : r.source) {
      if (s >= 0 && s != self) peers.push_back(s);
    }
    peers.insert(peers.end(), r.to.begin(), r.to.end());
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

std::vector<std::vector<int>> SyncGroupsOf(const StageGrid& grid,
                                           const model::ModelConfig& config) {
  if (grid.replicas < 2) return {};
  if (grid.aligned()) {  // the same position of every replica
    std::vector<std::vector<int>> groups(static_cast<size_t>(grid.stages(0)));
    for (int r = 0; r < grid.replicas; ++r) {
      for (int p = 0; p < grid.stages(0); ++p) groups[p].push_back(grid.flat(r, p));
    }
    return groups;
  }
  std::vector<int> parent(static_cast<size_t>(grid.size()));
  std::iota(parent.begin(), parent.end(), 0);
  auto root = [&](int i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  const Holders holders = HoldersOf(grid, config);
  for (int i = 0; i < grid.size(); ++i) {
    for (int p : SyncPeers(RoutesOf(holders, grid, config, i), i)) parent[root(p)] = root(i);
  }
  std::map<int, std::vector<int>> by_root;
  for (int i = 0; i < grid.size(); ++i) by_root[root(i)].push_back(i);
  std::vector<std::vector<int>> groups;
  for (auto& [r, members] : by_root) groups.push_back(std::move(members));
  std::sort(groups.begin(), groups.end());
  return groups;
}

}  // namespace longhaul::daemon
