// Learning-rate schedule and gradient-clipping arithmetic (see optimizer.h).
#include "model/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace longhaul::model {

Status ValidateOptimizerOptions(const OptimizerOptions& o) {
  auto bad = [](const char* field, float value, const char* want) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.", field, " must be ", want, ", got ", value));
  };
  if (!(o.lr > 0 && std::isfinite(o.lr))) return bad("lr", o.lr, "positive");
  if (o.warmup_steps < 0) return bad("warmup_steps", o.warmup_steps, ">= 0");
  if (!(o.min_lr_fraction >= 0 && o.min_lr_fraction <= 1)) {
    return bad("min_lr_fraction", o.min_lr_fraction, "in [0, 1]");
  }
  if (!(o.weight_decay >= 0 && std::isfinite(o.weight_decay))) {
    return bad("weight_decay", o.weight_decay, ">= 0");
  }
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return bad("beta1", o.beta1, "in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return bad("beta2", o.beta2, "in [0, 1)");
  if (!(o.eps > 0 && std::isfinite(o.eps))) return bad("eps", o.eps, "positive");
  if (!std::isfinite(o.grad_clip)) return bad("grad_clip", o.grad_clip, "finite");
  return absl::OkStatus();
}

float LearningRate(const OptimizerOptions& o, int step, int total_steps) {
  if (step < o.warmup_steps) return o.lr * float(step + 1) / float(o.warmup_steps);
  if (o.schedule == LrSchedule::kConstant) return o.lr;
  const float min_lr = o.lr * o.min_lr_fraction;
  const int decay_steps = total_steps - o.warmup_steps;
  if (decay_steps <= 1) return o.lr;
  const float ratio = float(step - o.warmup_steps) / float(decay_steps - 1);
  const float coeff = 0.5f * (1.0f + std::cos(float(M_PI) * std::min(ratio, 1.0f)));
  return min_lr + coeff * (o.lr - min_lr);
}

float GradNorm(const std::vector<double>& slice_sums) {
  double total = 0.0;
  for (double s : slice_sums) total += s;
  return float(std::sqrt(total));
}

void AddSliceSums(const std::vector<double>& partial, std::vector<double>* total) {
  if (total->size() < partial.size()) total->resize(partial.size(), 0.0);
  for (size_t i = 0; i < partial.size(); ++i) (*total)[i] += partial[i];
}

float ClipScale(float grad_norm, float grad_clip) {
  if (grad_clip <= 0 || !(grad_norm > grad_clip)) return 1.0f;
  return grad_clip / grad_norm;
}

}  // namespace longhaul::model
