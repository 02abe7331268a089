// The self-describing wire format of one tensor: a fixed little-endian header that names the
// codec pipeline and its parameters, the tensor's shape, sizes and a checksum, followed by the
// codec's payload. A receiver needs nothing else to decode it, and it does not depend on
// protobuf: the daemon carries frames as opaque bytes (TensorFrame.payload), and the fuzzer
// targets DecodeFrame directly.
//
// Version 1 layout (all integers little-endian):
//   off  size    field
//   0    4       magic "LHTF"
//   4    1       version = 1
//   5    1       ndim, 0..8 (0: a scalar)
//   6    1       value format (codec_spec.h ValueFormat)
//   7    1       flags: 1 topk, 2 topk approx, 4 asym, 8 stochastic rounding, 16 zstd
//   8    4       block (u32; 0 unless quantized)
//   12   4       zstd level (i32; 0 unless zstd)
//   16   8       topk fraction (f64; 0 unless topk)
//   24   8       element count (= product of dims)
//   32   8       raw size (bytes of the decoded fp32 tensor, 4 * element count)
//   40   8       payload size
//   48   8*ndim  dims (i64, each >= 0)
//   ..   8       XXH64 (seed 0) of every header byte before it, then the payload
//   ..           payload (codec.h; exactly `payload size` bytes, nothing after it)
//
// Decoding checks, in order: magic, version, the header fits, the payload size matches,
// the checksum, then every field (known codec, valid parameters, dims multiply to the count
// without overflow, count within FrameLimits, payload within the codec's maximum), and only
// then allocates the output and decodes. Every failure is an error naming the field.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/status.h"
#include "compression/codec.h"
#include "compression/codec_spec.h"

namespace longhaul::compression {

inline constexpr uint8_t kFrameVersion = 1;
inline constexpr size_t kMaxFrameDims = 8;

struct FrameLimits {
  // Frames with more elements are rejected before anything is allocated. The default
  // (256M floats, 1 GiB decoded) is above any GPT-2 activation or gradient; a receiver that
  // knows the expected shape should set it tighter.
  uint64_t max_elements = uint64_t{1} << 28;
};

struct FrameHeader {
  CodecSpec spec;
  std::vector<int64_t> shape;
  uint64_t element_count = 0;
  uint64_t raw_size = 0;
  uint64_t payload_size = 0;
  uint64_t checksum = 0;
  size_t header_size = 0;  // offset of the payload
};

// Header bytes for a tensor of `ndim` dimensions.
size_t FrameHeaderSize(size_t ndim);

// Replaces *frame with the frame of `values` (shape `shape`, whose product must equal
// values.size(); empty for a scalar) encoded with `codec`.
Status EncodeFrame(const Codec& codec, std::span<const float> values,
                   std::span<const int64_t> shape, const EncodeOptions& options,
                   std::vector<uint8_t>* frame);

// The same frame when another encoder writes the payload (the GPU codecs, device_encoder.h):
// `count` values of shape `shape` (product == count), `append_payload` appends exactly the
// bytes spec's Codec::Encode would.
Status EncodeFrameWith(const CodecSpec& spec, std::span<const int64_t> shape, uint64_t count,
                       const std::function<Status(std::vector<uint8_t>*)>& append_payload,
                       std::vector<uint8_t>* frame);

// Validates a frame's header, sizes and checksum without decoding the payload.
StatusOr<FrameHeader> ParseFrameHeader(std::span<const uint8_t> frame,
                                       const FrameLimits& limits = {});

// The same checks of a frame's first bytes (at least its header; a frame in transit, before
// the rest has arrived) except the two that need the whole frame: that the payload size
// matches and the checksum. A receiver uses it to refuse a tensor of the wrong shape or size
// before buffering it, and ParseFrameHeader once it is whole.
StatusOr<FrameHeader> ParseFrameHeaderPrefix(std::span<const uint8_t> prefix,
                                             const FrameLimits& limits = {});

struct DecodedFrame {
  FrameHeader header;
  std::vector<float> values;  // header.element_count finite values
};
StatusOr<DecodedFrame> DecodeFrame(std::span<const uint8_t> frame, const FrameLimits& limits = {});

// DecodeFrame's second half, for a frame whose header ParseFrameHeader gave: its
// header.element_count values into `out` (exactly that long).
Status DecodeFrameValues(const FrameHeader& header, std::span<const uint8_t> frame,
                         std::span<float> out);

// The same when another decoder reads the payload (a device decoder, device_encoder.h):
// `decode_payload` is handed the header.payload_size bytes; its errors are annotated as
// DecodeFrame's are.
Status DecodeFramePayload(const FrameHeader& header, std::span<const uint8_t> frame,
                          const std::function<Status(std::span<const uint8_t>)>& decode_payload);

// Rewrites the checksum field of a frame-shaped buffer to match its contents (tests and the
// fuzzer use it to reach the checks behind the checksum). Does nothing to a buffer too short
// to hold the header its ndim byte announces.
void RecomputeFrameChecksum(std::span<uint8_t> frame);

}  // namespace longhaul::compression
