// Encoding on the GPU before the copy to the host (compression/device_encoder.h): the frames it
// builds for bf16 and q8/q4/q2 (symmetric, asymmetric, stochastic rounding) equal, byte for
// byte, the frames of the host codec for the same floats, as the stage runner builds both; a
// non-finite value gives the host's error; codecs the GPU lacks are not Supported; a CPU
// backend gets no device encoder. main() is gpu_test_main.cc; without a GPU only [no-gpu] runs.
#include "compression/device_encoder.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "compression/frame.h"
#include "kernels/ops.h"

namespace longhaul::compression {
namespace {

std::vector<float> Values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng) * (rng() % 8 == 0 ? 30.0f : 1.0f);
  return v;
}

TEST_CASE("a CPU backend has no device encoder", "[no-gpu]") {
  auto ops = kernels::MakeOps("cpu-ref", 1);
  REQUIRE(ops.ok());
  auto e = MakeDeviceEncoder(ops->get());
  REQUIRE(e.ok());
  CHECK(*e == nullptr);
}

TEST_CASE("device-encoded frames equal the host codec's, byte for byte") {
  auto ops = kernels::MakeOps("cuda", 1);
  REQUIRE(ops.ok());
  auto made = MakeDeviceEncoder(ops->get());
  REQUIRE(made.ok());
  REQUIRE(*made != nullptr);
  DeviceEncoder& enc = **made;
  for (const char* name : {"bf16", "q8", "q4", "q2", "q8:asym", "q4:asym", "q8:sr",
                           "q2:block=256,asym,sr", "q4:block=256"}) {
    auto codec = MakeCodec(name);
    REQUIRE(codec.ok());
    const CodecSpec& spec = (*codec)->spec();
    REQUIRE(enc.Supports(spec));
    for (const std::vector<int64_t>& shape :
         std::vector<std::vector<int64_t>>{{1}, {3, 7}, {2, 64, 48}, {8, 1024, 768}}) {
      size_t n = 1;
      for (int64_t d : shape) n *= static_cast<size_t>(d);
      const std::vector<float> host = Values(n, n);
      float* dev = (*ops)->Alloc(n);
      (*ops)->Upload(dev, host.data(), n);
      EncodeOptions eo;
      eo.seed = 12345 + n;
      std::vector<uint8_t> want, got;
      REQUIRE(EncodeFrame(**codec, host, shape, eo, &want).ok());
      Status s = EncodeFrameWith(
          spec, shape, n,
          [&](std::vector<uint8_t>* out) { return enc.Encode(spec, dev, n, eo, out); }, &got);
      INFO(name << " over " << n << " floats");
      REQUIRE(s.ok());
      CHECK(got == want);
      (*ops)->Free(dev);
    }
  }
}

TEST_CASE("a non-finite value fails as on the host; other codecs stay on the host") {
  auto ops = kernels::MakeOps("cuda", 1);
  REQUIRE(ops.ok());
  auto made = MakeDeviceEncoder(ops->get());
  REQUIRE(made.ok());
  REQUIRE(*made != nullptr);
  DeviceEncoder& enc = **made;
  std::vector<float> host = Values(1000, 3);
  host[617] = std::nanf("");
  float* dev = (*ops)->Alloc(host.size());
  (*ops)->Upload(dev, host.data(), host.size());
  for (const char* name : {"bf16", "q8"}) {
    auto codec = MakeCodec(name);
    REQUIRE(codec.ok());
    std::vector<uint8_t> a, b;
    const Status want = (*codec)->Encode(host, {}, &a);
    const Status got = enc.Encode((*codec)->spec(), dev, host.size(), {}, &b);
    REQUIRE_FALSE(want.ok());
    CHECK(got.code() == want.code());
    CHECK(std::string(got.message()) == std::string(want.message()));
    CHECK(b.empty());
  }
  (*ops)->Free(dev);
  for (const char* name : {"fp32", "fp16", "q8+zstd", "topk:0.01+q8"}) {
    auto codec = MakeCodec(name);
    REQUIRE(codec.ok());
    INFO(name);
    CHECK_FALSE(enc.Supports((*codec)->spec()));
  }
}

}  // namespace
}  // namespace longhaul::compression
