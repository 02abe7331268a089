// Which kernel backends a site's stage runs on: one per data-parallel replica. The site's
// `devices` (daemon config) decide CPU or GPU and how many replicas; the job's `backend`
// decides the rest: cpu-ref rather than cpu on CPU replicas, and bf16 compute (cuda-bf16)
// rather than fp32 on GPUs. So one job can span GPU and CPU sites, each training its fragment
// on what it has.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace longhaul {

// devices: each "cpu", "cpu:N" or "cuda:N" (validated by the config loader). job_backend: the
// job's `backend` (cpu, cpu-ref, cuda or cuda-bf16). Returns kernels::MakeOps names, one per
// replica: every listed GPU ("cuda:1", "cuda-bf16:0", ...) when there is one, else one CPU
// replica per entry ("cpu" or "cpu-ref"; several CPU replicas split the machine's threads).
std::vector<std::string> SiteBackends(const std::vector<std::string>& devices,
                                      const std::string& job_backend);

// Checks at daemon start that every device in `devices` exists on this machine, in this
// build: "cuda:N" needs a CUDA build (--config=cuda) and a GPU N. The error names the device.
Status CheckSiteDevices(const std::vector<std::string>& devices);

}  // namespace longhaul
