// The "cuda" kernel backend: every op of kernels/ops.h on one NVIDIA GPU. Matrix products
// (the linear layers and attention's two batched products) run on cuBLAS; everything else is
// this backend's own kernels (cuda_kernels.h). All work is queued on one stream per backend,
// in order; Download, SumSquares and Synchronize wait for it.
//
// Two precisions, picked by the backend name (kernels/ops.cc):
//   "cuda"       fp32 everywhere (cuBLAS without TF32); what the tests compare with "cpu-ref".
//   "cuda-bf16"  bf16 compute: the matrix products run on tensor cores with bf16 inputs and
//                fp32 accumulation (CUBLAS_COMPUTE_32F_FAST_16BF); every tensor the model
//                keeps (weights = master weights, gradients, AdamW moments, activations) stays
//                fp32, as do layernorm, softmax, GELU, the loss and AdamW.
// Either name may end in ":N" to pick device N (default 0).
//
// Token ids and targets are host arrays (ops.h); the backend copies them to the device. The
// embedding's weight gradient is deterministic without atomics: positions are grouped by
// token on the host and each token's row sums its positions in order, as the reference does.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "common/status.h"
#include "kernels/ops.h"

namespace longhaul::kernels::cuda {

struct CudaOpsOptions {
  int device = 0;
  bool bf16_compute = false;
  std::string name = "cuda";  // what name() reports
};

// Fails with FailedPrecondition "no CUDA device: ..." when the device is not there.
StatusOr<std::unique_ptr<Ops>> NewCudaOps(const CudaOpsOptions& options);
// The same, for MakeOps, through the backend's entry table (kernels/cuda/backend_entry.cc).
StatusOr<std::unique_ptr<Ops>> NewCudaOpsForMakeOps(const std::string& name, int device,
                                                    bool bf16_compute);

// For code that works next to a CUDA backend (device codecs, NCCL): the device and stream of
// `ops`, or -1 / nullptr when `ops` is not a CUDA backend.
int CudaDeviceOf(const Ops& ops);
cudaStream_t CudaStreamOf(const Ops& ops);

}  // namespace longhaul::kernels::cuda
