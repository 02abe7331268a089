// The main() of the GPU tests (tag `gpu`, built only with --config=cuda). With a CUDA device it
// runs every test case. Without one it prints why the GPU cases are skipped, runs only the
// cases tagged [no-gpu] (which check that the no-GPU path fails cleanly), and succeeds: CI
// builds and runs these tests on machines without a GPU. With LONGHAUL_REQUIRE_GPU=1 in the
// environment (tools/gpu-check sets it) a missing device is a failure instead.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cuda/device.h"

int main(int argc, char** argv) {
  Catch::Session session;
  if (int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const char* name =
      std::strrchr(argv[0], '/') != nullptr ? std::strrchr(argv[0], '/') + 1 : argv[0];
  auto count = longhaul::kernels::cuda::CudaDeviceCount();
  if (!count.ok()) {
    const char* require = std::getenv("LONGHAUL_REQUIRE_GPU");
    if (require != nullptr && std::string(require) == "1") {
      std::printf("FAILED: %s: a GPU is required (LONGHAUL_REQUIRE_GPU=1) but: %s\n", name,
                  std::string(count.status().message()).c_str());
      return 1;
    }
    std::printf("SKIPPED: %s: GPU test cases not run: %s\n", name,
                std::string(count.status().message()).c_str());
    std::printf("%s: running only the [no-gpu] cases\n", name);
    std::fflush(stdout);
    session.configData().testsOrTags = {"[no-gpu]"};
  } else {
    for (int d = 0; d < *count; d++) {
      std::printf("%s: cuda:%d is %s\n", name, d,
                  longhaul::kernels::cuda::CudaDeviceDescription(d).c_str());
    }
    std::fflush(stdout);
  }
  return session.run();
}
