// Checking macros for NCCL calls, the NCCL counterpart of check.h / status_check.h (apart so
// that only code using NCCL links libnccl): the abort form LONGHAUL_NCCL_CHECK and the
// Status-returning form LONGHAUL_NCCL_RETURN_IF_ERROR, both naming the call, NCCL's error and
// its last-error detail, and the file and line.
#pragma once

#include <nccl.h>

#include <string>

#include "absl/status/status.h"

namespace longhaul::kernels::cuda {

// "file:line: expr: NCCL error <n> (<message>): <ncclGetLastError detail>".
std::string NcclErrorText(ncclResult_t res, const char* expr, const char* file, int line);
[[noreturn]] void NcclFail(ncclResult_t res, const char* expr, const char* file, int line);

}  // namespace longhaul::kernels::cuda

#define LONGHAUL_NCCL_CHECK(expr)                                                    \
  do {                                                                               \
    const ncclResult_t longhaul_res_ = (expr);                                       \
    if (longhaul_res_ != ncclSuccess) {                                              \
      ::longhaul::kernels::cuda::NcclFail(longhaul_res_, #expr, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)

#define LONGHAUL_NCCL_RETURN_IF_ERROR(expr)                                                    \
  do {                                                                                         \
    const ncclResult_t longhaul_res_ = (expr);                                                 \
    if (longhaul_res_ != ncclSuccess) {                                                        \
      return absl::InternalError(                                                              \
          ::longhaul::kernels::cuda::NcclErrorText(longhaul_res_, #expr, __FILE__, __LINE__)); \
    }                                                                                          \
  } while (0)
