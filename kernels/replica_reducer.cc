// The host reducer and MakeReplicaReducer; see replica_reducer.h. The NCCL reducer lives in
// the CUDA backend's shared library (kernels/cuda/nccl_reducer.cc), reached through the
// backend's entry table, as MakeOps reaches the backend (kernels/cuda_backend.h).
#include "kernels/replica_reducer.h"

#include <set>

#include "kernels/cuda_backend.h"

namespace longhaul::kernels {

namespace {

class NoReducer final : public ReplicaReducer {
 public:
  std::string name() const override { return "none"; }
  Status AllReduceSum(std::span<float* const>, size_t) override { return absl::OkStatus(); }
};

class HostReducer final : public ReplicaReducer {
 public:
  explicit HostReducer(std::vector<Ops*> replicas) : replicas_(std::move(replicas)) {}
  std::string name() const override { return "host"; }

  Status AllReduceSum(std::span<float* const> buffers, size_t count) override {
    if (buffers.size() != replicas_.size()) {
      return absl::InvalidArgumentError("host all-reduce: wrong number of buffers");
    }
    sum_.assign(count, 0.0f);
    part_.resize(count);
    for (size_t r = 0; r < replicas_.size(); ++r) {
      replicas_[r]->Download(part_.data(), buffers[r], count);
      for (size_t i = 0; i < count; ++i) sum_[i] += part_[i];
    }
    for (size_t r = 0; r < replicas_.size(); ++r) {
      replicas_[r]->Upload(buffers[r], sum_.data(), count);
    }
    return absl::OkStatus();
  }

 private:
  std::vector<Ops*> replicas_;
  std::vector<float> sum_, part_;
};

}  // namespace

std::unique_ptr<ReplicaReducer> NewHostReducer(std::vector<Ops*> replicas) {
  return std::make_unique<HostReducer>(std::move(replicas));
}

StatusOr<std::unique_ptr<ReplicaReducer>> MakeReplicaReducer(std::vector<Ops*> replicas) {
  if (replicas.size() <= 1) return std::unique_ptr<ReplicaReducer>(new NoReducer());
  // Only a loaded backend can have made CUDA replicas; without one, the host reducer.
  if (const CudaBackendEntry* cuda = CudaBackendIfLoaded(); cuda != nullptr) {
    ASSIGN_OR_RETURN(auto nccl, cuda->new_nccl_reducer(replicas));
    if (nccl) return nccl;
  }
  return NewHostReducer(std::move(replicas));
}

}  // namespace longhaul::kernels
