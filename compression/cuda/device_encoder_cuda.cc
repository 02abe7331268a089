// The GPU DeviceEncoder and DeviceDecoder (compression/device_encoder.h): the codec kernels of
// device_codec.h on the backend's own stream, and one copy of the encoded bytes between pinned
// host memory and the GPU on a stream of their own. Built into the CUDA backend's shared library.
#include <cuda_runtime_api.h>

#include <cstring>

#include "compression/cuda/device_codec.h"
#include "compression/dense_codec.h"
#include "compression/device_encoder.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/status_check.h"

namespace longhaul::compression::cuda {
namespace {

// What both directions hold: the device and its compute stream, a copy stream, an event that
// orders the two, and grow-only staging for the encoded bytes on the device and pinned on the
// host.
class Staging {
 public:
  Staging(int device, cudaStream_t compute) : device_(device), compute_(compute) {}
  ~Staging() {
    if (cudaSetDevice(device_) != cudaSuccess) return;
    if (copy_ != nullptr) (void)cudaStreamSynchronize(copy_);  // a copy still in flight
    if (codes_ != nullptr) (void)cudaFree(codes_);
    if (pinned_ != nullptr) (void)cudaFreeHost(pinned_);
    if (copied_ != nullptr) (void)cudaEventDestroy(copied_);
    if (copy_ != nullptr) (void)cudaStreamDestroy(copy_);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  Status Init() {
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
    return absl::OkStatus();
  }

  // Makes the device current and the staging at least `bytes` long.
  Status Reserve(uint64_t bytes) {
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    if (bytes <= capacity_) return absl::OkStatus();
    if (codes_ != nullptr) LONGHAUL_CUDA_RETURN_IF_ERROR(cudaFree(codes_));
    if (pinned_ != nullptr) LONGHAUL_CUDA_RETURN_IF_ERROR(cudaFreeHost(pinned_));
    codes_ = nullptr;
    pinned_ = nullptr;
    capacity_ = 0;
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&codes_), bytes));
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&pinned_), bytes));
    capacity_ = bytes;
    return absl::OkStatus();
  }

 protected:
  const int device_;
  const cudaStream_t compute_;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t copied_ = nullptr;
  uint8_t* codes_ = nullptr;
  uint8_t* pinned_ = nullptr;
  uint64_t capacity_ = 0;
};

class CudaDeviceEncoder final : public DeviceEncoder, public Staging {
 public:
  using Staging::Staging;

  bool Supports(const CodecSpec& spec) const override { return DeviceCodecSupports(spec); }

  Status Start(const CodecSpec& spec, const float* device_values, uint64_t n,
               const EncodeOptions& options) override {
    if (!Supports(spec)) {
      return absl::InvalidArgumentError("device encoder: this codec is encoded on the host");
    }
    if (started_) return absl::FailedPreconditionError("device encoder: Start without Finish");
    const uint64_t bytes = DenseEncodedSize(spec.value, n);
    RETURN_IF_ERROR(Reserve(bytes));
    int64_t bad = kernels::kNone;
    if (n > 0) {
      // Both wait for the compute stream before returning (they read back the error index),
      // so the codes are complete when the copy below starts, and the floats are free.
      if (spec.value.format == ValueFormat::kBf16) {
        bad = FloatsToBf16OnDevice(device_values, n, codes_, compute_);
      } else {
        bad = QuantizeOnDevice(QuantFor(spec.value, options.seed), device_values, n, codes_,
                               compute_);
      }
    }
    if (bad != kernels::kNone) {
      float v = 0;
      LONGHAUL_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(&v, device_values + bad, sizeof(v), cudaMemcpyDeviceToHost));
      return DenseValueError(spec.value, v, bad);
    }
    LONGHAUL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(pinned_, codes_, bytes, cudaMemcpyDeviceToHost, copy_));
    started_ = true;
    started_bytes_ = bytes;
    return absl::OkStatus();
  }

  Status Finish(std::vector<uint8_t>* out) override {
    if (!started_) return absl::FailedPreconditionError("device encoder: Finish without Start");
    started_ = false;
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_));
    out->insert(out->end(), pinned_, pinned_ + started_bytes_);
    return absl::OkStatus();
  }

 private:
  bool started_ = false;
  uint64_t started_bytes_ = 0;
};

class CudaDeviceDecoder final : public DeviceDecoder, public Staging {
 public:
  using Staging::Staging;

  bool Supports(const CodecSpec& spec) const override { return DeviceCodecSupports(spec); }

  Status Decode(const CodecSpec& spec, std::span<const uint8_t> payload, uint64_t n,
                float* device_out) override {
    if (!Supports(spec)) {
      return absl::InvalidArgumentError("device decoder: this codec is decoded on the host");
    }
    RETURN_IF_ERROR(CheckDenseEncodedSize(spec.value, payload.size(), n));
    if (n == 0) return absl::OkStatus();
    RETURN_IF_ERROR(Reserve(payload.size()));
    std::memcpy(pinned_, payload.data(), payload.size());
    LONGHAUL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(codes_, pinned_, payload.size(), cudaMemcpyHostToDevice, copy_));
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaEventRecord(copied_, copy_));
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(compute_, copied_, 0));
    // Both wait for the compute stream before returning, so the staging is free again after.
    const int64_t bad =
        spec.value.format == ValueFormat::kBf16
            ? Bf16ToFloatsOnDevice(codes_, n, device_out, compute_)
            : DequantizeOnDevice(QuantFor(spec.value, 0), codes_, n, device_out, compute_);
    if (bad != kernels::kNone) return DenseDecodeError(spec.value, bad);
    return absl::OkStatus();
  }
};

template <typename Interface, typename Impl>
StatusOr<std::unique_ptr<Interface>> New(::longhaul::kernels::Ops* ops) {
  const int device = ::longhaul::kernels::cuda::CudaDeviceOf(*ops);
  if (device < 0) return std::unique_ptr<Interface>();
  auto t = std::make_unique<Impl>(device, ::longhaul::kernels::cuda::CudaStreamOf(*ops));
  RETURN_IF_ERROR(t->Init());
  return std::unique_ptr<Interface>(std::move(t));
}

}  // namespace

StatusOr<std::unique_ptr<DeviceEncoder>> NewDeviceEncoderForMake(::longhaul::kernels::Ops* ops) {
  return New<DeviceEncoder, CudaDeviceEncoder>(ops);
}

StatusOr<std::unique_ptr<DeviceDecoder>> NewDeviceDecoderForMake(::longhaul::kernels::Ops* ops) {
  return New<DeviceDecoder, CudaDeviceDecoder>(ops);
}

}  // namespace longhaul::compression::cuda
