// What the gossip tests share: replicas' parameters drawn uniform in [0, 1), a link matrix
// with every link alike, and the replicas' consensus distance and mean.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/splitmix64.h"
#include "fleet/gossip.h"

namespace longhaul::fleet::testing {

// `n` replicas of `p` parameters, each uniform in [0, 1) from `seed`.
inline std::vector<std::vector<float>> UniformStart(int n, size_t p, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<std::vector<float>> x(static_cast<size_t>(n), std::vector<float>(p));
  for (auto& row : x) {
    for (float& v : row) v = static_cast<float>(rng.Uniform());
  }
  return x;
}

inline std::vector<std::vector<double>> AllLinks(int n) {
  return std::vector<std::vector<double>>(static_cast<size_t>(n),
                                          std::vector<double>(static_cast<size_t>(n), 1.0));
}

inline double Distance(const std::vector<std::vector<float>>& x) {
  std::vector<std::vector<double>> d(x.size());
  for (size_t r = 0; r < x.size(); ++r) d[r].assign(x[r].begin(), x[r].end());
  return ConsensusDistance(d);
}

inline std::vector<double> Mean(const std::vector<std::vector<float>>& x) {
  std::vector<double> mean(x.empty() ? 0 : x[0].size(), 0.0);
  for (const auto& row : x) {
    for (size_t c = 0; c < mean.size(); ++c) mean[c] += row[c] / static_cast<double>(x.size());
  }
  return mean;
}

}  // namespace longhaul::fleet::testing
