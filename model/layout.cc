// Parameter layout (llm.c's for gpt2, the same slots for llama): sizes, offsets, and copies between
// model and fragment buffers.
#include "model/layout.h"

#include <cstring>

namespace longhaul::model {

const char* TensorName(Tensor t) {
  static const char* kNames[kNumTensors] = {"wte",      "wpe",      "ln1w", "ln1b", "qkvw", "qkvb",
                                            "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                                            "fcprojw",  "fcprojb",  "lnfw", "lnfb", "head"};
  return kNames[int(t)];
}

bool IsPerLayer(Tensor t) {
  return t != Tensor::kWte && t != Tensor::kWpe && t != Tensor::kLnfw && t != Tensor::kLnfb &&
         t != Tensor::kHead;
}

bool IsDecayed(Tensor t) {
  return t == Tensor::kWte || t == Tensor::kWpe || t == Tensor::kQkvw || t == Tensor::kAttprojw ||
         t == Tensor::kFcw || t == Tensor::kFcprojw || t == Tensor::kHead;
}

bool IsResidualProjection(Tensor t) { return t == Tensor::kAttprojw || t == Tensor::kFcprojw; }

ParameterLayout::ParameterLayout(const ModelConfig& c) : config_(c) {
  const int64_t C = c.channels, L = c.num_layers;
  // What a constrained layer writes into the residual stream has R rows: C, or K coordinates
  // in the subspace-cut variant; its unconstrained layers (from free_from_ on) write C.
  const int64_t R = CutWidth(c);
  const int64_t Vp = c.padded_vocab_size;
  free_from_ = FirstUnconstrainedLayer(c);
  // Family llama fills the same slots: ln1w / ln2w / lnfw are RMSNorm weights, qkvw the q, k
  // and v projections stacked ((NH + 2 NKV) HD rows), attprojw o_proj, fcw gate_proj and
  // up_proj stacked (2I rows), fcprojw down_proj; biases, wpe and layernorm biases are empty.
  const LayerWidths w = Widths(c);
  const bool gpt2 = c.family == Family::kGpt2;
  const int64_t bias = gpt2 ? 1 : 0;
  const int64_t slices[kNumTensors] = {Vp * R,
                                       gpt2 ? int64_t(c.max_seq_len) * R : 0,
                                       C,
                                       C * bias,
                                       w.qkv * C,
                                       w.qkv * bias,
                                       R * w.attention,
                                       R * bias,
                                       C,
                                       C * bias,
                                       w.mlp_in * C,
                                       w.mlp_in * bias,
                                       R * w.mlp_hidden,
                                       R * bias,
                                       C,
                                       C * bias,
                                       TiedHead(c) ? 0 : Vp * C};
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    slice_[i] = slices[i];
    free_slice_[i] = slices[i];
    if (t == Tensor::kAttprojw || t == Tensor::kFcprojw) free_slice_[i] = slices[i] / R * C;
    if (t == Tensor::kAttprojb || t == Tensor::kFcprojb) free_slice_[i] = C * bias;
    size_[i] =
        IsPerLayer(t) ? slice_[i] * free_from_ + free_slice_[i] * (L - free_from_) : slices[i];
    offset_[i] = total_;
    total_ += size_[i];
  }
}

int ParameterLayout::SliceIndex(Tensor t, int layer) const {
  switch (t) {
    case Tensor::kWte:
      return 0;
    case Tensor::kWpe:
      return 1;
    case Tensor::kLnfw:
      return 2 + 12 * config_.num_layers;
    case Tensor::kLnfb:
      return 3 + 12 * config_.num_layers;
    case Tensor::kHead:
      return 4 + 12 * config_.num_layers;
    default:
      return 2 + (int(t) - int(Tensor::kLn1w)) * config_.num_layers + layer;
  }
}

FragmentLayout::FragmentLayout(const ModelConfig& config, int begin, int end)
    : model_(config), begin_(begin), end_(end) {
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    int64_t size = 0;
    if (IsPerLayer(t)) {
      size = model_.offset(t, end) - model_.offset(t, begin);
    } else if (t == Tensor::kWte) {
      // The standard model's last fragment holds a copy of wte: its output head.
      const bool tied_copy = is_last() && TiedHead(config);
      size = (is_first() || tied_copy) ? model_.size(t) : 0;
    } else if (t == Tensor::kWpe) {
      size = is_first() ? model_.size(t) : 0;
    } else {
      size = is_last() ? model_.size(t) : 0;
    }
    size_[i] = size;
    offset_[i] = total_;
    total_ += size;
  }
}

int64_t FragmentLayout::layer_floats(int layer) const {
  int64_t n = 0;
  for (int i = 0; i < kNumTensors; ++i) {
    if (IsPerLayer(Tensor(i))) n += model_.slice_size(Tensor(i), layer);
  }
  return n;
}

int64_t FragmentLayout::offset_in_layer(Tensor t, int layer) const {
  int64_t n = 0;
  for (int i = 0; i < int(t); ++i) {
    if (IsPerLayer(Tensor(i))) n += model_.slice_size(Tensor(i), layer);
  }
  return n;
}

void FragmentLayout::ExtractFromModel(const float* model_params, float* fragment_params) const {
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    if (!has(t)) continue;
    const int64_t src = IsPerLayer(t) ? model_.offset(t, begin_) : model_.offset(t);
    std::memcpy(fragment_params + offset(t), model_params + src, size(t) * sizeof(float));
  }
}

void FragmentLayout::InsertIntoModel(const float* fragment_params, float* model_params) const {
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    if (!has(t)) continue;
    const int64_t dst = IsPerLayer(t) ? model_.offset(t, begin_) : model_.offset(t);
    std::memcpy(model_params + dst, fragment_params + offset(t), size(t) * sizeof(float));
  }
}

}  // namespace longhaul::model
