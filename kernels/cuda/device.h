// Finding CUDA devices. Every CUDA entry point of longhaul (the "cuda" kernel backend, the NCCL
// communicator, the GPU tests and tools/gpu-check) asks here first, so a machine without a
// usable GPU gets one clear message: "no CUDA device: <what the CUDA runtime said>", e.g.
// "no CUDA device: CUDA driver version is insufficient for CUDA runtime version" where the
// toolkit is installed but no driver is, as on the development machines.
#pragma once

#include <string>

#include "common/status.h"

namespace longhaul::kernels::cuda {

// The number of CUDA devices (>= 1), or FailedPreconditionError("no CUDA device: ...").
StatusOr<int> CudaDeviceCount();

// OK when `device` exists; otherwise the reason (no device at all, or an index out of range).
Status CheckCudaDevice(int device);

// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)", or the error text.
std::string CudaDeviceDescription(int device);

}  // namespace longhaul::kernels::cuda
