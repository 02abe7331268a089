// AdamW hyperparameters, the learning-rate schedule, and global-norm gradient clipping.
//
// Schedule (llm.c's): linear warmup lr * (step + 1) / warmup_steps over the first
// warmup_steps steps, then either constant, or cosine decay from lr to lr * min_lr_fraction
// at the last step. Clipping: the gradient norm is the square root of the sum of every
// slice's sum of squares (double, added in the global slice order of ParameterLayout);
// when it exceeds grad_clip every gradient is scaled by grad_clip / norm (no clipping when
// grad_clip <= 0). Weight decay applies to 2-D weight matrices only (IsDecayed in layout.h).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace longhaul::model {

enum class LrSchedule { kCosine, kConstant };

struct OptimizerOptions {
  float lr = 3e-4f;
  int warmup_steps = 0;
  LrSchedule schedule = LrSchedule::kCosine;
  float min_lr_fraction = 0.1f;  // cosine floor, as a fraction of lr
  float weight_decay = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float grad_clip = 1.0f;  // <= 0: no clipping
};

// Checks ranges (lr > 0, 0 <= beta < 1, eps > 0, ...); messages name the field.
Status ValidateOptimizerOptions(const OptimizerOptions& options);

// Learning rate of step `step` (0-based) of a run of `total_steps` steps.
float LearningRate(const OptimizerOptions& options, int step, int total_steps);

// sqrt of the sum of `slice_sums` added in index order.
float GradNorm(const std::vector<double>& slice_sums);

// Elementwise sum of per-fragment partial slice sums: each slice is owned by exactly one
// fragment (the others hold 0), so the result does not depend on the order of fragments.
void AddSliceSums(const std::vector<double>& partial, std::vector<double>* total);

// The factor gradients are multiplied by before the update.
float ClipScale(float grad_norm, float grad_clip);

}  // namespace longhaul::model
