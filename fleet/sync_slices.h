// What a sync group exchanges, cut into parameter slices: each whole non-layer tensor and each
// layer's slice of a per-layer tensor (model/layout.h) that a fragment holds, numbered by the
// model's slice index (ParameterLayout::SliceIndex), so that the same slice has the same
// number, the same error-feedback residual and the same stochastic-rounding seed whichever
// fragment holds it. One frame per slice keeps frames bounded by the largest tensor and gives
// a sparsifier its fraction of every slice, not of the fragment.
#pragma once

#include <cstdint>
#include <vector>

#include "model/layout.h"

namespace longhaul::fleet {

struct SyncSlice {
  int index = 0;       // ParameterLayout::SliceIndex
  int64_t offset = 0;  // in the fragment's flat array
  int64_t size = 0;    // floats
};

// The fragment's slices in index order (which is also their order in the flat array).
std::vector<SyncSlice> SyncSlices(const model::FragmentLayout& layout);

// The phase of a staggered sync (sync_options.h, stagger) that a slice syncs in: layer l's
// slices in phase l mod stagger, the embeddings (wte, wpe) with layer 0, the final layernorm
// with the last layer. The same for every split of the model. REQUIRES: stagger >= 1.
int SlicePhase(const model::ParameterLayout& model, int slice_index, int stagger);

// The share of the model's parameters in each phase of `stagger` (they sum to 1): the
// embeddings make phase 0 the largest.
std::vector<double> PhaseShares(const model::ParameterLayout& model, int stagger);

// The seed of one slice's stochastic rounding in one sync: the same on every fragment that
// holds the slice, different per sender, slice and step.
inline uint64_t SyncSeed(uint64_t step, int slice, int num_slices, int replica, int replicas) {
  return (step * static_cast<uint64_t>(num_slices) + static_cast<uint64_t>(slice)) *
             static_cast<uint64_t>(replicas) +
         static_cast<uint64_t>(replica);
}

}  // namespace longhaul::fleet
