// The fixed tables of the subspace-cut variant (ModelConfig::residual_subspace = K > 0).
//
// In that variant everything a block writes into the residual stream, and the learned token
// and position embeddings, lie in span(U) for a fixed orthonormal basis U (C x K); a fixed
// random token table E (Vp x C) carries each token's identity at full width. The residual
// stream at any depth is therefore x = E[token] + U c, and the model carries it as the K
// coordinates c. A pipeline cut ships c (K floats per position instead of C) and the
// receiver, which knows the tokens, rebuilds x exactly; the gradient going back is dL/dc,
// K floats too. Layers read the full x (layernorm, attention and MLP are unchanged); the
// residual projections map to K coordinates (attprojw K x C, fcprojw K x 4C), wte and wpe
// hold K-dimensional coordinates, and the output head is its own (Vp x C) tensor, untied.
//
// This is the reparameterised form (W = U W'), not projection after each optimizer step:
// the coordinates are the state, so a split model carries exactly the numbers the whole
// model computes (bit for bit), and the parameter gradients are the exact gradients of the
// constrained model whatever the optimizer; projection would let AdamW's moments see the
// components outside span(U) and would rebuild the cut through U U^T with rounding.
//
// The tables depend only on (C, K, Vp) and are drawn from a fixed seed, so every site of a
// job builds the same ones without sending them; they are not parameters (never trained,
// synced or checkpointed).
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace longhaul::model {

// The fixed token table's entries are N(0, kTokenTableStd) (rows < V).
inline constexpr double kTokenTableStd = 0.06;

struct SubspaceTables {
  std::vector<float> basis;             // U, (C, K) row-major: orthonormal columns
  std::vector<float> basis_transposed;  // U^T, (K, C)
  std::vector<float> token_table;       // E, (Vp, C): rows < V N(0, kTokenTableStd), others 0
};

// REQUIRES: config.residual_subspace > 0 and ValidateConfig(config) is OK.
SubspaceTables MakeSubspaceTables(const ModelConfig& config);

}  // namespace longhaul::model
