#include "scheduler/rebalance.h"

#include <algorithm>
#include <limits>

namespace longhaul::scheduler {

StatusOr<RebalanceResult> Rebalance(const std::vector<StagePlan>& current,
                                    const std::vector<double>& seconds_per_layer) {
  const int S = static_cast<int>(current.size());
  if (S == 0 || seconds_per_layer.size() != current.size()) {
    return absl::InvalidArgumentError("rebalance: one time per stage is needed");
  }
  int L = 0;
  RebalanceResult r;
  for (int k = 0; k < S; ++k) {
    if (!(seconds_per_layer[k] > 0)) {
      return absl::InvalidArgumentError("rebalance: stage " + std::to_string(k) +
                                        " has no positive time per layer");
    }
    L += current[k].layers();
    r.current_bottleneck_seconds =
        std::max(r.current_bottleneck_seconds, current[k].layers() * seconds_per_layer[k]);
  }
  // best[k][l]: the smallest bottleneck of stages 0..k-1 holding the first l layers.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(S + 1, std::vector<double>(L + 1, inf));
  std::vector<std::vector<int>> take(S + 1, std::vector<int>(L + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= S; ++k) {
    for (int l = k; l <= L - (S - k); ++l) {
      for (int n = 1; n <= l - (k - 1); ++n) {
        const double v = std::max(best[k - 1][l - n], n * seconds_per_layer[k - 1]);
        // Ties keep the current split where possible (fewer layers move).
        if (v < best[k][l] - 1e-12 || (v <= best[k][l] + 1e-12 && n == current[k - 1].layers())) {
          best[k][l] = v;
          take[k][l] = n;
        }
      }
    }
  }
  r.bottleneck_seconds = best[S][L];
  r.stages.resize(S);
  for (int k = S, l = L; k >= 1; --k) {
    const int n = take[k][l];
    r.stages[k - 1] = {current[k - 1].site, l - n, l};
    l -= n;
  }
  return r;
}

}  // namespace longhaul::scheduler
