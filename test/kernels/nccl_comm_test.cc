// The in-site NCCL communicator (kernels/cuda/nccl_comm.h): argument checks and the no-GPU
// message everywhere ([no-gpu]); with GPUs, all-reduce sum and average over every local device
// (on a one-GPU machine a communicator of one, which must leave the buffer as it was).
// main() is gpu_test_main.cc.
#include "kernels/cuda/nccl_comm.h"

#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cuda/check.h"
#include "kernels/cuda/device.h"

namespace longhaul::kernels::cuda {
namespace {

TEST_CASE("NcclComm rejects bad device lists", "[nccl][no-gpu]") {
  auto none = NcclComm::Create({});
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == absl::StatusCode::kInvalidArgument);
  auto twice = NcclComm::Create({0, 0});
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.status().code() == absl::StatusCode::kInvalidArgument);
  auto count = CudaDeviceCount();
  if (!count.ok()) {
    auto comm = NcclComm::Create({0});
    REQUIRE_FALSE(comm.ok());
    CHECK(std::string(comm.status().message()).rfind("no CUDA device: ", 0) == 0);
  } else {
    auto comm = NcclComm::Create({*count});
    REQUIRE_FALSE(comm.ok());
    CHECK(std::string(comm.status().message()).find("no CUDA device") != std::string::npos);
  }
}

TEST_CASE("NcclComm all-reduces over every local GPU", "[nccl]") {
  auto count = CudaDeviceCount();
  REQUIRE(count.ok());
  std::vector<int> devices;
  for (int d = 0; d < *count; d++) devices.push_back(d);
  auto comm = NcclComm::Create(devices);
  REQUIRE(comm.ok());
  CHECK((*comm)->size() == *count);
  const size_t n = GENERATE(size_t{1}, size_t{1000003});
  INFO(*count << " devices, n=" << n);
  // Rank r holds r + 1 + i % 7; the sum over ranks is known exactly.
  std::vector<float*> buffers;
  for (int r = 0; r < *count; r++) {
    LONGHAUL_CUDA_CHECK(cudaSetDevice(devices[r]));
    float* p = nullptr;
    LONGHAUL_CUDA_CHECK(cudaMalloc(&p, n * sizeof(float)));
    std::vector<float> host(n);
    for (size_t i = 0; i < n; i++) host[i] = static_cast<float>(r + 1 + i % 7);
    LONGHAUL_CUDA_CHECK(cudaMemcpy(p, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    buffers.push_back(p);
  }
  const float ranks = static_cast<float>(*count);
  const float rank_sum = ranks * (ranks + 1) / 2;  // sum of r + 1
  REQUIRE((*comm)->AllReduce(buffers, n, NcclComm::Reduction::kSum).ok());
  for (int r = 0; r < *count; r++) {
    std::vector<float> host(n);
    LONGHAUL_CUDA_CHECK(
        cudaMemcpy(host.data(), buffers[r], n * sizeof(float), cudaMemcpyDeviceToHost));
    bool all = true;
    for (size_t i = 0; i < n; i++) all &= host[i] == rank_sum + ranks * (i % 7);
    CHECK(all);
  }
  REQUIRE((*comm)->AllReduce(buffers, n, NcclComm::Reduction::kAverage).ok());
  for (int r = 0; r < *count; r++) {
    std::vector<float> host(n);
    LONGHAUL_CUDA_CHECK(
        cudaMemcpy(host.data(), buffers[r], n * sizeof(float), cudaMemcpyDeviceToHost));
    // The average of equal buffers is the buffer (NCCL may scale by 1/ranks first: rounding).
    bool all = true;
    for (size_t i = 0; i < n; i++) {
      const float want = rank_sum + ranks * (i % 7);
      all &= std::fabs(host[i] - want) <= 1e-6f * want;
    }
    CHECK(all);
  }
  CHECK_FALSE(
      (*comm)
          ->AllReduce(std::span<float* const>(buffers.data(), 0), n, NcclComm::Reduction::kSum)
          .ok());
  for (int r = 0; r < *count; r++) {
    LONGHAUL_CUDA_CHECK(cudaSetDevice(devices[r]));
    LONGHAUL_CUDA_CHECK(cudaFree(buffers[r]));
  }
}

}  // namespace
}  // namespace longhaul::kernels::cuda
