// Fragment gradient bookkeeping and the AdamW step. Every reduction and update runs per
// slice (one layer of one tensor), so its shape, and therefore its bits, are the same
// whatever the split of the model.
#include <algorithm>

#include "model/fragment.h"

namespace longhaul::model {

void Fragment::ZeroGrads() {
  if (!options_.training) return;
  ops_->Zero(grads_, layout_.total());
  if (tied_peer_ != nullptr) ops_->Zero(tied_peer_, layout_.model().size(Tensor::kWte));
}

const float* Fragment::TiedGradOwn() const {
  return tied_peer_ == nullptr ? nullptr : G(Tensor::kWte);
}

float* Fragment::MutableTiedGradOwn() { return tied_peer_ == nullptr ? nullptr : G(Tensor::kWte); }

float* Fragment::TiedGradPeer() { return tied_peer_; }

void Fragment::CombineTiedGrads() {
  if (tied_peer_ == nullptr) return;
  float* g = G(Tensor::kWte);
  const size_t n = layout_.model().size(Tensor::kWte);
  // head part + encoder part, in that order, in both fragments (in place: out aliases one
  // input elementwise, which every backend's ResidualForward allows).
  if (is_last()) {
    ops_->ResidualForward(g, g, tied_peer_, n);
  } else {
    ops_->ResidualForward(g, tied_peer_, g, n);
  }
}

std::vector<double> Fragment::GradSliceSums() const {
  const ParameterLayout& model = layout_.model();
  std::vector<double> sums(model.num_slices(), 0.0);
  if (!options_.training) return sums;
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    if (!layout_.has(t)) continue;
    if (t == Tensor::kWte && !is_first()) continue;  // the first fragment counts the tied wte
    if (!IsPerLayer(t)) {
      sums[model.SliceIndex(t, 0)] = ops_->SumSquares(G(t), model.size(t));
      continue;
    }
    for (int l = layout_.begin(); l < layout_.end(); ++l) {
      sums[model.SliceIndex(t, l)] = ops_->SumSquares(G(t, l), model.slice_size(t, l));
    }
  }
  return sums;
}

void Fragment::Step(const OptimizerOptions& o, float lr, float grad_scale, int t) {
  if (!options_.training) return;
  const ParameterLayout& model = layout_.model();
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor tensor = Tensor(i);
    if (!layout_.has(tensor)) continue;
    const float decay = IsDecayed(tensor) ? o.weight_decay : 0.0f;
    const int first = IsPerLayer(tensor) ? layout_.begin() : 0;
    const int last = IsPerLayer(tensor) ? layout_.end() : 1;
    for (int l = first; l < last; ++l) {
      const int64_t off = IsPerLayer(tensor) ? layout_.offset(tensor, l) : layout_.offset(tensor);
      // The part of the slice whose moments this fragment holds (all of it unsharded).
      const int64_t b = std::max(off, opt_begin_);
      const int64_t e = std::min(off + model.slice_size(tensor, l), opt_end_);
      if (b >= e) continue;
      ops_->AdamW(params_ + b, grads_ + b, m_ + (b - opt_begin_), v_ + (b - opt_begin_), e - b, lr,
                  o.beta1, o.beta2, o.eps, decay, grad_scale, t);
    }
  }
}

void Fragment::GetGradients(float* host) const {
  if (!options_.training) return;
  ops_->Download(host, grads_, layout_.total());
}

void Fragment::SetGradients(const float* host) {
  if (!options_.training) return;
  ops_->Upload(grads_, host, layout_.total());
  if (tied_peer_ != nullptr) ops_->Zero(tied_peer_, layout_.model().size(Tensor::kWte));
}

void Fragment::GetOptimizerState(float* m_host, float* v_host) const {
  if (!options_.training || opt_end_ <= opt_begin_) return;
  ops_->Download(m_host + opt_begin_, m_, opt_end_ - opt_begin_);
  ops_->Download(v_host + opt_begin_, v_, opt_end_ - opt_begin_);
}

void Fragment::SetOptimizerState(const float* m_host, const float* v_host) {
  if (!options_.training || opt_end_ <= opt_begin_) return;
  ops_->Upload(m_, m_host + opt_begin_, opt_end_ - opt_begin_);
  ops_->Upload(v_, v_host + opt_begin_, opt_end_ - opt_begin_);
}

}  // namespace longhaul::model
