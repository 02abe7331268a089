// Gossip rounds, push-sum and gradient tracking (gossip.h).
#include "fleet/gossip.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/splitmix64.h"

namespace longhaul::fleet {
namespace {

// The round's mixing of one vector per node: node j keeps a share 1 / (1 + d_j) and sends as
// much to each out-neighbour; each node sums what it kept and received in node order.
std::vector<std::vector<double>> Mix(const GossipGraph& g,
                                     const std::vector<std::vector<double>>& in) {
  const size_t n = in.size(), dim = n == 0 ? 0 : in[0].size();
  std::vector<std::vector<double>> out(n, std::vector<double>(dim, 0.0));
  // Received shares gathered per receiver first, then added in sender order.
  std::vector<std::vector<int>> from(n);
  for (size_t j = 0; j < n; ++j) {
    from[j].push_back(static_cast<int>(j));
    for (int i : g.out[j]) from[static_cast<size_t>(i)].push_back(static_cast<int>(j));
  }
  for (size_t i = 0; i < n; ++i) {
    std::vector<int> senders = from[i];
    std::sort(senders.begin(), senders.end());
    for (int j : senders) {
      const double share = 1.0 / (1.0 + static_cast<double>(g.out[static_cast<size_t>(j)].size()));
      const std::vector<double>& v = in[static_cast<size_t>(j)];
      for (size_t k = 0; k < dim; ++k) out[i][k] += share * v[k];
    }
  }
  return out;
}

std::vector<double> MixScalars(const GossipGraph& g, const std::vector<double>& in) {
  std::vector<std::vector<double>> as(in.size());
  for (size_t i = 0; i < in.size(); ++i) as[i] = {in[i]};
  std::vector<std::vector<double>> mixed = Mix(g, as);
  std::vector<double> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = mixed[i][0];
  return out;
}

}  // namespace

GossipGraph ChooseGossipGraph(const std::vector<std::vector<double>>& bandwidth, int fanout,
                              uint64_t seed, uint64_t round) {
  const int n = static_cast<int>(bandwidth.size());
  GossipGraph g;
  g.out.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    // One stream per (seed, round, node): every site draws the same graph.
    SplitMix64 rng(seed ^ (round * 0x9E3779B97F4A7C15ull) ^ (uint64_t(i) << 32 | 0x5bd1e995u));
    rng.Next();
    std::vector<double> w(static_cast<size_t>(n), 0.0);
    for (int j = 0; j < n; ++j) {
      const double b = bandwidth[static_cast<size_t>(i)][static_cast<size_t>(j)];
      if (j != i && b > 0 && std::isfinite(b)) w[static_cast<size_t>(j)] = b;
    }
    for (int pick = 0; pick < fanout; ++pick) {
      const double total = std::accumulate(w.begin(), w.end(), 0.0);
      if (total <= 0) break;
      // A uniform draw in [0, total) over the remaining links' cumulative weights.
      const double u = rng.Uniform() * total;
      double acc = 0;
      int chosen = -1;
      for (int j = 0; j < n; ++j) {
        if (w[static_cast<size_t>(j)] <= 0) continue;
        acc += w[static_cast<size_t>(j)];
        chosen = j;
        if (u < acc) break;
      }
      g.out[static_cast<size_t>(i)].push_back(chosen);
      w[static_cast<size_t>(chosen)] = 0;
    }
    std::sort(g.out[static_cast<size_t>(i)].begin(), g.out[static_cast<size_t>(i)].end());
  }
  return g;
}

GossipGraph ExponentialGossipGraph(const std::vector<std::vector<double>>& bandwidth,
                                   uint64_t round) {
  const size_t n = bandwidth.size();
  GossipGraph g;
  g.out.resize(n);
  if (n < 2) return g;
  uint64_t hops = 0;  // ceil(log2 n): the offsets 1, 2, 4, ... below n
  while ((uint64_t{1} << hops) < n) ++hops;
  // Forward in even periods of `hops` rounds, backward in odd ones.
  size_t offset = size_t{1} << (round % hops);
  if ((round / hops) % 2 == 1) offset = n - offset % n;
  for (size_t i = 0; i < n; ++i) {
    const size_t j = (i + offset) % n;
    const double b = bandwidth[i][j];
    if (j != i && b > 0 && std::isfinite(b)) g.out[i].push_back(static_cast<int>(j));
  }
  return g;
}

void PushSumRound(const GossipGraph& g, std::vector<std::vector<double>>* values,
                  std::vector<double>* weights) {
  *values = Mix(g, *values);
  *weights = MixScalars(g, *weights);
}

std::vector<double> PushSumEstimate(std::span<const double> value, double weight) {
  std::vector<double> out(value.begin(), value.end());
  for (double& v : out) v /= weight;
  return out;
}

double ConsensusDistance(const std::vector<std::vector<double>>& estimates) {
  if (estimates.empty()) return 0;
  const size_t n = estimates.size(), dim = estimates[0].size();
  std::vector<double> mean(dim, 0.0);
  for (const auto& e : estimates) {
    for (size_t k = 0; k < dim; ++k) mean[k] += e[k] / static_cast<double>(n);
  }
  double sum = 0;
  for (const auto& e : estimates) {
    for (size_t k = 0; k < dim; ++k) sum += (e[k] - mean[k]) * (e[k] - mean[k]);
  }
  return std::sqrt(sum / static_cast<double>(n));
}

int RoundsToConsensus(const std::vector<std::vector<double>>& bandwidth, int fanout, uint64_t seed,
                      double fraction, int max_rounds) {
  const size_t n = bandwidth.size();
  std::vector<std::vector<double>> values(n), estimates(n);
  std::vector<double> weights(n, 1.0);
  for (size_t i = 0; i < n; ++i) values[i] = {static_cast<double>(i)};
  const double start = ConsensusDistance(values);
  if (start == 0) return 0;
  for (int round = 0; round < max_rounds; ++round) {
    PushSumRound(ChooseGossipGraph(bandwidth, fanout, seed, static_cast<uint64_t>(round)), &values,
                 &weights);
    for (size_t i = 0; i < n; ++i) estimates[i] = PushSumEstimate(values[i], weights[i]);
    if (ConsensusDistance(estimates) <= fraction * start) return round + 1;
  }
  return max_rounds;
}

std::vector<std::vector<double>> GossipDescent(
    const std::vector<std::vector<double>>& start, const GossipDescentOptions& options,
    const std::function<GossipGraph(int round)>& graph_of,
    const std::function<std::vector<double>(int node, std::span<const double> x)>& grad) {
  const size_t n = start.size();
  std::vector<std::vector<double>> u = start, x = start, g(n), y(n);
  std::vector<double> v(n, 1.0);
  for (size_t i = 0; i < n; ++i) g[i] = grad(static_cast<int>(i), x[i]);
  y = g;  // the tracker starts at each node's own gradient
  for (int round = 0; round < options.rounds; ++round) {
    const GossipGraph graph = graph_of(round);
    // u - step x (the tracker, or the node's own gradient)
    const std::vector<std::vector<double>>& direction = options.tracking ? y : g;
    for (size_t i = 0; i < n; ++i) {
      for (size_t k = 0; k < u[i].size(); ++k) u[i][k] -= options.step * direction[i][k];
    }
    u = Mix(graph, u);
    v = MixScalars(graph, v);
    std::vector<std::vector<double>> next_g(n);
    for (size_t i = 0; i < n; ++i) {
      x[i] = PushSumEstimate(u[i], v[i]);
      next_g[i] = grad(static_cast<int>(i), x[i]);
    }
    if (options.tracking) {
      y = Mix(graph, y);
      for (size_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < y[i].size(); ++k) y[i][k] += next_g[i][k] - g[i][k];
      }
    }
    g = std::move(next_g);
  }
  return x;
}

}  // namespace longhaul::fleet
