// The host reducer and MakeReplicaReducer; see replica_reducer.h. The NCCL reducer lives in
// the CUDA backend's shared library (kernels/cuda/nccl_reducer.cc), reached through the
// backend's entry table, as MakeOps reaches the backend (kernels/cuda_backend.h).
#include "kernels/replica_reducer.h"

#include <set>
#include <string>

#include "kernels/cuda_backend.h"

namespace longhaul::kernels {

namespace {

// Checks an AllGather's arguments against `replicas` replicas.
Status CheckParts(const char* what, size_t replicas, std::span<float* const> buffers,
                  std::span<const size_t> offsets) {
  if (buffers.size() != replicas || offsets.size() != replicas + 1) {
    return absl::InvalidArgumentError(std::string(what) + ": " + std::to_string(buffers.size()) +
                                      " buffers and " + std::to_string(offsets.size()) +
                                      " offsets for " + std::to_string(replicas) + " replicas");
  }
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    if (offsets[i] > offsets[i + 1]) {
      return absl::InvalidArgumentError(std::string(what) + ": part " + std::to_string(i) +
                                        " ends before it begins");
    }
  }
  return absl::OkStatus();
}

class NoReducer final : public ReplicaReducer {
 public:
  std::string name() const override { return "none"; }
  Status AllReduceSum(std::span<float* const>, size_t) override { return absl::OkStatus(); }
  Status AllGather(std::span<float* const> buffers, std::span<const size_t> offsets) override {
    return CheckParts("all-gather", 1, buffers, offsets);
  }
  Status ReduceScatterSum(std::span<float* const> buffers,
                          std::span<const size_t> offsets) override {
    return CheckParts("reduce-scatter", 1, buffers, offsets);
  }
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

  Status AllGather(std::span<float* const> buffers, std::span<const size_t> offsets) override {
    RETURN_IF_ERROR(CheckParts("host all-gather", replicas_.size(), buffers, offsets));
    for (size_t i = 0; i < replicas_.size(); ++i) {
      const size_t begin = offsets[i], n = offsets[i + 1] - begin;
      if (n == 0) continue;
      part_.resize(n);
      replicas_[i]->Download(part_.data(), buffers[i] + begin, n);
      for (size_t j = 0; j < replicas_.size(); ++j) {
        if (j != i) replicas_[j]->Upload(buffers[j] + begin, part_.data(), n);
      }
    }
    return absl::OkStatus();
  }

  Status ReduceScatterSum(std::span<float* const> buffers,
                          std::span<const size_t> offsets) override {
    RETURN_IF_ERROR(CheckParts("host reduce-scatter", replicas_.size(), buffers, offsets));
    for (size_t i = 0; i < replicas_.size(); ++i) {
      const size_t begin = offsets[i], n = offsets[i + 1] - begin;
      if (n == 0) continue;
      sum_.assign(n, 0.0f);
      part_.resize(n);
      for (size_t r = 0; r < replicas_.size(); ++r) {
        replicas_[r]->Download(part_.data(), buffers[r] + begin, n);
        for (size_t k = 0; k < n; ++k) sum_[k] += part_[k];
      }
      replicas_[i]->Upload(buffers[i] + begin, sum_.data(), n);
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
