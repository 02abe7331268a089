// GPT-2 model shape (llm.c's GPT2Config) and the checks every entry point runs on it. The
// padded vocabulary Vp rounds V up to a multiple of 128, as llm.c does, so that the
// token-embedding / output-head matmul has friendly sizes; rows V..Vp-1 stay zero.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace longhaul::model {

struct GPT2Config {
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

  bool operator==(const GPT2Config&) const = default;
  std::string DebugString() const;
};

// Rows a constrained layer writes: K for the subspace-cut variant, C otherwise.
inline int CutWidth(const GPT2Config& c) {
  return c.residual_subspace > 0 ? c.residual_subspace : c.channels;
}
// The first layer that writes the full stream: L - F in the subspace-cut variant, 0 in the
// standard model (every layer does).
inline int FirstUnconstrainedLayer(const GPT2Config& c) {
  return c.residual_subspace > 0 ? c.num_layers - c.unconstrained_layers : 0;
}
// True when layer boundary b of the subspace-cut variant carries K coordinates (a cut there
// sends them, not the stream).
inline bool CoordinateBoundary(const GPT2Config& c, int boundary) {
  return c.residual_subspace > 0 && boundary <= FirstUnconstrainedLayer(c);
}
// Floats per position of the residual stream at layer boundary b (0..L; a fragment [b, e)
// takes width(b) and gives width(e)): K coordinates up to the first unconstrained layer of
// the subspace-cut variant, C everywhere else.
inline int StreamWidth(const GPT2Config& c, int boundary) {
  return CoordinateBoundary(c, boundary) ? c.residual_subspace : c.channels;
}
// True when the output head is wte (the standard model), false when it is its own tensor.
inline bool TiedHead(const GPT2Config& c) { return c.residual_subspace == 0; }

// V rounded up to a multiple of 128.
int PadVocab(int vocab_size);

// A config with Vp derived from V.
GPT2Config MakeConfig(int num_layers, int channels, int num_heads, int vocab_size, int max_seq_len);

// OK when every field is positive (residual_subspace: 0 <= K <= C), C % NH == 0, Vp >= V and a
// multiple of 128, and the parameter count fits the int64 offsets the model uses. Messages name the
// bad field.
Status ValidateConfig(const GPT2Config& config);

// Total parameter count (floats) of the whole model, llm.c layout.
int64_t NumParameters(const GPT2Config& config);

}  // namespace longhaul::model
