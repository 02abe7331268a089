// The daemons' gossip rounds (gossip_round.h).
#include "daemon/job/sync/gossip_round.h"

#include <algorithm>

namespace longhaul::daemon {

uint64_t GossipRoundOf(const fleet::SyncOptions& sync, uint64_t step) {
  return step / static_cast<uint64_t>(std::max(1, sync.every));
}

fleet::GossipGraph GossipRoundGraph(const fleet::SyncOptions& sync, const std::vector<bool>& live,
                                    uint64_t seed, uint64_t step) {
  const size_t n = live.size();
  std::vector<std::vector<double>> links(n, std::vector<double>(n, 1.0));
  for (size_t r = 0; r < n; ++r) {
    if (live[r]) continue;
    for (size_t q = 0; q < n; ++q) links[r][q] = links[q][r] = 0;
  }
  return fleet::ChooseGossipGraph(links, sync.fanout, seed, GossipRoundOf(sync, step));
}

}  // namespace longhaul::daemon
