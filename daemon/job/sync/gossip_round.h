// The replica-level graph of a gossip round in the daemons (sync.reduce: gossip): what every
// stage of a job computes alike, the sender to choose its out-neighbours and the receiver to
// know whom it hears from (and to refuse a frame from anyone else).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "daemon/job/spec/stage_grid.h"
#include "fleet/gossip.h"
#include "fleet/sync_options.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

// The round of the sync after `step` (0-based): how many syncs came before it, one every
// `every` steps and one after the job's last step.
uint64_t GossipRoundOf(const fleet::SyncOptions& sync, uint64_t step);

// That round's graph over the replicas, drawn from the job's `seed` (fleet::ChooseGossipGraph):
// out-neighbours with probability proportional to `links`, the attempt's measured bandwidth
// between the replicas (StageAssignment.gossip_links: row-major, replicas x replicas), or every
// link alike when `links` is empty; a dropped replica's links down. `live`: by replica.
fleet::GossipGraph GossipRoundGraph(const fleet::SyncOptions& sync, const std::vector<bool>& live,
                                    uint64_t seed, uint64_t step,
                                    const std::vector<double>& links = {});

// The measured link matrix a gossip attempt draws its graphs from (StageAssignment.gossip_links),
// replicas x replicas, row-major. Link r -> q is the slowest link from a stage of r to a stage of
// q it sends sync frames to (the same layers, or both first, or both last), since r's round
// waits for every one of them; two such stages on one site do not limit it, and a pair with no
// limit at all gets the fastest link of the matrix. `bandwidth(from, to)`: a site link's
// measured bytes per second, 0 when unknown. Empty when a link a live pair needs is unknown:
// the graphs then count every link alike. A dropped replica's row and column are 0.
std::vector<double> GossipLinkMatrix(
    const StageGrid& grid, const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
    const std::vector<bool>& live,
    const std::function<double(const std::string& from, const std::string& to)>& bandwidth);

// "0->1 1000, 0->2 10, ..." (Mbit/s) for the log: each live link of a GossipLinkMatrix.
std::string GossipLinksDebugString(const std::vector<double>& links);

// Whether `links` is a matrix GossipRoundGraph can draw from for `replicas`: empty, or
// replicas x replicas finite values >= 0. An error naming the entry otherwise.
Status CheckGossipLinks(const google::protobuf::RepeatedField<double>& links, int replicas);

}  // namespace longhaul::daemon
