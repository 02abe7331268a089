// Re-planning around a straggler, end to end in the simulator: a site of the running plan is
// throttled mid-job, the straggler monitor fires within a bounded number of steps on the
// simulated step reports, Replan moves layers away from it, and the new plan's simulated
// throughput is within 20% of what the planner predicts for the new conditions. Plus the
// layer moves themselves and the decision's hysteresis.
#include "scheduler/replan.h"

#include <catch2/catch.hpp>

#include "scheduler/simulator.h"
#include "test/scheduler/test_util.h"

namespace longhaul::scheduler {
namespace {

using testing::Mesh;
using testing::SmallModel;

PlacementRequest Request(const Profiles& p, int layers = 12) {
  PlacementRequest r;
  r.model = SmallModel(layers);
  r.workload = testing::Workload(8, "adaptive");
  for (const auto& s : p.sites) r.sites.push_back(s.name);
  return r;
}

TEST_CASE("a throttled site is detected, re-planned around, and throughput recovers") {
  const Profiles profiles = Mesh({2e10, 2e10, 2e10, 2e10}, 1e9, 0.004);
  const PlacementRequest request = Request(profiles);
  const Planner planner(profiles);
  auto a = planner.Plan(request);
  REQUIRE(a.ok());
  REQUIRE(a->stages.size() >= 2);
  auto model = planner.Model(request);
  REQUIRE(model.ok());
  // Throttle the site with the most layers 3x from step 20 on.
  const StagePlan victim = *std::max_element(
      a->stages.begin(), a->stages.end(),
      [](const StagePlan& x, const StagePlan& y) { return x.layers() < y.layers(); });
  SimulatorOptions so;
  so.steps = 60;
  so.compute_jitter = 0.05;
  auto before = Simulate(*model, a->stages, so);
  REQUIRE(before.ok());
  const double throttle_at = before->steps[20].start_seconds;
  so.compute.push_back({victim.site, {{throttle_at, 3.0}}});
  auto run = Simulate(*model, a->stages, so);
  REQUIRE(run.ok());

  StragglerMonitor monitor(a->estimate);
  std::optional<StragglerEvent> event;
  size_t k = 0;
  for (; k < run->steps.size() && !event; ++k) event = monitor.Observe(run->steps[k].stages);
  REQUIRE(event);
  INFO(event->explanation);
  CHECK(event->component == "compute");
  CHECK(event->site == victim.site);
  CHECK(k > 20);
  CHECK(k <= 20 + 8);  // detected within 8 steps of the throttle
  CHECK(event->slowdown == Approx(3).epsilon(0.25));

  const Profiles measured = ApplyStraggler(profiles, *event);
  // The same conclusion from the raw step reports of the throttled steps.
  std::vector<StageMeasurement> recent;
  for (size_t j = k - 4; j < k; ++j) {
    for (const auto& m : run->steps[j].stages) recent.push_back(m);
  }
  const Profiles from_reports = FromMeasurements(profiles, a->estimate, recent);
  CHECK(from_reports.Site(victim.site)->flops ==
        Approx(profiles.Site(victim.site)->flops / 3).epsilon(0.1));
  for (const auto& s : a->stages) {
    if (s.site != victim.site) {
      CHECK(from_reports.Site(s.site)->flops == Approx(profiles.Site(s.site)->flops).epsilon(0.1));
    }
  }
  auto d = Replan(request, measured, a->stages, {}, {});
  REQUIRE(d.ok());
  INFO(d->explanation);
  REQUIRE(d->apply);
  CHECK(d->proposed.step_seconds < d->current.step_seconds);
  CHECK_FALSE(d->moves.empty());
  int victim_layers = 0;
  for (const StagePlan& s : d->plan) victim_layers += s.site == victim.site ? s.layers() : 0;
  CHECK(victim_layers < victim.layers());

  // The new plan, continued after the migration, still with the throttled site.
  auto new_model = Planner(profiles).Model(request);  // runtime prices at nominal speed...
  REQUIRE(new_model.ok());
  SimulatorOptions after = so;
  after.start_seconds = run->steps[k - 1].end_seconds + d->migration_seconds;
  after.steps = 20;
  auto recovered = Simulate(*new_model, d->plan, after);  // ...and the trace slows the site
  REQUIRE(recovered.ok());
  const double measured_step = recovered->MeanStepSeconds(2);
  const double throttled_step = run->MeanStepSeconds(static_cast<int>(k));
  INFO("throttled " << throttled_step << " s/step, re-planned " << measured_step
                    << " s/step, predicted " << d->proposed.step_seconds);
  CHECK(measured_step < throttled_step);
  CHECK(measured_step == Approx(d->proposed.step_seconds).epsilon(0.2));
}

TEST_CASE("layer moves: contiguous runs, bytes of parameters and moments, embeddings") {
  const Profiles profiles = Mesh({1e11, 1e11, 1e11}, 1e8, 0.02);
  const PlacementRequest request = Request(profiles, 12);
  auto model = Planner(profiles).Model(request);
  REQUIRE(model.ok());
  const std::vector<StagePlan> from = {{"s0", 0, 4}, {"s1", 4, 8}, {"s2", 8, 12}};
  const std::vector<StagePlan> to = {{"s0", 0, 6}, {"s1", 6, 12}};
  const auto moves = LayerMoves(*model, from, to);
  const int64_t C = 256, per_layer = (12 * C * C + 13 * C) * 12;
  REQUIRE(moves.size() == 3);
  CHECK(moves[0].what == "layers [4,6)");
  CHECK(moves[0].from_site == "s1");
  CHECK(moves[0].to_site == "s0");
  CHECK(moves[0].bytes == 2 * per_layer);
  CHECK(moves[0].seconds == Approx(2 * per_layer / 1e8 + 0.01));
  CHECK(moves[1].what == "layers [8,12)");
  CHECK(moves[1].from_site == "s2");
  CHECK(moves[1].to_site == "s1");
  CHECK(moves[2].what == "wte+lnf (last stage)");
  CHECK(moves[2].bytes == (512 * C + 2 * C) * 12);
  CHECK(LayerMoves(*model, from, from).empty());
}

// A llama's layers move with the family's layout: no biases, no wpe, RMSNorm's one weight; an
// untied head moves with the last stage.
TEST_CASE("layer moves of a llama: the family's parameters") {
  const Profiles profiles = Mesh({1e11, 1e11, 1e11}, 1e8, 0.02);
  for (const bool tied : {true, false}) {
    INFO((tied ? "tied" : "untied"));
    PlacementRequest request = Request(profiles, 12);
    request.model = testing::SmallLlama(12, tied);
    auto model = Planner(profiles).Model(request);
    REQUIRE(model.ok());
    const std::vector<StagePlan> from = {{"s0", 0, 4}, {"s1", 4, 8}, {"s2", 8, 12}};
    const std::vector<StagePlan> to = {{"s1", 0, 6}, {"s0", 6, 12}};
    const auto moves = LayerMoves(*model, from, to);
    // Per layer: two RMSNorm weights, q|k|v 192 x 64, o 64 x 96, gate|up 192 x 64, down 64 x 96;
    // parameters, m and v in fp32.
    const int64_t per_layer = (2 * 64 + 2 * 192 * 64 + 2 * 64 * 96) * 12, wte = 384 * 64 * 12;
    REQUIRE(moves.size() == 5);
    CHECK(moves[0].what == "layers [0,4)");
    CHECK(moves[0].bytes == 4 * per_layer);
    CHECK(moves[1].what == "layers [6,8)");
    CHECK(moves[1].bytes == 2 * per_layer);
    CHECK(moves[2].what == "layers [8,12)");
    CHECK(moves[3].what == "wte (first stage)");
    CHECK(moves[3].bytes == wte);
    CHECK(moves[4].what == (tied ? "wte+lnf (last stage)" : "head+lnf (last stage)"));
    CHECK(moves[4].bytes == wte + 64 * 12);
  }
}

TEST_CASE("no re-plan for a small gain or when nothing changed") {
  const Profiles profiles = Mesh({2e10, 2e10, 2e10}, 1e9, 0.004);
  const PlacementRequest request = Request(profiles);
  auto a = Planner(profiles).Plan(request);
  REQUIRE(a.ok());
  auto same = Replan(request, profiles, a->stages);
  REQUIRE(same.ok());
  CHECK_FALSE(same->apply);
  CHECK(same->plan == a->stages);
  StragglerEvent slight;
  slight.component = "compute";
  slight.site = a->stages[0].site;
  slight.slowdown = 1.02;
  auto small = Replan(request, ApplyStraggler(profiles, slight), a->stages);
  REQUIRE(small.ok());
  CHECK_FALSE(small->apply);
}

}  // namespace
}  // namespace longhaul::scheduler
