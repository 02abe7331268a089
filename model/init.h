// Deterministic GPT-2 initialisation that does not depend on how the model is split.
//
// Every (tensor, layer) slice draws from its own random stream: a std::mt19937_64 seeded
// with a SplitMix64 hash of (seed, tensor id, layer), turned into normals by Box-Muller
// computed here (std::normal_distribution is implementation-defined, this is not). So a
// layer gets the same weights whether it sits in a whole model or in any fragment, and
// the first and last fragments' copies of the tied wte are identical.
//
// GPT-2 / nanoGPT scheme: weight matrices N(0, 0.02); the residual projections attprojw
// and fcprojw N(0, 0.02 / sqrt(2 L)); wte (and the untied head of the subspace-cut variant)
// rows 0..V-1 N(0, 0.02), padded rows V..Vp-1 0;
// wpe N(0, 0.01); biases 0; layernorm weights 1.
#pragma once

#include <cstdint>

#include "model/layout.h"

namespace longhaul::model {

// Fills `out` (layout.model().slice_size(t, layer) floats) with layer `layer`'s slice of tensor
// `t` (layer is ignored for tensors that are not per-layer).
void InitSlice(const ParameterLayout& layout, uint64_t seed, Tensor t, int layer, float* out);

// Fills out[0..n) with N(0, std) from the stream seeded by SplitMix64(seed), the same
// generator as the parameters' (for tables that are not parameters, model/subspace.h).
void FillNormalStream(uint64_t seed, double std, float* out, int64_t n);

// Fills a fragment's flat parameter buffer (host, layout.total() floats).
void InitFragment(const FragmentLayout& layout, uint64_t seed, float* out);

}  // namespace longhaul::model
