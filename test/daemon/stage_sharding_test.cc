// How a stage's layers are held across a site's CPU devices (daemon/job/stage/stage_sharding.h):
// the job's mode for every layer; auto: zero1 where it fits, else the cost model's choice, which
// fits the site's memory; a stage that fits neither replicated nor zero1 then trains sharded,
// its measured bytes the prediction's and its losses the replicated run's.
#include "daemon/job/stage/stage_sharding.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/ops.h"
#include "model/replicated_fragment.h"

namespace longhaul::daemon {
namespace {

using model::ShardMode;

constexpr int kDevices = 4, kB = 4, kT = 16;

// Eight layers of 64 channels: the layers are most of the state, a small vocabulary.
model::ModelConfig Config() { return model::MakeConfig(8, 64, 4, 256, 32); }

model::FragmentOptions Stage() {
  model::FragmentOptions o;
  o.begin = 0;
  o.end = 8;
  o.batch_size = kB;
  o.seq_len = kT;
  o.slots = 1;
  return o;
}

int64_t Bytes(ShardMode mode) {
  model::FragmentOptions o = Stage();
  o.layer_modes.assign(8, mode);
  return CpuReplicaBytes(Config(), o, kDevices);
}

// Trains 3 steps of 2 microbatches on kDevices cpu-ref devices with these layer modes; the
// losses, and the devices' peak bytes added up.
std::vector<float> Train(const std::vector<ShardMode>& modes, int64_t* peak) {
  std::vector<std::unique_ptr<kernels::Ops>> owned;
  std::vector<kernels::Ops*> ops;
  for (int i = 0; i < kDevices; ++i) {
    owned.push_back(*kernels::MakeOps("cpu-ref", 1));
    ops.push_back(owned.back().get());
  }
  model::FragmentOptions o = Stage();
  o.layer_modes = modes;
  auto f = model::ReplicatedFragment::Create(Config(), o, ops);
  REQUIRE(f.ok());
  (*f)->InitParameters(3);
  model::OptimizerOptions opt;
  std::vector<float> losses;
  for (int step = 1; step <= 3; ++step) {
    (*f)->ZeroGrads();
    double loss = 0;
    for (int mb = 0; mb < 2; ++mb) {
      std::vector<int32_t> in(kB * kT), tg(kB * kT);
      for (int i = 0; i < kB * kT; ++i) {
        in[i] = (i * 31 + step * 7 + mb) % 256;
        tg[i] = (i * 31 + step * 7 + mb + 1) % 256;
      }
      REQUIRE((*f)->Forward(0, in.data(), nullptr).ok());
      auto l = (*f)->Loss(0, tg.data());
      REQUIRE(l.ok());
      loss += *l / 2;
      REQUIRE((*f)->Backward(0, nullptr, 1.0f / (kB * kT * 2)).ok());
    }
    REQUIRE((*f)->ReduceGradients().ok());
    (*f)->CombineTiedGrads();
    REQUIRE((*f)->Step(opt, 1e-3f, 1.0f, step).ok());
    losses.push_back(static_cast<float>(loss));
  }
  *peak = 0;
  for (kernels::Ops* d : ops) *peak += d->peak_allocated_bytes();
  return losses;
}

TEST_CASE("the job's mode holds every layer; auto is zero1 where zero1 fits") {
  auto z3 = ChooseStageSharding(ShardMode::kZero3, Config(), Stage(), kDevices, 2, 0);
  REQUIRE(z3.ok());
  CHECK(z3->layer_modes == std::vector<ShardMode>(8, ShardMode::kZero3));
  auto fits =
      ChooseStageSharding(std::nullopt, Config(), Stage(), kDevices, 2, Bytes(ShardMode::kZero1));
  REQUIRE(fits.ok());
  CHECK(fits->layer_modes == std::vector<ShardMode>(8, ShardMode::kZero1));
  CHECK(fits->why == "zero1 (auto)");
}

TEST_CASE("a stage that fits neither replicated nor zero1 trains sharded, as predicted") {
  const int64_t replicated = Bytes(ShardMode::kReplicate), zero1 = Bytes(ShardMode::kZero1),
                zero3 = Bytes(ShardMode::kZero3);
  INFO("replicated " << replicated << ", zero1 " << zero1 << ", zero3 " << zero3 << " bytes");
  REQUIRE(zero3 < zero1);
  REQUIRE(zero1 < replicated);
  const int64_t limit = (zero1 + zero3) / 2;
  auto chosen = ChooseStageSharding(std::nullopt, Config(), Stage(), kDevices, 2, limit);
  REQUIRE(chosen.ok());
  INFO(chosen->why);
  CHECK(chosen->why.find("the cost model's") == 0);
  model::FragmentOptions o = Stage();
  o.layer_modes = chosen->layer_modes;
  const int64_t predicted = CpuReplicaBytes(Config(), o, kDevices);
  CHECK(predicted <= limit);
  int sharded = 0;
  for (ShardMode m : chosen->layer_modes) sharded += model::ShardsGradients(m);
  CHECK(sharded > 0);
  int64_t peak = 0, peak_replicated = 0;
  const std::vector<float> losses = Train(chosen->layer_modes, &peak);
  const std::vector<float> reference =
      Train(std::vector<ShardMode>(8, ShardMode::kReplicate), &peak_replicated);
  INFO("measured " << peak << " bytes against " << predicted << " predicted; replicated "
                   << peak_replicated);
  CHECK(peak <= limit);
  CHECK(std::fabs(static_cast<double>(peak - predicted)) <= 0.10 * predicted);
  CHECK(peak_replicated > limit);
  for (size_t i = 0; i < losses.size(); ++i) {
    INFO("step " << i + 1 << ": " << losses[i] << " vs " << reference[i]);
    CHECK(std::fabs(losses[i] - reference[i]) <= 1e-5f * reference[i]);
  }
  // Less memory than zero3 needs fits nothing: the least memory (zero3 here, every layer),
  // for the memory check to refuse.
  auto none = ChooseStageSharding(std::nullopt, Config(), Stage(), kDevices, 2, zero3 / 2);
  REQUIRE(none.ok());
  CHECK(none->layer_modes == std::vector<ShardMode>(8, ShardMode::kZero3));
  CHECK(none->why.find("zero3 (auto; nothing fits") == 0);
}

}  // namespace
}  // namespace longhaul::daemon
