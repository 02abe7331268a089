// The in-site NCCL communicator; see nccl_comm.h.
#include "kernels/cuda/nccl_comm.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/nccl_check.h"
#include "kernels/cuda/status_check.h"

namespace longhaul::kernels::cuda {

StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(const std::vector<int>& devices) {
  if (devices.empty()) return absl::InvalidArgumentError("NCCL communicator: no devices given");
  if (std::set<int>(devices.begin(), devices.end()).size() != devices.size()) {
    return absl::InvalidArgumentError("NCCL communicator: a device is listed twice");
  }
  for (int d : devices) RETURN_IF_ERROR(CheckCudaDevice(d));
  std::unique_ptr<NcclComm> comm(new NcclComm());
  comm->devices_ = devices;
  comm->comms_.resize(devices.size(), nullptr);
  LONGHAUL_NCCL_RETURN_IF_ERROR(
      ncclCommInitAll(comm->comms_.data(), static_cast<int>(devices.size()), devices.data()));
  for (int d : devices) {
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaSetDevice(d));
    cudaStream_t s = nullptr;
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    comm->own_streams_.push_back(s);
  }
  return comm;
}

NcclComm::~NcclComm() {
  for (size_t i = 0; i < comms_.size(); i++) {
    if (comms_[i] != nullptr) (void)ncclCommDestroy(comms_[i]);
  }
  for (size_t i = 0; i < own_streams_.size(); i++) {
    if (cudaSetDevice(devices_[i]) == cudaSuccess) (void)cudaStreamDestroy(own_streams_[i]);
  }
}

Status NcclComm::AllReduce(std::span<float* const> buffers, size_t count, Reduction reduction,
                           std::span<const cudaStream_t> streams) {
  if (buffers.size() != devices_.size() ||
      (!streams.empty() && streams.size() != devices_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL all-reduce: ", buffers.size(),
                                                   " buffers and ", streams.size(), " streams for ",
                                                   devices_.size(), " ranks"));
  }
  if (count == 0) return absl::OkStatus();
  const ncclRedOp_t op = reduction == Reduction::kSum ? ncclSum : ncclAvg;
  auto stream_of = [&](size_t i) {
    return !streams.empty() && streams[i] != nullptr ? streams[i] : own_streams_[i];
  };
  // One process drives every rank: the calls must be grouped, or the first would wait forever
  // for the others.
  LONGHAUL_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  for (size_t i = 0; i < devices_.size(); i++) {
    const ncclResult_t res =
        ncclAllReduce(buffers[i], buffers[i], count, ncclFloat, op, comms_[i], stream_of(i));
    if (res != ncclSuccess) {
      (void)ncclGroupEnd();
      return absl::InternalError(NcclErrorText(res, "ncclAllReduce", __FILE__, __LINE__));
    }
  }
  LONGHAUL_NCCL_RETURN_IF_ERROR(ncclGroupEnd());
  for (size_t i = 0; i < devices_.size(); i++) {
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaSetDevice(devices_[i]));
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_of(i)));
  }
  return absl::OkStatus();
}

}  // namespace longhaul::kernels::cuda
