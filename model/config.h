// GPT-2 model shape (llm.c's ModelConfig) and the checks every entry point runs on it. The
// padded vocabulary Vp rounds V up to a multiple of 128, as llm.c does, so that the
// token-embedding / output-head matmul has friendly sizes; rows V..Vp-1 stay zero.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace longhaul::model {

enum class Family { kGpt2, kLlama };
// "gpt2", "llama".
const char* FamilyName(Family family);
StatusOr<Family> ParseFamily(const std::string& name);

// Hugging Face's `rope_scaling` of type "llama3": low frequencies (wavelengths above
// original_context / low_freq_factor) divided by `factor`, high ones (below original_context
// / high_freq_factor) kept, the band between interpolated. factor 0: no scaling.
struct RopeScaling {
  double factor = 0.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_context = 8192;  // original_max_position_embeddings
  bool operator==(const RopeScaling&) const = default;
};

struct ModelConfig {
  Family family = Family::kGpt2;
  int max_seq_len = 0;        // maxT: rows of the position embedding
  int vocab_size = 0;         // V
  int padded_vocab_size = 0;  // Vp = V rounded up to a multiple of 128
  int num_layers = 0;         // L
  int num_heads = 0;          // NH
  int channels = 0;           // C; a multiple of NH
  // K > 0: the subspace-cut variant (model/subspace.h): everything written into the
  // residual stream lies in a fixed K-dimensional subspace, the stream is carried as K
  // coordinates (what crosses a pipeline cut), and the output head is untied. 0: the
  // standard GPT-2, llm.c's layout and checkpoints.
  int residual_subspace = 0;
  // Subspace-cut variant only: the last F layers are unconstrained (they write all C
  // channels), so cuts after layer L - F carry the full stream. 0 <= F < L.
  int unconstrained_layers = 0;

  // Family llama only (0 / defaults for gpt2).
  int num_kv_heads = 0;       // NKV: key/value heads; divides NH (num_key_value_heads)
  int head_dim = 0;           // HD: width of a head (C / NH unless the checkpoint says otherwise)
  int intermediate_size = 0;  // I: the SwiGLU MLP's hidden width
  float norm_eps = 1e-5f;     // RMSNorm epsilon (rms_norm_eps)
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tied_embeddings = true;  // tie_word_embeddings: the head is the token embedding

  bool operator==(const ModelConfig&) const = default;
  std::string DebugString() const;
};

// Rows a constrained layer writes: K for the subspace-cut variant, C otherwise.
inline int CutWidth(const ModelConfig& c) {
  return c.residual_subspace > 0 ? c.residual_subspace : c.channels;
}
// The first layer that writes the full stream: L - F in the subspace-cut variant, 0 in the
// standard model (every layer does).
inline int FirstUnconstrainedLayer(const ModelConfig& c) {
  return c.residual_subspace > 0 ? c.num_layers - c.unconstrained_layers : 0;
}
// True when layer boundary b of the subspace-cut variant carries K coordinates (a cut there
// sends them, not the stream).
inline bool CoordinateBoundary(const ModelConfig& c, int boundary) {
  return c.residual_subspace > 0 && boundary <= FirstUnconstrainedLayer(c);
}
// Floats per position of the residual stream at layer boundary b (0..L; a fragment [b, e)
// takes width(b) and gives width(e)): K coordinates up to the first unconstrained layer of
// the subspace-cut variant, C everywhere else.
inline int StreamWidth(const ModelConfig& c, int boundary) {
  return CoordinateBoundary(c, boundary) ? c.residual_subspace : c.channels;
}
// True for the subspace-cut variant of GPT-2 (model/subspace.h).
inline bool Subspace(const ModelConfig& c) { return c.residual_subspace > 0; }
// True when the output head is wte (the standard GPT-2, a llama with tie_word_embeddings),
// false when it is its own tensor (the subspace-cut variant, an untied llama).
inline bool TiedHead(const ModelConfig& c) {
  return c.family == Family::kLlama ? c.tied_embeddings : c.residual_subspace == 0;
}

// The widths of a layer's activations, per position, by family:
//   gpt2:  qkv 3C, attention output C, MLP input 4C and hidden 4C (fc then GELU);
//   llama: qkv (NH + 2 NKV) HD, attention output NH HD, MLP input 2I (gate and up side by
//          side) and hidden I (SwiGLU).
struct LayerWidths {
  int64_t qkv = 0, attention = 0, mlp_in = 0, mlp_hidden = 0;
  int kv_heads = 0, head_dim = 0;
};
LayerWidths Widths(const ModelConfig& c);

// V rounded up to a multiple of 128.
int PadVocab(int vocab_size);

// A config with Vp derived from V.
ModelConfig MakeConfig(int num_layers, int channels, int num_heads, int vocab_size,
                       int max_seq_len);

// OK when every field is positive (residual_subspace: 0 <= K <= C), C % NH == 0, Vp >= V and a
// multiple of 128, and the parameter count fits the int64 offsets the model uses; for llama
// also NH % NKV == 0, an even head width, I > 0, a positive epsilon and theta, a sane
// rope_scaling and no subspace-cut variant. Messages name the bad field.
Status ValidateConfig(const ModelConfig& config);

// Total parameter count (floats) of the whole model, llm.c layout.
int64_t NumParameters(const ModelConfig& config);

}  // namespace longhaul::model
