// The compressed tied-embedding exchange; see tied_exchange.h.
#include "model/tied_exchange.h"

#include "compression/codec_spec.h"
#include "compression/frame.h"

namespace longhaul::model {

StatusOr<std::unique_ptr<TiedGradCodec>> TiedGradCodec::Create(std::string_view codec) {
  if (codec.empty() || codec == "exact") return std::unique_ptr<TiedGradCodec>();
  StatusOr<compression::CodecSpec> spec = compression::ParseCodecSpec(codec);
  if (!spec.ok()) return Annotate(spec.status(), "tied-embedding codec");
  ASSIGN_OR_RETURN(auto c, compression::MakeCodec(*spec));
  return std::unique_ptr<TiedGradCodec>(new TiedGradCodec(std::move(c)));
}

Status TiedGradCodec::Encode(std::span<float> part, std::span<const int64_t> shape, uint64_t seed,
                             std::vector<uint8_t>* frame) {
  compression::EncodeOptions options;
  options.seed = seed;
  RETURN_IF_ERROR(feedback_.EncodeFrame(part, shape, options, frame));
  compression::FrameLimits limits;
  limits.max_elements = part.size();
  ASSIGN_OR_RETURN(const compression::FrameHeader header,
                   compression::ParseFrameHeader(*frame, limits));
  return compression::DecodeFrameValues(header, *frame, part);
}

Status TiedGradCodec::RestoreResidual(std::vector<float> residual, size_t n) {
  if (!residual.empty() && residual.size() != n) {
    return absl::DataLossError("tied-embedding residual of " + std::to_string(residual.size()) +
                               " values for a part of " + std::to_string(n));
  }
  feedback_.SetResidual(std::move(residual));
  return absl::OkStatus();
}

}  // namespace longhaul::model
