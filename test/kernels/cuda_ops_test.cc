// What the CUDA backends ("cuda", "cuda-bf16") are beyond the op suite, which holds every op
// of theirs to "cpu-ref" (op_suite.h, the `_cuda` targets): names, device selection, memory,
// and (tagged [no-gpu], so CI runs it everywhere) the clear failure of MakeOps("cuda") on a
// machine without a GPU. main() is gpu_test_main.cc.
#include "kernels/cuda/cuda_ops.h"

#include <algorithm>
#include <string>

#include "kernels/cuda/device.h"
#include "test/kernels/test_util.h"

namespace longhaul::kernels::testing {
namespace {

TEST_CASE("Without a GPU, MakeOps(\"cuda\") fails with a clear message", "[cuda][no-gpu]") {
  // Malformed device suffixes are rejected whatever the machine.
  for (const char* bad : {"cuda:", "cuda:x", "cuda-bf16:-1", "cuda:123456"}) {
    auto ops = MakeOps(bad);
    REQUIRE_FALSE(ops.ok());
    CHECK(ops.status().code() == absl::StatusCode::kInvalidArgument);
  }
  auto count = cuda::CudaDeviceCount();
  if (!count.ok()) {
    const std::string why(count.status().message());
    CHECK(why.rfind("no CUDA device: ", 0) == 0);
    for (const char* name : {"cuda", "cuda-bf16", "cuda:0", "cuda-bf16:1"}) {
      auto ops = MakeOps(name);
      REQUIRE_FALSE(ops.ok());
      INFO(ops.status().message());
      CHECK(ops.status().code() == absl::StatusCode::kFailedPrecondition);
      CHECK(std::string(ops.status().message()) ==
            "kernel backend \"" + std::string(name) + "\": " + why);
    }
  } else {
    // With a GPU: a device past the last one is the error instead.
    const std::string name = "cuda:" + std::to_string(*count);
    auto ops = MakeOps(name);
    REQUIRE_FALSE(ops.ok());
    INFO(ops.status().message());
    CHECK(std::string(ops.status().message()).find("no CUDA device " + std::to_string(*count)) !=
          std::string::npos);
  }
}

TEST_CASE("CUDA backends: names, devices, memory", "[cuda][memory]") {
  for (const char* name : {"cuda", "cuda-bf16", "cuda:0", "cuda-bf16:0"}) {
    auto ops = Backend(name);
    CHECK(ops->name() == name);
    CHECK(cuda::CudaDeviceOf(*ops) == 0);
    CHECK(cuda::CudaStreamOf(*ops) != nullptr);
  }
  CHECK(cuda::CudaDeviceOf(*Backend("cpu-ref")) == -1);
  CHECK(cuda::CudaStreamOf(*Backend("cpu-ref")) == nullptr);

  auto ops = Backend("cuda");
  CHECK(ops->Alloc(0) == nullptr);
  ops->Free(nullptr);
  const size_t n = 1001;
  DeviceVec a(*ops, n);
  CHECK(a.ToHost() == std::vector<float>(n, 0.0f));
  auto host = Random(n, 1);
  ops->Upload(a.get(), host.data(), n);
  CHECK(a.ToHost() == host);
  DeviceVec b(*ops, n);
  ops->Copy(b.get(), a.get(), n);
  CHECK(b.ToHost() == host);
  ops->Zero(b.get() + 1, n - 2);
  auto zeroed = b.ToHost();
  CHECK(zeroed.front() == host.front());
  CHECK(zeroed.back() == host.back());
  CHECK(std::all_of(zeroed.begin() + 1, zeroed.end() - 1, [](float f) { return f == 0.0f; }));
  // Overlapping copies behave like memmove, in both directions.
  ops->Copy(a.get() + 10, a.get(), n - 10);
  auto shifted = a.ToHost();
  CHECK(std::equal(shifted.begin() + 10, shifted.end(), host.begin()));
  ops->Upload(a.get(), host.data(), n);
  ops->Copy(a.get(), a.get() + 10, n - 10);
  shifted = a.ToHost();
  CHECK(std::equal(shifted.begin(), shifted.end() - 10, host.begin() + 10));
  // Large: 64 Mi floats round-trip.
  const size_t big = size_t{1} << 26;
  auto big_host = Random(big, 2);
  DeviceVec c(*ops, big_host);
  CHECK(c.ToHost() == big_host);
}

}  // namespace
}  // namespace longhaul::kernels::testing
