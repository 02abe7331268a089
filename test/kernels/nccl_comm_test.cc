// The in-site NCCL communicator (kernels/cuda/nccl_comm.h): argument checks and the no-GPU
// message everywhere ([no-gpu]); with GPUs, all-reduce sum and average, and the sharded modes'
// all-gather and reduce-scatter of parts, over every local device (on a one-GPU machine a
// communicator of one, which must leave each part as it was).
// main() is gpu_test_main.cc.
#include "kernels/cuda/nccl_comm.h"

#include <cuda_runtime.h>

#include <algorithm>
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

// The sharded modes' collectives over parts (rank r owns floats [offsets[r], offsets[r + 1])):
// equal parts (NCCL's all-gather and reduce-scatter) and unequal ones (a broadcast or a reduce
// per owner), and the per-owner path forced for equal parts, so that one GPU runs both. Floats
// outside the parts are never written.
TEST_CASE("NcclComm all-gathers and reduce-scatters parts over every local GPU", "[nccl]") {
  auto count = CudaDeviceCount();
  REQUIRE(count.ok());
  const size_t ranks = static_cast<size_t>(*count);
  std::vector<int> devices;
  for (int d = 0; d < *count; d++) devices.push_back(d);
  auto comm = NcclComm::Create(devices);
  REQUIRE(comm.ok());
  constexpr size_t kSize = 100013, kBegin = 5;
  auto owned = [&](size_t n, bool equal) {  // rank r's part; unequal: the last one shorter
    std::vector<size_t> offsets;
    for (size_t r = 0; r <= ranks; r++) {
      offsets.push_back(kBegin +
                        (equal ? r * (n / ranks) : std::min(n, r * ((n + ranks) / ranks))));
    }
    return offsets;
  };
  std::vector<float*> buffers(ranks);
  for (size_t r = 0; r < ranks; r++) {
    LONGHAUL_CUDA_CHECK(cudaSetDevice(devices[r]));
    LONGHAUL_CUDA_CHECK(cudaMalloc(&buffers[r], kSize * sizeof(float)));
  }
  auto fill = [&](auto value) {
    for (size_t r = 0; r < ranks; r++) {
      std::vector<float> host(kSize);
      for (size_t i = 0; i < kSize; i++) host[i] = value(r, i);
      LONGHAUL_CUDA_CHECK(
          cudaMemcpy(buffers[r], host.data(), kSize * sizeof(float), cudaMemcpyHostToDevice));
    }
  };
  auto read = [&](size_t r) {
    std::vector<float> host(kSize);
    LONGHAUL_CUDA_CHECK(
        cudaMemcpy(host.data(), buffers[r], kSize * sizeof(float), cudaMemcpyDeviceToHost));
    return host;
  };
  for (bool by_owner : {false, true}) {
    for (bool equal : {true, false}) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{99999}}) {
        const std::vector<size_t> offsets = owned(n, equal);
        INFO(ranks << " ranks, " << (equal ? "equal" : "unequal") << " parts of " << n
                   << " floats, " << (by_owner ? "per owner" : "NCCL's collective"));
        (*comm)->set_parts_by_owner(by_owner);
        auto owner = [&](size_t i) -> int {  // the rank whose part holds float i; -1: none
          for (size_t r = 0; r < ranks; r++) {
            if (i >= offsets[r] && i < offsets[r + 1]) return static_cast<int>(r);
          }
          return -1;
        };
        // All-gather: every rank writes its own part, -1 elsewhere.
        fill([&](size_t r, size_t i) {
          return owner(i) == static_cast<int>(r) ? static_cast<float>(r * 1000 + i % 997) : -1.0f;
        });
        REQUIRE((*comm)->AllGather(buffers, offsets).ok());
        for (size_t r = 0; r < ranks; r++) {
          const std::vector<float> got = read(r);
          bool all = true;
          for (size_t i = 0; i < kSize; i++) {
            const int o = owner(i);
            all &= got[i] == (o < 0 ? -1.0f : static_cast<float>(o * 1000 + i % 997));
          }
          CHECK(all);
        }
        // Reduce-scatter: rank r holds r + 1 + i % 7 everywhere; its part the sum over ranks,
        // the floats outside every part as they were.
        fill([&](size_t r, size_t i) { return static_cast<float>(r + 1 + i % 7); });
        REQUIRE((*comm)->ReduceScatterSum(buffers, offsets).ok());
        const float sum = static_cast<float>(ranks * (ranks + 1) / 2);
        for (size_t r = 0; r < ranks; r++) {
          const std::vector<float> got = read(r);
          bool all = true;
          for (size_t i = 0; i < kSize; i++) {
            if (owner(i) == static_cast<int>(r)) {
              all &= got[i] == sum + static_cast<float>(ranks * (i % 7));
            } else if (owner(i) < 0) {
              all &= got[i] == static_cast<float>(r + 1 + i % 7);
            }
          }
          CHECK(all);
        }
      }
    }
  }
  std::vector<size_t> backwards(ranks + 1, 10);
  backwards[0] = 11;
  Status s = (*comm)->AllGather(buffers, backwards);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(std::string(s.message()).find("part 0 ends (10) before it begins (11)") !=
        std::string::npos);
  s = (*comm)->ReduceScatterSum(buffers, std::vector<size_t>(ranks + 2, 0));
  CHECK(absl::IsInvalidArgument(s));
  CHECK(std::string(s.message()).find("offsets for") != std::string::npos);
  for (size_t r = 0; r < ranks; r++) {
    LONGHAUL_CUDA_CHECK(cudaSetDevice(devices[r]));
    LONGHAUL_CUDA_CHECK(cudaFree(buffers[r]));
  }
}

}  // namespace
}  // namespace longhaul::kernels::cuda
