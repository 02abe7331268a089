// Data parallelism inside a site: the collectives between replicas of one fragment, each on its
// own backend (a GPU each, or CPU replicas). After AllReduceSum every replica's buffer holds
// the element-wise sum over all replicas, so identical optimizer steps keep the replicas
// identical. AllGather and ReduceScatterSum are the sharded modes' (model/shard_mode.h,
// model/replicated_fragment.h): each replica stepped one part of the parameters, and every
// replica takes every part; each replica keeps one part of the summed gradient.
//
// Two implementations behind MakeReplicaReducer: NCCL when every replica is a distinct CUDA
// device of a --config=cuda build (kernels/cuda/nccl_comm.h, one communicator over the local
// GPUs), otherwise the host reference: download every buffer, add them on the host in replica
// order, upload the sum to every replica; for AllGather, each part downloaded from its owner
// and uploaded to the others; for ReduceScatterSum, each part summed on the host and uploaded
// to its owner.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/ops.h"

namespace longhaul::kernels {

class ReplicaReducer {
 public:
  virtual ~ReplicaReducer() = default;
  virtual std::string name() const = 0;  // "host" or "nccl"
  // buffers[i]: `count` floats in replica i's backend memory. In place.
  // REQUIRES: buffers.size() == the number of replicas.
  virtual Status AllReduceSum(std::span<float* const> buffers, size_t count) = 0;
  // buffers[i] (replica i's backend memory) holds its own part, floats [offsets[i],
  // offsets[i + 1]); afterwards every buffer holds every part (the others' copied in, its own
  // untouched). REQUIRES: buffers.size() == the number of replicas, offsets.size() == that + 1,
  // offsets non-decreasing. The default answers Unimplemented, for a reducer without it.
  // (Inline: the CUDA backend's library derives from this class and sees only this header.)
  virtual Status AllGather(std::span<float* const> /*buffers*/,
                           std::span<const size_t> /*offsets*/) {
    return absl::UnimplementedError("the " + name() + " reducer has no all-gather");
  }
  // buffers[i] (replica i's backend memory) holds a whole tensor; afterwards part i of buffer
  // i, floats [offsets[i], offsets[i + 1]), holds that part's sum over the replicas (in
  // replica order, as AllReduceSum adds; NCCL's in its own), the rest of each buffer
  // unspecified. For the
  // sharded gradients (zero2, zero3). The same requirements and default as AllGather.
  virtual Status ReduceScatterSum(std::span<float* const> /*buffers*/,
                                  std::span<const size_t> /*offsets*/) {
    return absl::UnimplementedError("the " + name() + " reducer has no reduce-scatter");
  }
};

// The host reference over `replicas` (any backends; they must outlive the reducer).
std::unique_ptr<ReplicaReducer> NewHostReducer(std::vector<Ops*> replicas);

// NCCL when every replica is a distinct CUDA device and this build has CUDA, else the host
// reducer. One replica: a reducer that does nothing.
StatusOr<std::unique_ptr<ReplicaReducer>> MakeReplicaReducer(std::vector<Ops*> replicas);

}  // namespace longhaul::kernels
