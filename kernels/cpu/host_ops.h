// The part of every CPU backend that is about memory, not math: host allocation (64-byte
// aligned, zero-filled, so vector loads never straddle a cache line at a buffer's start),
// and the copies, which on the host are plain memcpy/memset. "cpu-ref" and "cpu" derive from
// HostOps and add only their ops.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "kernels/ops.h"

namespace longhaul::kernels {

class HostOps : public Ops {
 public:
  float* Alloc(size_t count) override;
  void Free(float* p) override;
  void Upload(float* dst, const float* host_src, size_t count) override;
  void Download(float* host_dst, const float* src, size_t count) override;
  void Copy(float* dst, const float* src, size_t count) override;
  void Zero(float* p, size_t count) override;
  int64_t allocated_bytes() const override;
  int64_t peak_allocated_bytes() const override;

 private:
  mutable std::mutex mu_;  // Alloc and Free may come from several threads (rare calls)
  std::unordered_map<const float*, size_t> sizes_;
  int64_t allocated_ = 0, peak_ = 0;
};

// The number of cores this process may run on (its CPU affinity), at least 1.
int AvailableCores();

}  // namespace longhaul::kernels
