// GPT-2 config checks and derived sizes.
#include "model/config.h"

#include "absl/strings/str_cat.h"
#include "model/layout.h"

namespace longhaul::model {

std::string GPT2Config::DebugString() const {
  return absl::StrCat("L=", num_layers, " C=", channels, " NH=", num_heads, " V=", vocab_size,
                      " Vp=", padded_vocab_size, " maxT=", max_seq_len,
                      residual_subspace > 0 ? absl::StrCat(" K=", residual_subspace) : "",
                      unconstrained_layers > 0 ? absl::StrCat(" F=", unconstrained_layers) : "");
}

int PadVocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

GPT2Config MakeConfig(int num_layers, int channels, int num_heads, int vocab_size,
                      int max_seq_len) {
  GPT2Config c;
  c.num_layers = num_layers;
  c.channels = channels;
  c.num_heads = num_heads;
  c.vocab_size = vocab_size;
  c.padded_vocab_size = PadVocab(vocab_size);
  c.max_seq_len = max_seq_len;
  return c;
}

Status ValidateConfig(const GPT2Config& c) {
  auto positive = [](const char* name, int v) -> Status {
    if (v <= 0) return absl::InvalidArgumentError(absl::StrCat(name, " must be positive, got ", v));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(positive("layers", c.num_layers));
  RETURN_IF_ERROR(positive("channels", c.channels));
  RETURN_IF_ERROR(positive("heads", c.num_heads));
  RETURN_IF_ERROR(positive("vocab", c.vocab_size));
  RETURN_IF_ERROR(positive("context", c.max_seq_len));
  if (c.channels % c.num_heads != 0) {
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
  if (c.padded_vocab_size < c.vocab_size || c.padded_vocab_size % 128 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("padded vocab ", c.padded_vocab_size,
                     " must be a multiple of 128 and at least the vocab ", c.vocab_size));
  }
  // Keep every per-tensor size well inside int64 and every activation index inside the
  // int arguments of the kernels (checked again per batch by the fragment).
  const double params = 12.0 * c.num_layers * double(c.channels) * c.channels +
                        (double(c.padded_vocab_size) + c.max_seq_len) * c.channels;
  if (params > 1e12) {
    return absl::InvalidArgumentError(
        absl::StrCat("model too large: about ", params, " parameters (", c.DebugString(), ")"));
  }
  return absl::OkStatus();
}

int64_t NumParameters(const GPT2Config& config) { return ParameterLayout(config).total(); }

}  // namespace longhaul::model
