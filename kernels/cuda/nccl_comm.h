// NCCL data parallelism inside a site: one communicator over this process's local GPUs, and an
// in-place all-reduce of one float buffer per GPU (the gradients of each replica, before the
// optimizer step). Single process, several devices (ncclCommInitAll), which is how one daemon
// drives all the GPUs of its machine.
//
//   auto comm = NcclComm::Create({0, 1, 2, 3});
//   RETURN_IF_ERROR((*comm)->AllReduce(grads_per_device, count, NcclComm::Reduction::kAverage,
//                                      streams_per_device));
//
// Every NCCL and CUDA call is checked (nccl_check.h, status_check.h): failures come back as a
// Status naming the call, the error and file:line, never as an abort.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <span>
#include <vector>

#include "common/status.h"

namespace longhaul::kernels::cuda {

class NcclComm {
 public:
  enum class Reduction { kSum, kAverage };

  // A communicator with one rank per entry of `devices` (distinct CUDA device indices), rank i
  // on devices[i]. Fails with "no CUDA device: ..." when a device is missing.
  static StatusOr<std::unique_ptr<NcclComm>> Create(const std::vector<int>& devices);

  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int size() const { return static_cast<int>(devices_.size()); }
  const std::vector<int>& devices() const { return devices_; }

  // In place: after it returns, every buffers[i] (device memory on devices()[i], `count`
  // floats) holds the element-wise sum (or average) over all ranks. The reductions are queued
  // on streams[i] (nullptr entries, or an empty span, use a stream of the communicator) and
  // waited for before returning.
  // REQUIRES: buffers.size() == size(); streams empty or streams.size() == size().
  Status AllReduce(std::span<float* const> buffers, size_t count, Reduction reduction,
                   std::span<const cudaStream_t> streams = {});

 private:
  NcclComm() = default;

  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> own_streams_;
};

}  // namespace longhaul::kernels::cuda
