// A fragment's parameter slices for syncing (see sync_slices.h).
#include "fleet/sync_slices.h"

#include <algorithm>

namespace longhaul::fleet {

std::vector<SyncSlice> SyncSlices(const model::FragmentLayout& layout) {
  const model::ParameterLayout& model = layout.model();
  std::vector<SyncSlice> slices;
  for (int i = 0; i < model::kNumTensors; ++i) {
    const auto t = static_cast<model::Tensor>(i);
    if (!layout.has(t)) continue;
    if (!model::IsPerLayer(t)) {
      slices.push_back({model.SliceIndex(t, 0), layout.offset(t), layout.size(t)});
      continue;
    }
    for (int l = layout.begin(); l < layout.end(); ++l) {
      slices.push_back({model.SliceIndex(t, l), layout.offset(t, l), model.slice_size(t, l)});
    }
  }
  std::sort(slices.begin(), slices.end(),
            [](const SyncSlice& a, const SyncSlice& b) { return a.index < b.index; });
  return slices;
}

int SlicePhase(const model::ParameterLayout& model, int slice_index, int stagger) {
  const int layers = model.config().num_layers;
  int layer = 0;  // wte and wpe
  if (slice_index >= model.SliceIndex(model::Tensor::kLnfw, 0)) {
    layer = layers - 1;  // lnfw, lnfb, head
  } else if (slice_index >= 2) {
    layer = (slice_index - 2) % layers;  // per-layer tensors, tensor-major
  }
  return layer % std::max(1, stagger);
}

std::vector<double> PhaseShares(const model::ParameterLayout& model, int stagger) {
  std::vector<double> shares(static_cast<size_t>(std::max(1, stagger)), 0.0);
  const model::FragmentLayout whole(model.config(), 0, model.config().num_layers);
  for (const SyncSlice& slice : SyncSlices(whole)) {
    shares[static_cast<size_t>(SlicePhase(model, slice.index, stagger))] +=
        static_cast<double>(slice.size) / static_cast<double>(model.total());
  }
  return shares;
}

}  // namespace longhaul::fleet
