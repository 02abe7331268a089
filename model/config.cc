// GPT-2 config checks and derived sizes.
#include "model/config.h"

#include "absl/strings/str_cat.h"
#include "model/layout.h"

namespace longhaul::model {

const char* FamilyName(Family family) { return family == Family::kLlama ? "llama" : "gpt2"; }

StatusOr<Family> ParseFamily(const std::string& name) {
  if (name == "gpt2") return Family::kGpt2;
  if (name == "llama") return Family::kLlama;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model family '", name, "' (expected gpt2 or llama)"));
}

LayerWidths Widths(const ModelConfig& c) {
  LayerWidths w;
  const int64_t C = c.channels;
  if (c.family == Family::kLlama) {
    w.kv_heads = c.num_kv_heads;
    w.head_dim = c.head_dim;
    w.qkv = int64_t(c.num_heads + 2 * c.num_kv_heads) * c.head_dim;
    w.attention = int64_t(c.num_heads) * c.head_dim;
    w.mlp_in = 2 * int64_t(c.intermediate_size);
    w.mlp_hidden = c.intermediate_size;
  } else {
    w.kv_heads = c.num_heads;
    w.head_dim = c.num_heads > 0 ? c.channels / c.num_heads : 0;
    w.qkv = 3 * C;
    w.attention = C;
    w.mlp_in = 4 * C;
    w.mlp_hidden = 4 * C;
  }
  return w;
}

std::string ModelConfig::DebugString() const {
  if (family == Family::kLlama) {
    return absl::StrCat(
        "llama L=", num_layers, " C=", channels, " NH=", num_heads, " NKV=", num_kv_heads,
        " HD=", head_dim, " I=", intermediate_size, " V=", vocab_size, " Vp=", padded_vocab_size,
        " maxT=", max_seq_len, " eps=", norm_eps, " theta=", rope_theta,
        rope_scaling.factor > 0
            ? absl::StrCat(" rope_scaling=llama3(", rope_scaling.factor, ",",
                           rope_scaling.low_freq_factor, ",", rope_scaling.high_freq_factor, ",",
                           rope_scaling.original_context, ")")
            : "",
        tied_embeddings ? " tied" : " untied");
  }
  return absl::StrCat("L=", num_layers, " C=", channels, " NH=", num_heads, " V=", vocab_size,
                      " Vp=", padded_vocab_size, " maxT=", max_seq_len,
                      residual_subspace > 0 ? absl::StrCat(" K=", residual_subspace) : "",
                      unconstrained_layers > 0 ? absl::StrCat(" F=", unconstrained_layers) : "");
}

int PadVocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

ModelConfig MakeConfig(int num_layers, int channels, int num_heads, int vocab_size,
                       int max_seq_len) {
  ModelConfig c;
  c.num_layers = num_layers;
  c.channels = channels;
  c.num_heads = num_heads;
  c.vocab_size = vocab_size;
  c.padded_vocab_size = PadVocab(vocab_size);
  c.max_seq_len = max_seq_len;
  return c;
}

namespace {

Status ValidateLlama(const ModelConfig& c) {
  if (c.residual_subspace != 0 || c.unconstrained_layers != 0) {
    return absl::InvalidArgumentError(
        "residual_subspace / unconstrained_layers are GPT-2 variants; a llama model has neither");
  }
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_heads (", c.num_kv_heads, ") must be positive and divide heads (", c.num_heads, ")"));
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0 || c.head_dim > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head_dim ", c.head_dim, " must be even and in [2, 4096] (rotary pairs halves)"));
  }
  if (c.intermediate_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("intermediate_size must be positive, got ", c.intermediate_size));
  }
  if (!(c.norm_eps > 0.0f) || !(c.norm_eps < 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("norm_eps ", c.norm_eps, " must be in (0, 1)"));
  }
  if (!(c.rope_theta > 1.0) || !(c.rope_theta < 1e12)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_theta ", c.rope_theta, " must be in (1, 1e12)"));
  }
  const RopeScaling& r = c.rope_scaling;
  if (r.factor != 0.0 && (!(r.factor >= 1.0 && r.factor < 1e6) || !(r.low_freq_factor > 0.0) ||
                          !(r.high_freq_factor > r.low_freq_factor) ||
                          !(r.high_freq_factor < 1e6) || r.original_context <= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope_scaling (llama3): factor ", r.factor, " must be in [1, 1e6), low_freq_factor ",
        r.low_freq_factor, " positive and below high_freq_factor ", r.high_freq_factor,
        ", original_max_position_embeddings ", r.original_context, " positive"));
  }
  return absl::OkStatus();
}

}  // namespace

Status ValidateConfig(const ModelConfig& c) {
  auto positive = [](const char* name, int v) -> Status {
    if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(name, " must be positive, got ", v));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(positive("layers", c.num_layers));
  RETURN_IF_ERROR(positive("channels", c.channels));
  RETURN_IF_ERROR(positive("heads", c.num_heads));
  RETURN_IF_ERROR(positive("vocab", c.vocab_size));
  RETURN_IF_ERROR(positive("context", c.max_seq_len));
  if (c.family == Family::kLlama) {
    RETURN_IF_ERROR(ValidateLlama(c));
  } else if (c.channels % c.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "channels (", c.channels, ") must be a multiple of heads (", c.num_heads, ")"));
  }
  if (c.residual_subspace < 0 || c.residual_subspace > c.channels) {
    return absl::InvalidArgumentError(absl::StrCat("residual_subspace ", c.residual_subspace,
                                                   " must be in [0, channels = ", c.channels,
                                                   "] (0: the standard model)"));
  }
  if (c.unconstrained_layers < 0 || c.unconstrained_layers >= c.num_layers ||
      (c.unconstrained_layers > 0 && c.residual_subspace == 0)) {
    return absl::InvalidArgumentError(absl::StrCat("unconstrained_layers ", c.unconstrained_layers,
                                                   " must be in [0, layers = ", c.num_layers,
                                                   ") and needs residual_subspace > 0"));
  }
  if (c.vocab_size > (1 << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab ", c.vocab_size, " is larger than the 2^30 ids the model supports"));
  }
  if (c.padded_vocab_size < c.vocab_size || c.padded_vocab_size % 128 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("padded vocab ", c.padded_vocab_size,
                     " must be a multiple of 128 and at least the vocab ", c.vocab_size));
  }
  // Keep every per-tensor size well inside int64 and every activation index inside the
  // int arguments of the kernels (checked again per batch by the fragment).
  const LayerWidths w = Widths(c);
  const double params =
      double(c.num_layers) * c.channels * double(w.qkv + w.attention + w.mlp_in + w.mlp_hidden) +
      (2.0 * c.padded_vocab_size + c.max_seq_len) * c.channels;
  if (params > 1e12) {
    return absl::InvalidArgumentError(
        absl::StrCat("model too large: about ", params, " parameters (", c.DebugString(), ")"));
  }
  return absl::OkStatus();
}

int64_t NumParameters(const ModelConfig& config) { return ParameterLayout(config).total(); }

}  // namespace longhaul::model
