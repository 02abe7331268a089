// A "CUDA backend" from another longhaul release: its entry table names version 0.0.0-other and
// has no functions; the loader must refuse it before calling any (cuda_backend_test).
#include "kernels/cuda_backend_entry.h"

extern "C" const longhaul::kernels::CudaBackendEntry* longhaul_cuda_backend_v1() {
  static const longhaul::kernels::CudaBackendEntry entry = {
      .abi = longhaul::kernels::kCudaBackendAbi,
      .build_version = "0.0.0-other",
  };
  return &entry;
}
