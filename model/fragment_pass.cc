// Fragment forward and backward passes over a layer range: llm.c's GPT-2 layers here, the
// llama family's in fragment_llama.cc; embeddings, head and loss here for both.
// Backward keeps one running residual-stream gradient (scratch_.dres): each layernorm
// backward accumulates into it, so the residual adds need no separate backward op.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/fragment.h"  // IWYU pragma: associated

namespace longhaul::model {

Status Fragment::CheckSlot(int slot, const char* what) const {
  if (slot < 0 || slot >= int(slots_.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": slot ", slot, " is outside [0, ", slots_.size(), ")"));
  }
  return absl::OkStatus();
}

Status Fragment::CheckTokens(const int32_t* ids, const char* what) const {
  if (ids == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, " are missing"));
  const int n = options_.batch_size * options_.seq_len;
  for (int i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= config_.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(what, "[", i, "] = ", ids[i],
                                                     " is outside the vocabulary [0, ",
                                                     config_.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

const float* Fragment::SlotOutput(const Slot& s) const { return s.layers.back().residual3; }

const float* Fragment::Output(int slot) const { return SlotOutput(slots_.at(slot)); }

void Fragment::Rebuild(float* x, const Slot& s, const float* coords) {
  const int BT = options_.batch_size * options_.seq_len, C = config_.channels;
  ops_->MatmulForward(scratch_.proj, coords, basis_, nullptr, BT, config_.residual_subspace, C);
  ops_->ResidualForward(x, s.fixed, scratch_.proj, size_t(BT) * C);
}

void Fragment::AddCoordGrad(float* dcoords, const float* dx) {
  const int BT = options_.batch_size * options_.seq_len, C = config_.channels;
  const int K = config_.residual_subspace;
  ops_->MatmulForward(scratch_.proj, dx, basis_transposed_, nullptr, BT, C, K);
  ops_->ResidualForward(dcoords, dcoords, scratch_.proj, size_t(BT) * K);
}

const float* Fragment::StreamInto(const Slot& s, int l) const {
  return l == layout_.begin() ? s.input : s.layers[l - 1 - layout_.begin()].residual3;
}

const float* Fragment::LayerInput(const Slot& s, int l) const {
  if (s.rebuilt != nullptr && l == FirstUnconstrainedLayer(config_)) return s.rebuilt;
  return StreamInto(s, l);
}

// One GPT-2 layer. The standard model's layernorms read the stream itself; a constrained
// layer of the subspace-cut variant reads it rebuilt from its coordinates (x1, x2) and writes
// R = K coordinates. The first unconstrained layer reads the stream rebuilt once.
void Fragment::Gpt2LayerForward(Slot& s, int l) {
  const int B = options_.batch_size, T = options_.seq_len, C = config_.channels;
  const int NH = config_.num_heads, BT = B * T;
  LayerActs& a = s.layers[l - layout_.begin()];
  const bool sub = constrained(l);
  const int R = sub ? config_.residual_subspace : C;
  if (s.rebuilt != nullptr && l == FirstUnconstrainedLayer(config_)) {
    Rebuild(s.rebuilt, s, StreamInto(s, l));
  }
  const float* residual = LayerInput(s, l);
  if (sub) Rebuild(a.x1, s, residual);
  ops_->LayerNormForward(a.ln1, a.ln1_mean, a.ln1_rstd, sub ? a.x1 : residual, P(Tensor::kLn1w, l),
                         P(Tensor::kLn1b, l), BT, C);
  ops_->MatmulForward(a.qkv, a.ln1, P(Tensor::kQkvw, l), P(Tensor::kQkvb, l), BT, C, 3 * C);
  ops_->AttentionForward(a.atty, scratch_.preatt, a.att, a.qkv, B, T, C, NH);
  ops_->MatmulForward(scratch_.proj, a.atty, P(Tensor::kAttprojw, l), P(Tensor::kAttprojb, l), BT,
                      C, R);
  ops_->ResidualForward(a.residual2, residual, scratch_.proj, size_t(BT) * R);
  if (sub) Rebuild(a.x2, s, a.residual2);
  ops_->LayerNormForward(a.ln2, a.ln2_mean, a.ln2_rstd, sub ? a.x2 : a.residual2,
                         P(Tensor::kLn2w, l), P(Tensor::kLn2b, l), BT, C);
  ops_->MatmulForward(a.fch, a.ln2, P(Tensor::kFcw, l), P(Tensor::kFcb, l), BT, C, 4 * C);
  ops_->GeluForward(a.fch_gelu, a.fch, size_t(BT) * 4 * C);
  ops_->MatmulForward(scratch_.proj, a.fch_gelu, P(Tensor::kFcprojw, l), P(Tensor::kFcprojb, l), BT,
                      4 * C, R);
  ops_->ResidualForward(a.residual3, a.residual2, scratch_.proj, size_t(BT) * R);
}

Status Fragment::Forward(int slot, const int32_t* tokens, const float* activations) {
  RETURN_IF_ERROR(ForwardBegin(slot, tokens, activations));
  for (int l = layout_.begin(); l < layout_.end(); ++l) ForwardLayer(slot, l);
  ForwardEnd(slot);
  return absl::OkStatus();
}

void Fragment::ForwardLayer(int slot, int l) {
  if (llama()) {
    LlamaLayerForward(slots_[slot], l);
  } else {
    Gpt2LayerForward(slots_[slot], l);
  }
}

void Fragment::ForwardEnd(int slot) { slots_[slot].forward_done = true; }

Status Fragment::ForwardBegin(int slot, const int32_t* tokens, const float* activations) {
  RETURN_IF_ERROR(CheckSlot(slot, "Forward"));
  const int B = options_.batch_size, T = options_.seq_len, C = config_.channels, BT = B * T;
  Slot& s = slots_[slot];
  if (needs_tokens()) {
    RETURN_IF_ERROR(CheckTokens(tokens, "input tokens"));
    std::copy(tokens, tokens + BT, s.tokens.begin());
  }
  if (is_first()) {
    // A llama has no position embedding: its rows are a table of zeros (rotary embeddings
    // carry positions inside attention).
    ops_->EmbeddingForward(s.input, s.tokens.data(), P(Tensor::kWte),
                           llama() ? zero_positions_ : P(Tensor::kWpe), B, T, input_width());
  } else {
    if (activations == nullptr) {
      return absl::InvalidArgumentError("Forward: a fragment after the first needs activations");
    }
    ops_->Copy(s.input, activations, size_t(BT) * input_width());
  }
  if (rebuilds()) {
    ops_->EmbeddingForward(s.fixed, s.tokens.data(), token_table_, zero_positions_, B, T, C);
  }
  s.forward_done = false;
  return absl::OkStatus();
}

StatusOr<float> Fragment::Loss(int slot, const int32_t* targets) {
  RETURN_IF_ERROR(CheckSlot(slot, "Loss"));
  if (!is_last()) return absl::FailedPreconditionError("Loss: only the last fragment has a head");
  Slot& s = slots_[slot];
  if (!s.forward_done) return absl::FailedPreconditionError("Loss: slot has no forward pass");
  RETURN_IF_ERROR(CheckTokens(targets, "targets"));
  const int B = options_.batch_size, T = options_.seq_len, C = config_.channels, BT = B * T;
  const int V = config_.vocab_size, Vp = config_.padded_vocab_size;
  std::copy(targets, targets + BT, head_.targets.begin());
  const float* x = SlotOutput(s);
  if (head_.x != nullptr) {  // the subspace-cut variant with every layer constrained
    Rebuild(head_.x, s, x);
    x = head_.x;
  }
  if (llama()) {
    ops_->RmsNormForward(head_.lnf, head_.lnf_rstd, x, P(Tensor::kLnfw), BT, C, config_.norm_eps);
  } else {
    ops_->LayerNormForward(head_.lnf, head_.lnf_mean, head_.lnf_rstd, x, P(Tensor::kLnfw),
                           P(Tensor::kLnfb), BT, C);
  }
  const Tensor head = TiedHead(config_) ? Tensor::kWte : Tensor::kHead;
  ops_->MatmulForward(head_.logits, head_.lnf, P(head), nullptr, BT, C, Vp);
  ops_->SoftmaxCrossEntropyForward(head_.probs, head_.losses, head_.logits, head_.targets.data(), B,
                                   T, V, Vp);
  ops_->Download(head_.host_losses.data(), head_.losses, BT);
  head_.owner = slot;
  double sum = 0.0;
  for (float l : head_.host_losses) sum += l;
  return float(sum / BT);
}

void Fragment::Gpt2LayerBackward(Slot& s, int l) {
  const int B = options_.batch_size, T = options_.seq_len, C = config_.channels;
  const int NH = config_.num_heads, BT = B * T;
  const bool subspace = constrained(l);
  const int R = subspace ? config_.residual_subspace : C;
  const size_t btc = size_t(BT) * C;
  const LayerActs& a = s.layers[l - layout_.begin()];
  const float* residual = LayerInput(s, l);
  // Holds d(residual3) on entry, d(residual) on exit: (B,T,R). A layernorm's input gradient
  // goes straight into it, or, in the subspace-cut variant, into dx and then through U^T.
  float* dres = scratch_.dres;
  float* dln_in = subspace ? scratch_.dx : dres;
  // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
  ops_->MatmulBackwardInto(scratch_.dfch_gelu, G(Tensor::kFcprojw, l), G(Tensor::kFcprojb, l), dres,
                           a.fch_gelu, P(Tensor::kFcprojw, l), BT, 4 * C, R);
  ops_->Zero(scratch_.dfch, btc * 4);
  ops_->GeluBackward(scratch_.dfch, a.fch, scratch_.dfch_gelu, btc * 4);
  ops_->MatmulBackwardInto(scratch_.dtmp, G(Tensor::kFcw, l), G(Tensor::kFcb, l), scratch_.dfch,
                           a.ln2, P(Tensor::kFcw, l), BT, C, 4 * C);
  if (subspace) ops_->Zero(dln_in, btc);
  ops_->LayerNormBackward(dln_in, G(Tensor::kLn2w, l), G(Tensor::kLn2b, l), scratch_.dtmp,
                          subspace ? a.x2 : a.residual2, P(Tensor::kLn2w, l), a.ln2_mean,
                          a.ln2_rstd, BT, C);
  if (subspace) AddCoordGrad(dres, dln_in);
  // Attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual)))).
  float* dqkv = scratch_.dfch;  // (B,T,3C) fits in the (B,T,4C) buffer
  ops_->MatmulBackwardInto(scratch_.dtmp, G(Tensor::kAttprojw, l), G(Tensor::kAttprojb, l), dres,
                           a.atty, P(Tensor::kAttprojw, l), BT, C, R);
  ops_->Zero(dqkv, btc * 3);
  ops_->AttentionBackward(dqkv, scratch_.dpreatt, scratch_.datt, scratch_.dtmp, a.qkv, a.att, B, T,
                          C, NH);
  ops_->MatmulBackwardInto(scratch_.dtmp, G(Tensor::kQkvw, l), G(Tensor::kQkvb, l), dqkv, a.ln1,
                           P(Tensor::kQkvw, l), BT, C, 3 * C);
  if (subspace) ops_->Zero(dln_in, btc);
  ops_->LayerNormBackward(dln_in, G(Tensor::kLn1w, l), G(Tensor::kLn1b, l), scratch_.dtmp,
                          subspace ? a.x1 : residual, P(Tensor::kLn1w, l), a.ln1_mean, a.ln1_rstd,
                          BT, C);
  if (subspace) AddCoordGrad(dres, dln_in);
}

Status Fragment::Backward(int slot, const float* output_grad, float dloss) {
  RETURN_IF_ERROR(BackwardBegin(slot, output_grad, dloss));
  for (int l = layout_.end() - 1; l >= layout_.begin(); --l) BackwardLayer(slot, l);
  BackwardEnd(slot);
  return absl::OkStatus();
}

void Fragment::BackwardLayer(int slot, int l) {
  Slot& s = slots_[slot];
  if (llama()) {
    LlamaLayerBackward(s, l);
  } else {
    Gpt2LayerBackward(s, l);
  }
  if (s.rebuilt != nullptr && l == FirstUnconstrainedLayer(config_)) {
    // Through the rebuild: d(coordinates) = U^T d(rebuilt stream).
    const size_t BT = size_t(options_.batch_size) * options_.seq_len;
    ops_->Copy(scratch_.dx, scratch_.dres, BT * config_.channels);
    ops_->Zero(scratch_.dres, BT * config_.residual_subspace);
    AddCoordGrad(scratch_.dres, scratch_.dx);
  }
}

Status Fragment::BackwardBegin(int slot, const float* output_grad, float dloss) {
  RETURN_IF_ERROR(CheckSlot(slot, "Backward"));
  if (!options_.training) {
    return absl::FailedPreconditionError("Backward: fragment was created for evaluation only");
  }
  Slot& s = slots_[slot];
  if (!s.forward_done) return absl::FailedPreconditionError("Backward: slot has no forward pass");
  const int B = options_.batch_size, T = options_.seq_len, C = config_.channels, BT = B * T;
  const int V = config_.vocab_size, Vp = config_.padded_vocab_size;
  const size_t btc = size_t(BT) * C;
  const bool untied = !TiedHead(config_);
  if (is_last()) {
    if (head_.owner != slot) {
      return absl::FailedPreconditionError(
          absl::StrCat("Backward: the last fragment's head holds slot ", head_.owner, ", not ",
                       slot, " (call Loss(slot) right before Backward(slot))"));
    }
    float* dlogits = head_.logits;  // logits are dead once probs exist
    ops_->SoftmaxCrossEntropyBackwardInto(dlogits, head_.probs, head_.targets.data(), dloss, B, T,
                                          V, Vp);
    const Tensor head = untied ? Tensor::kHead : Tensor::kWte;
    ops_->MatmulBackwardInto(scratch_.dtmp, G(head), nullptr, dlogits, head_.lnf, P(head), BT, C,
                             Vp);
    ops_->Zero(scratch_.dres, btc);
    const bool rebuilt = head_.x != nullptr;  // the final stream was rebuilt from coordinates
    float* dx = rebuilt ? scratch_.dx : scratch_.dres;
    if (rebuilt) ops_->Zero(dx, btc);
    if (llama()) {
      ops_->RmsNormBackward(dx, G(Tensor::kLnfw), scratch_.dtmp, SlotOutput(s), P(Tensor::kLnfw),
                            head_.lnf_rstd, BT, C);
    } else {
      ops_->LayerNormBackward(dx, G(Tensor::kLnfw), G(Tensor::kLnfb), scratch_.dtmp,
                              rebuilt ? head_.x : SlotOutput(s), P(Tensor::kLnfw), head_.lnf_mean,
                              head_.lnf_rstd, BT, C);
    }
    if (rebuilt) AddCoordGrad(scratch_.dres, dx);
    head_.owner = -1;
  } else {
    if (output_grad == nullptr) {
      return absl::InvalidArgumentError("Backward: a fragment before the last needs output_grad");
    }
    ops_->Copy(scratch_.dres, output_grad, size_t(BT) * output_width());
  }
  return absl::OkStatus();
}

void Fragment::BackwardEnd(int slot) {
  Slot& s = slots_[slot];
  const int B = options_.batch_size, T = options_.seq_len;
  const bool untied = !TiedHead(config_);
  if (is_first()) {
    // The encoder's part of the tied wte gradient: into the peer buffer when this fragment
    // also holds the head (whole standard model), into its own gradient otherwise.
    float* dwte = is_last() && !untied ? tied_peer_ : G(Tensor::kWte);
    ops_->EmbeddingBackward(dwte, llama() ? scratch_.dwpe_sink : G(Tensor::kWpe), scratch_.dres,
                            s.tokens.data(), B, T, input_width());
  }
  s.forward_done = false;
}

}  // namespace longhaul::model
