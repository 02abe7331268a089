// The per-group sharding search (scheduler/shard_plan.h): its groups cover the fragment, its
// memory is Fragment::EstimateMemory's for replication and the stage runner's ZeRO-1 replicas,
// its collective bytes are the ring formulas, and the knapsack finds what exhaustive search
// over every assignment finds, within the memory, or says what the stage needs.
#include "scheduler/shard_plan.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "model/fragment.h"
#include "model/layout.h"
#include "model/replicated_fragment.h"
#include "test/scheduler/test_util.h"

namespace longhaul::scheduler {
namespace {

using testing::SmallLlama;
using testing::SmallModel;

StageShape Shape(const model::ModelConfig& config, int begin, int end, int B = 8, int M = 4,
                 int slots = 2) {
  StageShape s;
  s.config = config;
  s.layer_begin = begin;
  s.layer_end = end;
  s.microbatch_size = B;
  s.seq_len = 32;
  s.microbatches = M;
  s.slots = slots;
  return s;
}

SiteDevices Devices(int count, int64_t memory = 0) {
  SiteDevices d;
  d.count = count;
  d.memory_bytes = memory;
  d.flops = 1e9;
  d.collective_bytes_per_second = 1e8;
  d.collective_latency_seconds = 1e-4;
  d.optimizer_params_per_second = 1e7;
  return d;
}

int64_t Sum(const std::vector<ShardGroup>& groups) {
  int64_t n = 0;
  for (const ShardGroup& g : groups) n += g.parameters;
  return n;
}

TEST_CASE("the groups cover the fragment: embeddings, one per layer, the head's tensors") {
  for (bool tied : {true, false}) {
    const auto llama = SmallLlama(6, tied);
    for (auto [b, e] : {std::pair{0, 6}, {0, 2}, {2, 4}, {4, 6}}) {
      auto groups = StageGroups(Shape(llama, b, e));
      REQUIRE(groups.ok());
      CHECK(Sum(*groups) == model::FragmentLayout(llama, b, e).total());
      int layers = 0;
      for (const ShardGroup& g : *groups) layers += g.name.rfind("layer ", 0) == 0;
      CHECK(layers == e - b);
      CHECK(((*groups)[0].name == "wte") == (b == 0));
    }
  }
  auto whole = StageGroups(Shape(SmallModel(4), 0, 4));
  REQUIRE(whole.ok());
  CHECK(Sum(*whole) == model::NumParameters(SmallModel(4)));
  CHECK(whole->front().name == "wte");
  CHECK(whole->at(1).name == "wpe");
  CHECK(whole->at(2).name == "layer 0");
}

TEST_CASE("replicated memory is the stage runner's estimate for each device's rows") {
  const auto config = SmallLlama(6, false);
  for (int D : {1, 2, 4}) {
    for (auto [b, e] : {std::pair{0, 3}, {3, 6}, {0, 6}}) {
      const StageShape s = Shape(config, b, e);
      auto plan = UniformSharding(s, Devices(D), ShardMode::kReplicate);
      REQUIRE(plan.ok());
      model::FragmentOptions fo;
      fo.begin = b, fo.end = e, fo.batch_size = 8 / D, fo.seq_len = 32, fo.slots = 2;
      INFO("D " << D << " layers " << b << ".." << e);
      CHECK(plan->estimate.peak_bytes ==
            model::ReplicatedFragment::EstimateMemory(config, fo, 1)[0].total());
      CHECK(plan->estimate.working_bytes == 0);
    }
  }
}

TEST_CASE("zero1 memory is the stage runner's sharded replica's, to a float per group") {
  const auto config = SmallModel(6);
  const StageShape s = Shape(config, 0, 3);
  const int64_t floats = model::FragmentLayout(config, 0, 3).total();
  for (int D : {2, 3, 4}) {
    auto plan = UniformSharding(s, Devices(D), ShardMode::kZero1);
    REQUIRE(plan.ok());
    model::FragmentOptions fo;
    fo.begin = 0, fo.end = 3, fo.batch_size = (8 + D - 1) / D, fo.seq_len = 32, fo.slots = 2;
    fo.optimizer_begin = 0;  // replica 0's part, the largest when D does not divide
    fo.optimizer_end = (floats + D - 1) / D;
    const int64_t runner = model::Fragment::EstimateMemory(config, fo).total() +
                           model::ReplicatedFragment::StagingBytes(config, fo);
    INFO("D " << D);
    CHECK(plan->estimate.peak_bytes >= runner);
    CHECK(plan->estimate.peak_bytes <= runner + 8 * int64_t(plan->groups.size()));
  }
}

TEST_CASE("every uniform mode's memory is the runtime's estimate a device, within 0.1%") {
  // The runtime's estimate (ReplicatedFragment::EstimateMemory) is what each device's measured
  // peak equals (replicated_fragment_test); the cost model prices the same buffers, its parts
  // rounded up per group where the runtime splits each layer's block (and the held tensors as
  // one range).
  for (const auto& config : {SmallModel(6), SmallLlama(6, false)}) {
    for (int D : {2, 4}) {
      for (auto [b, e] : {std::pair{0, 3}, {3, 6}, {0, 6}}) {
        for (int k = 0; k < kNumShardModes; ++k) {
          const ShardMode mode = ShardMode(k);
          const StageShape s = Shape(config, b, e);
          auto plan = UniformSharding(s, Devices(D), mode);
          REQUIRE(plan.ok());
          model::FragmentOptions fo;
          fo.begin = b, fo.end = e, fo.batch_size = 8, fo.seq_len = 32, fo.slots = 2;
          fo.layer_modes.assign(static_cast<size_t>(e - b), mode);
          const int64_t runtime =
              model::ReplicatedFragment::EstimateMemory(s.config, fo, D)[0].total();
          INFO(model::FamilyName(config.family)
               << " D " << D << " layers " << b << ".." << e << " " << ShardModeName(mode)
               << ": cost model " << plan->estimate.peak_bytes << ", runtime " << runtime);
          CHECK(std::fabs(double(plan->estimate.peak_bytes - runtime)) <= 1e-3 * runtime);
        }
      }
    }
  }
}

TEST_CASE("collective bytes are the ring formulas; one device sends nothing") {
  const StageShape s = Shape(SmallModel(4), 1, 3, 8, 5);
  auto groups = StageGroups(s);
  REQUIRE(groups.ok());
  const double P = double(Sum(*groups));
  const double ring = 3.0 / 4.0 * 4 * P;  // one reduce-scatter or all-gather over 4 devices
  const std::vector<std::pair<ShardMode, double>> want = {{ShardMode::kReplicate, 2 * ring},
                                                          {ShardMode::kZero1, 2 * ring},
                                                          {ShardMode::kZero2, 6 * ring},
                                                          {ShardMode::kZero3, 15 * ring}};
  for (const auto& [mode, bytes] : want) {
    auto plan = UniformSharding(s, Devices(4), mode);
    REQUIRE(plan.ok());
    INFO(ShardModeName(mode));
    CHECK(std::abs(plan->estimate.collective_bytes - bytes) <= 1e-6 * bytes);
    auto alone = UniformSharding(s, Devices(1), mode);
    REQUIRE(alone.ok());
    CHECK(alone->estimate.collective_bytes == 0);
    CHECK(alone->estimate.collective_seconds == 0);
  }
}

TEST_CASE("each mode holds less than the one before it, and sends at least as much") {
  const StageShape s = Shape(SmallLlama(8, false), 0, 8);
  ShardEstimate last;
  for (int k = 0; k < kNumShardModes; ++k) {
    auto plan = UniformSharding(s, Devices(4), ShardMode(k));
    REQUIRE(plan.ok());
    INFO(ShardModeName(ShardMode(k)));
    if (k > 0) {
      CHECK(plan->estimate.state_bytes < last.state_bytes);
      CHECK(plan->estimate.collective_bytes >= last.collective_bytes);
    }
    last = plan->estimate;
  }
}

TEST_CASE("without a memory limit, or on one device, nothing is sharded that need not be") {
  const StageShape s = Shape(SmallModel(4), 0, 4);
  auto one = ChooseSharding(s, Devices(1));
  REQUIRE(one.ok());
  CHECK(one->Summary() == "replicate x " + std::to_string(one->groups.size()));
  // The optimizer not priced: replication's one collective a group beats zero1's two.
  SiteDevices free_adam = Devices(4);
  free_adam.optimizer_params_per_second = 0;
  auto four = ChooseSharding(s, free_adam);
  REQUIRE(four.ok());
  CHECK(four->Summary() == "replicate x " + std::to_string(four->groups.size()));
  // A slow optimizer and fast collectives: zero1's shared step wins for every group.
  SiteDevices slow_adam = Devices(4);
  slow_adam.optimizer_params_per_second = 1e3;
  slow_adam.collective_latency_seconds = 0;
  auto z1 = ChooseSharding(s, slow_adam);
  REQUIRE(z1.ok());
  CHECK(z1->Summary() == "zero1 x " + std::to_string(z1->groups.size()));
}

// Every assignment of the (at most 4^6) modes, for the fastest that fits `memory`.
double Exhaustive(const StageShape& s, const SiteDevices& d, size_t groups, int64_t memory) {
  double best = INFINITY;
  std::vector<ShardMode> modes(groups);
  int64_t n = 1;
  for (size_t g = 0; g < groups; ++g) n *= kNumShardModes;
  for (int64_t code = 0; code < n; ++code) {
    int64_t c = code;
    for (size_t g = 0; g < groups; ++g) modes[g] = ShardMode(c % kNumShardModes), c /= 4;
    auto e = EvaluateSharding(s, d, modes);
    if (!e.ok()) continue;  // a tensor outside the layers beyond zero1
    if (e->peak_bytes <= memory) best = std::min(best, e->step_seconds());
  }
  return best;
}

TEST_CASE("the search finds exhaustive search's fastest plan within the memory") {
  // A first stage of 4 layers (wte, wpe and 4 layers: 6 groups), memory from all-zero3's need
  // up to replication's.
  const StageShape s = Shape(SmallModel(6), 0, 4, 8, 3);
  auto groups = StageGroups(s);
  REQUIRE(groups.ok());
  REQUIRE(groups->size() == 6);
  auto lo = UniformSharding(s, Devices(4), ShardMode::kZero3);
  auto hi = UniformSharding(s, Devices(4), ShardMode::kReplicate);
  REQUIRE(lo.ok());
  REQUIRE(hi.ok());
  const int64_t least = lo->estimate.peak_bytes, most = hi->estimate.peak_bytes;
  int checked = 0;
  for (int i = 0; i <= 12; ++i) {
    const int64_t memory = least + (most - least) * i / 12;
    auto plan = ChooseSharding(s, Devices(4, memory));
    INFO("memory " << memory << " (zero3 needs " << least << ", replication " << most << ")");
    REQUIRE(plan.ok());
    CHECK(plan->estimate.fits);
    CHECK(plan->estimate.peak_bytes <= memory);
    // Never faster than the optimum; as fast as the optimum of a budget smaller by the
    // search's rounding (1/65536 of the budget per group: under a 1/2000 of replication's
    // bytes for these 6 groups).
    const double exact = Exhaustive(s, Devices(4, memory), groups->size(), memory);
    const double rounded =
        Exhaustive(s, Devices(4, memory), groups->size(), memory - (memory - least) / 200);
    CHECK(plan->estimate.step_seconds() >= exact * (1 - 1e-12));
    CHECK(plan->estimate.step_seconds() <= rounded * (1 + 1e-12));
    ++checked;
  }
  CHECK(checked == 13);
}

TEST_CASE("only layers shard gradients and parameters, as the runtime does") {
  const StageShape s = Shape(SmallModel(6), 0, 4, 8, 3);  // wte, wpe, 4 layers
  auto groups = StageGroups(s);
  REQUIRE(groups.ok());
  std::vector<ShardMode> modes(groups->size(), ShardMode::kZero3);
  auto refused = EvaluateSharding(s, Devices(4), modes);
  REQUIRE_FALSE(refused.ok());
  CHECK_THAT(std::string(refused.status().message()), Catch::Contains("wte cannot be zero3"));
  auto all = UniformSharding(s, Devices(4), ShardMode::kZero3);
  REQUIRE(all.ok());
  CHECK(all->Summary() == "zero1 x 2, zero3 x 4");
  // However short the memory, the search keeps wte and wpe at zero1 or less.
  auto tight = ChooseSharding(s, Devices(4, all->estimate.peak_bytes));
  REQUIRE(tight.ok());
  for (size_t g = 0; g < tight->groups.size(); ++g) {
    INFO(tight->groups[g].name);
    CHECK(int(tight->modes[g]) <= int(tight->groups[g].most()));
  }
}

TEST_CASE("a stage that does not fit replicated is sharded to fit, as little as it can") {
  const StageShape s = Shape(SmallLlama(8, false), 2, 8);
  auto hi = UniformSharding(s, Devices(4), ShardMode::kReplicate);
  REQUIRE(hi.ok());
  const int64_t memory = hi->estimate.peak_bytes * 7 / 10;
  auto plan = ChooseSharding(s, Devices(4, memory));
  REQUIRE(plan.ok());
  CHECK(plan->estimate.peak_bytes <= memory);
  CHECK(plan->Summary() != "replicate x 6");
  // It beats sharding everything (the cheapest in memory, the dearest in collectives).
  auto all = UniformSharding(s, Devices(4, memory), ShardMode::kZero3);
  REQUIRE(all.ok());
  CHECK(plan->estimate.step_seconds() < all->estimate.step_seconds());
}

TEST_CASE("a stage that fits nowhere is refused, naming what it needs") {
  const StageShape s = Shape(SmallModel(4), 0, 4);
  auto plan = ChooseSharding(s, Devices(2, 1));
  REQUIRE(!plan.ok());
  CHECK(plan.status().code() == absl::StatusCode::kFailedPrecondition);
  const std::string message(plan.status().message());
  INFO(message);
  const size_t at = message.find("needs at least ");
  REQUIRE(at != std::string::npos);
  const int64_t need = std::stoll(message.substr(at + 15));
  // No plan needs less: not even all-zero3 (whose working set may outweigh what it saves).
  for (int k = 0; k < kNumShardModes; ++k) {
    auto uniform = UniformSharding(s, Devices(2), ShardMode(k));
    REQUIRE(uniform.ok());
    CHECK(uniform->estimate.peak_bytes >= need);
  }
  auto just = ChooseSharding(s, Devices(2, need));
  REQUIRE(just.ok());
  CHECK(just->estimate.peak_bytes == need);
  CHECK(!ChooseSharding(s, Devices(2, need - 1)).ok());
}

TEST_CASE("bad shapes and devices are refused, naming the field") {
  const StageShape s = Shape(SmallModel(4), 0, 4);
  SiteDevices d = Devices(0);
  CHECK_THAT(std::string(ChooseSharding(s, d).status().message()), Catch::Contains("count 0"));
  d = Devices(2);
  d.flops = 0;
  CHECK_THAT(std::string(ChooseSharding(s, d).status().message()), Catch::Contains("flops"));
  d = Devices(2);
  d.collective_bytes_per_second = 0;
  CHECK_THAT(std::string(ChooseSharding(s, d).status().message()),
             Catch::Contains("collective_bytes_per_second"));
  d = Devices(2, -1);
  CHECK_THAT(std::string(ChooseSharding(s, d).status().message()), Catch::Contains("memory_bytes"));
  StageShape bad = s;
  bad.layer_end = 5;
  CHECK_THAT(std::string(ChooseSharding(bad, Devices(2)).status().message()),
             Catch::Contains("layers [0, 5)"));
  bad = s;
  bad.microbatches = 0;
  CHECK_THAT(std::string(ChooseSharding(bad, Devices(2)).status().message()),
             Catch::Contains("microbatches 0"));
  bad = s;
  bad.seq_len = 1000;
  CHECK_THAT(std::string(ChooseSharding(bad, Devices(2)).status().message()),
             Catch::Contains("seq_len 1000"));
  auto groups = StageGroups(s);
  REQUIRE(groups.ok());
  CHECK_THAT(std::string(EvaluateSharding(s, Devices(2), {ShardMode::kZero1}).status().message()),
             Catch::Contains("1 modes for a stage of"));
}

}  // namespace
}  // namespace longhaul::scheduler
