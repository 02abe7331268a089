// The OpenBLAS kernel set: chosen from the CPU's features before OpenBLAS starts
// (kernels/cpu/blas_core.h), so a CPU newer than the library runs its vector kernels and
// not the SSE3 fallback.
#include "kernels/cpu/blas_core.h"

#include <cblas.h>
#include <strings.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

namespace longhaul::kernels {
namespace {

TEST_CASE("BlasCoreFor: AVX-512 (F, BW, DQ, VL) -> SkylakeX, AVX2 + FMA -> Haswell, else none") {
  CpuFeatures none;
  CHECK(BlasCoreFor(none).empty());

  CpuFeatures avx2;
  avx2.avx2 = true;
  CHECK(BlasCoreFor(avx2).empty());  // AVX2 without FMA: the library decides
  avx2.fma = true;
  CHECK(BlasCoreFor(avx2) == "Haswell");

  CpuFeatures avx512 = avx2;
  avx512.avx512f = avx512.avx512bw = avx512.avx512dq = avx512.avx512vl = true;
  CHECK(BlasCoreFor(avx512) == "SkylakeX");
  // Any of the four missing (e.g. Xeon Phi: F without BW, DQ and VL): not SkylakeX.
  for (bool CpuFeatures::*bit : {&CpuFeatures::avx512f, &CpuFeatures::avx512bw,
                                 &CpuFeatures::avx512dq, &CpuFeatures::avx512vl}) {
    CpuFeatures partial = avx512;
    partial.*bit = false;
    CHECK(BlasCoreFor(partial) == "Haswell");
  }
}

TEST_CASE("the pre-init hook set OpenBLAS's core from this CPU's features") {
  const std::string report = BlasCoreReport();
  INFO(report);
  const std::string_view want = BlasCoreFor(DetectCpuFeatures());
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  if (report.find("set by the user") != std::string::npos) {
    // The user's OPENBLAS_CORETYPE wins; nothing to check against the features.
    REQUIRE(env != nullptr);
    SUCCEED("OPENBLAS_CORETYPE was set before the process started");
  } else if (want.empty()) {
    CHECK(report.find("the library's own choice") != std::string::npos);
  } else {
    // The hook ran before OpenBLAS's constructor: the environment says so and the library
    // runs that kernel set (its names compare without case).
    REQUIRE(env != nullptr);
    CHECK(std::string(env) == want);
    CHECK(strcasecmp(openblas_get_corename(), std::string(want).c_str()) == 0);
    CHECK(report.find("set from CPU features") != std::string::npos);
    CHECK(std::getenv("LONGHAUL_BLAS_CORE_FROM_CPU") != nullptr);
  }
}

}  // namespace
}  // namespace longhaul::kernels
