// Fragment gradient bookkeeping and the AdamW step. Every reduction and update runs per
// slice (one layer of one tensor), so its shape, and therefore its bits, are the same
// whatever the split of the model.
#include <algorithm>

#include "model/fragment.h"

namespace longhaul::model {

void Fragment::ZeroGrads() {
  if (!options_.training) return;
  ops_->Zero(grads_, held_floats_);
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
  for (const SliceRef& s : slices_) {
    if (s.held < 0) continue;  // a bound layer: its owner's
    if (s.tensor == Tensor::kWte && !is_first())
      continue;  // the first fragment counts the tied wte
    sums[model.SliceIndex(s.tensor, s.layer)] = ops_->SumSquares(G(s.tensor, s.layer), s.floats);
  }
  return sums;
}

void Fragment::Step(const OptimizerOptions& o, float lr, float grad_scale, int t) {
  if (!options_.training) return;
  for (const SliceRef& s : slices_) {
    if (s.held < 0) continue;
    // The part of the slice whose moments this fragment holds (all of it unsharded).
    const int64_t b = std::max(s.held, opt_begin_);
    const int64_t e = std::min(s.held + s.floats, opt_end_);
    if (b >= e) continue;
    const float decay = IsDecayed(s.tensor) ? o.weight_decay : 0.0f;
    ops_->AdamW(params_ + b, grads_ + b, m_ + (b - opt_begin_), v_ + (b - opt_begin_), e - b, lr,
                o.beta1, o.beta2, o.eps, decay, grad_scale, t);
  }
}

void Fragment::GetGradients(float* host) const {
  if (!options_.training) return;
  if (held_floats_ == layout_.total()) return ops_->Download(host, grads_, held_floats_);
  for (const SliceRef& s : slices_) {
    if (s.held >= 0) ops_->Download(host + s.flat, grads_ + s.held, s.floats);
  }
}

void Fragment::SetGradients(const float* host) {
  if (!options_.training) return;
  if (held_floats_ == layout_.total()) {
    ops_->Upload(grads_, host, held_floats_);
  } else {
    for (const SliceRef& s : slices_) {
      if (s.held >= 0) ops_->Upload(grads_ + s.held, host + s.flat, s.floats);
    }
  }
  if (tied_peer_ != nullptr) ops_->Zero(tied_peer_, layout_.model().size(Tensor::kWte));
}

// The moments of the held slices' part [opt_begin_, opt_end_), at the slices' places in the
// whole layout's host arrays.
void Fragment::GetOptimizerState(float* m_host, float* v_host) const {
  if (!options_.training) return;
  for (const SliceRef& s : slices_) {
    const int64_t b = std::max(s.held, opt_begin_), e = std::min(s.held + s.floats, opt_end_);
    if (s.held < 0 || b >= e) continue;
    ops_->Download(m_host + s.flat + (b - s.held), m_ + (b - opt_begin_), e - b);
    ops_->Download(v_host + s.flat + (b - s.held), v_ + (b - opt_begin_), e - b);
  }
}

void Fragment::SetOptimizerState(const float* m_host, const float* v_host) {
  if (!options_.training) return;
  for (const SliceRef& s : slices_) {
    const int64_t b = std::max(s.held, opt_begin_), e = std::min(s.held + s.floats, opt_end_);
    if (s.held < 0 || b >= e) continue;
    ops_->Upload(m_ + (b - opt_begin_), m_host + s.flat + (b - s.held), e - b);
    ops_->Upload(v_ + (b - opt_begin_), v_host + s.flat + (b - s.held), e - b);
  }
}

}  // namespace longhaul::model
