// The even split (the coordinator's default placement) and plan checks shared by every placer.
#include "scheduler/placement.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/layer_range.h"

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

Status ValidatePlan(const std::vector<StagePlan>& plan, int num_layers) {
  if (plan.empty()) return absl::InvalidArgumentError("plan: no stages");
  std::set<std::string> seen;
  int next = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const StagePlan& s = plan[i];
    if (s.layer_begin != next || s.layer_end <= s.layer_begin) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: stage ", i, " (", s.site, ") has layers [", s.layer_begin, ", ",
                       s.layer_end, "), expected a non-empty range from ", next));
    }
    if (!seen.insert(s.site).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("plan: site '", s.site, "' runs more than one stage"));
    }
    next = s.layer_end;
  }
  if (next != num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("plan: stages cover layers ", LayerRange(0, next), " of ", num_layers));
  }
  return absl::OkStatus();
}

std::string PlanDebugString(const std::vector<StagePlan>& plan) {
  std::string out;
  for (const StagePlan& s : plan) {
    absl::StrAppend(&out, out.empty() ? "" : " ", s.site, LayerRange(s.layer_begin, s.layer_end));
  }
  return out;
}

}  // namespace longhaul::scheduler
