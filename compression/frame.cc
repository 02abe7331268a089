// Frame encoding and defensive decoding (see frame.h for the layout).
#include "compression/frame.h"

#include <xxhash.h>

#include <cstring>

#include "compression/byte_io.h"
#include "compression/strings.h"

namespace longhaul::compression {
namespace {

constexpr uint8_t kMagic[4] = {'L', 'H', 'T', 'F'};
constexpr size_t kFixedHeader = 48;  // bytes before the dims

enum Flags : uint8_t {
  kFlagTopK = 1,
  kFlagApprox = 2,
  kFlagAsym = 4,
  kFlagStochastic = 8,
  kFlagZstd = 16,
  kKnownFlags = 31,
};

uint64_t Checksum(std::span<const uint8_t> header_before_checksum,
                  std::span<const uint8_t> payload) {
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  XXH64_update(state, header_before_checksum.data(), header_before_checksum.size());
  XXH64_update(state, payload.data(), payload.size());
  const uint64_t hash = XXH64_digest(state);
  XXH64_freeState(state);
  return hash;
}

Status FrameError(std::string_view what) {
  return absl::InvalidArgumentError(Cat("tensor frame: ", what));
}

// Rebuilds and validates the codec spec from the header's codec fields.
StatusOr<CodecSpec> SpecFromHeader(uint8_t format, uint8_t flags, uint32_t block, int32_t level,
                                   double fraction) {
  if (format < static_cast<uint8_t>(ValueFormat::kFp32) ||
      format > static_cast<uint8_t>(ValueFormat::kQ2)) {
    return FrameError(Cat("unknown value format ", format));
  }
  if ((flags & ~kKnownFlags) != 0) return FrameError(Cat("unknown flags 0x", absl::Hex(flags)));
  CodecSpec spec;
  spec.value.format = static_cast<ValueFormat>(format);
  spec.value.asymmetric = flags & kFlagAsym;
  spec.value.stochastic = flags & kFlagStochastic;
  if (spec.value.quantized()) {
    spec.value.block = block;
  } else if (block != 0) {
    return FrameError(Cat("block ", block, " set for an unquantized format"));
  }
  spec.topk.enabled = flags & kFlagTopK;
  spec.topk.approximate = flags & kFlagApprox;
  spec.topk.fraction = fraction;
  spec.zstd.enabled = flags & kFlagZstd;
  if (spec.zstd.enabled) {
    spec.zstd.level = level;
  } else if (level != 0) {
    return FrameError(Cat("zstd level ", level, " set without zstd"));
  }
  RETURN_IF_ERROR(Annotate(spec.Validate(), "tensor frame"));
  return spec;
}

}  // namespace

size_t FrameHeaderSize(size_t ndim) { return kFixedHeader + 8 * ndim + 8; }

Status EncodeFrame(const Codec& codec, std::span<const float> values,
                   std::span<const int64_t> shape, const EncodeOptions& options,
                   std::vector<uint8_t>* frame) {
  return EncodeFrameWith(
      codec.spec(), shape, values.size(),
      [&](std::vector<uint8_t>* out) { return codec.Encode(values, options, out); }, frame);
}

Status EncodeFrameWith(const CodecSpec& spec, std::span<const int64_t> shape, uint64_t values,
                       const std::function<Status(std::vector<uint8_t>*)>& append_payload,
                       std::vector<uint8_t>* frame) {
  if (shape.size() > kMaxFrameDims) {
    return FrameError(Cat(shape.size(), " dimensions; at most ", kMaxFrameDims));
  }
  bool has_zero = false;
  for (int64_t d : shape) {
    if (d < 0) return FrameError(Cat("negative dimension ", d));
    has_zero |= d == 0;
  }
  uint64_t count = has_zero ? 0 : 1;
  for (int64_t d : shape) {
    if (has_zero) break;
    if (count > values / static_cast<uint64_t>(d)) {
      return FrameError(Cat("shape holds more than the ", values, " values given"));
    }
    count *= static_cast<uint64_t>(d);
  }
  if (count != values) {
    return FrameError(Cat("shape holds ", count, " values but ", values, " were given"));
  }
  uint8_t flags = 0;
  if (spec.topk.enabled) flags |= kFlagTopK;
  if (spec.topk.approximate) flags |= kFlagApprox;
  if (spec.value.asymmetric) flags |= kFlagAsym;
  if (spec.value.stochastic) flags |= kFlagStochastic;
  if (spec.zstd.enabled) flags |= kFlagZstd;

  frame->clear();
  ByteWriter w(frame);
  w.Bytes(kMagic);
  w.U8(kFrameVersion);
  w.U8(static_cast<uint8_t>(shape.size()));
  w.U8(static_cast<uint8_t>(spec.value.format));
  w.U8(flags);
  w.U32(spec.value.quantized() ? spec.value.block : 0);
  w.U32(spec.zstd.enabled ? static_cast<uint32_t>(spec.zstd.level) : 0);
  w.F64(spec.topk.enabled ? spec.topk.fraction : 0.0);
  w.U64(count);
  w.U64(4 * count);
  w.U64(0);  // payload size, patched below
  for (int64_t d : shape) w.U64(static_cast<uint64_t>(d));
  w.U64(0);  // checksum, patched below
  const size_t header_size = frame->size();
  RETURN_IF_ERROR(append_payload(frame));
  const uint64_t payload_size = frame->size() - header_size;
  std::memcpy(frame->data() + 40, &payload_size, 8);
  RecomputeFrameChecksum(*frame);
  return absl::OkStatus();
}

namespace {

// The header's fields, checked in the documented order. With `whole`, `frame` is the whole
// frame and its payload size and checksum are checked too; otherwise it is a prefix (the
// first chunk of a frame in transit) that must hold the header, and those two are not.
StatusOr<FrameHeader> ParseHeader(std::span<const uint8_t> frame, const FrameLimits& limits,
                                  bool whole) {
  ByteReader r(frame, "tensor frame");
  std::span<const uint8_t> magic;
  RETURN_IF_ERROR(r.Bytes("magic", 4, &magic));
  if (std::memcmp(magic.data(), kMagic, 4) != 0) return FrameError("bad magic (not a frame)");
  uint8_t version = 0, ndim = 0, format = 0, flags = 0;
  uint32_t block = 0, level = 0;
  double fraction = 0;
  uint64_t count = 0, raw_size = 0, payload_size = 0;
  RETURN_IF_ERROR(r.U8("version", &version));
  if (version != kFrameVersion) {
    return FrameError(
        Cat("unsupported version ", version, " (this build reads version ", kFrameVersion, ")"));
  }
  RETURN_IF_ERROR(r.U8("ndim", &ndim));
  if (ndim > kMaxFrameDims) return FrameError(Cat(ndim, " dimensions; at most ", kMaxFrameDims));
  RETURN_IF_ERROR(r.U8("value format", &format));
  RETURN_IF_ERROR(r.U8("flags", &flags));
  RETURN_IF_ERROR(r.U32("block", &block));
  RETURN_IF_ERROR(r.U32("zstd level", &level));
  RETURN_IF_ERROR(r.F64("topk fraction", &fraction));
  RETURN_IF_ERROR(r.U64("element count", &count));
  RETURN_IF_ERROR(r.U64("raw size", &raw_size));
  RETURN_IF_ERROR(r.U64("payload size", &payload_size));
  FrameHeader header;
  header.shape.resize(ndim);
  for (auto& d : header.shape) RETURN_IF_ERROR(r.I64("dimension", &d));
  const size_t checksummed = r.position();
  RETURN_IF_ERROR(r.U64("checksum", &header.checksum));
  header.header_size = r.position();
  if (whole && payload_size != r.remaining()) {
    return FrameError(
        Cat("header announces ", payload_size, " payload bytes but ", r.remaining(), " follow"));
  }
  if (whole) {
    const uint64_t actual = Checksum(frame.first(checksummed), r.Rest());
    if (actual != header.checksum) {
      return FrameError(Cat("checksum mismatch (header 0x", absl::Hex(header.checksum),
                            ", contents 0x", absl::Hex(actual), "): corrupted in transit?"));
    }
  }
  ASSIGN_OR_RETURN(header.spec,
                   SpecFromHeader(format, flags, block, static_cast<int32_t>(level), fraction));
  bool has_zero = false;
  for (int64_t d : header.shape) {
    if (d < 0) return FrameError(Cat("negative dimension ", d));
    has_zero |= d == 0;
  }
  uint64_t product = has_zero ? 0 : 1;
  for (int64_t d : header.shape) {
    if (has_zero) break;
    const uint64_t ud = static_cast<uint64_t>(d);
    if (product > limits.max_elements / ud) {
      return FrameError(
          Cat("dimensions hold more than the limit of ", limits.max_elements, " elements"));
    }
    product *= ud;
  }
  if (product != count) {
    return FrameError(Cat("dimensions do not multiply to the element count ", count));
  }
  if (count > limits.max_elements) {
    return FrameError(Cat(count, " elements exceed the limit of ", limits.max_elements));
  }
  if (raw_size != 4 * count) {
    return FrameError(Cat("raw size ", raw_size, " is not 4 x ", count, " elements"));
  }
  header.element_count = count;
  header.raw_size = raw_size;
  header.payload_size = payload_size;
  return header;
}

}  // namespace

StatusOr<FrameHeader> ParseFrameHeader(std::span<const uint8_t> frame, const FrameLimits& limits) {
  return ParseHeader(frame, limits, /*whole=*/true);
}

StatusOr<FrameHeader> ParseFrameHeaderPrefix(std::span<const uint8_t> prefix,
                                             const FrameLimits& limits) {
  return ParseHeader(prefix, limits, /*whole=*/false);
}

StatusOr<DecodedFrame> DecodeFrame(std::span<const uint8_t> frame, const FrameLimits& limits) {
  DecodedFrame decoded;
  ASSIGN_OR_RETURN(decoded.header, ParseFrameHeader(frame, limits));
  decoded.values.resize(decoded.header.element_count);
  RETURN_IF_ERROR(DecodeFrameValues(decoded.header, frame, decoded.values));
  return decoded;
}

Status DecodeFrameValues(const FrameHeader& header, std::span<const uint8_t> frame,
                         std::span<float> out) {
  ASSIGN_OR_RETURN(std::unique_ptr<Codec> codec, MakeCodec(header.spec));
  const uint64_t n = header.element_count;
  if (out.size() != n) {
    return absl::InvalidArgumentError(
        Cat("tensor frame: ", n, " values for room for ", out.size()));
  }
  if (header.payload_size > codec->MaxEncodedSize(n)) {
    return FrameError(Cat("payload of ", header.payload_size, " bytes exceeds the ",
                          codec->MaxEncodedSize(n), " that ", n, " values can take"));
  }
  return DecodeFramePayload(
      header, frame, [&](std::span<const uint8_t> payload) { return codec->Decode(payload, out); });
}

Status DecodeFramePayload(const FrameHeader& header, std::span<const uint8_t> frame,
                          const std::function<Status(std::span<const uint8_t>)>& decode_payload) {
  return Annotate(decode_payload(frame.subspan(header.header_size)),
                  Cat("tensor frame (", header.spec.ToString(), ")"));
}

void RecomputeFrameChecksum(std::span<uint8_t> frame) {
  if (frame.size() < FrameHeaderSize(0)) return;
  const size_t ndim = frame[5];
  if (ndim > kMaxFrameDims || frame.size() < FrameHeaderSize(ndim)) return;
  const size_t checksummed = FrameHeaderSize(ndim) - 8;
  const uint64_t hash = Checksum(frame.first(checksummed), frame.subspan(checksummed + 8));
  std::memcpy(frame.data() + checksummed, &hash, 8);
}

}  // namespace longhaul::compression
