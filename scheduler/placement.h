// The placement seam: which site runs which contiguous layer range, in which order. The
// coordinator asks a Placer; the even split below is the stand-in until the scheduler issue
// lands a planner that uses measured compute and bandwidth behind the same interface.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/config.h"

namespace longhaul::scheduler {

struct StagePlan {
  std::string site;
  int layer_begin = 0;
  int layer_end = 0;  // one past the last layer
};

struct PlacementRequest {
  model::GPT2Config model;
  std::vector<std::string> sites;  // candidate sites, in the job's preferred order
};

class Placer {
 public:
  virtual ~Placer() = default;
  virtual std::string name() const = 0;
  // Stages in pipeline order; every layer in exactly one stage.
  virtual StatusOr<std::vector<StagePlan>> Place(const PlacementRequest& request) = 0;
};

// Sites in the given order, L layers split as evenly as possible (earlier sites take the
// remainder).
std::unique_ptr<Placer> MakeEvenSplitPlacer();

}  // namespace longhaul::scheduler
