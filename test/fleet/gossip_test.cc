// Gossip over time-varying directed links (fleet/gossip.h): the round's graph drawn from the
// link matrix (down links never, fast links more often, the same graph on every site); push-sum
// keeping the sums of values and weights and reaching the average on changing directed graphs
// with a quarter of the links down each round; and gradient tracking reaching the minimizer of
// the sum of different local objectives where push-sum gradient descent stays biased.
#include "fleet/gossip.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "common/splitmix64.h"

namespace longhaul::fleet {
namespace {

using Matrix = std::vector<std::vector<double>>;

// n nodes, every link up at `rate`, except a random quarter of them down (from `round`).
Matrix QuarterDown(int n, uint64_t round) {
  SplitMix64 rng(1000 + round);
  Matrix b(static_cast<size_t>(n), std::vector<double>(static_cast<size_t>(n), 0.0));
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i != j && rng.Below(4) != 0) b[i][j] = 1e6 * (1 + static_cast<double>(rng.Below(100)));
    }
  }
  return b;
}

TEST_CASE("a gossip round's graph follows the measured links", "[gossip]") {
  // Node 0's links: to 1 fast, to 2 ten times slower, to 3 a hundred times, to 4 down.
  Matrix b(5, std::vector<double>(5, 1.0));
  b[0] = {0, 100, 10, 1, 0};
  std::vector<int> picks(5, 0);
  for (uint64_t round = 0; round < 4000; ++round) {
    const GossipGraph g = ChooseGossipGraph(b, 1, 7, round);
    REQUIRE(g.nodes() == 5);
    REQUIRE(g.out[0].size() == 1);
    ++picks[static_cast<size_t>(g.out[0][0])];
    for (int i = 0; i < 5; ++i) {
      for (int j : g.out[static_cast<size_t>(i)]) CHECK(j != i);
    }
  }
  CHECK(picks[0] == 0);
  CHECK(picks[4] == 0);  // down: never
  CHECK(picks[1] > picks[2]);
  CHECK(picks[2] > picks[3]);
  const double ratio = static_cast<double>(picks[1]) / picks[2];
  CHECK(ratio > 7);
  CHECK(ratio < 14);

  // Fanout: distinct neighbours, no more than the links that are up.
  const GossipGraph two = ChooseGossipGraph(b, 3, 7, 0);
  CHECK(two.out[0].size() == 3);  // 1, 2 and 3 are up
  CHECK(two.out[0] == std::vector<int>{1, 2, 3});
  CHECK(two.out[1].size() == 3);
  // The same matrix, seed and round give the same graph on every site; other rounds differ.
  int differ = 0;
  for (uint64_t round = 0; round < 20; ++round) {
    CHECK(ChooseGossipGraph(b, 2, 9, round).out == ChooseGossipGraph(b, 2, 9, round).out);
    differ += ChooseGossipGraph(b, 2, 9, round).out != ChooseGossipGraph(b, 2, 9, round + 1).out;
  }
  CHECK(differ > 10);
  // A node with every link down sends to no one.
  Matrix isolated = b;
  isolated[2] = {0, 0, 0, 0, 0};
  CHECK(ChooseGossipGraph(isolated, 2, 1, 0).out[2].empty());
}

TEST_CASE("the one-peer exponential graph: log2(n) rounds of push-sum give the exact average",
          "[gossip]") {
  for (const size_t n : {size_t{4}, size_t{8}}) {
    INFO(n << " nodes");
    const Matrix links(n, std::vector<double>(n, 1.0));
    std::vector<std::vector<double>> values(n);
    std::vector<double> weights(n, 1.0);
    double mean = 0;
    for (size_t i = 0; i < n; ++i) {
      values[i] = {static_cast<double>(i * i) + 0.5};
      mean += values[i][0] / static_cast<double>(n);
    }
    const uint64_t hops = n == 4 ? 2 : 3;
    for (uint64_t round = 0; round < hops; ++round) {
      const GossipGraph g = ExponentialGossipGraph(links, round);
      for (size_t i = 0; i < n; ++i) {
        REQUIRE(g.out[i].size() == 1);
        CHECK(g.out[i][0] == static_cast<int>((i + (size_t{1} << round)) % n));
      }
      PushSumRound(g, &values, &weights);
    }
    for (size_t i = 0; i < n; ++i) {
      CHECK(PushSumEstimate(values[i], weights[i])[0] == Approx(mean).epsilon(1e-12));
    }
    // The next period goes backward (every link's reverse drawn), and averages exactly too,
    // from values apart again.
    for (size_t i = 0; i < n; ++i) values[i] = {static_cast<double>(3 * i) - 1.0};
    std::fill(weights.begin(), weights.end(), 1.0);
    mean = 0;
    for (size_t i = 0; i < n; ++i) mean += values[i][0] / static_cast<double>(n);
    for (uint64_t round = hops; round < 2 * hops; ++round) {
      const GossipGraph g = ExponentialGossipGraph(links, round);
      for (size_t i = 0; i < n; ++i) {
        REQUIRE(g.out[i].size() == 1);
        CHECK(g.out[i][0] == static_cast<int>((i + n - (size_t{1} << (round - hops))) % n));
      }
      PushSumRound(g, &values, &weights);
    }
    for (size_t i = 0; i < n; ++i) {
      CHECK(PushSumEstimate(values[i], weights[i])[0] == Approx(mean).epsilon(1e-12));
    }
    // Forward again after that; a link that is down sends nothing that round.
    Matrix down = links;
    down[1][2] = 0;
    const GossipGraph g = ExponentialGossipGraph(down, 2 * hops);
    CHECK(g.out[1].empty());
    CHECK(g.out[0] == std::vector<int>{1});
    down[1][0] = 0;
    CHECK(ExponentialGossipGraph(down, hops).out[1].empty());  // backward: 1 -> 0, down
  }
  // Three nodes: offsets 1 and 2 (ceil(log2 3) = 2), then 2 and 1 (-1 and -2).
  const Matrix all3(3, std::vector<double>(3, 1.0));
  CHECK(ExponentialGossipGraph(all3, 1).out[0] == std::vector<int>{2});
  CHECK(ExponentialGossipGraph(all3, 1).out[2] == std::vector<int>{1});
  CHECK(ExponentialGossipGraph(all3, 2).out[0] == std::vector<int>{2});
  CHECK(ExponentialGossipGraph(all3, 3).out[0] == std::vector<int>{1});
}

TEST_CASE("push-sum reaches the average over changing directed graphs", "[gossip]") {
  constexpr int kN = 8, kDim = 4;
  SplitMix64 rng(42);
  std::vector<std::vector<double>> values(kN, std::vector<double>(kDim));
  std::vector<double> mean(kDim, 0.0), sum(kDim, 0.0);
  for (auto& v : values) {
    for (int k = 0; k < kDim; ++k) {
      v[k] = static_cast<double>(rng.Below(2001)) - 1000.0;
      sum[k] += v[k];
    }
  }
  for (int k = 0; k < kDim; ++k) mean[k] = sum[k] / kN;
  std::vector<double> weights(kN, 1.0);
  std::vector<std::vector<double>> estimates;
  double first_distance = -1;
  for (uint64_t round = 0; round < 150; ++round) {
    PushSumRound(ChooseGossipGraph(QuarterDown(kN, round), 1, 3, round), &values, &weights);
    // The sums never change: nothing is lost or made on the way.
    double wsum = 0;
    for (double w : weights) wsum += w;
    REQUIRE(std::fabs(wsum - kN) < 1e-9);
    for (int k = 0; k < kDim; ++k) {
      double s = 0;
      for (const auto& v : values) s += v[k];
      REQUIRE(std::fabs(s - sum[k]) < 1e-7 * (1 + std::fabs(sum[k])));
    }
    estimates.clear();
    for (int i = 0; i < kN; ++i) estimates.push_back(PushSumEstimate(values[i], weights[i]));
    if (round == 0) first_distance = ConsensusDistance(estimates);
  }
  CHECK(first_distance > 10);
  CHECK(ConsensusDistance(estimates) < 1e-6);
  for (const auto& e : estimates) {
    for (int k = 0; k < kDim; ++k) CHECK(e[k] == Approx(mean[k]).margin(1e-6));
  }
}

TEST_CASE("gradient tracking reaches the minimizer of the sum; push-sum descent stays biased",
          "[gossip]") {
  // f_i(x) = a_i / 2 |x - b_i|^2: each node's data pulls to its own b_i (skewed shards).
  constexpr int kN = 6, kDim = 3;
  const std::vector<double> a = {0.5, 1.0, 2.0, 1.5, 0.8, 1.2};
  std::vector<std::vector<double>> b(kN, std::vector<double>(kDim));
  std::vector<double> best(kDim, 0.0);
  double asum = 0;
  for (int i = 0; i < kN; ++i) {
    for (int k = 0; k < kDim; ++k) b[i][k] = (i % 2 ? 1.0 : -1.0) * (i + 1) * (k + 1);
    asum += a[i];
  }
  for (int k = 0; k < kDim; ++k) {
    for (int i = 0; i < kN; ++i) best[k] += a[i] * b[i][k] / asum;
  }
  auto grad = [&](int i, std::span<const double> x) {
    std::vector<double> g(kDim);
    for (int k = 0; k < kDim; ++k) g[k] = a[i] * (x[k] - b[i][k]);
    return g;
  };
  auto graph_of = [&](int round) {
    return ChooseGossipGraph(QuarterDown(kN, static_cast<uint64_t>(round)), 1, 5,
                             static_cast<uint64_t>(round));
  };
  const std::vector<std::vector<double>> start(kN, std::vector<double>(kDim, 0.0));
  auto worst = [&](const std::vector<std::vector<double>>& xs) {
    double w = 0;
    for (const auto& x : xs) {
      for (int k = 0; k < kDim; ++k) w = std::max(w, std::fabs(x[k] - best[k]));
    }
    return w;
  };
  GossipDescentOptions o;
  o.step = 0.05;
  o.rounds = 1500;
  o.tracking = true;
  const double tracked = worst(GossipDescent(start, o, graph_of, grad));
  o.tracking = false;
  const double plain = worst(GossipDescent(start, o, graph_of, grad));
  INFO("tracking " << tracked << ", push-sum descent " << plain);
  CHECK(tracked < 1e-6);
  CHECK(plain > 1e-2);
}

TEST_CASE("rounds to consensus: more fanout, fewer rounds; disconnected, never", "[gossip]") {
  constexpr int kN = 16;
  Matrix all(kN, std::vector<double>(kN, 1e8));
  const int one = RoundsToConsensus(all, 1, 11, 1e-3, 1000);
  const int three = RoundsToConsensus(all, 3, 11, 1e-3, 1000);
  INFO("fanout 1: " << one << " rounds, fanout 3: " << three);
  CHECK(one < 1000);
  CHECK(three < one);
  // Two halves with no link between them never agree.
  Matrix halves = all;
  for (int i = 0; i < kN; ++i) {
    for (int j = 0; j < kN; ++j) {
      if ((i < kN / 2) != (j < kN / 2)) halves[i][j] = 0;
    }
  }
  CHECK(RoundsToConsensus(halves, 2, 11, 1e-3, 300) == 300);
}

}  // namespace
}  // namespace longhaul::fleet
