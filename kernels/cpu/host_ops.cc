// Host memory for the CPU backends; see host_ops.h.
#include "kernels/cpu/host_ops.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace longhaul::kernels {

namespace {
constexpr size_t kAlignment = 64;
}  // namespace

float* HostOps::Alloc(size_t count) {
  if (count == 0) return nullptr;
  size_t bytes = count * sizeof(float);
  if (bytes / sizeof(float) != count) {
    std::fprintf(stderr, "longhaul kernels: allocation of %zu floats overflows\n", count);
    std::abort();
  }
  bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;  // aligned_alloc requires it
  void* p = std::aligned_alloc(kAlignment, bytes);
  if (p == nullptr) {
    std::fprintf(stderr, "longhaul kernels (%s): out of memory allocating %zu bytes\n",
                 name().c_str(), bytes);
    std::abort();
  }
  std::memset(p, 0, bytes);
  {
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[static_cast<const float*>(p)] = bytes;
    allocated_ += static_cast<int64_t>(bytes);
    peak_ = std::max(peak_, allocated_);
  }
  return static_cast<float*>(p);
}

void HostOps::Free(float* p) {
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = sizes_.find(p); it != sizes_.end()) {
      allocated_ -= static_cast<int64_t>(it->second);
      sizes_.erase(it);
    }
  }
  std::free(p);
}

int64_t HostOps::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

int64_t HostOps::peak_allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

void HostOps::Upload(float* dst, const float* host_src, size_t count) {
  if (count > 0) std::memcpy(dst, host_src, count * sizeof(float));
}

void HostOps::Download(float* host_dst, const float* src, size_t count) {
  if (count > 0) std::memcpy(host_dst, src, count * sizeof(float));
}

void HostOps::Copy(float* dst, const float* src, size_t count) {
  if (count > 0 && dst != src) std::memmove(dst, src, count * sizeof(float));
}

void HostOps::Zero(float* p, size_t count) {
  if (count > 0) std::memset(p, 0, count * sizeof(float));
}

int AvailableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

}  // namespace longhaul::kernels
