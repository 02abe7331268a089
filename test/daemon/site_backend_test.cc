// SiteBackend: the site's devices pick CPU or GPU, the job's backend picks the variant.
#include "daemon/job/site_backend.h"

#include <catch2/catch.hpp>

namespace longhaul {
namespace {

std::string Backend(const std::vector<std::string>& devices, const std::string& job) {
  auto b = SiteBackend(devices, job);
  REQUIRE(b.ok());
  return *b;
}

TEST_CASE("CPU sites run the job's CPU backend, or cpu when the job names a GPU one") {
  CHECK(Backend({"cpu"}, "cpu") == "cpu");
  CHECK(Backend({"cpu"}, "cpu-ref") == "cpu-ref");
  CHECK(Backend({"cpu"}, "cuda") == "cpu");
  CHECK(Backend({"cpu"}, "cuda-bf16") == "cpu");
}

TEST_CASE("a GPU site runs on its GPU, in bf16 when the job asks for it") {
  CHECK(Backend({"cuda:0"}, "cpu") == "cuda:0");
  CHECK(Backend({"cuda:3"}, "cuda") == "cuda:3");
  CHECK(Backend({"cuda:1"}, "cuda-bf16") == "cuda-bf16:1");
  CHECK(Backend({"cpu", "cuda:2"}, "cuda-bf16") == "cuda-bf16:2");
}

TEST_CASE("several GPUs at one site are refused with a reason") {
  auto b = SiteBackend({"cuda:0", "cuda:1"}, "cuda");
  REQUIRE_FALSE(b.ok());
  CHECK(std::string(b.status().message()).find("2 GPUs listed") != std::string::npos);
}

TEST_CASE("CheckSiteDevices accepts cpu and names a GPU it cannot use") {
  CHECK(CheckSiteDevices({"cpu"}).ok());
  // This test runs where there is no GPU (CI); a GPU machine would pass the check.
  const Status s = CheckSiteDevices({"cpu", "cuda:7"});
  if (!s.ok()) {
    CHECK(std::string(s.message()).find("cuda:7 is not usable here") != std::string::npos);
  }
}

}  // namespace
}  // namespace longhaul
