// Error texts and the abort path of the checking macros (check.h).
#include "kernels/cuda/check.h"

#include <cstdio>
#include <cstdlib>

namespace longhaul::kernels::cuda {

std::string CallSite(const char* expr, const char* file, int line) {
  return std::string(file) + ":" + std::to_string(line) + ": " + expr + ": ";
}

void CheckFailed(const std::string& text) {
  std::fprintf(stderr, "longhaul cuda: %s\n", text.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string CudaErrorText(cudaError_t err, const char* expr, const char* file, int line) {
  return CallSite(expr, file, line) + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")";
}

std::string CublasErrorText(cublasStatus_t st, const char* expr, const char* file, int line) {
  return CallSite(expr, file, line) + cublasGetStatusName(st) + " (" + cublasGetStatusString(st) +
         ")";
}

void CudaFail(cudaError_t err, const char* expr, const char* file, int line) {
  CheckFailed(CudaErrorText(err, expr, file, line));
}

void CublasFail(cublasStatus_t st, const char* expr, const char* file, int line) {
  CheckFailed(CublasErrorText(st, expr, file, line));
}

}  // namespace longhaul::kernels::cuda
