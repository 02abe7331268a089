// Status-returning forms of the checking macros in check.h, for code that can report an error
// to its caller (the backend factory, the NCCL communicator): a failed call returns an
// absl::Status whose message names the call, the error and the file and line. Host code only
// (absl), never included by .cu files. NCCL's form is in nccl_check.h.
#pragma once

#include "absl/status/status.h"
#include "kernels/cuda/check.h"

#define LONGHAUL_CUDA_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                         \
    const cudaError_t longhaul_err_ = (expr);                                                  \
    if (longhaul_err_ != cudaSuccess) {                                                        \
      return absl::InternalError(                                                              \
          ::longhaul::kernels::cuda::CudaErrorText(longhaul_err_, #expr, __FILE__, __LINE__)); \
    }                                                                                          \
  } while (0)

#define LONGHAUL_CUBLAS_RETURN_IF_ERROR(expr)                                                   \
  do {                                                                                          \
    const cublasStatus_t longhaul_st_ = (expr);                                                 \
    if (longhaul_st_ != CUBLAS_STATUS_SUCCESS) {                                                \
      return absl::InternalError(                                                               \
          ::longhaul::kernels::cuda::CublasErrorText(longhaul_st_, #expr, __FILE__, __LINE__)); \
    }                                                                                           \
  } while (0)
