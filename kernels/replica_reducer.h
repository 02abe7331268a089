// Data parallelism inside a site: the gradient all-reduce between replicas of one fragment,
// each on its own backend (a GPU each, or CPU replicas). After AllReduceSum every replica's
// buffer holds the element-wise sum over all replicas, so identical optimizer steps keep the
// replicas identical.
//
// Two implementations behind MakeReplicaReducer: NCCL when every replica is a distinct CUDA
// device of a --config=cuda build (kernels/cuda/nccl_comm.h, one communicator over the local
// GPUs), otherwise the host reference: download every buffer, add them on the host in replica
// order, upload the sum to every replica.
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
};

// The host reference over `replicas` (any backends; they must outlive the reducer).
std::unique_ptr<ReplicaReducer> NewHostReducer(std::vector<Ops*> replicas);

// NCCL when every replica is a distinct CUDA device and this build has CUDA, else the host
// reducer. One replica: a reducer that does nothing.
StatusOr<std::unique_ptr<ReplicaReducer>> MakeReplicaReducer(std::vector<Ops*> replicas);

}  // namespace longhaul::kernels
