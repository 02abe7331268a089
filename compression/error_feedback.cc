// Error feedback over any codec (see error_feedback.h).
#include "compression/error_feedback.h"

#include "compression/frame.h"

namespace longhaul::compression {

Status ErrorFeedback::EncodeFrame(std::span<const float> values, std::span<const int64_t> shape,
                                  const EncodeOptions& options, std::vector<uint8_t>* frame) {
  if (residual_.size() != values.size()) residual_.assign(values.size(), 0.0f);
  std::vector<float> compensated(values.size());
  for (size_t i = 0; i < values.size(); ++i) compensated[i] = values[i] + residual_[i];
  RETURN_IF_ERROR(compression::EncodeFrame(*codec_, compensated, shape, options, frame));
  std::vector<float> sent(values.size());
  const size_t payload = FrameHeaderSize(shape.size());
  RETURN_IF_ERROR(Annotate(codec_->Decode(std::span<const uint8_t>(*frame).subspan(payload), sent),
                           "error feedback: decoding its own frame"));
  for (size_t i = 0; i < values.size(); ++i) residual_[i] = compensated[i] - sent[i];
  return absl::OkStatus();
}

}  // namespace longhaul::compression
