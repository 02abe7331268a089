// The CUDA backend's entry table: everything the always-built code calls in the CUDA backend's
// shared library (//kernels/cuda:libcuda_backend.so), as one struct that the library returns
// from one C function. Plain C++ declarations, no CUDA headers: the loader (cuda_backend.h) and
// the backend (kernels/cuda/backend_entry.cc) share it.
//
// The library is linked into --config=cuda builds and dlopen()ed by the others (the package's
// longhauld finds it in /usr/lib/longhaul), so the table carries what the loader checks before
// it calls anything: the layout's number (abi) and the longhaul release it was built from.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace longhaul::kernels {
class Ops;
class ReplicaReducer;
}  // namespace longhaul::kernels
namespace longhaul::compression {
class DeviceEncoder;
class DeviceDecoder;
}  // namespace longhaul::compression

namespace longhaul::kernels {

// The layout of CudaBackendEntry; a change to it (or to a signature in it), or to the virtual
// functions of a class the backend derives from (kernels::Ops, kernels::ReplicaReducer), takes a
// new number. 2: Ops::MatmulBackwardInto and SoftmaxCrossEntropyBackwardInto,
// ReplicaReducer::AllGather. 3: ReplicaReducer::ReduceScatterSum.
inline constexpr int kCudaBackendAbi = 3;

struct CudaBackendEntry {
  // These two come first in every layout, so that any loader can read them.
  int abi;                    // kCudaBackendAbi of the backend's build
  const char* build_version;  // kBuildVersion (common/version.h) of the backend's build

  // The number of CUDA devices (0 or more), or FailedPrecondition with what cudaGetDeviceCount
  // said (cudaGetErrorString), and why where it can tell (the NVIDIA driver's library missing).
  StatusOr<int> (*device_count)();

  // MakeOps("cuda[-bf16][:N]") (kernels/cuda/cuda_ops.h, NewCudaOpsForMakeOps).
  StatusOr<std::unique_ptr<Ops>> (*new_ops)(const std::string& name, int device, bool bf16_compute);
  // MakeReplicaReducer's NCCL reducer (kernels/cuda/nccl_reducer.cc): nullptr when the replicas
  // are not distinct CUDA devices.
  StatusOr<std::unique_ptr<ReplicaReducer>> (*new_nccl_reducer)(const std::vector<Ops*>& replicas);
  // MakeDeviceEncoder / MakeDeviceDecoder (compression/cuda/device_encoder_cuda.cc): nullptr when
  // `ops` is not a CUDA backend.
  StatusOr<std::unique_ptr<compression::DeviceEncoder>> (*new_device_encoder)(Ops* ops);
  StatusOr<std::unique_ptr<compression::DeviceDecoder>> (*new_device_decoder)(Ops* ops);
};

}  // namespace longhaul::kernels

// Defined in the backend (kernels/cuda/backend_entry.cc): its table, valid for the process's
// lifetime. The loader looks this name up with dlsym.
extern "C" const longhaul::kernels::CudaBackendEntry* longhaul_cuda_backend_v1();
