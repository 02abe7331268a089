// SiteBackend and CheckSiteDevices; see site_backend.h.
#include "daemon/job/site/site_backend.h"

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda_backend.h"
#include "kernels/ops.h"

namespace longhaul {
namespace {

std::vector<std::string> Gpus(const std::vector<std::string>& devices) {
  std::vector<std::string> gpus;
  for (const auto& d : devices) {
    if (absl::StartsWith(d, "cuda:")) gpus.push_back(d);
  }
  return gpus;
}

}  // namespace

std::vector<std::string> SiteBackends(const std::vector<std::string>& devices,
                                      const std::string& job_backend) {
  std::vector<std::string> backends;
  for (const auto& gpu : Gpus(devices)) {
    backends.push_back(
        absl::StrCat(job_backend == "cuda-bf16" ? "cuda-bf16" : "cuda", ":", gpu.substr(5)));
  }
  if (!backends.empty()) return backends;
  const std::string cpu = job_backend == "cpu-ref" ? "cpu-ref" : "cpu";
  backends.assign(std::max<size_t>(1, devices.size()), cpu);
  return backends;
}

namespace {

// Why GPU `device` ("cuda:N") is not usable here, each step's own message; OK when it is.
Status CheckGpu(const std::string& device) {
  int index = -1;
  if (!absl::SimpleAtoi(device.substr(5), &index) || index < 0) {
    return absl::InvalidArgumentError("expected cuda:N, N a device number");
  }
  // The backend: linked, or its library found and loaded with the NVIDIA libraries it needs.
  ASSIGN_OR_RETURN(const kernels::CudaBackendEntry* backend, kernels::CudaBackend());
  // A driver and GPUs.
  auto count = backend->device_count();
  if (!count.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no GPU: the CUDA backend ", kernels::CudaBackendSource(),
                     " loaded but cudaGetDeviceCount says: ", count.status().message()));
  }
  if (*count <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no GPU: the CUDA backend ", kernels::CudaBackendSource(),
                     " loaded but cudaGetDeviceCount finds no device"));
  }
  if (index >= *count) {
    return absl::FailedPreconditionError(absl::StrCat("this machine has ", *count, " GPU",
                                                      *count == 1 ? "" : "s",
                                                      " (cuda:0 .. cuda:", *count - 1, ")"));
  }
  // The backend on it: the device made current and cuBLAS started, as a stage will.
  return kernels::MakeOps(device, 1).status();
}

}  // namespace

Status CheckSiteDevices(const std::vector<std::string>& devices) {
  for (const auto& d : devices) {
    if (!absl::StartsWith(d, "cuda:")) continue;
    if (Status s = CheckGpu(d); !s.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("devices: ", d, " is not usable here: ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace longhaul
