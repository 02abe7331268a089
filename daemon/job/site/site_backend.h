// Which kernel backends a site's stage runs on: one per data-parallel replica. The site's
// `devices` (daemon config) decide CPU or GPU and how many replicas; the job's `backend`
// decides the rest: cpu-ref rather than cpu on CPU replicas, and bf16 compute (cuda-bf16)
// rather than fp32 on GPUs. So one job can span GPU and CPU sites, each training its fragment
// on what it has.
#pragma once

#include <algorithm>
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

// Threads for each of `replicas` replicas of a job asking for `job_threads` (0: all cores,
// which every replica then shares).
inline int ReplicaThreads(int job_threads, int replicas) {
  return job_threads == 0 ? 0 : std::max(1, job_threads / replicas);
}

// Whether a SiteBackends name is a GPU's: GPU replicas run side by side, each on its own
// device and memory; CPU replicas take turns on one machine's cores and memory.
inline bool OnGpu(const std::string& backend) { return backend.rfind("cuda", 0) == 0; }

// Checks that every device in `devices` is usable on this machine, with this build: for each
// "cuda:N", that the CUDA backend is there and loads (kernels/cuda_backend.h: linked, or the
// package's /usr/lib/longhaul/libcuda_backend.so with the NVIDIA libraries it needs), that
// cudaGetDeviceCount finds GPUs (a driver and a device), that N is one of them, and that the
// backend starts on it (MakeOps: the device and cuBLAS). `longhauld --check` and the daemon's
// start both call it, so that a config --check passes does not fail to start for its devices.
// The error names the device and what is missing: "devices: cuda:0 is not usable here: ...".
Status CheckSiteDevices(const std::vector<std::string>& devices);

}  // namespace longhaul
