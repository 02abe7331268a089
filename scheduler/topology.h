// Generated site topologies for tests, the simulator and the scale study: random meshes, and
// realistic multi-region deployments whose inter-region round-trip times follow public
// cloud inter-region latency tables (11 regions on five continents, figures rounded) and
// whose per-flow bandwidth falls with distance, with sites of several GPU node kinds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/profiles.h"

namespace longhaul::scheduler {

struct RandomMeshOptions {
  int sites = 4;
  uint64_t seed = 1;
  double min_flops = 2e10, max_flops = 2e11;         // log-uniform per site
  double min_bandwidth = 1e7, max_bandwidth = 1e10;  // bytes/s, log-uniform per direction
  double min_rtt = 0.001, max_rtt = 0.15;            // seconds, uniform per pair
  int64_t memory_bytes = 0;                          // per site; 0 = no limit
};

// Sites "s0".."s{n-1}", every ordered pair linked; directions differ in bandwidth.
Profiles RandomMesh(const RandomMeshOptions& options);

struct RegionTopologyOptions {
  int sites = 8;
  uint64_t seed = 1;
  int regions = 11;  // how many of the built-in regions to spread the sites over (1..11)
  // Intra-region links between two sites (different datacenters of one region).
  double intra_bandwidth = 100e9 / 8, intra_rtt = 0.0015;
  // Inter-region per-flow bandwidth: uniform in [min, max], divided by (1 + rtt / 100 ms).
  double min_inter_bandwidth = 1e9 / 8, max_inter_bandwidth = 10e9 / 8;
};

// Sites named "<region>-<k>" (e.g. "euw1-2"), each a node of one of four kinds (8x H100,
// 8x A100 80 GB, 8x V100 32 GB, 4x L4): FLOP/s of the whole node, memory of one GPU (the
// stage is replicated on every GPU of the node by data parallelism).
Profiles RegionTopology(const RegionTopologyOptions& options);

// The same sites with every link set to the mean bandwidth and RTT of all links: the view of
// a planner that ignores the network (the scale study's bandwidth-oblivious baseline).
Profiles UniformLinks(const Profiles& profiles);

// Site names in profile order, and sorted by name (the scale study's naive order).
std::vector<std::string> SiteNames(const Profiles& profiles);
std::vector<std::string> SortedSiteNames(const Profiles& profiles);

}  // namespace longhaul::scheduler
