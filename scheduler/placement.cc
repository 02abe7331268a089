#include "scheduler/placement.h"

namespace longhaul::scheduler {
namespace {

class EvenSplitPlacer final : public Placer {
 public:
  std::string name() const override { return "even-split"; }

  StatusOr<std::vector<StagePlan>> Place(const PlacementRequest& r) override {
    const int L = r.model.num_layers;
    const int S = static_cast<int>(r.sites.size());
    if (S == 0) return absl::InvalidArgumentError("placement: no sites");
    if (S > L) {
      return absl::InvalidArgumentError("placement: " + std::to_string(S) + " sites but only " +
                                        std::to_string(L) + " layers");
    }
    std::vector<StagePlan> plan;
    int begin = 0;
    for (int i = 0; i < S; ++i) {
      const int n = L / S + (i < L % S ? 1 : 0);
      plan.push_back({r.sites[i], begin, begin + n});
      begin += n;
    }
    return plan;
  }
};

}  // namespace

std::unique_ptr<Placer> MakeEvenSplitPlacer() { return std::make_unique<EvenSplitPlacer>(); }

}  // namespace longhaul::scheduler
