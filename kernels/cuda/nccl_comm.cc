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

Status NcclComm::CheckArgs(const char* what, size_t buffers, size_t streams) const {
  if (buffers != devices_.size() || (streams != 0 && streams != devices_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL ", what, ": ", buffers, " buffers and ",
                                                   streams, " streams for ", devices_.size(),
                                                   " ranks"));
  }
  return absl::OkStatus();
}

cudaStream_t NcclComm::StreamOf(std::span<const cudaStream_t> streams, size_t i) const {
  return !streams.empty() && streams[i] != nullptr ? streams[i] : own_streams_[i];
}

Status NcclComm::Wait(std::span<const cudaStream_t> streams) const {
  for (size_t i = 0; i < devices_.size(); i++) {
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaSetDevice(devices_[i]));
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(StreamOf(streams, i)));
  }
  return absl::OkStatus();
}

// One process drives every rank: the calls must be grouped, or the first would wait forever
// for the others. A failed call still closes the group.
#define LONGHAUL_NCCL_GROUPED(call, name)                                        \
  do {                                                                           \
    const ncclResult_t res_ = (call);                                            \
    if (res_ != ncclSuccess) {                                                   \
      (void)ncclGroupEnd();                                                      \
      return absl::InternalError(NcclErrorText(res_, name, __FILE__, __LINE__)); \
    }                                                                            \
  } while (0)

Status NcclComm::AllReduce(std::span<float* const> buffers, size_t count, Reduction reduction,
                           std::span<const cudaStream_t> streams) {
  RETURN_IF_ERROR(CheckArgs("all-reduce", buffers.size(), streams.size()));
  if (count == 0) return absl::OkStatus();
  const ncclRedOp_t op = reduction == Reduction::kSum ? ncclSum : ncclAvg;
  LONGHAUL_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  for (size_t i = 0; i < devices_.size(); i++) {
    LONGHAUL_NCCL_GROUPED(ncclAllReduce(buffers[i], buffers[i], count, ncclFloat, op, comms_[i],
                                        StreamOf(streams, i)),
                          "ncclAllReduce");
  }
  LONGHAUL_NCCL_RETURN_IF_ERROR(ncclGroupEnd());
  return Wait(streams);
}

template <typename Equal, typename Each>
Status NcclComm::Parts(const char* what, std::span<float* const> buffers,
                       std::span<const size_t> offsets, std::span<const cudaStream_t> streams,
                       Equal equal, Each each) {
  RETURN_IF_ERROR(CheckArgs(what, buffers.size(), streams.size()));
  const size_t n = devices_.size();
  if (offsets.size() != n + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL ", what, ": ", offsets.size(), " offsets for ", n, " ranks"));
  }
  bool same = true;
  for (size_t i = 0; i < n; i++) {
    if (offsets[i] > offsets[i + 1]) {
      return absl::InvalidArgumentError(absl::StrCat("NCCL ", what, ": part ", i, " ends (",
                                                     offsets[i + 1], ") before it begins (",
                                                     offsets[i], ")"));
    }
    same &= offsets[i + 1] - offsets[i] == offsets[1] - offsets[0];
  }
  if (offsets[n] == offsets[0]) return absl::OkStatus();
  LONGHAUL_NCCL_RETURN_IF_ERROR(ncclGroupStart());
  if (same && !parts_by_owner_) {
    const size_t count = offsets[1] - offsets[0];
    for (size_t r = 0; r < n; r++) {
      LONGHAUL_NCCL_GROUPED(equal(buffers[r] + offsets[0], buffers[r] + offsets[r], count,
                                  comms_[r], StreamOf(streams, r)),
                            what);
    }
  } else {
    for (size_t part = 0; part < n; part++) {
      const size_t count = offsets[part + 1] - offsets[part];
      if (count == 0) continue;
      for (size_t r = 0; r < n; r++) {
        LONGHAUL_NCCL_GROUPED(each(buffers[r] + offsets[part], count, static_cast<int>(part),
                                   comms_[r], StreamOf(streams, r)),
                              what);
      }
    }
  }
  LONGHAUL_NCCL_RETURN_IF_ERROR(ncclGroupEnd());
  return Wait(streams);
}

Status NcclComm::AllGather(std::span<float* const> buffers, std::span<const size_t> offsets,
                           std::span<const cudaStream_t> streams) {
  // In place: rank r's part is where NCCL's all-gather puts it (whole + r * count).
  return Parts(
      "all-gather", buffers, offsets, streams,
      [](float* whole, float* own, size_t count, ncclComm_t comm, cudaStream_t s) {
        return ncclAllGather(own, whole, count, ncclFloat, comm, s);
      },
      [](float* part, size_t count, int owner, ncclComm_t comm, cudaStream_t s) {
        return ncclBroadcast(part, part, count, ncclFloat, owner, comm, s);
      });
}

Status NcclComm::ReduceScatterSum(std::span<float* const> buffers, std::span<const size_t> offsets,
                                  std::span<const cudaStream_t> streams) {
  return Parts(
      "reduce-scatter", buffers, offsets, streams,
      [](float* whole, float* own, size_t count, ncclComm_t comm, cudaStream_t s) {
        return ncclReduceScatter(whole, own, count, ncclFloat, ncclSum, comm, s);
      },
      [](float* part, size_t count, int owner, ncclComm_t comm, cudaStream_t s) {
        return ncclReduce(part, part, count, ncclFloat, ncclSum, owner, comm, s);
      });
}

}  // namespace longhaul::kernels::cuda
