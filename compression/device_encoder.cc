// MakeDeviceEncoder and MakeDeviceDecoder; see device_encoder.h. The GPU implementation lives in
// the CUDA backend's shared library (compression/cuda/device_encoder_cuda.cc), reached through one
// declared function, as MakeOps reaches the backend (kernels/BUILD).
#include "compression/device_encoder.h"

namespace longhaul::compression {

#ifdef LONGHAUL_WITH_CUDA
namespace cuda {
// nullptr when `ops` is not a CUDA backend.
StatusOr<std::unique_ptr<DeviceEncoder>> NewDeviceEncoderForMake(::longhaul::kernels::Ops* ops);
StatusOr<std::unique_ptr<DeviceDecoder>> NewDeviceDecoderForMake(::longhaul::kernels::Ops* ops);
}  // namespace cuda
#endif

StatusOr<std::unique_ptr<DeviceEncoder>> MakeDeviceEncoder(::longhaul::kernels::Ops* ops) {
#ifdef LONGHAUL_WITH_CUDA
  return cuda::NewDeviceEncoderForMake(ops);
#else
  (void)ops;
  return std::unique_ptr<DeviceEncoder>();
#endif
}

StatusOr<std::unique_ptr<DeviceDecoder>> MakeDeviceDecoder(::longhaul::kernels::Ops* ops) {
#ifdef LONGHAUL_WITH_CUDA
  return cuda::NewDeviceDecoderForMake(ops);
#else
  (void)ops;
  return std::unique_ptr<DeviceDecoder>();
#endif
}

}  // namespace longhaul::compression
