// Packing and checking the targets frame (see targets_frame.h).
#include "model/targets_frame.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"

namespace longhaul::model {

int TargetsFrameRow(const ModelConfig& config, int seq_len) {
  return Subspace(config) ? seq_len + 1 : seq_len;
}

std::vector<float> PackTargetsFrame(const ModelConfig& config, int batch, int seq_len,
                                    const int32_t* inputs, const int32_t* targets) {
  const bool window = Subspace(config);
  const int per_row = TargetsFrameRow(config, seq_len);
  std::vector<float> frame(size_t(batch) * per_row);
  for (int b = 0; b < batch; ++b) {
    float* row = frame.data() + size_t(b) * per_row;
    if (window) *row++ = float(inputs[size_t(b) * seq_len]);  // then target t = input t + 1
    for (int t = 0; t < seq_len; ++t) row[t] = float(targets[size_t(b) * seq_len + t]);
  }
  return frame;
}

Status UnpackTargetsFrame(const ModelConfig& config, int batch, int seq_len,
                          std::span<const float> frame, int32_t* inputs, int32_t* targets) {
  const bool window = Subspace(config);
  const int per_row = TargetsFrameRow(config, seq_len);
  if (frame.size() != size_t(batch) * per_row) {
    return absl::InvalidArgumentError(absl::StrCat("targets frame of ", frame.size(),
                                                   " values, expected ", batch, " x ", per_row));
  }
  if (config.vocab_size > kMaxFrameVocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("targets frame: a vocabulary of ", config.vocab_size, " is above ",
                     kMaxFrameVocab, ", the largest whose ids a frame carries exactly"));
  }
  for (size_t i = 0; i < frame.size(); ++i) {
    // Checked before any conversion: a float outside int's range does not convert.
    const float v = frame[i];
    if (!(v >= 0.0f && v < float(config.vocab_size)) || v != std::floor(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("targets frame: value ", v, " at ", i, " of ", frame.size(),
                       " is not a token id of the vocabulary [0, ", config.vocab_size, ")"));
    }
  }
  for (int b = 0; b < batch; ++b) {
    const float* row = frame.data() + size_t(b) * per_row;
    for (int t = 0; t < seq_len; ++t) {
      const size_t i = size_t(b) * seq_len + t;
      if (window) inputs[i] = int32_t(row[t]);
      targets[i] = int32_t(row[window ? t + 1 : t]);
    }
  }
  return absl::OkStatus();
}

}  // namespace longhaul::model
