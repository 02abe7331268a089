// SiteBackends: the site's devices pick CPU or GPU and the replicas, the job's backend picks
// the variant.
#include "daemon/job/site/site_backend.h"

#include <catch2/catch.hpp>

namespace longhaul {
namespace {

using V = std::vector<std::string>;

TEST_CASE("CPU sites run the job's CPU backend, or cpu when the job names a GPU one") {
  CHECK(SiteBackends({"cpu"}, "cpu") == V{"cpu"});
  CHECK(SiteBackends({"cpu"}, "cpu-ref") == V{"cpu-ref"});
  CHECK(SiteBackends({"cpu"}, "cuda") == V{"cpu"});
  CHECK(SiteBackends({"cpu"}, "cuda-bf16") == V{"cpu"});
}

TEST_CASE("CPU replicas: one per listed entry") {
  CHECK(SiteBackends({"cpu:0", "cpu:1"}, "cpu") == V{"cpu", "cpu"});
  CHECK(SiteBackends({"cpu:0", "cpu:1", "cpu:2"}, "cpu-ref") == V{"cpu-ref", "cpu-ref", "cpu-ref"});
}

TEST_CASE("GPU sites run on every listed GPU, in bf16 when the job asks for it") {
  CHECK(SiteBackends({"cuda:0"}, "cpu") == V{"cuda:0"});
  CHECK(SiteBackends({"cuda:3"}, "cuda") == V{"cuda:3"});
  CHECK(SiteBackends({"cuda:1"}, "cuda-bf16") == V{"cuda-bf16:1"});
  CHECK(SiteBackends({"cpu", "cuda:2"}, "cuda-bf16") == V{"cuda-bf16:2"});
  CHECK(SiteBackends({"cuda:0", "cuda:1"}, "cuda") == V{"cuda:0", "cuda:1"});
}

TEST_CASE("CheckSiteDevices accepts CPUs and names a GPU it cannot use") {
  CHECK(CheckSiteDevices({"cpu", "cpu:1"}).ok());
  // This test runs where there is no GPU (CI); a GPU machine would pass the check.
  const Status s = CheckSiteDevices({"cpu", "cuda:7"});
  if (!s.ok()) {
    // What is missing: the backend (a build without --config=cuda has none beside this test),
    // a GPU, or GPU 7 (kernels/cuda_backend.h, site_backend.cc).
    const std::string m(s.message());
    CHECK_THAT(m, Catch::StartsWith("devices: cuda:7 is not usable here: "));
    CHECK((m.find("has no CUDA backend: looked for ") != std::string::npos ||
           m.find("no GPU: the CUDA backend ") != std::string::npos ||
           m.find("this machine has ") != std::string::npos));
  }
}

}  // namespace
}  // namespace longhaul
