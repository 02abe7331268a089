// MakeOps: the one place that maps a backend name to an implementation. Callers pick the
// backend at run time by name; a backend this build lacks fails here with a clear message.
#include "kernels/ops.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/reference_ops.h"
namespace longhaul::kernels {

#ifdef LONGHAUL_WITH_CUDA
namespace cuda {
// kernels/cuda/cuda_ops.h. Declared here rather than included: this target links the CUDA
// backend as a shared library without its headers (see kernels/BUILD); a mismatch fails to link.
StatusOr<std::unique_ptr<Ops>> NewCudaOpsForMakeOps(const std::string& name, int device,
                                                    bool bf16_compute);
}  // namespace cuda
#endif

namespace {

// "cuda", "cuda-bf16", each optionally ":N": the device index N, or -1 when the name is not a
// CUDA backend's, or -2 when it is one with a malformed device suffix.
int CudaDeviceInName(const std::string& name, bool* bf16) {
  std::string base = name, index;
  if (size_t colon = name.find(':'); colon != std::string::npos) {
    base = name.substr(0, colon);
    index = name.substr(colon + 1);
  }
  if (base != "cuda" && base != "cuda-bf16") return -1;
  *bf16 = base == "cuda-bf16";
  if (index.empty()) return name.find(':') == std::string::npos ? 0 : -2;
  if (index.size() > 4 || index.find_first_not_of("0123456789") != std::string::npos) return -2;
  return std::stoi(index);
}

}  // namespace

StatusOr<std::unique_ptr<Ops>> MakeOps(const std::string& name, int threads) {
  if (name == "cpu-ref") return NewReferenceOps();
  if (name == "cpu") return NewCpuOps(threads);
  bool bf16 = false;
  if (const int device = CudaDeviceInName(name, &bf16); device != -1) {
    if (device < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "kernel backend \"", name, "\": expected cuda or cuda-bf16, optionally :N (device N)"));
    }
#ifdef LONGHAUL_WITH_CUDA
    auto ops = cuda::NewCudaOpsForMakeOps(name, device, bf16);
    if (!ops.ok()) return Annotate(ops.status(), absl::StrCat("kernel backend \"", name, "\""));
    return ops;
#else
    return absl::FailedPreconditionError(
        absl::StrCat("kernel backend \"", name,
                     "\": this build has no CUDA backend; rebuild with --config=cuda"));
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown kernel backend \"", name,
                                                 "\" (expected cpu, cpu-ref, cuda or cuda-bf16)"));
}

}  // namespace longhaul::kernels
