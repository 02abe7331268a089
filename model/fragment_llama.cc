// One llama layer of a Fragment, forward and backward, as Hugging Face's LlamaDecoderLayer
// computes it:
//   h = x + o_proj(attention(rope(q, k), v)),  q|k|v = qkv_proj(rmsnorm(x))
//   y = h + down_proj(silu(gate) * up),        gate|up = gate_up_proj(rmsnorm(h))
// with the projections stored stacked (model/layout.h) so each is one matmul. The rotary
// embedding is applied in place to the qkv activations, so attention and its backward see
// the rotated heads; the backward rotates the heads' gradient back before the projection's.
#include "model/fragment.h"  // IWYU pragma: associated

namespace longhaul::model {

void Fragment::LlamaLayerForward(Slot& s, int l) {
  const int B = options_.batch_size, T = options_.seq_len, C = config_.channels, BT = B * T;
  const int NH = config_.num_heads, NKV = config_.num_kv_heads, HD = config_.head_dim;
  const LayerWidths w = Widths(config_);
  const int I = config_.intermediate_size;
  const float eps = config_.norm_eps;
  LayerActs& a = s.layers[l - layout_.begin()];
  const float* residual = StreamInto(s, l);
  ops_->RmsNormForward(a.ln1, a.ln1_rstd, residual, P(Tensor::kLn1w, l), BT, C, eps);
  ops_->MatmulForward(a.qkv, a.ln1, P(Tensor::kQkvw, l), nullptr, BT, C, int(w.qkv));
  ops_->RopeForward(a.qkv, rope_cos_, rope_sin_, B, T, NH, NKV, HD);
  ops_->GroupedAttentionForward(a.atty, scratch_.preatt, a.att, a.qkv, B, T, NH, NKV, HD);
  ops_->MatmulForward(scratch_.proj, a.atty, P(Tensor::kAttprojw, l), nullptr, BT, int(w.attention),
                      C);
  ops_->ResidualForward(a.residual2, residual, scratch_.proj, size_t(BT) * C);
  ops_->RmsNormForward(a.ln2, a.ln2_rstd, a.residual2, P(Tensor::kLn2w, l), BT, C, eps);
  ops_->MatmulForward(a.fch, a.ln2, P(Tensor::kFcw, l), nullptr, BT, C, 2 * I);
  ops_->SwiGluForward(a.fch_gelu, a.fch, BT, I);
  ops_->MatmulForward(scratch_.proj, a.fch_gelu, P(Tensor::kFcprojw, l), nullptr, BT, I, C);
  ops_->ResidualForward(a.residual3, a.residual2, scratch_.proj, size_t(BT) * C);
}

// scratch_.dres holds d(residual3) on entry and d(residual) on exit; each RMSNorm's input
// gradient goes straight into it (the residual adds need no backward op of their own).
void Fragment::LlamaLayerBackward(Slot& s, int l) {
  const int B = options_.batch_size, T = options_.seq_len, C = config_.channels, BT = B * T;
  const int NH = config_.num_heads, NKV = config_.num_kv_heads, HD = config_.head_dim;
  const LayerWidths w = Widths(config_);
  const int I = config_.intermediate_size;
  const LayerActs& a = s.layers[l - layout_.begin()];
  float* dres = scratch_.dres;
  // MLP branch.
  ops_->MatmulBackwardInto(scratch_.dfch_gelu, G(Tensor::kFcprojw, l), nullptr, dres, a.fch_gelu,
                           P(Tensor::kFcprojw, l), BT, I, C);
  ops_->Zero(scratch_.dfch, size_t(BT) * 2 * I);
  ops_->SwiGluBackward(scratch_.dfch, a.fch, scratch_.dfch_gelu, BT, I);
  ops_->MatmulBackwardInto(scratch_.dtmp, G(Tensor::kFcw, l), nullptr, scratch_.dfch, a.ln2,
                           P(Tensor::kFcw, l), BT, C, 2 * I);
  ops_->RmsNormBackward(dres, G(Tensor::kLn2w, l), scratch_.dtmp, a.residual2, P(Tensor::kLn2w, l),
                        a.ln2_rstd, BT, C);
  // Attention branch.
  float* dqkv = scratch_.dfch;  // sized for the larger of (B,T,2I) and (B,T,qkv)
  ops_->MatmulBackwardInto(scratch_.dtmp, G(Tensor::kAttprojw, l), nullptr, dres, a.atty,
                           P(Tensor::kAttprojw, l), BT, int(w.attention), C);
  ops_->Zero(dqkv, size_t(BT) * w.qkv);
  ops_->GroupedAttentionBackward(dqkv, scratch_.dpreatt, scratch_.datt, scratch_.dtmp, a.qkv, a.att,
                                 B, T, NH, NKV, HD);
  ops_->RopeBackward(dqkv, rope_cos_, rope_sin_, B, T, NH, NKV, HD);
  ops_->MatmulBackwardInto(scratch_.dtmp, G(Tensor::kQkvw, l), nullptr, dqkv, a.ln1,
                           P(Tensor::kQkvw, l), BT, C, int(w.qkv));
  ops_->RmsNormBackward(dres, G(Tensor::kLn1w, l), scratch_.dtmp, StreamInto(s, l),
                        P(Tensor::kLn1w, l), a.ln1_rstd, BT, C);
}

}  // namespace longhaul::model
