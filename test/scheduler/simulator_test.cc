// The simulator against the cost model on steady links (the same schedule, played by events
// instead of a recurrence), and what only it can show: a link whose bandwidth drops mid-run
// makes the controller compress harder, a throttled site slows every step, and per-step
// measurements add up.
#include "scheduler/simulator.h"

#include <catch2/catch.hpp>
#include <random>

#include "scheduler/topology.h"
#include "test/scheduler/test_util.h"

namespace longhaul::scheduler {
namespace {

using testing::MakeModel;
using testing::Mesh;
using testing::SmallModel;

// The controller settles at once, and the model replays its noise-free decisions.
CostModelOptions Replayed() {
  CostModelOptions o;
  o.controller.hysteresis_window_seconds = 0;
  o.settling = CostModelOptions::Settling::kReplay;
  return o;
}

// Real links jitter: the model predicts the controller's attractor.
CostModelOptions Settled() {
  CostModelOptions o;
  o.controller.hysteresis_window_seconds = 0;
  return o;
}

TEST_CASE("on steady links the simulator agrees with the cost model") {
  std::mt19937_64 rng(3);
  int compared = 0;
  for (int trial = 0; trial < 40; ++trial) {
    RandomMeshOptions ro;
    ro.sites = 2 + static_cast<int>(rng() % 5);
    ro.seed = rng();
    const Profiles p = RandomMesh(ro);
    const char* modes[] = {"off", "adaptive", "fixed"};
    auto w = testing::Workload(1 + static_cast<int>(rng() % 8), modes[rng() % 3]);
    if (rng() % 2) w.coordinator = p.sites[rng() % p.sites.size()].name;
    const CostModel m = MakeModel(SmallModel(12), w, p, Replayed());
    std::vector<std::string> sites;
    for (const auto& s : p.sites) sites.push_back(s.name);
    PlacementRequest r;
    r.model = SmallModel(12);
    r.sites = sites;
    auto plan = MakeEvenSplitPlacer()->Place(r);
    REQUIRE(plan.ok());
    auto estimate = m.Estimate(*plan);
    REQUIRE(estimate.ok());
    SimulatorOptions so;
    so.steps = 6;
    auto sim = Simulate(m, *plan, so);
    REQUIRE(sim.ok());
    INFO("trial " << trial << ": " << PlanDebugString(*plan) << " M=" << w.microbatches << " "
                  << w.compression);
    // Step 0 has no optimizer step before it; the rest are the steady state.
    for (int k = 2; k < 6; ++k) {
      CHECK(sim->steps[k].seconds() == Approx(estimate->step_seconds).epsilon(1e-6));
    }
    for (int i = 0; i < static_cast<int>(plan->size()); ++i) {
      CHECK(sim->steps[3].stages[i].compute_seconds ==
            Approx(estimate->stages[i].compute_seconds).epsilon(1e-6));
      CHECK(sim->steps[3].stages[i].step_seconds == Approx(estimate->step_seconds).epsilon(1e-6));
    }
    for (size_t k = 0; k + 1 < plan->size(); ++k) {
      CHECK(sim->steps[3].activation_codecs[k] == estimate->links[2 * k].codec);
      CHECK(sim->steps[3].gradient_codecs[k] == estimate->links[2 * k + 1].codec);
    }
    ++compared;
  }
  CHECK(compared == 40);
}

TEST_CASE("a bandwidth drop: the controller compresses harder and steps slow down") {
  const auto config = SmallModel(8);
  Profiles p = Mesh({1e11, 1e11}, 2e8, 0.004);
  const CostModel m = MakeModel(config, testing::Workload(8, "adaptive"), p, Settled());
  const std::vector<StagePlan> plan = {{"s0", 0, 4}, {"s1", 4, 8}};
  SimulatorOptions so;
  so.steps = 40;
  auto steady = Simulate(m, plan, so);
  REQUIRE(steady.ok());
  const double t_drop = steady->steps[10].start_seconds;
  so.links.push_back({"s0", "s1", {{t_drop, 2e6}}});
  so.links.push_back({"s1", "s0", {{t_drop, 2e6}}});
  auto dropped = Simulate(m, plan, so);
  REQUIRE(dropped.ok());
  CHECK(dropped->steps[5].activation_codecs[0] == steady->steps[5].activation_codecs[0]);
  CHECK(dropped->steps[5].seconds() == Approx(steady->steps[5].seconds()));
  CHECK(dropped->steps[35].activation_codecs[0] != steady->steps[35].activation_codecs[0]);
  CHECK(dropped->steps[35].seconds() > steady->steps[35].seconds());
  // The cost model with the new bandwidth predicts the new steady state.
  testing::SetLink(&p, "s0", "s1", 2e6, 0.004);
  testing::SetLink(&p, "s1", "s0", 2e6, 0.004);
  const CostModel after = MakeModel(config, testing::Workload(8, "adaptive"), p, Settled());
  auto e = after.Estimate(plan);
  REQUIRE(e.ok());
  INFO("simulated " << dropped->steps[35].activation_codecs[0] << "/"
                    << dropped->steps[35].gradient_codecs[0] << ", cost model " << e->links[0].codec
                    << "/" << e->links[1].codec << ": " << e->links[0].reason);
  CHECK(dropped->steps[35].seconds() == Approx(e->step_seconds).epsilon(0.02));
}

TEST_CASE("a throttled site slows every step after the throttle") {
  const auto config = SmallModel(8);
  const Profiles p = Mesh({1e11, 1e11, 1e11}, 1e9, 0.01);
  const CostModel m = MakeModel(config, testing::Workload(8), p);
  const std::vector<StagePlan> plan = {{"s0", 0, 3}, {"s1", 3, 6}, {"s2", 6, 8}};
  SimulatorOptions so;
  so.steps = 20;
  so.compute.push_back({"s1", {{0, 1}}});
  auto base = Simulate(m, plan, so);
  REQUIRE(base.ok());
  so.compute[0].slowdown.push_back({base->steps[10].start_seconds, 3});
  auto slow = Simulate(m, plan, so);
  REQUIRE(slow.ok());
  CHECK(slow->steps[15].seconds() > 1.5 * base->steps[15].seconds());
  CHECK(slow->steps[15].stages[1].compute_seconds ==
        Approx(3 * base->steps[15].stages[1].compute_seconds).epsilon(0.01));
  CHECK(slow->steps[15].stages[0].compute_seconds ==
        Approx(base->steps[15].stages[0].compute_seconds).epsilon(0.01));
}

TEST_CASE("jitter averages out; bad traces are refused") {
  const auto config = SmallModel(8);
  const Profiles p = Mesh({1e11, 1e11}, 1e9, 0.01);
  const CostModel m = MakeModel(config, testing::Workload(8), p);
  const std::vector<StagePlan> plan = {{"s0", 0, 4}, {"s1", 4, 8}};
  SimulatorOptions so;
  so.steps = 60;
  so.compute_jitter = 0.1;
  auto sim = Simulate(m, plan, so);
  REQUIRE(sim.ok());
  auto e = m.Estimate(plan);
  REQUIRE(e.ok());
  CHECK(sim->MeanStepSeconds(1) == Approx(e->step_seconds).epsilon(0.1));
  so.links.push_back({"s0", "nowhere", {}});
  CHECK_FALSE(Simulate(m, plan, so).ok());
}

}  // namespace
}  // namespace longhaul::scheduler
