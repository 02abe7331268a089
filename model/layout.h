// llm.c's GPT-2 parameter layout: 16 tensors in a fixed order (a 17th, the untied head,
// only in the subspace-cut variant, where wte, wpe and the residual projections also have
// K rows instead of C: see model/subspace.h), the per-layer ones stacked
// over layers (every layer of a tensor before the next tensor). The same layout, cut to a
// layer range, is the layout of a Fragment's parameters: a fragment holds its layers'
// slices of the 12 per-layer tensors, plus wte/wpe when it is the first fragment and
// wte (its own copy: the head is tied) / lnfw / lnfb when it is the last. For the whole
// model [0, L) the fragment layout is exactly llm.c's flat parameter array.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "model/config.h"

namespace longhaul::model {

enum class Tensor : int {
  kWte = 0,   // (Vp, C) token embedding, also the output head (tied)
  kWpe,       // (maxT, C) position embedding
  kLn1w,      // (L, C)
  kLn1b,      // (L, C)
  kQkvw,      // (L, 3C, C)
  kQkvb,      // (L, 3C)
  kAttprojw,  // (L, C, C)
  kAttprojb,  // (L, C)
  kLn2w,      // (L, C)
  kLn2b,      // (L, C)
  kFcw,       // (L, 4C, C)
  kFcb,       // (L, 4C)
  kFcprojw,   // (L, C, 4C)
  kFcprojb,   // (L, C)
  kLnfw,      // (C)
  kLnfb,      // (C)
  kHead,      // (Vp, C) the untied output head of the subspace-cut variant; empty otherwise
};
inline constexpr int kNumTensors = 17;

// "wte", "qkvw", ...
const char* TensorName(Tensor t);
// True for the 12 tensors stacked over layers.
bool IsPerLayer(Tensor t);
// True for the weight matrices that get weight decay (2-D: wte, wpe, qkvw, attprojw, fcw,
// fcprojw), as in nanoGPT and llm.c's CUDA trainer; biases and layernorm params do not.
bool IsDecayed(Tensor t);
// True for the residual projections (attprojw, fcprojw), initialised with a smaller std.
bool IsResidualProjection(Tensor t);

// Sizes and offsets of the 16 tensors for the whole model.
class ParameterLayout {
 public:
  explicit ParameterLayout(const ModelConfig& config);
  // Floats of layer `layer`'s slice (per-layer tensors) or of the whole tensor (others).
  // Slices of one tensor differ only in the subspace-cut variant with unconstrained layers:
  // their residual projections write C rows where the constrained layers' write K.
  int64_t slice_size(Tensor t, int layer = 0) const {
    return IsPerLayer(t) && layer >= free_from_ ? free_slice_[int(t)] : slice_[int(t)];
  }
  // Floats of the whole tensor (all layers).
  int64_t size(Tensor t) const { return size_[int(t)]; }
  // Offset of the tensor in the flat llm.c array.
  int64_t offset(Tensor t) const { return offset_[int(t)]; }
  // Offset of layer `layer`'s slice of per-layer tensor `t`.
  int64_t offset(Tensor t, int layer) const {
    const int constrained = std::min(layer, free_from_);
    return offset_[int(t)] + constrained * slice_[int(t)] +
           (layer - constrained) * free_slice_[int(t)];
  }
  int64_t total() const { return total_; }
  const ModelConfig& config() const { return config_; }

  // Gradient-norm accounting works on "slices": each whole non-layer tensor and each
  // (per-layer tensor, layer) pair. Slices are numbered in the global order in which their
  // sums of squares are added: wte, wpe, then per-layer tensors tensor-major, layer-minor,
  // then lnfw, lnfb, then (subspace-cut variant only) head. Any split of the model sums
  // them in this same order.
  int num_slices() const { return 4 + 12 * config_.num_layers + (TiedHead(config_) ? 0 : 1); }
  int SliceIndex(Tensor t, int layer) const;

 private:
  ModelConfig config_;
  // Per-layer tensors: slices of layers < free_from_ (all of them but the subspace-cut
  // variant's unconstrained layers) are slice_, the others free_slice_.
  int free_from_ = 0;
  std::array<int64_t, kNumTensors> slice_{}, free_slice_{}, size_{}, offset_{};
  int64_t total_ = 0;
};

// Which layers and tensors a fragment holds, and where each lives in its flat buffer.
// The fragment's flat buffer has the present tensors in the global order; per-layer
// tensors hold layers [begin, end).
class FragmentLayout {
 public:
  // REQUIRES: 0 <= begin < end <= L.
  FragmentLayout(const ModelConfig& config, int begin, int end);
  int begin() const { return begin_; }
  int end() const { return end_; }
  int num_layers() const { return end_ - begin_; }
  bool is_first() const { return begin_ == 0; }
  bool is_last() const { return end_ == model_.config().num_layers; }
  bool has(Tensor t) const { return size_[int(t)] > 0; }
  // Floats of the tensor in this fragment (0 when absent).
  int64_t size(Tensor t) const { return size_[int(t)]; }
  int64_t offset(Tensor t) const { return offset_[int(t)]; }
  // Offset of global layer `layer` (begin <= layer < end) of per-layer tensor `t`.
  int64_t offset(Tensor t, int layer) const {
    return offset_[int(t)] + model_.offset(t, layer) - model_.offset(t, begin_);
  }
  int64_t total() const { return total_; }
  // One layer's parameters side by side: its slices of the per-layer tensors in tensor order,
  // the block a sharded layer (model/shard_mode.h) gathers and reduce-scatters whole.
  int64_t layer_floats(int layer) const;
  // Offset of per-layer tensor t's slice inside layer `layer`'s block.
  int64_t offset_in_layer(Tensor t, int layer) const;
  const ParameterLayout& model() const { return model_; }

  // Copies this fragment's tensors between its flat buffer and the whole model's llm.c
  // array (host memory).
  void ExtractFromModel(const float* model_params, float* fragment_params) const;
  void InsertIntoModel(const float* fragment_params, float* model_params) const;

 private:
  ParameterLayout model_;
  int begin_, end_;
  std::array<int64_t, kNumTensors> size_{}, offset_{};
  int64_t total_ = 0;
};

}  // namespace longhaul::model
