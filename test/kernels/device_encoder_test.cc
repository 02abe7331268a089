// Encoding on the GPU before the copy to the host, and decoding on it after the copy from the
// host (compression/device_encoder.h): the frames the encoder builds for bf16 and q8/q4/q2
// (symmetric, asymmetric, stochastic rounding) equal, byte for byte, the frames of the host
// codec for the same floats, as the stage runner builds both, and the decoder's floats equal the
// host codec's, bit for bit; a non-finite value, a corrupt block scale or a short payload gives
// the host's error; codecs the GPU lacks are not Supported; a CPU backend gets neither. main()
// is gpu_test_main.cc; without a GPU only [no-gpu] runs.
#include "compression/device_encoder.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
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

// The codecs the GPU takes, in every variant the kernels have.
constexpr const char* kDeviceCodecs[] = {"bf16",        "q8",      "q4",    "q2",
                                         "q8:asym",     "q4:asym", "q8:sr", "q2:block=256,asym,sr",
                                         "q4:block=256"};
const std::vector<std::vector<int64_t>> kShapes = {{1}, {3, 7}, {2, 64, 48}, {8, 1024, 768}};

size_t Count(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

// A CUDA backend and its device encoder or decoder (T), made as the stage runner makes them.
template <typename T>
struct OnGpu {
  std::unique_ptr<kernels::Ops> ops;
  std::unique_ptr<T> codec;
};

template <typename T, typename Make>
OnGpu<T> MakeOnGpu(Make make) {
  auto ops = kernels::MakeOps("cuda", 1);
  REQUIRE(ops.ok());
  auto made = make(ops->get());
  REQUIRE(made.ok());
  REQUIRE(*made != nullptr);
  return {std::move(*ops), std::move(*made)};
}

TEST_CASE("a CPU backend has no device encoder or decoder", "[no-gpu]") {
  auto ops = kernels::MakeOps("cpu-ref", 1);
  REQUIRE(ops.ok());
  auto e = MakeDeviceEncoder(ops->get());
  REQUIRE(e.ok());
  CHECK(*e == nullptr);
  auto d = MakeDeviceDecoder(ops->get());
  REQUIRE(d.ok());
  CHECK(*d == nullptr);
}

TEST_CASE("device-encoded frames equal the host codec's, byte for byte") {
  auto gpu = MakeOnGpu<DeviceEncoder>(MakeDeviceEncoder);
  kernels::Ops* ops = gpu.ops.get();
  DeviceEncoder& enc = *gpu.codec;
  for (const char* name : kDeviceCodecs) {
    auto codec = MakeCodec(name);
    REQUIRE(codec.ok());
    const CodecSpec& spec = (*codec)->spec();
    REQUIRE(enc.Supports(spec));
    for (const std::vector<int64_t>& shape : kShapes) {
      const size_t n = Count(shape);
      const std::vector<float> host = Values(n, n);
      float* dev = ops->Alloc(n);
      ops->Upload(dev, host.data(), n);
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
      ops->Free(dev);
    }
  }
}

TEST_CASE("device-decoded frames equal the host codec's floats, bit for bit") {
  auto gpu = MakeOnGpu<DeviceDecoder>(MakeDeviceDecoder);
  kernels::Ops* ops = gpu.ops.get();
  DeviceDecoder& dec = *gpu.codec;
  for (const char* name : kDeviceCodecs) {
    auto codec = MakeCodec(name);
    REQUIRE(codec.ok());
    const CodecSpec& spec = (*codec)->spec();
    REQUIRE(dec.Supports(spec));
    for (const std::vector<int64_t>& shape : kShapes) {
      const size_t n = Count(shape);
      EncodeOptions eo;
      eo.seed = 777 + n;
      std::vector<uint8_t> frame;
      REQUIRE(EncodeFrame(**codec, Values(n, n + 1), shape, eo, &frame).ok());
      auto want = DecodeFrame(frame);
      REQUIRE(want.ok());
      auto header = ParseFrameHeader(frame);
      REQUIRE(header.ok());
      // Start from a marker, so that a value the decoder leaves alone shows.
      float* dev = ops->Alloc(n);
      const std::vector<float> marker(n, -1234.5f);
      ops->Upload(dev, marker.data(), n);
      INFO(name << " over " << n << " floats");
      REQUIRE(DecodeFramePayload(*header, frame, [&](std::span<const uint8_t> payload) {
                return dec.Decode(spec, payload, n, dev);
              }).ok());
      std::vector<float> got(n);
      ops->Download(got.data(), dev, n);
      CHECK(std::memcmp(got.data(), want->values.data(), n * sizeof(float)) == 0);
      ops->Free(dev);
    }
  }
}

TEST_CASE("a corrupt payload fails to decode as on the host") {
  auto gpu = MakeOnGpu<DeviceDecoder>(MakeDeviceDecoder);
  kernels::Ops* ops = gpu.ops.get();
  DeviceDecoder& dec = *gpu.codec;
  const size_t n = 1000;
  float* dev = ops->Alloc(n);
  for (const char* name : {"q8", "q4:asym", "bf16"}) {
    auto codec = MakeCodec(name);
    REQUIRE(codec.ok());
    const CodecSpec& spec = (*codec)->spec();
    std::vector<uint8_t> frame;
    const std::vector<int64_t> shape = {static_cast<int64_t>(n)};
    REQUIRE(EncodeFrame(**codec, Values(n, 5), shape, {}, &frame).ok());
    auto header = ParseFrameHeader(frame);
    REQUIRE(header.ok());
    // A NaN in the payload: the scale of block 3 (quantized), or value 617 (bf16).
    const size_t at = header->header_size + (spec.value.quantized() ? 4 * 3 : 2 * 617);
    if (spec.value.quantized()) {
      const float nan = std::nanf("");
      std::memcpy(frame.data() + at, &nan, sizeof(nan));
    } else {
      frame[at] = 0xc0;  // bfloat16 NaN, 0x7fc0, little-endian
      frame[at + 1] = 0x7f;
    }
    RecomputeFrameChecksum(frame);
    INFO(name);
    const Status want = DecodeFrame(frame).status();
    REQUIRE_FALSE(want.ok());
    const Status got = DecodeFramePayload(*header, frame, [&](std::span<const uint8_t> payload) {
      return dec.Decode(spec, payload, n, dev);
    });
    CHECK(got.code() == want.code());
    CHECK(std::string(got.message()) == std::string(want.message()));
    // A payload one byte short.
    std::vector<float> host(n);
    const auto payload = std::span<const uint8_t>(frame).subspan(header->header_size);
    const Status short_want = (*codec)->Decode(payload.first(payload.size() - 1), host);
    const Status short_got = dec.Decode(spec, payload.first(payload.size() - 1), n, dev);
    REQUIRE_FALSE(short_want.ok());
    CHECK(std::string(short_got.message()) == std::string(short_want.message()));
  }
  ops->Free(dev);
  for (const char* name : {"fp32", "fp16", "q8+zstd", "topk:0.01+q8"}) {
    auto codec = MakeCodec(name);
    REQUIRE(codec.ok());
    INFO(name);
    CHECK_FALSE(dec.Supports((*codec)->spec()));
  }
}

TEST_CASE("a non-finite value fails as on the host; other codecs stay on the host") {
  auto gpu = MakeOnGpu<DeviceEncoder>(MakeDeviceEncoder);
  kernels::Ops* ops = gpu.ops.get();
  DeviceEncoder& enc = *gpu.codec;
  std::vector<float> host = Values(1000, 3);
  host[617] = std::nanf("");
  float* dev = ops->Alloc(host.size());
  ops->Upload(dev, host.data(), host.size());
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
  ops->Free(dev);
  for (const char* name : {"fp32", "fp16", "q8+zstd", "topk:0.01+q8"}) {
    auto codec = MakeCodec(name);
    REQUIRE(codec.ok());
    INFO(name);
    CHECK_FALSE(enc.Supports((*codec)->spec()));
  }
}

}  // namespace
}  // namespace longhaul::compression
