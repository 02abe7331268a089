// Error texts and the abort path of the NCCL checking macros (nccl_check.h).
#include "kernels/cuda/nccl_check.h"

#include "kernels/cuda/check.h"

namespace longhaul::kernels::cuda {

std::string NcclErrorText(ncclResult_t res, const char* expr, const char* file, int line) {
  std::string text = CallSite(expr, file, line) + "NCCL error " + std::to_string(res) + " (" +
                     ncclGetErrorString(res) + ")";
  if (const char* last = ncclGetLastError(nullptr); last != nullptr && *last != '\0') {
    text += ": ";
    text += last;
  }
  return text;
}

void NcclFail(ncclResult_t res, const char* expr, const char* file, int line) {
  CheckFailed(NcclErrorText(res, expr, file, line));
}

}  // namespace longhaul::kernels::cuda
