// MakeOps: the one place that maps a backend name to an implementation. Callers pick the
// backend at run time by name; a backend this build lacks fails here with a clear message.
#include "kernels/ops.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/reference_ops.h"
#include "kernels/cuda_backend.h"
namespace longhaul::kernels {

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
    // The backend linked (--config=cuda) or loaded from its library (kernels/cuda_backend.h).
    auto backend = CudaBackend();
    if (!backend.ok()) {
      return Annotate(backend.status(), absl::StrCat("kernel backend \"", name, "\""));
    }
    auto ops = (*backend)->new_ops(name, device, bf16);
    if (!ops.ok()) return Annotate(ops.status(), absl::StrCat("kernel backend \"", name, "\""));
    return ops;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown kernel backend \"", name,
                                                 "\" (expected cpu, cpu-ref, cuda or cuda-bf16)"));
}

}  // namespace longhaul::kernels
