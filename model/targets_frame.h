// The frame that carries a microbatch's targets from a pipeline stage to the next: B rows
// of the T targets, or, for the subspace-cut variant (whose later stages rebuild the stream
// from the tokens), of each sequence's T + 1 tokens, which hold the inputs and the targets
// (target t is input t + 1). Values are token ids as floats, sent exactly: a float holds
// every integer up to 2^24, so vocabularies up to kMaxFrameVocab (16,777,216; llama-3's is
// 128,256) travel exactly; a larger one is refused, never rounded.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "model/config.h"

namespace longhaul::model {

// The largest vocabulary whose ids a frame carries exactly (2^24, a float's integers).
inline constexpr int kMaxFrameVocab = 1 << 24;

// Floats per row: T, or T + 1 for the subspace-cut variant.
int TargetsFrameRow(const ModelConfig& config, int seq_len);

// The frame of B x T `targets`, with `inputs` (B x T) for the subspace-cut variant (else
// unread, may be null). REQUIRES: config.vocab_size <= kMaxFrameVocab (job files are
// checked: model/job.h) and every id is in [0, vocab_size).
std::vector<float> PackTargetsFrame(const ModelConfig& config, int batch, int seq_len,
                                    const int32_t* inputs, const int32_t* targets);

// Into `targets` (B x T) and, for the subspace-cut variant, `inputs` (B x T). Every value
// is checked to be a token id of the vocabulary before it is converted (a frame may come
// from a peer); the error names the value and its place. A vocabulary above kMaxFrameVocab
// is an error (its ids would not have travelled exactly).
Status UnpackTargetsFrame(const ModelConfig& config, int batch, int seq_len,
                          std::span<const float> frame, int32_t* inputs, int32_t* targets);

}  // namespace longhaul::model
