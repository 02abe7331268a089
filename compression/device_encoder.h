// Encoding and decoding on the GPU, so that only compressed bytes cross PCIe: a tensor that lives
// in a CUDA backend's memory is quantized (or converted to bf16) there, and only the encoded
// bytes are copied, through a pinned host buffer on a stream of their own, into the frame; the
// other way, a frame's encoded bytes are copied to the GPU the same way and decoded there. The
// bytes are exactly Codec::Encode's for the same spec, and the decoded floats Codec::Decode's
// (compression/cuda/device_codec.h), so peers cannot tell. Dense codecs only (bf16, q8/q4/q2); a
// spec with top-k or zstd, or fp32 or fp16, is not Supported and the caller uses the host codec.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/status.h"
#include "compression/codec.h"
#include "compression/codec_spec.h"
#include "kernels/ops.h"

namespace longhaul::compression {

// The codecs a device encoder and decoder take: dense bf16 and q8/q4/q2, without top-k or zstd.
inline bool DeviceCodecSupports(const CodecSpec& spec) {
  if (spec.topk.enabled || spec.zstd.enabled) return false;
  return spec.value.format == ValueFormat::kBf16 || spec.value.quantized();
}

class DeviceEncoder {
 public:
  virtual ~DeviceEncoder() = default;
  virtual bool Supports(const CodecSpec& spec) const = 0;
  // Encodes the n floats at `device_values` (memory of the backend this encoder was made for)
  // and starts copying the encoded bytes to the host; once it returns, the floats may change
  // (the backend's next work can be queued) while the copy runs. Errors are EncodeDense's (the
  // first non-finite value); then nothing was started.
  // REQUIRES: Supports(spec), and no Start without its Finish.
  virtual Status Start(const CodecSpec& spec, const float* device_values, uint64_t n,
                       const EncodeOptions& options) = 0;
  // Waits for the copy the last Start began and appends the encoded bytes to *out.
  virtual Status Finish(std::vector<uint8_t>* out) = 0;
  // Both at once.
  Status Encode(const CodecSpec& spec, const float* device_values, uint64_t n,
                const EncodeOptions& options, std::vector<uint8_t>* out) {
    RETURN_IF_ERROR(Start(spec, device_values, n, options));
    return Finish(out);
  }
};

// A GPU encoder for `ops` when it is a CUDA backend (linked, or loaded: kernels/cuda_backend.h);
// nullptr otherwise (the CPU backends' tensors are already on the host). `ops` must outlive it.
StatusOr<std::unique_ptr<DeviceEncoder>> MakeDeviceEncoder(::longhaul::kernels::Ops* ops);

class DeviceDecoder {
 public:
  virtual ~DeviceDecoder() = default;
  virtual bool Supports(const CodecSpec& spec) const = 0;
  // Decodes `payload` (host memory: a frame's payload, DenseEncodedSize(spec.value, n) bytes)
  // into the n floats at `device_out` (memory of the backend this decoder was made for), which
  // hold Codec::Decode's values when it returns. Errors are DecodeDense's (a payload of the wrong
  // size; the first bad block, or the first NaN or infinite bf16 value).
  // REQUIRES: Supports(spec).
  virtual Status Decode(const CodecSpec& spec, std::span<const uint8_t> payload, uint64_t n,
                        float* device_out) = 0;
};

// As MakeDeviceEncoder, for decoding.
StatusOr<std::unique_ptr<DeviceDecoder>> MakeDeviceDecoder(::longhaul::kernels::Ops* ops);

// The same interfaces over host memory, with the host codec (the same codecs Supported, the same
// bytes and floats, the errors the GPU versions give): a test seam, so that what a GPU stage does
// with its device codecs (decoding into the fragment's input buffer, sends left pending while the
// next pass computes) runs without a GPU (HostStandInDeviceCodecs below).
std::unique_ptr<DeviceEncoder> MakeHostDeviceEncoder();
std::unique_ptr<DeviceDecoder> MakeHostDeviceDecoder();

// A stage's device encoder and decoder: both null where its backend has none.
struct DeviceCodecs {
  std::unique_ptr<DeviceEncoder> encoder;
  std::unique_ptr<DeviceDecoder> decoder;
};
// Where a stage gets them (daemon/job/site/runtime_env.h): from the backend (BackendDeviceCodecs),
// or, as the test seam, the host stand-ins on a backend without its own (HostStandInDeviceCodecs).
using DeviceCodecSource = StatusOr<DeviceCodecs> (*)(::longhaul::kernels::Ops* ops);
// MakeDeviceEncoder and MakeDeviceDecoder of `ops`.
StatusOr<DeviceCodecs> BackendDeviceCodecs(::longhaul::kernels::Ops* ops);
// The backend's own, or MakeHostDeviceEncoder and MakeHostDeviceDecoder where it has none.
StatusOr<DeviceCodecs> HostStandInDeviceCodecs(::longhaul::kernels::Ops* ops);

}  // namespace longhaul::compression
