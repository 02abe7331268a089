// Checking macros for every CUDA runtime and cuBLAS call (NCCL's are in nccl_check.h, so that
// only code using NCCL links it): a failed call aborts the process
// with the call's text, the library's error name and message, and the file and line, e.g.
//   longhaul cuda: kernels/cuda/cuda_ops.cc:120: cudaMalloc(&p, bytes): cudaErrorMemoryAllocation
//   (out of memory)
// Aborting is deliberate: the Ops interface has no error channel, and a failed kernel leaves
// the CUDA context unusable anyway. Code that can report errors (the backend factory, the NCCL
// communicator) uses the Status-returning forms in status_check.h instead.
//
// This header is also compiled by nvcc (.cu files), so it includes nothing from absl.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <string>

namespace longhaul::kernels::cuda {

// "file:line: expr: ", the start of every error text.
std::string CallSite(const char* expr, const char* file, int line);
// Prints "longhaul cuda: <text>" to stderr and aborts.
[[noreturn]] void CheckFailed(const std::string& text);

// "file:line: expr: <error name> (<message>)".
std::string CudaErrorText(cudaError_t err, const char* expr, const char* file, int line);
std::string CublasErrorText(cublasStatus_t st, const char* expr, const char* file, int line);

[[noreturn]] void CudaFail(cudaError_t err, const char* expr, const char* file, int line);
[[noreturn]] void CublasFail(cublasStatus_t st, const char* expr, const char* file, int line);

}  // namespace longhaul::kernels::cuda

#define LONGHAUL_CUDA_CHECK(expr)                                                    \
  do {                                                                               \
    const cudaError_t longhaul_err_ = (expr);                                        \
    if (longhaul_err_ != cudaSuccess) {                                              \
      ::longhaul::kernels::cuda::CudaFail(longhaul_err_, #expr, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)

// After a kernel launch: reports launch errors (bad configuration, no kernel image for this
// GPU) at the launch site. Errors raised while the kernel runs surface at the next check.
#define LONGHAUL_CUDA_CHECK_LAUNCH() LONGHAUL_CUDA_CHECK(cudaGetLastError())

#define LONGHAUL_CUBLAS_CHECK(expr)                                                   \
  do {                                                                                \
    const cublasStatus_t longhaul_st_ = (expr);                                       \
    if (longhaul_st_ != CUBLAS_STATUS_SUCCESS) {                                      \
      ::longhaul::kernels::cuda::CublasFail(longhaul_st_, #expr, __FILE__, __LINE__); \
    }                                                                                 \
  } while (0)
