// How far apart gossip replicas are, estimated from sketches: the consensus distance of
// fleet/gossip.h (ConsensusDistance: the root mean square over replicas of the distance of
// each one's parameters from their mean; 0 when all are equal), which the fleet simulator
// computes exactly, from a count sketch of each replica's parameters (the daemons: each stage
// sends kConsensusSketchSize sums in its step report, not its parameters). The sketch is
// linear: every coordinate, named by its parameter slice and its index in the slice (so
// replicas split differently agree), adds into one bucket with a sign, both drawn from a hash
// of that name; a replica's sketch is the sum of its stages' (each slice counted once), and
// ||S(x - y)||^2 estimates ||x - y||^2 without bias, with a relative spread of about
// sqrt(2 / kConsensusSketchSize) (9%) for one difference, less over several replicas.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace longhaul::fleet {

inline constexpr int kConsensusSketchSize = 256;

// Adds slice `slice`'s values (coordinates 0.. of the slice) into `sketch`
// (kConsensusSketchSize long).
void AddToSketch(uint32_t slice, std::span<const float> values, std::span<double> sketch);

// The consensus distance estimated from each replica's sketch (same sizes): ConsensusDistance
// of the sketches; 0 for fewer than two.
double SketchConsensusDistance(const std::vector<std::vector<double>>& sketches);

}  // namespace longhaul::fleet
