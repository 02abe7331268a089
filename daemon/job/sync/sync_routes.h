// Where a stage's sync frames go and come from when pipeline replicas may be split
// differently (stage_grid.h). Each parameter slice (fleet/sync_slices.h) is held by one stage
// of every replica, except the tied embedding, which a multi-stage replica holds on its first
// and last stage (identical copies). A stage adds, for each of its slices, one frame per other
// live replica: from that replica's holder, or where it has two, the one at the same end
// (first stages take the first's copy, the others the last's). A stage sends a slice's frame
// to every stage of another replica that takes it from this stage. When every replica is split
// alike this is "the same stage of every replica".
#pragma once

#include <vector>

#include "daemon/job/spec/stage_grid.h"
#include "fleet/sync_slices.h"
#include "model/config.h"

namespace longhaul::daemon {

struct SyncRoute {
  fleet::SyncSlice slice;   // this stage's
  std::vector<int> source;  // by replica: the stage whose frame of the slice this stage adds
  std::vector<int> to;      // the stages of other replicas that add this stage's frame
  int phase = 0;            // the staggered sync's phase it syncs in (fleet::SlicePhase)
};

// The routes of stage `self`'s slices, in its slices' order, each with its phase of a sync
// staggered in `stagger` phases (sync.stagger). REQUIRES: the grid's layers are known (OfPlan)
// and every replica covers the model's layers (CheckPlan).
std::vector<SyncRoute> SyncRoutes(const StageGrid& grid, const model::ModelConfig& config, int self,
                                  int stagger = 1);

// Whether the plan's syncs can go around rings (sync.reduce: ring, fleet/sync_ring.h): two
// or more replicas, and every stage that another adds a slice from takes that slice from the
// same stages, so each slice's holders agree on one ring. Aligned replicas always do; a plan
// split per replica where one replica holds the tied embedding once and another on two stages
// does not (its syncs gather).
bool RingsAgree(const StageGrid& grid, const model::ModelConfig& config);

// Stage `self`'s ring for one of its slices: the route's sources of the live replicas, in
// replica order, and self's place among them.
struct RingPlace {
  std::vector<int> members;  // flat stages
  int position = -1;         // self's index in members
  int size() const { return static_cast<int>(members.size()); }
  int prev() const { return members[static_cast<size_t>((position + size() - 1) % size())]; }
  int next() const { return members[static_cast<size_t>((position + 1) % size())]; }
};
// REQUIRES: live empty (all live) or one per replica.
RingPlace RingOf(const SyncRoute& route, const std::vector<bool>& live, int self);

// The stages this stage sends frames to or takes frames from, ascending, its own left out.
std::vector<int> SyncPeers(const std::vector<SyncRoute>& routes, int self);

// The sync groups of a plan: the stages that exchange frames with each other, directly or
// through others, each group ascending, groups by their first stage. Aligned replicas give
// one group per position; one replica gives none.
std::vector<std::vector<int>> SyncGroupsOf(const StageGrid& grid, const model::ModelConfig& config);

}  // namespace longhaul::daemon
