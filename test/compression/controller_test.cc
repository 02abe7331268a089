// The adaptive controller on synthetic link traces (steady with noise, falling, oscillating,
// recovering): whenever some allowed codec's predicted time fits the budget the chosen one
// does, it never goes past the quality floor, it changes codec at most once per hysteresis
// window on a noisy steady link, fast links stay exact, and every choice is explained in
// one line.
#include "compression/controller.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <random>

namespace longhaul::compression {
namespace {

constexpr uint64_t kActivationBytes = 8ull * 1024 * 768 * 4;  // GPT-2 small, B=8, T=1024
constexpr double kBudget = 0.1;                               // seconds of compute to hide behind
constexpr double kStep = 0.5;                                 // seconds between decisions

Controller Make(ControllerOptions options = {}) {
  auto c = Controller::Create(options);
  REQUIRE(c.ok());
  return *c;
}

struct TraceResult {
  std::vector<Decision> decisions;
  std::vector<double> times;
};

// Runs the controller over `steps` decisions with bandwidth trace(time) and checks the
// invariants that hold on every trace.
TraceResult Run(const Controller& c, int floor, int steps,
                const std::function<double(double)>& bandwidth, double rtt = 0.02) {
  TraceResult r;
  ControllerState state;
  for (int s = 0; s < steps; ++s) {
    ControllerInput in;
    in.now_seconds = s * kStep;
    in.bandwidth_bytes_per_second = bandwidth(in.now_seconds);
    in.rtt_seconds = rtt;
    in.tensor_bytes = kActivationBytes;
    in.budget_seconds = kBudget;
    in.quality_floor = floor;
    auto d = c.Decide(in, state);
    REQUIRE(d.ok());
    INFO("t=" << in.now_seconds << " bw=" << in.bandwidth_bytes_per_second << " "
              << d->explanation);
    REQUIRE(d->rung <= floor);
    bool any_fits = false;
    for (int i = 0; i <= floor; ++i) any_fits |= c.Predict(i, in) <= kBudget;
    if (any_fits) REQUIRE(d->fits);
    REQUIRE(d->predicted_seconds == c.Predict(d->rung, in));
    REQUIRE_FALSE(d->explanation.empty());
    REQUIRE(d->explanation.find('\n') == std::string::npos);
    REQUIRE(d->explanation.rfind(d->codec, 0) == 0);
    state = d->next;
    r.decisions.push_back(*d);
    r.times.push_back(in.now_seconds);
  }
  return r;
}

// Most codec changes in any window of `window` seconds, not counting the first decision.
int MaxChangesPerWindow(const TraceResult& r, double window) {
  int worst = 0;
  for (size_t i = 1; i < r.decisions.size(); ++i) {
    int changes = 0;
    for (size_t j = i; j < r.decisions.size() && r.times[j] < r.times[i] + window; ++j) {
      changes += r.decisions[j].changed;
    }
    worst = std::max(worst, changes);
  }
  return worst;
}

TEST_CASE("the default ladder parses and rungs can be found by any spelling") {
  Controller c = Make();
  CHECK(c.rungs() == 4);
  CHECK(c.name(0) == "fp32");
  auto q4 = c.FindRung("q4:block=64");
  REQUIRE(q4.ok());
  CHECK(*q4 == 3);
  CHECK_FALSE(c.FindRung("q2").ok());
  ControllerOptions bad;
  bad.ladder = {"fp32", "q9"};
  CHECK_FALSE(Controller::Create(bad).ok());
  bad = {};
  bad.upgrade_margin = 1;
  CHECK_FALSE(Controller::Create(bad).ok());
}

TEST_CASE("predictions fall along the ladder on a slow link") {
  Controller c = Make();
  ControllerInput in{50e6, 0.02, kActivationBytes, kBudget, 5, 0};
  for (int i = 1; i < c.rungs(); ++i) CHECK(c.Predict(i, in) < c.Predict(i - 1, in));
  in.bandwidth_bytes_per_second = 0;
  CHECK(std::isinf(c.Predict(0, in)));
}

TEST_CASE("steady noisy links: fast stays exact, slow pays, at most one change per window") {
  Controller c = Make();
  for (double mean : {10e9, 1e9, 400e6, 150e6, 60e6, 20e6, 2e6}) {
    std::mt19937 rng(static_cast<unsigned>(static_cast<uint64_t>(mean)));  // low 32 bits
    std::uniform_real_distribution<double> noise(0.9, 1.1);
    auto r = Run(c, c.rungs() - 1, 400, [&](double) { return mean * noise(rng); });
    INFO("mean bandwidth " << mean << ": last " << r.decisions.back().explanation);
    CHECK(MaxChangesPerWindow(r, 10.0) <= 1);
    if (mean >= 1e9) {
      for (const auto& d : r.decisions) CHECK(d.codec == "fp32");
    }
    if (mean <= 60e6) CHECK(r.decisions.back().rung >= 2);
  }
}

TEST_CASE("a falling link downgrades at once and always meets the budget when possible") {
  Controller c = Make();
  // From 2 GB/s down to 1 MB/s over 200 s, exponentially.
  auto r = Run(c, c.rungs() - 1, 400, [](double t) { return 2e9 * std::pow(2e9 / 1e6, -t / 200); });
  int previous = 0;
  for (const auto& d : r.decisions) {
    CHECK(d.rung >= previous);  // never upgrades while the link only falls
    previous = d.rung;
  }
  CHECK(r.decisions.front().codec == "fp32");
  CHECK(r.decisions.back().rung == c.rungs() - 1);
}

TEST_CASE("an oscillating link does not drag the codec up and down with it") {
  Controller c = Make();
  // Square wave between 60 and 600 MB/s with a 6 s period (shorter than the window).
  auto r =
      Run(c, c.rungs() - 1, 400, [](double t) { return std::fmod(t, 6.0) < 3.0 ? 600e6 : 60e6; });
  int changes = 0;
  for (const auto& d : r.decisions) changes += d.changed;
  INFO("changes " << changes);
  CHECK(changes <= 2);
  // A slow swing (30 MB/s to 3 GB/s, period 120 s) is followed: downgrades as soon as
  // needed, upgrades only a full window after the previous change.
  auto slow = Run(c, c.rungs() - 1, 600,
                  [](double t) { return 300e6 * std::pow(10.0, std::sin(t * 2 * M_PI / 120.0)); });
  double last_change = -1e9;
  int upgrades = 0, downgrades = 0;
  for (size_t i = 1; i < slow.decisions.size(); ++i) {
    if (!slow.decisions[i].changed) continue;
    if (slow.decisions[i].rung < slow.decisions[i - 1].rung) {
      ++upgrades;
      CHECK(slow.times[i] - last_change >= 10.0);
    } else {
      ++downgrades;
    }
    last_change = slow.times[i];
  }
  CHECK(upgrades >= 2);
  CHECK(downgrades >= 2);
}

TEST_CASE("a recovering link upgrades after one window of evidence, to the best codec") {
  Controller c = Make();
  auto r = Run(c, c.rungs() - 1, 200, [](double t) { return t < 30 ? 20e6 : 5e9; });
  // Before recovery: heavily compressed. After 30 s + window + one step: exact again.
  CHECK(r.decisions[50].rung >= 3);
  bool upgraded_early = false;
  for (size_t i = 0; i < r.decisions.size(); ++i) {
    if (r.times[i] >= 30 && r.times[i] < 40) upgraded_early |= r.decisions[i].rung == 0;
  }
  CHECK_FALSE(upgraded_early);
  CHECK(r.decisions[static_cast<size_t>(41 / kStep)].codec == "fp32");
  // The upgrade goes straight to fp32, not one rung at a time.
  int changes_after = 0;
  for (size_t i = static_cast<size_t>(30 / kStep); i < r.decisions.size(); ++i) {
    changes_after += r.decisions[i].changed;
  }
  CHECK(changes_after == 1);
}

TEST_CASE("the quality floor is never crossed, even when nothing fits") {
  Controller c = Make();
  const int q8 = *c.FindRung("q8");
  auto r = Run(c, q8, 100, [](double) { return 1e6; });  // far too slow for anything
  for (const auto& d : r.decisions) {
    CHECK(d.rung <= q8);
    CHECK_FALSE(d.fits);
  }
  CHECK(r.decisions.back().rung == q8);
  CHECK(r.decisions.back().explanation.find("nothing fits") != std::string::npos);
  // Tightening the floor below the current choice moves at once.
  ControllerState state;
  ControllerInput in{10e6, 0.01, kActivationBytes, kBudget, c.rungs() - 1, 0};
  auto d = c.Decide(in, state);
  REQUIRE(d.ok());
  REQUIRE(d->rung > q8);
  in.quality_floor = q8;
  auto d2 = c.Decide(in, d->next);
  REQUIRE(d2.ok());
  CHECK(d2->rung == q8);
  CHECK(d2->explanation.find("quality floor moved") != std::string::npos);
}

TEST_CASE("the reason names the round trip it priced, or says it priced none") {
  Controller c = Make();
  ControllerInput priced{5e7, 0.02, kActivationBytes, kBudget, 3, 0};
  auto d = c.Decide(priced, {});
  REQUIRE(d.ok());
  CHECK(d->explanation.find("rtt 20.0 ms") != std::string::npos);
  ControllerInput pipelined{5e7, 0, kActivationBytes, kBudget, 3, 0};
  auto p = c.Decide(pipelined, {});
  REQUIRE(p.ok());
  CHECK(p->explanation.find("rtt") == std::string::npos);
  CHECK(p->explanation.find("round trip not priced") != std::string::npos);
}

TEST_CASE("no bandwidth estimate: the floor first, then keep the current codec") {
  Controller c = Make();
  ControllerInput in{0, 0, kActivationBytes, kBudget, 3, 0};
  auto d = c.Decide(in, {});
  REQUIRE(d.ok());
  CHECK(d->rung == 3);
  CHECK(d->explanation.find("no bandwidth estimate") != std::string::npos);
  ControllerState state;
  state.rung = 1;
  auto kept = c.Decide(in, state);
  REQUIRE(kept.ok());
  CHECK(kept->rung == 1);
  CHECK_FALSE(kept->changed);
  // The first estimate after a provisional choice decides at once, without a window.
  ControllerInput fast{5e9, 0.01, kActivationBytes, kBudget, 3, 0.5};
  auto first = c.Decide(fast, d->next);
  REQUIRE(first.ok());
  CHECK(first->codec == "fp32");
  CHECK_FALSE(first->next.provisional);
}

TEST_CASE("bad inputs are errors") {
  Controller c = Make();
  ControllerInput in{1e9, 0.01, kActivationBytes, kBudget, 2, 0};
  auto bad = in;
  bad.budget_seconds = 0;
  CHECK_FALSE(c.Decide(bad, {}).ok());
  bad = in;
  bad.quality_floor = 6;
  CHECK_FALSE(c.Decide(bad, {}).ok());
  bad = in;
  bad.rtt_seconds = -1;
  CHECK_FALSE(c.Decide(bad, {}).ok());
  bad = in;
  bad.bandwidth_bytes_per_second = std::nan("");
  CHECK_FALSE(c.Decide(bad, {}).ok());
}

}  // namespace
}  // namespace longhaul::compression
