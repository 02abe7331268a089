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

StatusOr<std::string> SiteBackend(const std::vector<std::string>& devices,
                                  const std::string& job_backend) {
  const std::vector<std::string> gpus = Gpus(devices);
  if (gpus.size() > 1) {
    return absl::UnimplementedError(
        absl::StrCat("devices: ", gpus.size(),
                     " GPUs listed, but a site trains on one device (data parallelism over "
                     "several GPUs is not built yet); list one of them"));
  }
  if (gpus.empty()) return job_backend == "cpu-ref" ? std::string("cpu-ref") : std::string("cpu");
  const std::string index = gpus[0].substr(5);
  return absl::StrCat(job_backend == "cuda-bf16" ? "cuda-bf16" : "cuda", ":", index);
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
