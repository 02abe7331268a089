// MakeOps: the one place that maps a backend name to an implementation. Callers pick the
// backend at run time by name; a backend this build lacks fails here with a clear message.
#include "kernels/ops.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/reference_ops.h"

namespace longhaul::kernels {

StatusOr<std::unique_ptr<Ops>> MakeOps(const std::string& name, int threads) {
  if (name == "cpu-ref") return NewReferenceOps();
  if (name == "cpu") return NewCpuOps(threads);
  if (name == "cuda") {
#ifdef LONGHAUL_WITH_CUDA
    // The CUDA backend (kernels/cuda) is not written yet; its issue wires it in here.
    return absl::UnimplementedError(
        "kernel backend \"cuda\": this --config=cuda build does not include the CUDA backend "
        "yet (kernels/cuda is not implemented)");
#else
    return absl::FailedPreconditionError(
        "kernel backend \"cuda\": this build has no CUDA backend; rebuild with --config=cuda");
#endif
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown kernel backend \"", name, "\" (expected cpu, cpu-ref or cuda)"));
}

}  // namespace longhaul::kernels
