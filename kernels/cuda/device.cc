// Device discovery; see device.h.
#include "kernels/cuda/device.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/status_check.h"

namespace longhaul::kernels::cuda {

StatusOr<int> CudaDeviceCount() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear it, so later calls do not report it again
    return absl::FailedPreconditionError(absl::StrCat("no CUDA device: ", cudaGetErrorString(err)));
  }
  if (count <= 0) {
    return absl::FailedPreconditionError("no CUDA device: the CUDA runtime reports 0 devices");
  }
  return count;
}

Status CheckCudaDevice(int device) {
  auto count = CudaDeviceCount();
  if (!count.ok()) return count.status();
  if (device < 0 || device >= *count) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "no CUDA device %d: this machine has %d (cuda:0 .. cuda:%d)", device, *count, *count - 1));
  }
  return absl::OkStatus();
}

std::string CudaDeviceDescription(int device) {
  if (Status s = CheckCudaDevice(device); !s.ok()) return std::string(s.message());
  cudaDeviceProp prop{};
  if (cudaError_t err = cudaGetDeviceProperties(&prop, device); err != cudaSuccess) {
    return CudaErrorText(err, "cudaGetDeviceProperties", __FILE__, __LINE__);
  }
  return absl::StrFormat("%s (sm_%d%d, %d SMs, %.1f GiB)", prop.name, prop.major, prop.minor,
                         prop.multiProcessorCount,
                         static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024 * 1024));
}

}  // namespace longhaul::kernels::cuda
