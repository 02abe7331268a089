// The CUDA backend's loader (kernels/cuda_backend.h): where it looks, and what it says for a
// file that is missing, not a shared library, a shared library without the entry table, or a
// backend of another release; and that a --config=cuda build finds the linked backend (and a
// build without it none, by default).
#include "kernels/cuda_backend.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/version.h"
#include "kernels/ops.h"

namespace longhaul::kernels {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return (std::filesystem::path(dir != nullptr ? dir : "/tmp") / name).string();
}

// A test library built beside this test (BUILD: data), by absolute path.
std::string TestLibrary(const std::string& name) {
  const auto path = std::filesystem::absolute(std::filesystem::path("test/kernels") / name);
  REQUIRE(std::filesystem::exists(path));
  return path.string();
}

std::string Message(const Status& s) { return std::string(s.message()); }

// LONGHAUL_CUDA_BACKEND set to `path` for one scope.
class BackendEnv {
 public:
  explicit BackendEnv(const std::string& path) { setenv("LONGHAUL_CUDA_BACKEND", path.c_str(), 1); }
  ~BackendEnv() { unsetenv("LONGHAUL_CUDA_BACKEND"); }
};

TEST_CASE("Without $LONGHAUL_CUDA_BACKEND the loader looks beside the program, as packaged") {
  unsetenv("LONGHAUL_CUDA_BACKEND");
  const auto candidates = CudaBackendCandidates();
  REQUIRE(candidates.size() == 1);
  // <bin>/test/kernels/cuda_backend_test -> <bin>/test/lib/longhaul/libcuda_backend.so, as
  // /usr/bin/longhauld -> /usr/lib/longhaul/libcuda_backend.so.
  const auto exe = std::filesystem::read_symlink("/proc/self/exe");
  CHECK(candidates[0] ==
        (exe.parent_path().parent_path() / "lib/longhaul/libcuda_backend.so").string());
}

TEST_CASE("$LONGHAUL_CUDA_BACKEND to a missing file: no backend, naming the file") {
  const std::string missing = TempPath("no-such-backend.so");
  BackendEnv env(missing);
  REQUIRE(CudaBackendCandidates() == std::vector<std::string>{missing});
  std::string loaded = "unchanged";
  auto backend = LoadCudaBackend(CudaBackendCandidates(), &loaded);
  REQUIRE_FALSE(backend.ok());
  CHECK(backend.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(Message(backend.status()) ==
        "this cuda_backend_test has no CUDA backend: looked for " + missing +
            "; a CPU-only build or package (tools/package.sh includes the backend where nvcc is "
            "installed; bazel build --config=cuda links it)");
  CHECK(loaded == "unchanged");
}

TEST_CASE("$LONGHAUL_CUDA_BACKEND to a file that is not a shared library: does not load") {
  const std::string text = TempPath("not-elf.so");
  {
    std::ofstream out(text);  // longer than an ELF header, or dlopen says "file too short"
    for (int i = 0; i < 16; ++i) out << "not a shared library\n";
  }
  BackendEnv env(text);
  std::string loaded;
  auto backend = LoadCudaBackend(CudaBackendCandidates(), &loaded);
  REQUIRE_FALSE(backend.ok());
  CHECK(loaded == text);
  const std::string m = Message(backend.status());
  CHECK_THAT(m, Catch::StartsWith("the CUDA backend " + text + " does not load: "));
  CHECK_THAT(m, Catch::Contains("invalid ELF header"));
  CHECK_THAT(m, Catch::Contains("libcudart.so.13"));  // the hint: what it needs
  CHECK_THAT(m, Catch::Contains("libnccl.so.2"));
}

TEST_CASE("$LONGHAUL_CUDA_BACKEND to a shared library without the entry table: refused") {
  const std::string lib = TestLibrary("libfake_backend_no_entry.so");
  BackendEnv env(lib);
  auto backend = LoadCudaBackend(CudaBackendCandidates());
  REQUIRE_FALSE(backend.ok());
  CHECK(Message(backend.status()) == "the CUDA backend " + lib +
                                         " is not a longhaul CUDA backend: it has no "
                                         "longhaul_cuda_backend_v1");
}

TEST_CASE("A backend of another release: refused, naming both versions") {
  const std::string lib = TestLibrary("libfake_backend_other_build.so");
  BackendEnv env(lib);
  auto backend = LoadCudaBackend(CudaBackendCandidates());
  REQUIRE_FALSE(backend.ok());
  CHECK(Message(backend.status()) ==
        "the CUDA backend " + lib + " is from longhaul 0.0.0-other (entry table " +
            std::to_string(kCudaBackendAbi) + "), this cuda_backend_test is " + kBuildVersion +
            " (entry table " + std::to_string(kCudaBackendAbi) +
            "): install the backend built with it (its package carries it)");
}

#ifdef LONGHAUL_WITH_CUDA
TEST_CASE("A --config=cuda build finds the linked backend, of its own build") {
  auto backend = CudaBackend();
  REQUIRE(backend.ok());
  CHECK((*backend)->abi == kCudaBackendAbi);
  CHECK(std::string((*backend)->build_version) == kBuildVersion);
  CHECK(CudaBackendIfLoaded() == *backend);
  CHECK(CudaBackendSource() == "(linked into this --config=cuda build)");
  // The device count: GPUs where there are (tools/gpu-check sets LONGHAUL_REQUIRE_GPU=1), else
  // the CUDA runtime's reason.
  auto count = (*backend)->device_count();
  const char* require = std::getenv("LONGHAUL_REQUIRE_GPU");
  if (require != nullptr && std::string(require) == "1") {
    REQUIRE(count.ok());
    CHECK(*count > 0);
  } else if (!count.ok()) {
    CHECK_FALSE(Message(count.status()).empty());
  }
}
#else
TEST_CASE("A build without --config=cuda has no backend by default, and loads none for codecs") {
  unsetenv("LONGHAUL_CUDA_BACKEND");
  CHECK(CudaBackendIfLoaded() == nullptr);
  auto backend = CudaBackend();
  REQUIRE_FALSE(backend.ok());
  CHECK_THAT(Message(backend.status()),
             Catch::StartsWith("this cuda_backend_test has no CUDA backend: looked for " +
                               CudaBackendCandidates()[0]));
  CHECK(CudaBackendSource() == CudaBackendCandidates()[0]);
  CHECK(CudaBackendIfLoaded() == nullptr);
  // MakeOps says the same.
  auto ops = MakeOps("cuda:0");
  REQUIRE_FALSE(ops.ok());
  CHECK(Message(ops.status()) == "kernel backend \"cuda:0\": " + Message(backend.status()));
}
#endif

}  // namespace
}  // namespace longhaul::kernels
