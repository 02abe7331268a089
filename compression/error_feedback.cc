// Error feedback over any codec (see error_feedback.h).
#include "compression/error_feedback.h"

#include <string>

#include "compression/frame.h"

namespace longhaul::compression {

Status ErrorFeedback::EncodeFrame(std::span<const float> values, std::span<const int64_t> shape,
                                  const EncodeOptions& options, std::vector<uint8_t>* frame) {
  return EncodeFrameAt(values, 0, values.size(), shape, options, frame);
}

Status ErrorFeedback::EncodeFrameAt(std::span<const float> values, size_t offset, size_t total,
                                    std::span<const int64_t> shape, const EncodeOptions& options,
                                    std::vector<uint8_t>* frame) {
  if (offset > total || values.size() > total - offset) {
    return absl::InvalidArgumentError("error feedback: part of " + std::to_string(values.size()) +
                                      " values at " + std::to_string(offset) +
                                      " outside a tensor of " + std::to_string(total));
  }
  if (residual_.size() != total) residual_.assign(total, 0.0f);
  float* residual = residual_.data() + offset;
  std::vector<float> compensated(values.size());
  for (size_t i = 0; i < values.size(); ++i) compensated[i] = values[i] + residual[i];
  RETURN_IF_ERROR(compression::EncodeFrame(*codec_, compensated, shape, options, frame));
  std::vector<float> sent(values.size());
  const size_t payload = FrameHeaderSize(shape.size());
  RETURN_IF_ERROR(Annotate(codec_->Decode(std::span<const uint8_t>(*frame).subspan(payload), sent),
                           "error feedback: decoding its own frame"));
  for (size_t i = 0; i < values.size(); ++i) residual[i] = compensated[i] - sent[i];
  return absl::OkStatus();
}

Status FeedbackEncoder::Encode(std::span<const float> values, std::span<const int64_t> shape,
                               uint64_t seed, std::vector<uint8_t>* frame) {
  EncodeOptions options;
  options.seed = seed;
  return feedback_.EncodeFrame(values, shape, options, frame);
}

Status FeedbackEncoder::EncodePart(std::span<const float> values, size_t offset, size_t total,
                                   uint64_t seed, std::vector<uint8_t>* frame) {
  EncodeOptions options;
  options.seed = seed;
  const int64_t shape[1] = {static_cast<int64_t>(values.size())};
  return feedback_.EncodeFrameAt(values, offset, total, shape, options, frame);
}

Status FeedbackEncoder::RestoreResidual(std::vector<float> residual, size_t n) {
  if (!residual.empty() && residual.size() != n) {
    return absl::DataLossError("error-feedback residual of " + std::to_string(residual.size()) +
                               " values for a tensor of " + std::to_string(n));
  }
  feedback_.SetResidual(std::move(residual));
  return absl::OkStatus();
}

}  // namespace longhaul::compression
