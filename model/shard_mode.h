// How a data-parallel stage holds one parameter group (a layer, or a tensor outside the layers)
// across a site's devices (OSDP; the cost model is scheduler/shard_plan.h, the runtime
// model/replicated_fragment.h):
//   kReplicate  every device holds parameters, gradients and AdamW moments whole;
//   kZero1      the AdamW moments sharded (each device steps its part of the parameters);
//   kZero2      the gradients sharded too (reduce-scattered as each microbatch makes them);
//   kZero3      the parameters sharded too (gathered before each use, freed after).
#pragma once

#include <string>
#include <vector>

namespace longhaul::model {

enum class ShardMode { kReplicate = 0, kZero1, kZero2, kZero3 };
inline constexpr int kNumShardModes = 4;

// "replicate", "zero1", "zero2", "zero3".
const char* ShardModeName(ShardMode mode);

// "zero3 x 12, zero1 x 8": the modes in order of first appearance, with their counts.
std::string ModesSummary(const std::vector<ShardMode>& modes);

// Whether the mode shards the gradients (zero2, zero3) / the parameters (zero3).
inline bool ShardsGradients(ShardMode m) {
  return m == ShardMode::kZero2 || m == ShardMode::kZero3;
}
inline bool ShardsParameters(ShardMode m) { return m == ShardMode::kZero3; }

}  // namespace longhaul::model
