// MakeOps: the backends of this build by name, a clear error for the CUDA backend in a build
// without it and for unknown names, and basic memory behaviour of the CPU backends.
#include "test/kernels/test_util.h"

namespace longhaul::kernels::testing {
namespace {

TEST_CASE("MakeOps knows the CPU backends", "[kernels][factory]") {
  for (const char* name : {"cpu-ref", "cpu"}) {
    auto ops = MakeOps(name);
    REQUIRE(ops.ok());
    CHECK((*ops)->name() == name);
  }
  CHECK(MakeOps("cpu", 1).ok());
  CHECK(MakeOps("cpu", -1).ok());  // <= 0: all cores
}

TEST_CASE("MakeOps rejects what this build lacks", "[kernels][factory]") {
  auto unknown = MakeOps("tpu");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(unknown.status().message()).find("tpu") != std::string::npos);
#ifndef LONGHAUL_WITH_CUDA
  // No backend beside this test (kernels/cuda_backend.h): MakeOps says so.
  auto cuda = MakeOps("cuda");
  REQUIRE_FALSE(cuda.ok());
  CHECK(cuda.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(cuda.status().message()),
             Catch::StartsWith("kernel backend \"cuda\": this make_ops_test has no CUDA backend: "
                               "looked for "));
#endif
}

TEST_CASE("CPU backends allocate zeroed memory and copy", "[kernels][memory]") {
  for (const char* name : {"cpu-ref", "cpu"}) {
    auto ops = Backend(name);
    CHECK(ops->Alloc(0) == nullptr);
    ops->Free(nullptr);
    DeviceVec a(*ops, size_t{37});
    for (float f : a.ToHost()) CHECK(f == 0.0f);
    CHECK(reinterpret_cast<uintptr_t>(a.get()) % 64 == 0);
    auto host = Random(37, 1);
    ops->Upload(a.get(), host.data(), 37);
    DeviceVec b(*ops, size_t{37});
    ops->Copy(b.get(), a.get(), 37);
    CHECK(b.ToHost() == host);
    ops->Zero(b.get(), 37);
    CHECK(b.ToHost() == std::vector<float>(37, 0.0f));
  }
}

}  // namespace
}  // namespace longhaul::kernels::testing
