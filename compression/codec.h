// The codec seam: one interface that turns a float tensor into bytes and back, and a factory
// that builds any pipeline a CodecSpec describes (top-k -> value codec -> zstd). Callers
// (frame.h, error_feedback.h, the daemon) depend on this header only; the stages behind it
// are picked at run time from the spec, never with #ifdefs.
//
// Codecs are immutable and thread-safe. Encoding never silently exceeds the codec's stated
// error bound (docs/compression.md): NaN, infinity and out-of-range values are errors.
// Decoding never trusts its input: malformed bytes give an error, and a successful decode
// always yields finite values.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "compression/codec_spec.h"

namespace longhaul::compression {

struct EncodeOptions {
  // Seed of the stochastic rounding noise (q* with "sr"); vary it per send, for example with
  // the step and tensor id, so rounding errors do not repeat.
  uint64_t seed = 0;
};

class Codec {
 public:
  virtual ~Codec() = default;

  virtual const CodecSpec& spec() const = 0;

  // Appends the encoding of `values` to *out. On error *out is left as it was.
  virtual Status Encode(std::span<const float> values, const EncodeOptions& options,
                        std::vector<uint8_t>* out) const = 0;

  // Decodes `encoded` into exactly out.size() values. Every byte must be used.
  virtual Status Decode(std::span<const uint8_t> encoded, std::span<float> out) const = 0;

  // An upper bound of Encode's output for n values; decoders reject anything larger.
  virtual uint64_t MaxEncodedSize(uint64_t n) const = 0;
};

StatusOr<std::unique_ptr<Codec>> MakeCodec(const CodecSpec& spec);
// Parses the spec string ("topk:0.01+q8+zstd") first; errors name the bad part.
StatusOr<std::unique_ptr<Codec>> MakeCodec(std::string_view spec);

// Predicted encoded bytes for n values, for the controller: exact for dense codecs; for top-k
// it assumes randomly spread indices; zstd is assumed to gain nothing (callers that observe
// real sizes correct for it).
uint64_t EstimateEncodedSize(const CodecSpec& spec, uint64_t n);

}  // namespace longhaul::compression
