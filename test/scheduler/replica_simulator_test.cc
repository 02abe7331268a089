// Replicas replayed over traces: on steady links the replay matches the cost model's price
// (PriceReplicas) step for step; a sync link slowed by its trace makes the syncs slower by
// that much; a streamed sync shows only what runs past the steps it hides behind.
#include "scheduler/replica_simulator.h"

#include <catch2/catch.hpp>

#include "fleet/sync_slices.h"
#include "model/layout.h"
#include "test/scheduler/test_util.h"

namespace longhaul::scheduler {
namespace {

using testing::Mesh;
using testing::SmallModel;
using testing::Workload;

struct Fixture {
  model::ModelConfig config = SmallModel(4);
  PipelineWorkload w = Workload(4);
  Profiles p = Mesh({1e9, 1e9}, 1e5, 0.01);  // slow links: syncs of seconds
  std::vector<PlanResult> replicas;
  SyncCostOptions sync;
  SimulatorOptions so;
  Fixture() {
    sync.every = 5;
    so.steps = 20;
    auto cm = CostModel::Create(config, w, p);
    REQUIRE(cm.ok());
    for (const std::string site : {"s0", "s1"}) {
      PlanResult r;
      r.stages = {{site, 0, 4}};
      auto e = cm->Estimate(r.stages);
      REQUIRE(e.ok());
      r.estimate = *e;
      replicas.push_back(r);
    }
  }
};

TEST_CASE("steady links: the replay is the cost model's price", "[replicas]") {
  Fixture f;
  SyncCostOptions& sync = f.sync;
  SimulatorOptions& so = f.so;
  const ReplicaPlan priced = PriceReplicas(f.p, f.config, f.w, f.replicas, sync);
  auto sim = SimulateReplicas(f.p, f.config, f.w, f.replicas, sync, so);
  REQUIRE(sim.ok());
  CHECK(sim->syncs == 4);
  CHECK(sim->sync_seconds == Approx(4 * priced.sync_seconds));
  CHECK(sim->exposed_seconds == Approx(4 * priced.sync_seconds));  // blocking
  CHECK(priced.sync_seconds > 1.0);
  CHECK(sim->MeanStepSeconds(0) == Approx(priced.step_seconds).epsilon(0.01));
  CHECK(sim->tokens_per_second() == Approx(priced.tokens_per_second).epsilon(0.01));
  // Steps 2..19: three syncs (after steps 5, 10, 15) in 18 steps, not four in 20.
  const double steady_step =
      (18 * f.replicas[0].estimate.step_seconds + 3 * priced.sync_seconds) / 18;
  CHECK(sim->steady_tokens_per_second() == Approx(sim->tokens / 20 / steady_step).epsilon(0.01));
  // Staggered in 2 phases (phase 1 after steps 2, 7, 12, 17, phase 0 after 5, 10, 15, each
  // its share of the parameters; all after 20).
  sync.stagger = 2;
  auto staggered = SimulateReplicas(f.p, f.config, f.w, f.replicas, sync, so);
  REQUIRE(staggered.ok());
  CHECK(staggered->syncs == 8);
  const std::vector<double> shares = fleet::PhaseShares(model::ParameterLayout(f.config), 2);
  CHECK(shares[0] > shares[1]);  // the embeddings' phase
  CHECK(shares[0] + shares[1] == Approx(1.0));
  CHECK(staggered->sync_seconds ==
        Approx((3 * shares[0] + 4 * shares[1] + 1) * priced.sync_seconds));
}

TEST_CASE("a sync link slowed by its trace: slower syncs; streamed syncs hide", "[replicas]") {
  Fixture f;
  SyncCostOptions& sync = f.sync;
  SimulatorOptions& so = f.so;
  auto steady = SimulateReplicas(f.p, f.config, f.w, f.replicas, sync, so);
  REQUIRE(steady.ok());
  // Both directions at a quarter of the profile's rate from the start.
  so.links.push_back({"s0", "s1", {{0, 0.25e5}}});
  so.links.push_back({"s1", "s0", {{0, 0.25e5}}});
  auto slow = SimulateReplicas(f.p, f.config, f.w, f.replicas, sync, so);
  REQUIRE(slow.ok());
  const double rtt = 0.01 * 4;  // four syncs' latency, not slowed
  CHECK(slow->sync_seconds - rtt == Approx(4 * (steady->sync_seconds - rtt)).epsilon(1e-6));
  CHECK(slow->tokens_per_second() < steady->tokens_per_second());
  // Streamed behind 4 steps, each sync runs past them by what is left of it; the last blocks.
  so.links.clear();
  sync.overlap = 4;
  auto streamed = SimulateReplicas(f.p, f.config, f.w, f.replicas, sync, so);
  REQUIRE(streamed.ok());
  const double one = steady->sync_seconds / 4;
  const double step = f.replicas[0].estimate.step_seconds;
  CHECK(streamed->exposed_seconds == Approx(3 * std::max(0.0, one - 4 * step) + one).epsilon(0.02));
  CHECK(streamed->tokens_per_second() > steady->tokens_per_second());
}

}  // namespace
}  // namespace longhaul::scheduler
