// The outer optimizer of local-step data parallelism across pipeline replicas (DiLoCo,
// Douillard et al. 2023): every replica trains `every` inner steps with its own AdamW, then
// the group averages the replicas' pseudo-gradients (the parameters at the last outer step,
// the anchor, minus the parameters now) and takes one SGD step with Nesterov momentum from
// the anchor:
//
//   buf    = momentum * buf + delta
//   update = nesterov ? delta + momentum * buf : buf
//   anchor = anchor - lr * update            (every replica continues from the new anchor)
//
// which is PyTorch's SGD(nesterov=True) applied to the pseudo-gradient. With lr 1 and no
// momentum the new anchor is the plain average of the replicas. Every member of a sync group
// holds one OuterOptimizer over the same tensor and feeds it the same delta, so the anchors
// stay bit-identical on every site. Its state (anchor and buf) is checkpointed with the stage.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace longhaul::fleet {

// DiLoCo's values. A job file that gives no outer step gets DefaultOuterStep's
// (fleet/sync_options.h: by the sync's reduce, codec and cadence), not these.
struct OuterOptions {
  float lr = 0.7f;        // DiLoCo's outer learning rate
  float momentum = 0.9f;  // in [0, 1)
  bool nesterov = true;
};

// The ranges a job file's sync.outer takes (and a coordinator's record or assignment).
inline constexpr double kMinOuterLr = 1e-9, kMaxOuterLr = 100, kMaxOuterMomentum = 0.999999;

// lr 1 and no momentum: the new anchor is the plain average (gossip's default).
inline constexpr OuterOptions kPlainAveraging{1.0f, 0.0f, true};
inline bool IsPlainAveraging(const OuterOptions& o) { return o.lr == 1.0f && o.momentum == 0.0f; }

// "plain averaging (lr 1, no momentum)" or "Nesterov lr 0.7, momentum 0.9", for plans and
// status lines.
std::string OuterStepText(const OuterOptions& options);

// Ranges: lr finite and > 0, momentum in [0, 1); messages name the field.
Status ValidateOuterOptions(const OuterOptions& options);

class OuterOptimizer {
 public:
  // Starts from `params` as the anchor, with no momentum.
  void Reset(std::span<const float> params);
  // A checkpointed state; fails (naming the sizes) unless both have the same, non-zero size.
  Status Restore(std::vector<float> anchor, std::vector<float> momentum);

  // This replica's pseudo-gradient, anchor - params, into `out`.
  // REQUIRES: params.size() == out.size() == size().
  void PseudoGradient(std::span<const float> params, std::span<float> out) const;
  // The outer step with the group's mean pseudo-gradient. With momentum 0 (plain averaging)
  // the momentum buffer is left as it is. REQUIRES: delta.size() == size().
  void Step(const OuterOptions& options, std::span<const float> delta);
  // A streaming sync's end (sync_options.h, overlap): params = anchor + (params - started),
  // `started` being the parameters when the sync started; what the inner steps since then
  // moved stays. REQUIRES: both of size().
  void Rebase(std::span<const float> started, std::span<float> params) const;
  // Step and Rebase on the part of the arrays from `offset` on that the spans cover (one
  // slice of a staggered sync's phase, sync_options.h); the rest stays.
  // REQUIRES: offset + delta.size() (started.size(), params.size()) <= size().
  void StepPart(const OuterOptions& options, size_t offset, std::span<const float> delta);
  void RebasePart(size_t offset, std::span<const float> started, std::span<float> params) const;
  // The anchor from `offset` on becomes `values` (a gossip round's mixed parameters, which the
  // next round's pseudo-gradient is measured from); the momentum stays.
  // REQUIRES: offset + values.size() <= size().
  void MoveAnchorPart(size_t offset, std::span<const float> values);
  // The part from `offset` on starts over from `values`: the anchor there becomes them and the
  // momentum there 0 (a copy replaced whole, such as a mended tied embedding, whose two holders
  // must step alike from then on). REQUIRES: offset + values.size() <= size().
  void RestartPart(size_t offset, std::span<const float> values);
  // A gossip node's own outer step before its round (fleet/gossip_node.h, gossip_link_node.h):
  // its pseudo-gradient from `params` into `scratch`, the step, and params = the new anchor.
  // REQUIRES: params.size() >= size().
  void StepOwn(const OuterOptions& options, std::span<float> params, std::vector<float>* scratch);

  size_t size() const { return anchor_.size(); }
  const std::vector<float>& anchor() const { return anchor_; }
  const std::vector<float>& momentum() const { return momentum_; }

 private:
  std::vector<float> anchor_, momentum_;
};

}  // namespace longhaul::fleet
