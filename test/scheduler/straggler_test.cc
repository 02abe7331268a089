// The straggler detector on synthetic traces: noise, jitter and isolated slow steps never
// fire; a sustained 2x slowdown fires within a bounded number of steps, and the monitor names
// the slowed stage (or the step, when no stage computes slower).
#include "scheduler/straggler.h"

#include <catch2/catch.hpp>
#include <random>

namespace longhaul::scheduler {
namespace {

TEST_CASE("noise and isolated slow steps do not fire") {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> noise(0, 0.15);
  std::uniform_real_distribution<double> u(0, 1);
  ChangeDetector d;
  for (int step = 0; step < 20000; ++step) {
    double x = 0.2 * std::exp(noise(rng));
    if (u(rng) < 0.02) x *= 5;  // a 5x hiccup now and then
    d.Observe(x);
  }
  CHECK_FALSE(d.fired());
  CHECK(d.reference() == Approx(0.2).epsilon(0.2));
}

TEST_CASE("a single very slow step does not fire; three in a row do not either") {
  ChangeDetector d;
  for (int i = 0; i < 10; ++i) d.Observe(1.0);
  d.Observe(100.0);
  for (int i = 0; i < 10; ++i) d.Observe(1.0);
  CHECK_FALSE(d.fired());
  for (int i = 0; i < 3; ++i) d.Observe(100.0);
  CHECK_FALSE(d.fired());
}

TEST_CASE("a sustained 2x slowdown fires within 5 steps, also under noise") {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> noise(0, 0.1);
  int worst = 0;
  for (int trial = 0; trial < 200; ++trial) {
    ChangeDetector d;
    for (int i = 0; i < 50; ++i) REQUIRE_FALSE(d.Observe(0.5 * std::exp(noise(rng))));
    int steps = 0;
    while (!d.Observe(1.0 * std::exp(noise(rng)))) {
      ++steps;
      REQUIRE(steps < 50);
    }
    worst = std::max(worst, steps + 1);
    CHECK(d.slowdown() == Approx(2).epsilon(0.3));
  }
  INFO("slowest detection: " << worst << " steps");
  CHECK(worst <= 8);
  ChangeDetector exact;
  for (int i = 0; i < 10; ++i) exact.Observe(0.5);
  int steps = 0;
  while (!exact.Observe(1.0)) ++steps;
  CHECK(steps + 1 == 5);  // ceil(1.5 / 0.375) + 1 with the clip
}

TEST_CASE("a plan's prediction as the reference when there is no warm-up") {
  StragglerOptions o;
  o.warmup_steps = 0;
  ChangeDetector d(o, 0.5);
  for (int i = 0; i < 100; ++i) CHECK_FALSE(d.Observe(0.55));  // 10% over: fine
  ChangeDetector slow(o, 0.5);
  bool fired = false;
  for (int i = 0; i < 10 && !fired; ++i) fired = slow.Observe(1.0);
  CHECK(fired);
}

StepEstimate ThreeStages() {
  StepEstimate e;
  for (const char* site : {"a", "b", "c"}) {
    StageEstimate s;
    s.site = site;
    s.compute_seconds = 0.3;
    e.stages.push_back(s);
  }
  e.step_seconds = 0.5;
  return e;
}

std::vector<StageMeasurement> Step(uint64_t step, std::vector<double> compute, double seconds) {
  std::vector<StageMeasurement> out;
  for (int i = 0; i < static_cast<int>(compute.size()); ++i) {
    out.push_back({i, step, compute[i], seconds - compute[i], seconds});
  }
  return out;
}

TEST_CASE("the monitor names the slowed stage, once") {
  StragglerMonitor monitor(ThreeStages());
  uint64_t step = 0;
  for (; step < 20; ++step) CHECK_FALSE(monitor.Observe(Step(step, {0.3, 0.31, 0.29}, 0.5)));
  std::optional<StragglerEvent> e;
  for (; step < 40 && !e; ++step) e = monitor.Observe(Step(step, {0.3, 0.6, 0.29}, 0.8));
  REQUIRE(e);
  CHECK(e->component == "compute");
  CHECK(e->stage == 1);
  CHECK(e->site == "b");
  CHECK(e->slowdown == Approx(2).epsilon(0.05));
  CHECK(step - 20 <= 5);
  CHECK_FALSE(monitor.Observe(Step(step, {0.3, 0.6, 0.29}, 0.8)));  // reported once
  monitor.Reset(ThreeStages());
  for (int i = 0; i < 30; ++i) CHECK_FALSE(monitor.Observe(Step(step++, {0.3, 0.6, 0.29}, 0.8)));
}

TEST_CASE("a slower step with no slower stage is blamed on the links") {
  StragglerMonitor monitor(ThreeStages());
  uint64_t step = 0;
  for (; step < 10; ++step) monitor.Observe(Step(step, {0.3, 0.3, 0.3}, 0.5));
  std::optional<StragglerEvent> e;
  for (; step < 30 && !e; ++step) e = monitor.Observe(Step(step, {0.3, 0.3, 0.3}, 1.5));
  REQUIRE(e);
  CHECK(e->component == "step");
  CHECK(e->stage == -1);
  CHECK(e->slowdown == Approx(3).epsilon(0.05));
}

}  // namespace
}  // namespace longhaul::scheduler
