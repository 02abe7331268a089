// Per-group sharding of a stage across a site's devices: the cost model and the knapsack search
// (shard_plan.h).
#include "scheduler/shard_plan.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "model/fragment.h"
#include "model/layout.h"
#include "model/replicated_fragment.h"
#include "scheduler/profiles.h"

namespace longhaul::scheduler {
namespace {

constexpr int64_t kFloat = 4;
// Memory is quantised to 1/kBuckets of the budget in the search (rounded up, so plans fit).
constexpr int64_t kBuckets = 65536;

Status CheckShape(const StageShape& s) {
  RETURN_IF_ERROR(Annotate(model::ValidateConfig(s.config), "stage shape: model"));
  const int L = s.config.num_layers;
  if (s.layer_begin < 0 || s.layer_begin >= s.layer_end || s.layer_end > L) {
    return absl::InvalidArgumentError(absl::StrCat("stage shape: layers [", s.layer_begin, ", ",
                                                   s.layer_end, ") are not a range of the ", L,
                                                   " layers"));
  }
  if (s.microbatch_size < 1 || s.microbatches < 1 || s.slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage shape: microbatch_size ", s.microbatch_size, ", microbatches ",
                     s.microbatches, " and slots ", s.slots, " must each be at least 1"));
  }
  if (s.seq_len < 1 || s.seq_len > s.config.max_seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("stage shape: seq_len ", s.seq_len,
                                                   " is outside [1, ", s.config.max_seq_len,
                                                   "] (the model's context)"));
  }
  return Status();
}

Status CheckDevices(const SiteDevices& d) {
  if (d.count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("site devices: count ", d.count, " must be at least 1"));
  }
  if (d.memory_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat("site devices: memory_bytes ", d.memory_bytes,
                                                   " is negative (0 means no limit)"));
  }
  if (!(d.flops > 0) || !std::isfinite(d.flops)) {
    return absl::InvalidArgumentError(
        absl::StrCat("site devices: flops ", d.flops, " must be a positive number"));
  }
  if (d.count > 1 &&
      (!(d.collective_bytes_per_second > 0) || !std::isfinite(d.collective_bytes_per_second))) {
    return absl::InvalidArgumentError(absl::StrCat("site devices: collective_bytes_per_second ",
                                                   d.collective_bytes_per_second,
                                                   " must be positive for ", d.count, " devices"));
  }
  if (!(d.collective_latency_seconds >= 0) || !std::isfinite(d.collective_latency_seconds) ||
      !(d.optimizer_params_per_second >= 0) || !std::isfinite(d.optimizer_params_per_second)) {
    return absl::InvalidArgumentError(
        absl::StrCat("site devices: collective_latency_seconds ", d.collective_latency_seconds,
                     " and optimizer_params_per_second ", d.optimizer_params_per_second,
                     " must be finite and not negative"));
  }
  return Status();
}

int RowsPerDevice(const StageShape& s, const SiteDevices& d) {
  return std::max(1, (s.microbatch_size + d.count - 1) / d.count);
}

int64_t ShardOf(int64_t n, int devices) { return (n + devices - 1) / devices; }

// Bytes one device holds for a group of `p` parameters.
int64_t StateBytes(ShardMode mode, int64_t p, int devices) {
  const int64_t part = ShardOf(p, devices);
  switch (mode) {
    case ShardMode::kReplicate:
      return 4 * kFloat * p;
    case ShardMode::kZero1:
      return 2 * kFloat * p + 2 * kFloat * part;
    case ShardMode::kZero2:
      return kFloat * p + 3 * kFloat * part;
    case ShardMode::kZero3:
      return 4 * kFloat * part;
  }
  return 0;
}

// The working set of the sharded modes: the whole gradient of the largest group whose
// gradients are sharded (zero2, zero3), before its reduce-scatter; the gathered parameters of
// the largest zero3 group in use and of the next one, prefetched.
int64_t WorkingBytes(int64_t largest_sharded_gradients, int64_t largest_zero3) {
  return kFloat * largest_sharded_gradients + 2 * kFloat * largest_zero3;
}

// A group's collectives for one step: bytes each device sends, and how many collectives.
void Collectives(ShardMode mode, int64_t p, int devices, int microbatches, double* bytes,
                 int64_t* count) {
  *bytes = 0;
  *count = 0;
  if (devices <= 1) return;
  const double ring = double(devices - 1) / devices * double(kFloat * p);  // one RS or AG
  const int64_t M = microbatches;
  switch (mode) {
    case ShardMode::kReplicate:  // one all-reduce
      *bytes = 2 * ring, *count = 1;
      break;
    case ShardMode::kZero1:  // reduce-scatter, all-gather
      *bytes = 2 * ring, *count = 2;
      break;
    case ShardMode::kZero2:  // a reduce-scatter per microbatch, one all-gather
      *bytes = double(M + 1) * ring, *count = M + 1;
      break;
    case ShardMode::kZero3:  // two all-gathers and a reduce-scatter per microbatch
      *bytes = 3.0 * double(M) * ring, *count = 3 * M;
      break;
  }
}

// One group's share of the step: optimizer and collective seconds, collective bytes.
struct GroupCost {
  int64_t bytes = 0;
  double optimizer_seconds = 0, collective_seconds = 0, collective_bytes = 0;
  double seconds() const { return optimizer_seconds + collective_seconds; }
};

GroupCost PriceGroup(ShardMode mode, int64_t p, const StageShape& s, const SiteDevices& d) {
  GroupCost c;
  c.bytes = StateBytes(mode, p, d.count);
  const int64_t stepped = mode == ShardMode::kReplicate ? p : ShardOf(p, d.count);
  if (d.optimizer_params_per_second > 0) {
    c.optimizer_seconds = double(stepped) / d.optimizer_params_per_second;
  }
  int64_t count = 0;
  Collectives(mode, p, d.count, s.microbatches, &c.collective_bytes, &count);
  if (count > 0) {
    c.collective_seconds = c.collective_bytes / d.collective_bytes_per_second +
                           double(count) * d.collective_latency_seconds;
  }
  return c;
}

// What does not depend on the modes: activations, shared buffers, the tied peer gradient.
int64_t FixedBytes(const StageShape& s, const SiteDevices& d) {
  model::FragmentOptions fo;
  fo.begin = s.layer_begin;
  fo.end = s.layer_end;
  fo.batch_size = RowsPerDevice(s, d);
  fo.seq_len = s.seq_len;
  fo.slots = s.slots;
  const model::MemoryReport r = model::Fragment::EstimateMemory(s.config, fo);
  const int64_t floats = model::FragmentLayout(s.config, s.layer_begin, s.layer_end).total();
  return r.activations_per_slot * r.slots + r.shared + (r.gradients - kFloat * floats) +
         model::ReplicatedFragment::StagingBytes(s.config, fo);
}

double ComputeSeconds(const StageShape& s, const SiteDevices& d) {
  const int rows = RowsPerDevice(s, d);
  double forward =
      double(s.layer_end - s.layer_begin) * LayerForwardFlops(s.config, rows, s.seq_len);
  if (s.layer_end == s.config.num_layers) forward += HeadForwardFlops(s.config, rows, s.seq_len);
  return double(s.microbatches) * (1 + kBackwardFlopsFactor) * forward / d.flops;
}

// Every group priced in every mode: what the estimate and the search read.
using Prices = std::vector<std::array<GroupCost, kNumShardModes>>;

Prices PriceGroups(const StageShape& s, const SiteDevices& d,
                   const std::vector<ShardGroup>& groups) {
  Prices prices(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int k = 0; k < kNumShardModes; ++k) {
      prices[g][k] = PriceGroup(ShardMode(k), groups[g].parameters, s, d);
    }
  }
  return prices;
}

ShardEstimate Estimate(const SiteDevices& d, const std::vector<ShardGroup>& groups,
                       const Prices& prices, const std::vector<ShardMode>& modes, int64_t fixed,
                       double compute) {
  ShardEstimate e;
  e.fixed_bytes = fixed;
  e.compute_seconds = compute;
  int64_t largest_zero3 = 0, largest_sharded = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    const GroupCost& c = prices[g][int(modes[g])];
    e.state_bytes += c.bytes;
    e.optimizer_seconds += c.optimizer_seconds;
    e.collective_seconds += c.collective_seconds;
    e.collective_bytes += c.collective_bytes;
    if (modes[g] == ShardMode::kZero3) {
      largest_zero3 = std::max(largest_zero3, groups[g].parameters);
    }
    if (ShardsGradients(modes[g])) {
      largest_sharded = std::max(largest_sharded, groups[g].parameters);
    }
  }
  e.working_bytes = WorkingBytes(largest_sharded, largest_zero3);
  e.peak_bytes = e.state_bytes + e.fixed_bytes + e.working_bytes;
  e.fits = d.memory_bytes == 0 || e.peak_bytes <= d.memory_bytes;
  return e;
}

// Which modes a group may take when the largest group with sharded gradients has at most
// `sharded_max` parameters and the largest zero3 group at most `zero3_max`.
struct Limits {
  int64_t sharded_max = 0, zero3_max = 0;
  bool Allows(const ShardGroup& g, ShardMode m) const {
    if (int(m) > int(g.most())) return false;
    if (m == ShardMode::kZero3 && g.parameters > zero3_max) return false;
    return !ShardsGradients(m) || g.parameters <= sharded_max;
  }
};

// The least memory each group can take within `limits`.
std::vector<ShardMode> LeastMemory(const std::vector<ShardGroup>& groups, const Prices& prices,
                                   const Limits& limits) {
  std::vector<ShardMode> modes(groups.size(), ShardMode::kReplicate);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int k = 1; k < kNumShardModes; ++k) {
      if (limits.Allows(groups[g], ShardMode(k)) &&
          prices[g][k].bytes < prices[g][int(modes[g])].bytes) {
        modes[g] = ShardMode(k);
      }
    }
  }
  return modes;
}

// The fastest modes within `budget` bytes of state (no limit when budget < 0) and `limits`;
// false when nothing fits.
bool Knapsack(const std::vector<ShardGroup>& groups, const Prices& prices, int64_t budget,
              const Limits& limits, std::vector<ShardMode>* modes) {
  const size_t G = groups.size();
  modes->assign(G, ShardMode::kReplicate);
  auto allowed = [&](size_t g, int k) { return limits.Allows(groups[g], ShardMode(k)); };
  if (budget < 0) {  // no limit: each group on its own
    for (size_t g = 0; g < G; ++g) {
      double best = std::numeric_limits<double>::infinity();
      for (int k = 0; k < kNumShardModes; ++k) {
        if (!allowed(g, k)) continue;
        const double t = prices[g][k].seconds();
        if (t < best) best = t, (*modes)[g] = ShardMode(k);
      }
    }
    return true;
  }
  const int64_t quantum = std::max<int64_t>(1, (budget + kBuckets - 1) / kBuckets);
  const int64_t W = budget / quantum;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> best(static_cast<size_t>(W) + 1, inf), next(best.size());
  best[0] = 0;
  // choice[g * (W + 1) + w]: group g's mode on the best path to weight w after group g.
  std::vector<uint8_t> choice(G * best.size(), 0);
  for (size_t g = 0; g < G; ++g) {
    std::fill(next.begin(), next.end(), inf);
    for (int k = 0; k < kNumShardModes; ++k) {
      if (!allowed(g, k)) continue;
      const int64_t weight = (prices[g][k].bytes + quantum - 1) / quantum;
      if (weight > W) continue;
      const double t = prices[g][k].seconds();
      for (int64_t w = weight; w <= W; ++w) {
        const double candidate = best[static_cast<size_t>(w - weight)] + t;
        if (candidate < next[static_cast<size_t>(w)]) {
          next[static_cast<size_t>(w)] = candidate;
          choice[g * best.size() + static_cast<size_t>(w)] = static_cast<uint8_t>(k);
        }
      }
    }
    best.swap(next);
  }
  int64_t at = -1;
  for (int64_t w = 0; w <= W; ++w) {
    if (best[static_cast<size_t>(w)] < inf &&
        (at < 0 || best[static_cast<size_t>(w)] < best[static_cast<size_t>(at)])) {
      at = w;
    }
  }
  if (at < 0) return false;
  for (size_t g = G; g-- > 0;) {
    const int k = choice[g * best.size() + static_cast<size_t>(at)];
    (*modes)[g] = ShardMode(k);
    at -= (prices[g][k].bytes + quantum - 1) / quantum;
  }
  return true;
}

}  // namespace

std::string ShardPlan::Summary() const { return model::ModesSummary(modes); }

StatusOr<std::vector<ShardGroup>> StageGroups(const StageShape& shape) {
  RETURN_IF_ERROR(CheckShape(shape));
  const model::FragmentLayout layout(shape.config, shape.layer_begin, shape.layer_end);
  const model::ParameterLayout& whole = layout.model();
  std::vector<ShardGroup> groups;
  auto others = [&](bool before_layers) {
    for (int t = 0; t < model::kNumTensors; ++t) {
      const auto tensor = static_cast<model::Tensor>(t);
      if (model::IsPerLayer(tensor) || !layout.has(tensor)) continue;
      const bool input =
          tensor == model::Tensor::kWte ? layout.is_first() : tensor == model::Tensor::kWpe;
      if (input != before_layers) continue;
      groups.push_back({model::TensorName(tensor), layout.size(tensor)});
    }
  };
  others(true);
  for (int l = shape.layer_begin; l < shape.layer_end; ++l) {
    ShardGroup g{absl::StrCat("layer ", l), 0, /*layer=*/true};
    for (int t = 0; t < model::kNumTensors; ++t) {
      const auto tensor = static_cast<model::Tensor>(t);
      if (model::IsPerLayer(tensor) && layout.has(tensor))
        g.parameters += whole.slice_size(tensor, l);
    }
    groups.push_back(g);
  }
  others(false);
  return groups;
}

StatusOr<ShardEstimate> EvaluateSharding(const StageShape& shape, const SiteDevices& devices,
                                         const std::vector<ShardMode>& modes) {
  RETURN_IF_ERROR(CheckDevices(devices));
  ASSIGN_OR_RETURN(const std::vector<ShardGroup> groups, StageGroups(shape));
  if (modes.size() != groups.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sharding: ", modes.size(), " modes for a stage of ", groups.size(), " parameter groups"));
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    if (int(modes[g]) > int(groups[g].most())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sharding: ", groups[g].name, " cannot be ", ShardModeName(modes[g]), " (at most ",
          ShardModeName(groups[g].most()), ": only layers shard gradients and parameters)"));
    }
  }
  return Estimate(devices, groups, PriceGroups(shape, devices, groups), modes,
                  FixedBytes(shape, devices), ComputeSeconds(shape, devices));
}

StatusOr<ShardPlan> UniformSharding(const StageShape& shape, const SiteDevices& devices,
                                    ShardMode mode) {
  RETURN_IF_ERROR(CheckDevices(devices));
  ShardPlan plan;
  ASSIGN_OR_RETURN(plan.groups, StageGroups(shape));
  for (const ShardGroup& g : plan.groups) {
    plan.modes.push_back(int(mode) > int(g.most()) ? g.most() : mode);
  }
  plan.estimate = Estimate(devices, plan.groups, PriceGroups(shape, devices, plan.groups),
                           plan.modes, FixedBytes(shape, devices), ComputeSeconds(shape, devices));
  return plan;
}

SiteDevices NominalCpuDevices(int count, int64_t memory_bytes) {
  SiteDevices d;
  d.count = count;
  d.memory_bytes = memory_bytes;
  d.flops = 1e11;
  d.collective_bytes_per_second = 1e10;
  d.collective_latency_seconds = 1e-5;
  d.optimizer_params_per_second = 1e9;
  return d;
}

StatusOr<int64_t> LeastShardedBytes(const StageShape& shape, int count) {
  const SiteDevices d = NominalCpuDevices(count, 0);
  int64_t least = -1;
  for (int k = 0; k < kNumShardModes; ++k) {
    ASSIGN_OR_RETURN(const ShardPlan plan, UniformSharding(shape, d, ShardMode(k)));
    if (least < 0 || plan.estimate.peak_bytes < least) least = plan.estimate.peak_bytes;
  }
  return least;
}

StatusOr<ShardPlan> ChooseSharding(const StageShape& shape, const SiteDevices& devices) {
  RETURN_IF_ERROR(CheckDevices(devices));
  ShardPlan best;
  ASSIGN_OR_RETURN(best.groups, StageGroups(shape));
  const int64_t fixed = FixedBytes(shape, devices);
  const double compute = ComputeSeconds(shape, devices);
  const Prices prices = PriceGroups(shape, devices, best.groups);
  // The working set depends on the largest groups in the sharded modes: one search for each
  // candidate pair of limits (none, or a group's size; a handful of distinct sizes).
  std::vector<int64_t> sizes = {0};
  for (const ShardGroup& g : best.groups) sizes.push_back(g.parameters);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  bool found = false;
  ShardPlan least;  // the plan of least memory seen, for the error
  auto consider = [&](std::vector<ShardMode> modes) {
    const ShardEstimate e = Estimate(devices, best.groups, prices, modes, fixed, compute);
    if (least.modes.empty() || e.peak_bytes < least.estimate.peak_bytes) {
      least.modes = modes;
      least.estimate = e;
    }
    if (!e.fits) return;
    if (!found || e.step_seconds() < best.estimate.step_seconds() ||
        (e.step_seconds() == best.estimate.step_seconds() &&
         e.peak_bytes < best.estimate.peak_bytes)) {
      best.modes = std::move(modes);
      best.estimate = e;
      found = true;
    }
  };
  for (const int64_t sharded_max : sizes) {
    for (const int64_t zero3_max : sizes) {
      if (zero3_max > sharded_max) break;
      const Limits limits{sharded_max, zero3_max};
      // The least memory within these limits: found even where the search's rounding of
      // memory would miss a plan that fits to the byte.
      consider(LeastMemory(best.groups, prices, limits));
      int64_t budget = -1;  // no limit
      if (devices.memory_bytes > 0) {
        budget = devices.memory_bytes - fixed - WorkingBytes(sharded_max, zero3_max);
        if (budget < 0) continue;
      }
      std::vector<ShardMode> modes;
      if (Knapsack(best.groups, prices, budget, limits, &modes)) consider(modes);
    }
  }
  if (!found) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage of layers [", shape.layer_begin, ", ", shape.layer_end, ") needs at least ",
        least.estimate.peak_bytes, " bytes a device sharded over ", devices.count, " devices (",
        least.Summary(), "; ", least.estimate.fixed_bytes,
        " bytes of it activations and buffers); a device has ", devices.memory_bytes));
  }
  return best;
}

}  // namespace longhaul::scheduler
