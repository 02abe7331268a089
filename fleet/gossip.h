// Gossip among pipeline replicas over time-varying directed links: the arithmetic of issue 36's
// `sync: {reduce: gossip}`, before the daemon carries it, and the reference it will be tested
// against. No job-wide collective: in each round every replica sends to a few out-neighbours
// only, chosen from the measured link matrix, and the graph changes from round to round.
//
// - The round's graph (GossipGraph, ChooseGossipGraph): each node's out-neighbours, `fanout`
//   distinct others drawn with probability proportional to the link's measured bandwidth; a
//   link that is down (bandwidth 0) is never drawn. The same (matrix, seed, round) gives the
//   same graph on every site, so a receiver knows whom it hears from.
// - Push-sum (Kempe, Dobra, Gehrke 2003): every node keeps a value vector and a weight; in a
//   round it keeps one share of both and pushes one equal share to each out-neighbour. The
//   mixing is column stochastic, so the sum of the values and of the weights over the nodes
//   never changes, and each node's estimate, value / weight, tends to the average of the
//   initial values whenever the union of the rounds' graphs over some window is strongly
//   connected, however they are directed.
// - Gradient tracking (Push-DIGing: Nedic, Olshevsky, Shi 2017; for time-varying directed
//   graphs as in the seed of Chen, Hashemi and Vikalo): beside its parameters each node mixes a
//   tracker of the average gradient, corrected each round by the change of its own gradient,
//   and steps along the tracker instead of its own gradient. With nodes on different data
//   (different local objectives) plain push-sum gradient descent at a constant step settles at a
//   point biased towards each node's own optimum; with tracking every node converges to the
//   minimizer of the sum.
// - ConsensusDistance: how far the nodes' estimates are from their mean (the quantity the
//   status will show).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace longhaul::fleet {

struct GossipGraph {
  std::vector<std::vector<int>> out;  // by node: the nodes it sends to this round
  int nodes() const { return static_cast<int>(out.size()); }
  // The nodes that send to `node` this round, ascending.
  std::vector<int> In(int node) const {
    std::vector<int> in;
    for (int j = 0; j < nodes(); ++j) {
      for (int i : out[static_cast<size_t>(j)]) {
        if (i == node) in.push_back(j);
      }
    }
    return in;
  }
};

// The graph of round `round`: for each node i, min(fanout, its up links) distinct nodes j != i
// drawn without replacement with probability bandwidth[i][j] / (the sum over those left), from
// `seed` and `round` alone. A link whose bandwidth is not a positive finite number is down.
// REQUIRES: a square matrix.
GossipGraph ChooseGossipGraph(const std::vector<std::vector<double>>& bandwidth, int fanout,
                              uint64_t seed, uint64_t round);

// The one-peer exponential graph of round `round` (Ying, Yuan, Chen, Hu, Pan and Yin 2021),
// its direction turned every period: with h = ceil(log2 n), node i sends to
// (i + 2^(round mod h)) mod n in even periods of h rounds and to (i - 2^(round mod h)) mod n in
// odd ones, alone, or to nobody when that link is down (not a positive finite number in
// `bandwidth`). With n a power of two and every link up, each period's h rounds of push-sum give
// every node the exact average (either way round); a random graph's rounds only come near it.
// Turning keeps every link's reverse in the schedule: over compressed links a receiver's request
// for a key frame reaches its sender within a period (fleet/gossip_link_node.h).
// REQUIRES: a square matrix.
GossipGraph ExponentialGossipGraph(const std::vector<std::vector<double>>& bandwidth,
                                   uint64_t round);

// One push-sum round over every node's (value, weight), in place: node j keeps 1 / (1 + d_j) of
// its value and weight and sends as much to each of its d_j out-neighbours; each node's new
// value and weight are the sums of what it kept and received, added in node order (so every
// simulation of the same round gives the same bits). REQUIRES: values[i].size() equal for all
// i; one weight per node; g.nodes() == values.size().
void PushSumRound(const GossipGraph& g, std::vector<std::vector<double>>* values,
                  std::vector<double>* weights);

// Node i's estimate: values[i] / weights[i].
std::vector<double> PushSumEstimate(std::span<const double> value, double weight);

// The root mean square over nodes of the distance of each estimate from their mean.
double ConsensusDistance(const std::vector<std::vector<double>>& estimates);

// The rounds push-sum takes over ChooseGossipGraph's graphs of `bandwidth` (fanout, seed) until
// the consensus distance of N distinct starting values falls to `fraction` of where it started
// (the cost model's rounds to consensus); `max_rounds` when it has not within them (a matrix
// whose up links never connect the nodes never does).
int RoundsToConsensus(const std::vector<std::vector<double>>& bandwidth, int fanout, uint64_t seed,
                      double fraction, int max_rounds);

// Distributed gradient descent over the rounds' graphs: every node i minimizes the sum over
// nodes of f_i from its own start, knowing only grad f_i. `graph_of(round)` gives each round's
// graph; `grad(i, x)` node i's gradient at x.
struct GossipDescentOptions {
  double step = 0.1;
  int rounds = 100;
  bool tracking = true;  // Push-DIGing; false: push-sum gradient descent (subgradient-push)
};
// Each node's estimate after `rounds` rounds.
std::vector<std::vector<double>> GossipDescent(
    const std::vector<std::vector<double>>& start, const GossipDescentOptions& options,
    const std::function<GossipGraph(int round)>& graph_of,
    const std::function<std::vector<double>(int node, std::span<const double> x)>& grad);

}  // namespace longhaul::fleet
