// The DiLoCo outer step (see outer_optimizer.h).
#include "fleet/outer_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"

namespace longhaul::fleet {

std::string OuterStepText(const OuterOptions& o) {
  if (IsPlainAveraging(o)) return "plain averaging (lr 1, no momentum)";
  return absl::StrCat(o.nesterov ? "Nesterov " : "", "lr ", o.lr, ", momentum ", o.momentum);
}

Status ValidateOuterOptions(const OuterOptions& o) {
  if (!std::isfinite(o.lr) || o.lr <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("sync.outer.lr must be > 0, not ", o.lr));
  }
  if (!std::isfinite(o.momentum) || o.momentum < 0 || o.momentum >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.outer.momentum must be in [0, 1), not ", o.momentum));
  }
  return absl::OkStatus();
}

void OuterOptimizer::Reset(std::span<const float> params) {
  anchor_.assign(params.begin(), params.end());
  momentum_.assign(params.size(), 0.0f);
}

Status OuterOptimizer::Restore(std::vector<float> anchor, std::vector<float> momentum) {
  if (anchor.empty() || anchor.size() != momentum.size()) {
    return absl::DataLossError(absl::StrCat("outer optimizer state: anchor of ", anchor.size(),
                                            " values, momentum of ", momentum.size()));
  }
  anchor_ = std::move(anchor);
  momentum_ = std::move(momentum);
  return absl::OkStatus();
}

void OuterOptimizer::PseudoGradient(std::span<const float> params, std::span<float> out) const {
  for (size_t i = 0; i < anchor_.size(); ++i) out[i] = anchor_[i] - params[i];
}

void OuterOptimizer::Step(const OuterOptions& o, std::span<const float> delta) {
  StepPart(o, 0, delta.first(anchor_.size()));
}

void OuterOptimizer::StepPart(const OuterOptions& o, size_t offset, std::span<const float> delta) {
  const float mu = o.momentum;
  float* anchor = anchor_.data() + offset;
  if (mu == 0.0f) {
    // Plain averaging (a job's, or sync.warmup's): no momentum is kept, so the outer step
    // after a warm-up starts with none.
    for (size_t i = 0; i < delta.size(); ++i) anchor[i] -= o.lr * delta[i];
    return;
  }
  float* momentum = momentum_.data() + offset;
  for (size_t i = 0; i < delta.size(); ++i) {
    const float buf = mu * momentum[i] + delta[i];
    momentum[i] = buf;
    const float update = o.nesterov ? delta[i] + mu * buf : buf;
    anchor[i] -= o.lr * update;
  }
}

void OuterOptimizer::Rebase(std::span<const float> started, std::span<float> params) const {
  RebasePart(0, started.first(anchor_.size()), params.first(anchor_.size()));
}

void OuterOptimizer::RebasePart(size_t offset, std::span<const float> started,
                                std::span<float> params) const {
  const float* anchor = anchor_.data() + offset;
  for (size_t i = 0; i < params.size(); ++i) params[i] = anchor[i] + (params[i] - started[i]);
}

void OuterOptimizer::MoveAnchorPart(size_t offset, std::span<const float> values) {
  std::copy(values.begin(), values.end(), anchor_.begin() + static_cast<std::ptrdiff_t>(offset));
}

void OuterOptimizer::RestartPart(size_t offset, std::span<const float> values) {
  std::copy(values.begin(), values.end(), anchor_.begin() + static_cast<ptrdiff_t>(offset));
  if (!momentum_.empty()) {
    std::fill_n(momentum_.begin() + static_cast<ptrdiff_t>(offset), values.size(), 0.0f);
  }
}

void OuterOptimizer::StepOwn(const OuterOptions& options, std::span<float> params,
                             std::vector<float>* scratch) {
  scratch->resize(size());  // kept by the caller from round to round: no allocation after one
  PseudoGradient(params.first(size()), *scratch);
  Step(options, *scratch);
  std::copy(anchor_.begin(), anchor_.end(), params.begin());
}

}  // namespace longhaul::fleet
