// The replica-level graph of a gossip round in the daemons (sync.reduce: gossip): what every
// stage of a job computes alike, the sender to choose its out-neighbours and the receiver to
// know whom it hears from (and to refuse a frame from anyone else).
#pragma once

#include <cstdint>
#include <vector>

#include "fleet/gossip.h"
#include "fleet/sync_options.h"

namespace longhaul::daemon {

// The round of the sync after `step` (0-based): how many syncs came before it, one every
// `every` steps and one after the job's last step.
uint64_t GossipRoundOf(const fleet::SyncOptions& sync, uint64_t step);

// That round's graph over the replicas: every link between live replicas alike (the fleet
// simulator's matrix when none is given), a dropped replica's links down, drawn from the
// job's `seed` (fleet::ChooseGossipGraph). `live`: by replica.
fleet::GossipGraph GossipRoundGraph(const fleet::SyncOptions& sync, const std::vector<bool>& live,
                                    uint64_t seed, uint64_t step);

}  // namespace longhaul::daemon
