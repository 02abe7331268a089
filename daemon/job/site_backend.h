// Which kernel backend a site's stage runs on. The site's `devices` (daemon config) decide
// CPU or GPU; the job's `backend` decides the rest: cpu-ref rather than cpu on a CPU site, and
// bf16 compute (cuda-bf16) rather than fp32 on a GPU site. So one job can span GPU and CPU
// sites, each training its fragment on what it has.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace longhaul {

// devices: each "cpu" or "cuda:N" (validated by the config loader). job_backend: the job's
// `backend` (cpu, cpu-ref, cuda or cuda-bf16). Returns a kernels::MakeOps name, e.g. "cpu",
// "cuda:1" or "cuda-bf16:0". Fails when devices names more than one GPU: a site trains on one
// device (data parallelism over several GPUs is not built yet).
StatusOr<std::string> SiteBackend(const std::vector<std::string>& devices,
                                  const std::string& job_backend);

// Checks at daemon start that every device in `devices` exists on this machine, in this
// build: "cuda:N" needs a CUDA build (--config=cuda) and a GPU N. The error names the device.
Status CheckSiteDevices(const std::vector<std::string>& devices);

}  // namespace longhaul
