// Replicated placement priced by hand: two single-stage replicas whose sync is one model's
// parameters in q4 over a known link (one sync's seconds, hidden behind `every` steps or
// exposed), lockstep against paced throughput when one replica is slower, and the planner
// finding as many replicas as the sites allow when the network is fast.
#include "scheduler/replica_planner.h"

#include <catch2/catch.hpp>

#include "model/layout.h"
#include "test/scheduler/test_util.h"

namespace longhaul::scheduler {
namespace {

using testing::Mesh;
using testing::SmallModel;
using testing::Workload;

PlanResult OneStage(const std::string& site, int layers, double step_seconds, int64_t tokens) {
  PlanResult r;
  r.stages = {{site, 0, layers}};
  r.estimate.step_seconds = step_seconds;
  r.estimate.tokens_per_step = tokens;
  return r;
}

TEST_CASE("a sync is each stage's parameters over the slowest flow, hidden behind the steps",
          "[replicas]") {
  const auto config = SmallModel(4);
  const PipelineWorkload w = Workload(4);
  const int64_t tokens = int64_t{w.microbatch_size} * w.seq_len * w.microbatches;
  Profiles p = Mesh({1e12, 1e12}, 1e6, 0.01);  // 1 MB/s, 10 ms
  const double params = static_cast<double>(model::NumParameters(config));
  SyncCostOptions sync;
  sync.every = 10;
  sync.bytes_per_value = 0.5;
  const ReplicaPlan a = PriceReplicas(
      p, config, w, {OneStage("s0", 4, 1.0, tokens), OneStage("s1", 4, 1.0, tokens)}, sync);
  const double one_sync = params * 0.5 / 1e6 + 0.01;
  CHECK(a.sync_seconds == Approx(one_sync));
  CHECK(a.sync_bytes == Approx(2 * params * 0.5));
  CHECK(a.sites_used == 2);
  // Streamed behind 10 steps of 1 s: exposed only beyond them.
  CHECK(a.exposed_sync_per_step == Approx(std::max(0.0, one_sync - 10) / 10));
  CHECK(a.tokens_per_second == Approx(2 * tokens / (1.0 + a.exposed_sync_per_step)));
  sync.overlap = false;
  const ReplicaPlan b = PriceReplicas(
      p, config, w, {OneStage("s0", 4, 1.0, tokens), OneStage("s1", 4, 1.0, tokens)}, sync);
  CHECK(b.exposed_sync_per_step == Approx(one_sync / 10));

  // One replica twice as slow: lockstep goes at its pace, paced adds each one's own rate.
  sync.overlap = true;
  sync.bytes_per_value = 1e-9;  // a free sync
  const ReplicaPlan c = PriceReplicas(
      p, config, w, {OneStage("s0", 4, 1.0, tokens), OneStage("s1", 4, 2.0, tokens)}, sync);
  CHECK(c.tokens_per_second == Approx(2 * tokens / 2.0).epsilon(1e-3));
  CHECK(c.paced_tokens_per_second == Approx(tokens / 1.0 + tokens / 2.0).epsilon(1e-3));
}

TEST_CASE("on a fast network the planner runs a replica on every site", "[replicas]") {
  const auto config = SmallModel(4);
  const Profiles p = Mesh({1e12, 1e12, 1e12, 1e12}, 1e11, 0.001);
  PlannerOptions po;
  po.time_budget_seconds = 1;
  const Planner planner(p, po);
  ReplicaPlanRequest r;
  r.request.model = config;
  r.request.workload = Workload(4);
  r.request.sites = {"s0", "s1", "s2", "s3"};
  auto single = planner.Plan(r.request);
  auto fleet = PlanReplicas(planner, r);
  REQUIRE(single.ok());
  REQUIRE(fleet.ok());
  CHECK(fleet->sites_used == 4);
  CHECK(fleet->tokens_per_second > 1.5 * single->estimate.tokens_per_second);
  r.max_replicas = 1;
  auto one = PlanReplicas(planner, r);
  REQUIRE(one.ok());
  CHECK(one->replicas.size() == 1);
}

}  // namespace
}  // namespace longhaul::scheduler
