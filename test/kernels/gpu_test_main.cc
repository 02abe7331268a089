// The main() of the GPU tests (tag `gpu`, built only with --config=cuda). With a CUDA device it
// runs every test case. Without one it prints an explicit, counted skip,
//   SKIPPED: <binary>: no GPU (N cases need one): <why>
// (tools/test.sh reads these lines and reports the GPU tests as skipped, not passed), runs only
// the cases tagged [no-gpu] (which check that the no-GPU path fails cleanly) and succeeds: CI
// builds and runs these tests on machines without a GPU. With LONGHAUL_REQUIRE_GPU=1 in the
// environment (tools/gpu-check sets it) a missing device is a failure instead.
//
// A binary never passes having checked nothing: one with no test case at all (an op-suite twin
// whose cases were compiled out, say), or whose filter matches none, fails, with or without a
// GPU; Catch2 2.13 itself would exit 0 on both.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/device.h"

namespace {

// How many test cases `tests_or_tags` (Catch2's command-line filter; empty: all) selects.
size_t CountCases(const Catch::ConfigData& base, const std::vector<std::string>& tests_or_tags) {
  Catch::ConfigData data = base;
  data.testsOrTags = tests_or_tags;
  Catch::Config config(data);
  return Catch::filterTests(Catch::getAllTestCasesSorted(config), config.testSpec(), config).size();
}

}  // namespace

int main(int argc, char** argv) {
  Catch::Session session;
  if (int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  const Catch::ConfigData& data = session.configData();
  if (data.showHelp || data.libIdentify || data.listTests || data.listTestNamesOnly ||
      data.listTags || data.listReporters) {
    return session.run();
  }
  const char* name =
      std::strrchr(argv[0], '/') != nullptr ? std::strrchr(argv[0], '/') + 1 : argv[0];
  const size_t selected = CountCases(data, data.testsOrTags);
  if (selected == 0) {
    std::printf("FAILED: %s: no test case to run (%s)\n", name,
                data.testsOrTags.empty() ? "the binary has none" : "the filter matches none");
    return 1;
  }
  auto count = longhaul::kernels::cuda::CudaDeviceCount();
  if (!count.ok()) {
    const char* require = std::getenv("LONGHAUL_REQUIRE_GPU");
    if (require != nullptr && std::string(require) == "1") {
      std::printf("FAILED: %s: a GPU is required (LONGHAUL_REQUIRE_GPU=1) but: %s\n", name,
                  std::string(count.status().message()).c_str());
      return 1;
    }
    // The [no-gpu] cases run (all of them: the caller's filter is replaced); the others
    // are the counted skip.
    const size_t no_gpu = CountCases(data, {"[no-gpu]"});
    const size_t skipped = CountCases(data, {"~[no-gpu]"});
    std::printf("SKIPPED: %s: no GPU (%zu cases need one): %s\n", name, skipped,
                std::string(count.status().message()).c_str());
    if (no_gpu == 0) {
      std::printf("%s: no [no-gpu] case to run; the skip above is all this binary did\n", name);
      std::fflush(stdout);
      return skipped > 0 ? 0 : 1;
    }
    std::printf("%s: running only the %zu [no-gpu] cases\n", name, no_gpu);
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
