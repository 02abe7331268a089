// Rotary position embedding tables of a llama model, computed as Hugging Face's Llama
// computes them: inverse frequencies theta^(-2j/HD) for j < HD/2, rescaled by `rope_scaling`
// of type llama3 when the config has one, and the angle t * inv_freq[j] taken in fp32 for each
// position t < T. The kernels (kernels/ops.h RopeForward) read cos and sin of those angles.
#pragma once

#include <vector>

#include "model/config.h"

namespace longhaul::model {

// The HD/2 inverse frequencies, llama3 scaling applied.
std::vector<float> RopeInverseFrequencies(const ModelConfig& config);

struct RopeTables {
  std::vector<float> cos, sin;  // (T, HD/2) each, row t for position t
};
// REQUIRES: config.family == Family::kLlama, validated; T >= 0.
RopeTables MakeRopeTables(const ModelConfig& config, int T);

}  // namespace longhaul::model
