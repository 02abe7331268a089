// The compressed tied-embedding exchange; see tied_exchange.h.
#include "model/tied_exchange.h"

#include "compression/codec.h"
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

Status TiedGradCodec::EncodeInPlace(std::span<float> part, std::span<const int64_t> shape,
                                    uint64_t seed, std::vector<uint8_t>* frame) {
  RETURN_IF_ERROR(Encode(part, shape, seed, frame));
  compression::FrameLimits limits;
  limits.max_elements = part.size();
  ASSIGN_OR_RETURN(const compression::FrameHeader header,
                   compression::ParseFrameHeader(*frame, limits));
  return compression::DecodeFrameValues(header, *frame, part);
}

}  // namespace longhaul::model
