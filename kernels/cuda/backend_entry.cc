// The CUDA backend's entry table (kernels/cuda_backend_entry.h): what libcuda_backend.so offers
// the code that links or loads it (kernels/cuda_backend.h).
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include "absl/strings/str_cat.h"
#include "common/version.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda_backend_entry.h"

namespace longhaul::kernels::cuda {
// kernels/cuda/nccl_reducer.cc.
StatusOr<std::unique_ptr<ReplicaReducer>> NewNcclReducerForMakeReducer(
    const std::vector<Ops*>& replicas);
}  // namespace longhaul::kernels::cuda

namespace longhaul::compression::cuda {
// compression/cuda/device_encoder_cuda.cc.
StatusOr<std::unique_ptr<DeviceEncoder>> NewDeviceEncoderForMake(::longhaul::kernels::Ops* ops);
StatusOr<std::unique_ptr<DeviceDecoder>> NewDeviceDecoderForMake(::longhaul::kernels::Ops* ops);
}  // namespace longhaul::compression::cuda

namespace longhaul::kernels::cuda {
namespace {

// The CUDA runtime reports a missing driver as "CUDA driver version is insufficient for CUDA
// runtime version", as it does an old one: say which.
std::string DriverDiagnosis() {
  if (void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD); h != nullptr) {
    dlclose(h);
    return " (the NVIDIA driver's libcuda.so.1 is loaded: the driver is older than this CUDA "
           "runtime needs)";
  }
  dlerror();
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    return absl::StrCat(" (no NVIDIA driver: ", why != nullptr ? why : "libcuda.so.1 not found",
                        ")");
  }
  dlclose(h);
  return " (the NVIDIA driver's libcuda.so.1 loads: the driver is older than this CUDA runtime "
         "needs)";
}

StatusOr<int> DeviceCount() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaSuccess) return count;
  (void)cudaGetLastError();  // clear it, so later calls do not report it again
  std::string text = cudaGetErrorString(err);
  if (err == cudaErrorInsufficientDriver) text += DriverDiagnosis();
  return absl::FailedPreconditionError(text);
}

}  // namespace
}  // namespace longhaul::kernels::cuda

extern "C" const longhaul::kernels::CudaBackendEntry* longhaul_cuda_backend_v1() {
  namespace kc = longhaul::kernels::cuda;
  namespace cc = longhaul::compression::cuda;
  static const longhaul::kernels::CudaBackendEntry entry = {
      .abi = longhaul::kernels::kCudaBackendAbi,
      .build_version = longhaul::kBuildVersion,
      .device_count = &kc::DeviceCount,
      .new_ops = &kc::NewCudaOpsForMakeOps,
      .new_nccl_reducer = &kc::NewNcclReducerForMakeReducer,
      .new_device_encoder = &cc::NewDeviceEncoderForMake,
      .new_device_decoder = &cc::NewDeviceDecoderForMake,
  };
  return &entry;
}
