// Greedy chain starts and local search for the planner (see planner_search.h).
#include "scheduler/planner_search.h"

#include <algorithm>
#include <set>

#include "scheduler/planner_dp.h"

namespace longhaul::scheduler::internal {
namespace {

// Accepted only when it beats the incumbent by more than rounding.
bool Better(double t, double best) { return t < best * (1 - 1e-9); }

// Stage counts to try: every count up to 12, then a geometric ladder.
std::vector<int> StageCounts(int kmax) {
  std::vector<int> ks;
  for (int k = 1; k <= std::min(kmax, 12); ++k) ks.push_back(k);
  for (int k : {16, 20, 24, 32, 40, 48, 64, 96, 128, 192, 256}) {
    if (k <= kmax) ks.push_back(k);
  }
  if (ks.back() != kmax) ks.push_back(kmax);
  return ks;
}

}  // namespace

std::vector<Pipeline> ChainStarts(SearchContext* ctx, int max_starts) {
  const CostModel& m = *ctx->model;
  const int N = static_cast<int>(ctx->candidates.size()), L = m.num_layers(), M = m.microbatches();
  std::vector<int> seeds = ctx->candidates;
  std::stable_sort(seeds.begin(), seeds.end(), [&](int a, int b) {
    return m.profiles().sites[a].flops > m.profiles().sites[b].flops;
  });
  seeds.resize(std::min<size_t>(seeds.size(), 12));
  std::vector<std::pair<double, Pipeline>> found;
  std::set<std::vector<int>> chains_seen;
  for (int k : StageCounts(std::min(N, L))) {
    if (!ctx->allow_leaving_out && k != N) continue;
    const int n_typ = std::max(1, L / k);
    for (int seed : seeds) {
      if (!ctx->TimeLeft() && !found.empty()) break;
      std::vector<int> chain{seed};
      std::vector<char> used(m.num_sites(), 0);
      used[seed] = 1;
      while (static_cast<int>(chain.size()) < k) {
        const int end = chain.back();
        int pick = -1;
        double pick_score = kInfeasible;
        for (int u : ctx->candidates) {
          if (used[u] || !m.HasLink(end, u) || !m.HasLink(u, end)) continue;
          const TransferCost a = m.Activation(end, u, m.Budget(end, n_typ, false));
          const TransferCost g = m.Gradient(u, end, m.Budget(u, n_typ, false));
          double score = a.wire_seconds + a.latency_seconds + a.encode_seconds + a.decode_seconds +
                         g.wire_seconds + g.latency_seconds + g.encode_seconds + g.decode_seconds +
                         m.Forward(u, n_typ, false) + m.Backward(u, n_typ, false);
          if (!m.Fits(u, n_typ, false, false, std::min(M, k))) score += 1e9;
          if (score < pick_score) pick = u, pick_score = score;
        }
        if (pick < 0) break;
        chain.push_back(pick);
        used[pick] = 1;
      }
      if (static_cast<int>(chain.size()) != k || !chains_seen.insert(chain).second) continue;
      const auto split = SolveInOrder(m, chain);
      for (size_t i = 0; i < split.size() && i < 2; ++i) {
        const double t = ctx->Price(split[i].pipeline);
        if (t < kInfeasible) found.push_back({t, split[i].pipeline});
      }
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Pipeline> out;
  for (const auto& [t, p] : found) {
    if (static_cast<int>(out.size()) >= max_starts) break;
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

Pipeline LocalSearch(SearchContext* ctx, Pipeline best) {
  const CostModel& m = *ctx->model;
  double bt = ctx->Price(best);
  auto try_move = [&](const Pipeline& p) {
    const double t = ctx->Price(p);
    if (!Better(t, bt)) return false;
    best = p, bt = t;
    return true;
  };
  bool improved = true;
  while (improved && ctx->TimeLeft()) {
    improved = false;
    // Re-split the current order.
    const auto split = SolveInOrder(m, best.sites);
    for (size_t i = 0; i < split.size() && i < 8; ++i) improved |= try_move(split[i].pipeline);
    const int S = static_cast<int>(best.sites.size());
    // Move layers from one stage to another (the stages between keep their counts).
    for (int a = 0; a < S && ctx->TimeLeft(); ++a) {
      for (int b = 0; b < S; ++b) {
        if (a == b) continue;
        for (int d : {1, 2, 4, 8}) {
          Pipeline p = best;
          p.layers[a] += d, p.layers[b] -= d;
          if (p.layers[b] >= 1) improved |= try_move(p);
        }
      }
    }
    if (ctx->keep_order) continue;
    // Swap two stages' sites.
    for (int a = 0; a < S && ctx->TimeLeft(); ++a) {
      for (int b = a + 1; b < static_cast<int>(best.sites.size()); ++b) {
        Pipeline p = best;
        std::swap(p.sites[a], p.sites[b]);
        improved |= try_move(p);
      }
    }
    std::vector<int> unused;
    for (int u : ctx->candidates) {
      if (std::find(best.sites.begin(), best.sites.end(), u) == best.sites.end())
        unused.push_back(u);
    }
    // Replace a stage's site by an unused one.
    if (ctx->allow_leaving_out) {
      for (int a = 0; a < static_cast<int>(best.sites.size()) && ctx->TimeLeft(); ++a) {
        for (int u : unused) {
          if (std::find(best.sites.begin(), best.sites.end(), u) != best.sites.end()) continue;
          Pipeline p = best;
          p.sites[a] = u;
          improved |= try_move(p);
        }
      }
    }
    // Drop a stage, its layers going to a neighbour.
    if (ctx->allow_leaving_out) {
      for (int a = 0; a < static_cast<int>(best.sites.size()) && best.sites.size() > 1; ++a) {
        for (int side : {-1, 1}) {
          const int to = a + side;
          if (to < 0 || to >= static_cast<int>(best.sites.size())) continue;
          Pipeline p = best;
          p.layers[to] += p.layers[a];
          p.sites.erase(p.sites.begin() + a);
          p.layers.erase(p.layers.begin() + a);
          if (try_move(p)) {
            improved = true;
            break;
          }
        }
      }
    }
    // Add an unused site next to a stage, taking part of its layers.
    for (int a = 0; a < static_cast<int>(best.sites.size()) && ctx->TimeLeft(); ++a) {
      if (best.layers[a] < 2) continue;
      for (int u : unused) {
        if (std::find(best.sites.begin(), best.sites.end(), u) != best.sites.end()) continue;
        for (int after : {0, 1}) {
          // Half of the stage's layers, or a single layer (a relay between two sites).
          for (int half : {1, 0}) {
            if (a >= static_cast<int>(best.sites.size()) || best.layers[a] < 2) break;
            Pipeline p = best;
            const int moved = half ? p.layers[a] / 2 : 1;
            p.layers[a] -= moved;
            p.sites.insert(p.sites.begin() + a + after, u);
            p.layers.insert(p.layers.begin() + a + after, moved);
            improved |= try_move(p);
          }
        }
      }
    }
  }
  return best;
}

}  // namespace longhaul::scheduler::internal
