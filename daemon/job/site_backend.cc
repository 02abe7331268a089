// SiteBackend and CheckSiteDevices; see site_backend.h.
#include "daemon/job/site_backend.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

Status CheckSiteDevices(const std::vector<std::string>& devices) {
  for (const auto& d : devices) {
    if (!absl::StartsWith(d, "cuda:")) continue;
    // Creating the backend is the check: it finds the device and starts cuBLAS on it.
    auto ops = kernels::MakeOps(d, 1);
    if (!ops.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("devices: ", d, " is not usable here: ", ops.status().message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace longhaul
