// Encoding on the GPU, so that only compressed bytes cross PCIe: a tensor that lives in a CUDA
// backend's memory is quantized (or converted to bf16) there, and only the encoded bytes are
// copied, through a pinned host buffer on a stream of their own, into the frame. The bytes are
// exactly Codec::Encode's for the same spec (compression/cuda/device_codec.h), so receivers
// cannot tell. Dense codecs only (fp32, bf16, q8/q4/q2); a spec with top-k or zstd, or fp16,
// is not Supported and the caller encodes on the host.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "compression/codec.h"
#include "compression/codec_spec.h"
#include "kernels/ops.h"

namespace longhaul::compression {

class DeviceEncoder {
 public:
  virtual ~DeviceEncoder() = default;
  virtual bool Supports(const CodecSpec& spec) const = 0;
  // Appends the encoding of the n floats at `device_values` (memory of the backend this
  // encoder was made for) to *out. Errors are EncodeDense's (the first non-finite value).
  // REQUIRES: Supports(spec).
  virtual Status Encode(const CodecSpec& spec, const float* device_values, uint64_t n,
                        const EncodeOptions& options, std::vector<uint8_t>* out) = 0;
};

// A GPU encoder for `ops` when it is a CUDA backend of a --config=cuda build; nullptr
// otherwise (the CPU backends' tensors are already on the host). `ops` must outlive it.
StatusOr<std::unique_ptr<DeviceEncoder>> MakeDeviceEncoder(::longhaul::kernels::Ops* ops);

}  // namespace longhaul::compression
