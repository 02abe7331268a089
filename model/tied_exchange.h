// The tied-embedding exchange of a pipeline, compressed. The first stage (token embedding)
// and the last (the head, whose weights are wte too) each compute part of wte's gradient,
// and both must add the same two parts in the same order, or the two copies of wte drift
// apart. Exact (fp32) is what the pipeline does by default. With a lossy codec, each end
// encodes its part with error feedback into a frame (compression/frame.h), sends the frame,
// and replaces its own part with what the frame carries: both ends then add the two decoded
// parts (Fragment::CombineTiedGrads, head part first), the same bits from the same bytes, and
// what the codec dropped is carried in the end's residual into its next step's part.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "compression/error_feedback.h"

namespace longhaul::model {

class TiedGradCodec : public compression::FeedbackEncoder {
 public:
  // A codec spec (compression/codec_spec.h: "q8", "q2", "topk:0.1+q8", ...). "exact" or ""
  // means no codec: the parts travel in fp32 and nothing here is needed (null).
  static StatusOr<std::unique_ptr<TiedGradCodec>> Create(std::string_view codec);

  // Encodes `part` (this end's part, plus the carried residual) as a frame of `shape` into
  // *frame, and overwrites `part` with the frame's decoded values; the residual becomes what
  // the frame does not carry. `seed` varies stochastic rounding between steps.
  Status EncodeInPlace(std::span<float> part, std::span<const int64_t> shape, uint64_t seed,
                       std::vector<uint8_t>* frame);

  std::string name() const { return spec().ToString(); }

 private:
  using FeedbackEncoder::FeedbackEncoder;
};

}  // namespace longhaul::model
