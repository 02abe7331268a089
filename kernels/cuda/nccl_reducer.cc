// The NCCL ReplicaReducer (kernels/replica_reducer.h): one communicator over the replicas'
// GPUs, each collective queued on each replica's own stream so that it follows the pass that
// produced its input (the backward's gradients, the optimizer's stepped parts).
#include <set>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/nccl_comm.h"
#include "kernels/replica_reducer.h"

namespace longhaul::kernels::cuda {
namespace {

class NcclReducer final : public ReplicaReducer {
 public:
  NcclReducer(std::unique_ptr<NcclComm> comm, std::vector<cudaStream_t> streams)
      : comm_(std::move(comm)), streams_(std::move(streams)) {}
  std::string name() const override { return "nccl"; }
  Status AllReduceSum(std::span<float* const> buffers, size_t count) override {
    return comm_->AllReduce(buffers, count, NcclComm::Reduction::kSum, streams_);
  }
  Status AllGather(std::span<float* const> buffers, std::span<const size_t> offsets) override {
    return comm_->AllGather(buffers, offsets, streams_);
  }
  Status ReduceScatterSum(std::span<float* const> buffers,
                          std::span<const size_t> offsets) override {
    return comm_->ReduceScatterSum(buffers, offsets, streams_);
  }

 private:
  std::unique_ptr<NcclComm> comm_;
  std::vector<cudaStream_t> streams_;
};

}  // namespace

StatusOr<std::unique_ptr<ReplicaReducer>> NewNcclReducerForMakeReducer(
    const std::vector<Ops*>& replicas) {
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  for (Ops* ops : replicas) {
    const int d = CudaDeviceOf(*ops);
    if (d < 0) return std::unique_ptr<ReplicaReducer>();
    devices.push_back(d);
    streams.push_back(CudaStreamOf(*ops));
  }
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size()) {
    return std::unique_ptr<ReplicaReducer>();
  }
  ASSIGN_OR_RETURN(auto comm, NcclComm::Create(devices));
  return std::unique_ptr<ReplicaReducer>(new NcclReducer(std::move(comm), std::move(streams)));
}

}  // namespace longhaul::kernels::cuda
