// How one stage's tensors are held across a site's devices, chosen per tensor by cost (OSDP).
//
// Inside a site a stage runs data parallel: each device takes its rows of every microbatch.
// Each of the stage's parameter groups (one per transformer layer, one per other tensor: the
// token embedding, the position embedding, the final norm, the untied head) is held in one of
// four ways:
//   replicate  every device holds parameters, gradients and AdamW moments whole; the
//              gradients are all-reduced once a step;
//   zero1      the AdamW moments sharded (each device steps its 1/D of the parameters): a
//              reduce-scatter of the gradients and an all-gather of the stepped parameters;
//   zero2      the gradients sharded too: each microbatch's gradients reduce-scattered as
//              they are made (M reduce-scatters a step), one all-gather after the step;
//   zero3      the parameters sharded too: gathered before the forward and again before the
//              backward of each microbatch, gradients reduce-scattered (3M collectives).
// Each mode trades memory for collective bytes. The cost model prices, per device: the bytes
// each group holds (fp32: 4 bytes per parameter, gradient and moment), the activations and
// shared buffers model::Fragment::EstimateMemory gives for the device's rows (mode
// independent; and the replica's staging buffer for received tensors), the sharded modes' working
// set (the whole gradient of the largest zero2 or zero3 group before its reduce-scatter, and the
// gathered parameters of the largest zero3 group in use and of the next one prefetched: 4 and 8
// bytes a parameter); the compute of M microbatches of the device's rows (profiles.h's FLOP
// conventions), each group's AdamW step, and each group's collectives as ring collectives
// ((D-1)/D of the bytes per device for a reduce-scatter or an all-gather, twice that for an
// all-reduce) at the devices' collective bandwidth plus a latency each. Collectives are not
// assumed to overlap compute: the step is compute + optimizer + collectives, an upper bound
// where prefetching hides some.
//
// ChooseSharding finds the modes that minimise that step time within the devices' memory: a
// multiple-choice knapsack over the groups (exact over memory quantised up to 1/65536 of the
// budget, so every plan it returns fits), once for each candidate size of the largest sharded
// groups (which sets the working set), beside the plan of least memory within the same limits
// (so that a stage that fits only to the byte is still found).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"
#include "model/shard_mode.h"

namespace longhaul::scheduler {

using model::kNumShardModes;
using model::ShardMode;
using model::ShardModeName;

// A site's devices, as one stage sees them.
struct SiteDevices {
  int count = 1;
  int64_t memory_bytes = 0;  // what one device may hold; 0 = no limit
  double flops = 0;          // sustained FLOP/s of one device on the layer shapes; > 0
  // Ring bus bandwidth: bytes a second each device sends (and receives) in a collective;
  // > 0 where count > 1.
  double collective_bytes_per_second = 0;
  double collective_latency_seconds = 0;  // added per collective
  // AdamW parameter updates a second on one device; 0 = the optimizer step is not priced.
  double optimizer_params_per_second = 0;
};

// One stage: layers [layer_begin, layer_end) of `config`, M microbatches of B sequences of T
// tokens a step, `slots` microbatches' activations held at once (the 1F1B warm-ups + 1).
struct StageShape {
  model::ModelConfig config;
  int layer_begin = 0, layer_end = 0;
  int microbatch_size = 1;  // B: the devices split its rows
  int seq_len = 1;          // T
  int microbatches = 1;     // M
  int slots = 1;
};

// A parameter group: a layer ("layer 7") or a tensor outside the layers ("wte").
struct ShardGroup {
  std::string name;
  int64_t parameters = 0;
  // A transformer layer. The runtime (model/replicated_fragment.h) shards the gradients and
  // parameters (zero2, zero3) of layers only: a tensor outside them is replicated or zero1.
  bool layer = false;
  ShardMode most() const { return layer ? ShardMode::kZero3 : ShardMode::kZero1; }
};

struct ShardEstimate {
  bool fits = false;          // peak_bytes <= the devices' memory (always, without a limit)
  int64_t peak_bytes = 0;     // per device
  int64_t state_bytes = 0;    // of which parameters, gradients and moments
  int64_t fixed_bytes = 0;    // of which activations, shared buffers and the tied peer gradient
  int64_t working_bytes = 0;  // of which the sharded modes' working set
  double compute_seconds = 0, optimizer_seconds = 0, collective_seconds = 0;
  double collective_bytes = 0;  // sent per device per step
  double step_seconds() const { return compute_seconds + optimizer_seconds + collective_seconds; }
};

struct ShardPlan {
  std::vector<ShardGroup> groups;
  std::vector<ShardMode> modes;  // one per group
  ShardEstimate estimate;
  // "zero3 x 12, zero2 x 8" in group order of first appearance.
  std::string Summary() const;
};

// A site's CPU devices as the cost model sees them: nominal figures (100 GFLOP/s, collectives
// at 10 GB/s, memory copies, 10 us each, 1e9 AdamW updates a second), since they share the
// machine's cores and memory and what decides between plans there is memory.
SiteDevices NominalCpuDevices(int count, int64_t memory_bytes);

// The least bytes a device needs for the stage on `count` devices: the smallest peak of the
// uniform plans (every group in one mode, capped at its most()). The planner's test of whether
// a stage fits a site with several devices (cost_model.h).
StatusOr<int64_t> LeastShardedBytes(const StageShape& shape, int count);

// The stage's parameter groups, in the fragment's order. Errors name the bad field.
StatusOr<std::vector<ShardGroup>> StageGroups(const StageShape& shape);

// The cost of holding the groups as `modes` says (one mode per group of StageGroups, none
// beyond the group's most()).
StatusOr<ShardEstimate> EvaluateSharding(const StageShape& shape, const SiteDevices& devices,
                                         const std::vector<ShardMode>& modes);

// Every group in `mode`, or its most() where that is less.
StatusOr<ShardPlan> UniformSharding(const StageShape& shape, const SiteDevices& devices,
                                    ShardMode mode);

// The fastest modes that fit the devices' memory; FailedPrecondition naming the stage, the
// least memory it needs (and how it is sharded then) and the devices' memory when nothing
// fits.
StatusOr<ShardPlan> ChooseSharding(const StageShape& shape, const SiteDevices& devices);

}  // namespace longhaul::scheduler
