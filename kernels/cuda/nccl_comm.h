// NCCL data parallelism inside a site: one communicator over this process's local GPUs, and
// in-place collectives over one float buffer per GPU: an all-reduce (the gradients of each
// replica, before the optimizer step), and the sharded modes' all-gather and reduce-scatter of
// parts (model/replicated_fragment.h). Single process, several devices (ncclCommInitAll), which is
// how one daemon drives all the GPUs of its machine.
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

  // The sharded modes' collectives over parts: rank i owns floats [offsets[i], offsets[i + 1])
  // of every buffer. AllGather: each buffers[i] holds its own part; afterwards every buffer
  // holds every part. ReduceScatterSum: each buffers[i] holds a whole tensor; afterwards part i
  // of buffers[i] holds that part's sum over the ranks (the rest of each buffer unspecified).
  // Equal parts take NCCL's all-gather and reduce-scatter, in place; unequal ones (the last part
  // shorter, say) a broadcast or a reduce per part from or to its owner, all in one group
  // (each link then carries every part once, against (ranks - 1) / ranks of them: at most 2x
  // the bytes for two ranks, 1/7 more for eight). Queued on `streams` as AllReduce and waited for.
  // REQUIRES: buffers.size() == size(), offsets.size() == size() + 1, offsets non-decreasing,
  // streams empty or of size().
  Status AllGather(std::span<float* const> buffers, std::span<const size_t> offsets,
                   std::span<const cudaStream_t> streams = {});
  Status ReduceScatterSum(std::span<float* const> buffers, std::span<const size_t> offsets,
                          std::span<const cudaStream_t> streams = {});

  // For tests: equal parts take the per-owner path too, so that one GPU runs both paths.
  void set_parts_by_owner(bool on) { parts_by_owner_ = on; }

 private:
  NcclComm() = default;
  // The checks every collective makes: `what` names it in the error.
  Status CheckArgs(const char* what, size_t buffers, size_t streams) const;
  cudaStream_t StreamOf(std::span<const cudaStream_t> streams, size_t i) const;
  Status Wait(std::span<const cudaStream_t> streams) const;
  // `what` over parts: `equal` (ranks' parts of one size) or `each` (one part), in one group.
  template <typename Equal, typename Each>
  Status Parts(const char* what, std::span<float* const> buffers, std::span<const size_t> offsets,
               std::span<const cudaStream_t> streams, Equal equal, Each each);

  std::vector<int> devices_;
  std::vector<ncclComm_t> comms_;
  std::vector<cudaStream_t> own_streams_;
  bool parts_by_owner_ = false;
};

}  // namespace longhaul::kernels::cuda
