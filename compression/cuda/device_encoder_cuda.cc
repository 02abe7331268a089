// The GPU DeviceEncoder (compression/device_encoder.h): the codec kernels of device_codec.h on
// the backend's own stream, then one copy of the encoded bytes into pinned host memory on a
// stream of its own. Built into the CUDA backend's shared library.
#include <cuda_runtime_api.h>

#include "compression/cuda/device_codec.h"
#include "compression/dense_codec.h"
#include "compression/device_encoder.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/status_check.h"

namespace longhaul::compression::cuda {
namespace {

class CudaDeviceEncoder final : public DeviceEncoder {
 public:
  CudaDeviceEncoder(int device, cudaStream_t compute) : device_(device), compute_(compute) {}

  ~CudaDeviceEncoder() override {
    if (cudaSetDevice(device_) != cudaSuccess) return;
    if (codes_ != nullptr) (void)cudaFree(codes_);
    if (pinned_ != nullptr) (void)cudaFreeHost(pinned_);
    if (copy_ != nullptr) (void)cudaStreamDestroy(copy_);
  }

  Status Init() {
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
    return absl::OkStatus();
  }

  bool Supports(const CodecSpec& spec) const override {
    if (spec.topk.enabled || spec.zstd.enabled) return false;
    return spec.value.format == ValueFormat::kBf16 || spec.value.quantized();
  }

  Status Encode(const CodecSpec& spec, const float* device_values, uint64_t n,
                const EncodeOptions& options, std::vector<uint8_t>* out) override {
    if (!Supports(spec)) {
      return absl::InvalidArgumentError("device encoder: this codec is encoded on the host");
    }
    const uint64_t bytes = DenseEncodedSize(spec.value, n);
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    RETURN_IF_ERROR(Reserve(bytes));
    int64_t bad = kernels::kNone;
    if (n > 0) {
      // Both wait for the compute stream before returning (they read back the error index),
      // so the codes are complete when the copy below starts.
      if (spec.value.format == ValueFormat::kBf16) {
        bad = FloatsToBf16OnDevice(device_values, n, codes_, compute_);
      } else {
        kernels::QuantParams p;
        p.bits = spec.value.bits();
        p.block = spec.value.block;
        p.asymmetric = spec.value.asymmetric;
        p.stochastic = spec.value.stochastic;
        p.seed = options.seed;
        bad = QuantizeOnDevice(p, device_values, n, codes_, compute_);
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
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(copy_));
    out->insert(out->end(), pinned_, pinned_ + bytes);
    return absl::OkStatus();
  }

 private:
  // Grow-only staging: device codes and their pinned host copy.
  Status Reserve(uint64_t bytes) {
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

  const int device_;
  const cudaStream_t compute_;
  cudaStream_t copy_ = nullptr;
  uint8_t* codes_ = nullptr;
  uint8_t* pinned_ = nullptr;
  uint64_t capacity_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<DeviceEncoder>> NewDeviceEncoderForMake(::longhaul::kernels::Ops* ops) {
  const int device = ::longhaul::kernels::cuda::CudaDeviceOf(*ops);
  if (device < 0) return std::unique_ptr<DeviceEncoder>();
  auto e =
      std::make_unique<CudaDeviceEncoder>(device, ::longhaul::kernels::cuda::CudaStreamOf(*ops));
  RETURN_IF_ERROR(e->Init());
  return std::unique_ptr<DeviceEncoder>(std::move(e));
}

}  // namespace longhaul::compression::cuda
