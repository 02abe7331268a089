// MakeDeviceEncoder and MakeDeviceDecoder, and their host stand-ins; see device_encoder.h. The GPU
// implementation lives in the CUDA backend's shared library
// (compression/cuda/device_encoder_cuda.cc), reached through the backend's entry table, as
// MakeOps reaches the backend (kernels/cuda_backend.h).
#include "compression/device_encoder.h"

#include "compression/dense_codec.h"
#include "kernels/cuda_backend.h"

namespace longhaul::compression {

// Only a loaded backend can have made a CUDA `ops`: without one, no device codec (nullptr), and
// nothing is loaded for a CPU backend's sake.
StatusOr<std::unique_ptr<DeviceEncoder>> MakeDeviceEncoder(::longhaul::kernels::Ops* ops) {
  const auto* cuda = ::longhaul::kernels::CudaBackendIfLoaded();
  if (cuda == nullptr) return std::unique_ptr<DeviceEncoder>();
  return cuda->new_device_encoder(ops);
}

StatusOr<std::unique_ptr<DeviceDecoder>> MakeDeviceDecoder(::longhaul::kernels::Ops* ops) {
  const auto* cuda = ::longhaul::kernels::CudaBackendIfLoaded();
  if (cuda == nullptr) return std::unique_ptr<DeviceDecoder>();
  return cuda->new_device_decoder(ops);
}

namespace {

class HostDeviceEncoder final : public DeviceEncoder {
 public:
  bool Supports(const CodecSpec& spec) const override { return DeviceCodecSupports(spec); }
  Status Start(const CodecSpec& spec, const float* values, uint64_t n,
               const EncodeOptions& options) override {
    if (!Supports(spec)) {
      return absl::InvalidArgumentError("device encoder: this codec is encoded on the host");
    }
    if (started_) return absl::FailedPreconditionError("device encoder: Start without Finish");
    bytes_.resize(DenseEncodedSize(spec.value, n));
    RETURN_IF_ERROR(EncodeDense(spec.value, {values, n}, options.seed, bytes_.data()));
    started_ = true;
    return absl::OkStatus();
  }
  Status Finish(std::vector<uint8_t>* out) override {
    if (!started_) return absl::FailedPreconditionError("device encoder: Finish without Start");
    started_ = false;
    out->insert(out->end(), bytes_.begin(), bytes_.end());
    return absl::OkStatus();
  }

 private:
  std::vector<uint8_t> bytes_;
  bool started_ = false;
};

class HostDeviceDecoder final : public DeviceDecoder {
 public:
  bool Supports(const CodecSpec& spec) const override { return DeviceCodecSupports(spec); }
  Status Decode(const CodecSpec& spec, std::span<const uint8_t> payload, uint64_t n,
                float* out) override {
    if (!Supports(spec)) {
      return absl::InvalidArgumentError("device decoder: this codec is decoded on the host");
    }
    return DecodeDense(spec.value, payload, {out, n});
  }
};

}  // namespace

std::unique_ptr<DeviceEncoder> MakeHostDeviceEncoder() {
  return std::make_unique<HostDeviceEncoder>();
}
std::unique_ptr<DeviceDecoder> MakeHostDeviceDecoder() {
  return std::make_unique<HostDeviceDecoder>();
}

StatusOr<DeviceCodecs> BackendDeviceCodecs(::longhaul::kernels::Ops* ops) {
  DeviceCodecs c;
  ASSIGN_OR_RETURN(c.encoder, MakeDeviceEncoder(ops));
  ASSIGN_OR_RETURN(c.decoder, MakeDeviceDecoder(ops));
  return c;
}

StatusOr<DeviceCodecs> HostStandInDeviceCodecs(::longhaul::kernels::Ops* ops) {
  ASSIGN_OR_RETURN(DeviceCodecs c, BackendDeviceCodecs(ops));
  if (c.encoder == nullptr) c.encoder = MakeHostDeviceEncoder();
  if (c.decoder == nullptr) c.decoder = MakeHostDeviceDecoder();
  return c;
}

}  // namespace longhaul::compression
