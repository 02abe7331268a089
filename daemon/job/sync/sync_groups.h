// A job's sync groups as its status shows them (v1::SyncGroupStatus): per group of stages that
// exchange sync frames (sync_routes.h: SyncGroupsOf) the codec, the bytes its members sent each
// other, the syncs completed and their time, from the stages' latest step reports.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

// Replaces record->sync_groups with `groups` (none for a single pipeline): their sites but
// those of replicas removed from the job (record->removed_replicas), bytes
// summed over the members, syncs the fewest any member completed, exposed time the largest
// total any member spent in syncs (its own sync work and its wait for the others, which in
// lockstep includes waiting for a replica that computes slower). `gossip`: the job's syncs
// are gossip rounds (its groups' reduce reads "gossip", else "ring" or "gather" by the
// record's sync_ring).
void SetSyncGroups(const std::map<uint32_t, v1::StepReport>& reports,
                   const std::vector<std::vector<int>>& groups, bool gossip, v1::JobStatus* record);

}  // namespace longhaul::daemon
