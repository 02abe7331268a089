// Sparse push-sum rounds over replicas' parameters (fleet/gossip_mixer.h): a round moves mass
// per coordinate and never makes or loses it, dense and sparse rounds over changing graphs
// bring the replicas to the average they started from, a replica with no out-link keeps what
// it has, the bytes are the frames' and the final average is exact.
#include "fleet/gossip_mixer.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "common/splitmix64.h"
#include "test/fleet/gossip_test_util.h"

namespace longhaul::fleet {
namespace {

constexpr int kN = 5;
constexpr size_t kP = 96;

std::vector<SyncSlice> Slices() { return {{0, 0, 40}, {1, 40, 56}}; }

std::vector<std::vector<float>> Start(uint64_t seed) { return testing::UniformStart(kN, kP, seed); }

std::vector<std::vector<double>> AllLinks() { return testing::AllLinks(kN); }

// Per coordinate: sum over replicas of w x (the push-sum value) and of w.
std::pair<std::vector<double>, std::vector<double>> Mass(const GossipMixer& m,
                                                         const std::vector<std::vector<float>>& x) {
  std::vector<double> v(kP, 0.0), w(kP, 0.0);
  for (int r = 0; r < kN; ++r) {
    for (size_t c = 0; c < kP; ++c) {
      v[c] += static_cast<double>(m.weights(r)[c]) * x[static_cast<size_t>(r)][c];
      w[c] += m.weights(r)[c];
    }
  }
  return {v, w};
}

using testing::Distance;
using testing::Mean;

TEST_CASE("a sparse round moves mass per coordinate and never makes or loses it") {
  auto x = Start(1);
  GossipMixer m(kN, kP, Slices(), 0.25);
  m.Reset(x[0]);
  for (int round = 0; round < 20; ++round) {
    const auto [v0, w0] = Mass(m, x);
    REQUIRE(m.Round(ChooseGossipGraph(AllLinks(), 2, 7, static_cast<uint64_t>(round)), &x).ok());
    const auto [v1, w1] = Mass(m, x);
    for (size_t c = 0; c < kP; ++c) {
      INFO("round " << round << " coordinate " << c);
      CHECK(w1[c] == Approx(w0[c]).epsilon(1e-6));
      CHECK(v1[c] == Approx(v0[c]).epsilon(1e-5));
    }
  }
}

TEST_CASE("dense and sparse rounds over changing graphs reach the starting average") {
  for (const double keep : {1.0, 0.25}) {
    auto x = Start(2);
    const std::vector<double> mean = Mean(x);
    GossipMixer m(kN, kP, Slices(), keep);
    // Every replica's reference at 0, so each coordinate's move is its value.
    m.Reset(std::vector<float>(kP, 0.0f));
    const double start = Distance(x);
    const int rounds = keep == 1.0 ? 60 : 400;
    for (int round = 0; round < rounds; ++round) {
      REQUIRE(m.Round(ChooseGossipGraph(AllLinks(), 1, 9, static_cast<uint64_t>(round)), &x).ok());
    }
    INFO("keep " << keep);
    CHECK(Distance(x) < 1e-3 * start);
    for (size_t c = 0; c < kP; ++c) CHECK(x[0][c] == Approx(mean[c]).epsilon(1e-3));
  }
}

TEST_CASE("a sparse round sends the largest moves and keeps the rest") {
  std::vector<std::vector<float>> x(kN, std::vector<float>(kP, 0.0f));
  // 2 of 40 (the window's 1, from coordinate 0 in round 0, and the largest move) and 3 of 56
  // (the window's 2 from 40, and the largest move).
  GossipMixer m(kN, kP, Slices(), 0.05);
  m.Reset(x[0]);
  x[0][0] = 4.0f;
  x[0][5] = 1.0f;
  x[0][6] = -3.0f;  // slice 0's largest move
  x[0][7] = 2.0f;
  x[0][50] = 0.5f;
  GossipGraph g;
  g.out.assign(kN, {});
  g.out[0] = {1};
  const StatusOr<uint64_t> bytes = m.Round(g, &x);
  REQUIRE(bytes.ok());
  // Two sparse frames: a 16-byte header, 12 bytes a coordinate and an 8-byte checksum each.
  CHECK(*bytes == 16 + 2 * 12 + 8 + 16 + 3 * 12 + 8);
  CHECK(x[0][5] == 1.0f);  // not picked: kept whole
  CHECK(x[1][5] == 0.0f);
  CHECK(x[1][7] == 0.0f);   // the second largest move waits for a later round
  CHECK(x[0][6] == -3.0f);  // picked: half kept (value and weight), half sent
  CHECK(m.weights(0)[6] == 0.5f);
  CHECK(x[1][6] == Approx(-1.0f));  // (1 x 0 + 0.5 x -3) / (1 + 0.5)
  CHECK(m.weights(1)[6] == 1.5f);
  CHECK(x[1][0] == Approx(4.0f / 3));  // in the window
  CHECK(x[1][50] == Approx(0.25f / 1.5f));
  // The next round's window is coordinate 1 of slice 0: replica 0 sends its largest move
  // left (7) beside it.
  const StatusOr<uint64_t> again = m.Round(g, &x);
  REQUIRE(again.ok());
  CHECK(*again == *bytes);
  CHECK(x[1][7] == Approx(2.0f / 3));
  // Replicas 2..4 sent nothing and heard nothing.
  for (int r = 2; r < kN; ++r) {
    for (size_t c = 0; c < kP; ++c) CHECK(x[static_cast<size_t>(r)][c] == 0.0f);
  }
}

TEST_CASE("rounds are deterministic and the final average is exact") {
  auto a = Start(4), b = Start(4);
  GossipMixer ma(kN, kP, Slices(), 0.3), mb(kN, kP, Slices(), 0.3);
  ma.Reset(a[0]);
  mb.Reset(b[0]);
  for (int round = 0; round < 5; ++round) {
    const GossipGraph g = ChooseGossipGraph(AllLinks(), 2, 3, static_cast<uint64_t>(round));
    const StatusOr<uint64_t> ba = ma.Round(g, &a), bb = mb.Round(g, &b);
    REQUIRE(ba.ok());
    REQUIRE(bb.ok());
    CHECK(*ba == *bb);
  }
  CHECK(a == b);
  const auto [v, w] = Mass(ma, a);
  REQUIRE(ma.Average(&a).ok());
  for (int r = 0; r < kN; ++r) {
    for (size_t c = 0; c < kP; ++c) {
      CHECK(a[static_cast<size_t>(r)][c] == Approx(v[c] / w[c]).epsilon(1e-6));
      CHECK(ma.weights(r)[c] == 1.0f);
    }
  }
  CHECK(Distance(a) == 0);
}

// Every replica r minimizes 0.5 |x - b_r|^2 (its own data) with `steps` local gradient steps of
// `lr` between rounds over fanout-1 graphs; returns the largest distance of a replica's
// coordinate from the minimizer of the sum (the mean of the b_r).
double LocalStepsOnSkewedObjectives(double keep, bool tracking, int rounds) {
  auto b = Start(3);
  const std::vector<double> target = Mean(b);
  std::vector<std::vector<float>> x(kN, std::vector<float>(kP, 0.0f));
  GossipMixer m(kN, kP, Slices(), keep, tracking);
  CHECK(m.tracking() == tracking);
  m.Reset(x[0]);
  const int steps = 5;
  const double lr = 0.1;
  for (int round = 0; round < rounds; ++round) {
    for (int r = 0; r < kN; ++r) {
      auto& xr = x[static_cast<size_t>(r)];
      for (int s = 0; s < steps; ++s) {
        for (size_t c = 0; c < kP; ++c) {
          xr[c] -= static_cast<float>(lr * (xr[c] - b[static_cast<size_t>(r)][c]));
        }
        m.Correct(r, xr, lr);
      }
    }
    REQUIRE(m.Round(ChooseGossipGraph(AllLinks(), 1, 5, static_cast<uint64_t>(round)), &x).ok());
    if (!tracking) continue;
    // The shares only move the corrections between replicas: their sum stays 0.
    for (size_t c = 0; c < kP; ++c) {
      double sum = 0, scale = 0;
      for (int r = 0; r < kN; ++r) {
        sum += m.corrections(r)[c];
        scale += std::fabs(m.corrections(r)[c]);
      }
      if (std::fabs(sum) > 1e-5 * (1 + scale)) {
        FAIL("round " << round << ": the corrections of " << c << " sum to " << sum);
      }
    }
  }
  double worst = 0;
  for (const auto& row : x) {
    for (size_t c = 0; c < kP; ++c) worst = std::max(worst, std::fabs(row[c] - target[c]));
  }
  return worst;
}

TEST_CASE("tracking: replicas on different objectives meet at the minimizer of the sum") {
  // Without tracking each replica stays pulled towards its own b_r (the b_r are uniform in
  // [0, 1)); with it every replica comes to their mean, dense rounds and sparse ones.
  for (const double keep : {1.0, 0.5}) {
    INFO("keep " << keep);
    const int rounds = keep == 1.0 ? 200 : 400;
    const double plain = LocalStepsOnSkewedObjectives(keep, false, rounds);
    const double tracked = LocalStepsOnSkewedObjectives(keep, true, rounds);
    INFO("worst distance: plain " << plain << ", tracked " << tracked);
    CHECK(plain > 0.05);
    CHECK(tracked < 1e-3);
  }
}

TEST_CASE("an outer step before the mix: over all-to-all rounds it is the ring's outer step") {
  // Every replica starts at the same x; local moves of its own; dense rounds to all others mix
  // the exact average, so each replica's own outer step and the mix give the outer step on the
  // mean pseudo-gradient, momentum included (outer_optimizer.h), round after round.
  const OuterOptions outer{1.0f, 0.5f, true};
  std::vector<std::vector<float>> x(kN, Start(9)[0]);
  GossipMixer m(kN, kP, Slices(), 1.0, /*tracking=*/false, outer);
  m.Reset(x[0]);
  OuterOptimizer ring;
  ring.Reset(x[0]);
  SplitMix64 rng(11);
  for (int round = 0; round < 4; ++round) {
    std::vector<std::vector<float>> deltas(kN, std::vector<float>(kP));
    std::vector<float> mean(kP, 0.0f);
    for (int r = 0; r < kN; ++r) {
      auto& xr = x[static_cast<size_t>(r)];
      for (float& v : xr) v += static_cast<float>(rng.Uniform() - 0.5) * 0.1f;
      ring.PseudoGradient(xr, deltas[static_cast<size_t>(r)]);
    }
    for (int r = 0; r < kN; ++r) {
      for (size_t c = 0; c < kP; ++c) mean[c] += deltas[static_cast<size_t>(r)][c] / float(kN);
    }
    ring.Step(outer, mean);
    REQUIRE(
        m.Round(ChooseGossipGraph(AllLinks(), kN - 1, 5, static_cast<uint64_t>(round)), &x).ok());
    for (int r = 0; r < kN; ++r) {
      for (size_t c = 0; c < kP; ++c) {
        if (std::fabs(x[static_cast<size_t>(r)][c] - ring.anchor()[c]) > 1e-5f) {
          FAIL("round " << round << ", replica " << r << ", coordinate " << c << ": "
                        << x[static_cast<size_t>(r)][c] << " against the ring's "
                        << ring.anchor()[c]);
        }
      }
    }
  }
  // The momentum made a difference: plain averaging of the last round's moves lands elsewhere.
  double moved = 0;
  for (size_t c = 0; c < kP; ++c) moved += std::fabs(ring.momentum()[c]);
  CHECK(moved > 0.01);
}

TEST_CASE("an outer step before a sparse mix: a node restored from a checkpoint rounds alike") {
  const OuterOptions outer{0.9f, 0.6f, true};
  auto x = Start(12);
  GossipNode a(Slices(), kP, 0.5, false, outer);
  a.Reset(x[0]);
  CHECK(a.outer_step());
  std::vector<float> xa = x[1];
  a.BeginRound(xa);  // a's momentum now holds its first pseudo-gradient
  for (size_t k = 0; k < Slices().size(); ++k) a.Apply(k, a.Pick(k, xa, 0), 1.0, {}, xa);
  CHECK(xa != x[1]);
  GossipNode b(Slices(), kP, 0.5, false, outer);
  b.Reset(x[0]);
  REQUIRE(b.RestoreOuter(a.outer_state().anchor(), a.outer_state().momentum()).ok());
  std::vector<float> xb = xa;
  for (float& v : xa) v += 0.01f;
  for (float& v : xb) v += 0.01f;
  a.BeginRound(xa);
  b.BeginRound(xb);
  CHECK(xa == xb);
  // A checkpoint's state that does not fit is refused, naming the sizes.
  GossipNode c(Slices(), kP, 0.5, false, outer);
  const Status bad = c.RestoreOuter(std::vector<float>(kP - 1), std::vector<float>(kP));
  CHECK(bad.code() == absl::StatusCode::kDataLoss);
  CHECK(std::string(bad.message()).find("95") != std::string::npos);
  std::vector<float> nan(kP, 0.0f);
  nan[7] = std::nanf("");
  CHECK(!c.RestoreOuter(nan, std::vector<float>(kP)).ok());
  GossipNode plain(Slices(), kP, 0.5);
  CHECK(!plain.outer_step());
  CHECK(!plain.RestoreOuter(std::vector<float>(kP), std::vector<float>(kP)).ok());
}

}  // namespace
}  // namespace longhaul::fleet
