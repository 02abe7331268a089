// Consensus distance from sketches (consensus_sketch.h).
#include "fleet/consensus_sketch.h"

#include "common/splitmix64.h"
#include "fleet/gossip.h"

namespace longhaul::fleet {

void AddToSketch(uint32_t slice, std::span<const float> values, std::span<double> sketch) {
  const uint64_t base = static_cast<uint64_t>(slice) << 40;
  for (size_t j = 0; j < values.size(); ++j) {
    const uint64_t h = SplitMix64(base | j).Next();  // the coordinate's bucket and sign
    const double v = values[j];
    sketch[h % kConsensusSketchSize] += (h >> 32) & 1 ? v : -v;
  }
}

double SketchConsensusDistance(const std::vector<std::vector<double>>& sketches) {
  return sketches.size() < 2 ? 0.0 : ConsensusDistance(sketches);
}

}  // namespace longhaul::fleet
