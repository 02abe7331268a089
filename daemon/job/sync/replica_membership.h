// Which pipeline replicas of a job train in an attempt (sync.on_site_loss: drop, fleet/
// sync_options.h): the coordinator drops every replica with a stage on a lost site and lets
// the others go on; a dropped replica rejoins at a later committed step once its sites answer,
// its stages taking a live replica's state. Pure decisions over the plan (stage_grid.h), so
// they are tested without daemons.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/job/spec/stage_grid.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

using ReplicaList = std::vector<uint32_t>;  // replica indices, ascending

bool Contains(const ReplicaList& replicas, int replica);
// The flat indices of the stages of replicas not in `dropped`, in order.
std::vector<int> LiveStages(const StageGrid& grid, const ReplicaList& dropped);
// The sites of those stages, in stage order, each once.
std::vector<std::string> LiveSites(const StageGrid& grid,
                                   const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
                                   const ReplicaList& dropped);
// The live replicas with a stage on one of `lost_sites`, ascending; empty when dropping them
// would leave no replica that is neither dropped nor rejoining (one that has not taken its
// state yet cannot go on alone: the job then waits for the sites, as a single pipeline does).
ReplicaList ReplicasToDrop(const StageGrid& grid,
                           const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
                           const ReplicaList& dropped, const ReplicaList& rejoining,
                           const std::vector<std::string>& lost_sites);
// Whether dropped replicas may rejoin at committed step `committed`: later than the step the
// current attempt started from (the live replicas made progress) and before the job's last.
// A rejoining stage starts from the live replicas' state: in local mode at their last outer
// step (the anchor), so any committed step will do; in step mode their parameters, the same
// on every replica.
bool RejoinDue(uint64_t committed, uint64_t attempt_start, uint64_t total_steps);
// The first checkpoint step after `committed` with checkpoints every `every` steps
// (UINT64_MAX when `every` is 0: none comes).
uint64_t NextCheckpointStep(uint64_t committed, int64_t every);
// Whether a join or a comeback asked for when `asked` was the committed step is made now.
// Either starts every stage again from the committed step, so the steps each live replica
// made since it (`replica_steps`: each one's step now, as its stages report) are redone; just
// after the next commit only those made since that commit are. Now once a commit came after
// `asked`; when none can come before the job's end (`total`); or when the replica-steps
// redone now are no more than the steps the new replica would miss waiting for the next
// checkpoint, which the slowest replica reaches last (a join at the job's start, or just
// past a commit). Otherwise it waits for the next commit.
bool MembershipChangeDue(uint64_t committed, uint64_t asked,
                         const std::vector<uint64_t>& replica_steps, int64_t every, uint64_t total);
// The replica rejoining stages copy (and export reads): the first one neither dropped nor
// rejoining; -1 if none. A rejoining stage takes its layers from the source's stages that
// hold them, however the source is split.
int RejoinSource(const StageGrid& grid, const ReplicaList& dropped, const ReplicaList& rejoining);
// "replica 2" or "replicas 1, 3", for messages.
std::string ReplicaNames(const ReplicaList& replicas);
// The sorted union of two replica lists.
ReplicaList Union(const ReplicaList& a, const ReplicaList& b);

// Sites joining and leaving a running job (`longhaul job add-site`, `remove-site`).
//
// The plan with one more replica on `sites`, in that order: the model's `layers` split evenly
// among them (the first ones a layer more where they do not divide), or with `ends` (one per
// site) each site's stage ending at its layer (the planner's split), every stage of it with
// `microbatches` and the next flat indices. Errors name the site: none given, more sites than
// layers, a site named twice or running a stage of the job already (a removed replica's too:
// its stage stays in the plan), or ends that are not a split of the layers.
StatusOr<google::protobuf::RepeatedPtrField<v1::StageInfo>> PlanAddedReplica(
    const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
    const std::vector<std::string>& sites, int layers, uint32_t microbatches,
    const std::vector<int>& ends = {});
// A removed replica's sites named again (`longhaul job add-site`): that replica, which comes
// back as it was (its stages, layers and data shard kept in the plan) and rejoins from a live
// replica's state; -1 when no site given ran a stage of the job (a new replica:
// PlanAddedReplica). Errors name the site: one running a stage of a replica still in the job
// (one `dropped` sits out and rejoins by itself), one named twice, sites of two removed
// replicas, or a removed replica's sites named in part or beside others (its stages come back
// together or not at all: the message lists them).
StatusOr<int> ReturningReplica(const StageGrid& grid,
                               const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
                               const ReplicaList& dropped, const ReplicaList& removed,
                               const std::vector<std::string>& sites);
// The replicas leaving `sites` takes out for good: each site's replica, ascending. Errors
// name the site: not in the plan, its replica removed already, or no replica left that is
// neither dropped, rejoining nor leaving (the job would have no one to train it).
StatusOr<ReplicaList> ReplicasToRemove(
    const StageGrid& grid, const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
    const ReplicaList& dropped, const ReplicaList& rejoining, const ReplicaList& removed,
    const std::vector<std::string>& sites);

}  // namespace longhaul::daemon
