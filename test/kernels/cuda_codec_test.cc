// The GPU codec kernels (compression/cuda/device_codec.h) against the CPU reference kernels:
// identical bytes for block quantization (8, 4 and 2 bits, symmetric and asymmetric, nearest
// and stochastic rounding, block sizes 8 to 4096, sizes 0, 1, odd and large, zeros of both
// signs, subnormals, huge values, constant blocks), identical floats for dequantization, the
// same error index for non-finite input and malformed blocks, bf16 both ways, and encoded
// buffers at odd addresses. main() is gpu_test_main.cc; without a GPU only [no-gpu] runs.
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "compression/cuda/device_codec.h"
#include "compression/kernels.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/device.h"

namespace longhaul::compression::cuda {
namespace {

using kernels::kNone;
using kernels::QuantParams;

// Device memory of n bytes, freed on destruction; `offset` shifts the pointer (odd addresses).
class DeviceBytes {
 public:
  explicit DeviceBytes(size_t n, size_t offset = 0) : offset_(offset) {
    LONGHAUL_CUDA_CHECK(cudaMalloc(&base_, n + offset + 1));
  }
  ~DeviceBytes() { (void)cudaFree(base_); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  uint8_t* get() { return static_cast<uint8_t*>(base_) + offset_; }
  float* floats() { return reinterpret_cast<float*>(get()); }

 private:
  void* base_ = nullptr;
  size_t offset_;
};

template <typename T>
void ToDevice(void* dst, const std::vector<T>& host) {
  if (host.empty()) return;
  LONGHAUL_CUDA_CHECK(
      cudaMemcpy(dst, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
}

template <typename T>
std::vector<T> FromDevice(const void* src, size_t n) {
  std::vector<T> host(n);
  if (n > 0)
    LONGHAUL_CUDA_CHECK(cudaMemcpy(host.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

// Test data: normal values with, at fixed places, the cases that stress the rounding rules.
std::vector<float> TestValues(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  const float specials[] = {0.0f,    -0.0f,   1e-40f, -1e-40f, FLT_MIN, 3e38f, -3e38f,
                            FLT_MAX, -1e-30f, 0.5f,   -0.5f,   1.5f,    2.5f,  -2.5f};
  for (size_t i = 0; i < n; i += 97) v[i] = specials[(i / 97) % std::size(specials)];
  // A constant block, an all-zero block of mixed signs, and a block of tiny values.
  for (size_t i = 256; i < std::min<size_t>(n, 320); i++) v[i] = 0.75f;
  for (size_t i = 512; i < std::min<size_t>(n, 576); i++) v[i] = (i % 3 == 0) ? -0.0f : 0.0f;
  for (size_t i = 768; i < std::min<size_t>(n, 832); i++) v[i] *= 1e-39f;
  return v;
}

TEST_CASE("GPU codec tests need a GPU", "[codec][no-gpu]") {
  // Without one, the kernels are not called at all; this case documents the skip and checks
  // that the reason is the clear one.
  auto count = longhaul::kernels::cuda::CudaDeviceCount();
  if (!count.ok()) {
    CHECK(std::string(count.status().message()).rfind("no CUDA device: ", 0) == 0);
  } else {
    CHECK(*count >= 1);
  }
}

TEST_CASE("GPU quantization gives the CPU reference's bytes", "[codec][quantize]") {
  const int bits = GENERATE(8, 4, 2);
  const bool asym = GENERATE(false, true);
  const bool stochastic = GENERATE(false, true);
  const uint32_t block = GENERATE(8u, 64u, 4096u);
  const size_t n = GENERATE(size_t{0}, size_t{1}, size_t{7}, size_t{63}, size_t{64}, size_t{65},
                            size_t{1001}, size_t{(1 << 20) + 3});
  QuantParams p;
  p.bits = bits;
  p.block = block;
  p.asymmetric = asym;
  p.stochastic = stochastic;
  p.seed = 0x1234567890abcdefull;
  INFO("bits=" << bits << " asym=" << asym << " sr=" << stochastic << " block=" << block
               << " n=" << n);
  const auto x = TestValues(n, 1);
  const size_t size = kernels::QuantizedSize(p, n);
  std::vector<uint8_t> want(size);
  REQUIRE(kernels::ReferenceKernels().quantize(p, x.data(), n, want.data()) == kNone);

  cudaStream_t stream = nullptr;
  LONGHAUL_CUDA_CHECK(cudaStreamCreate(&stream));
  const size_t offset = GENERATE(size_t{0}, size_t{1});  // encoded side at an odd address
  DeviceBytes in(n * sizeof(float)), out(size, offset);
  ToDevice(in.get(), x);
  REQUIRE(QuantizeOnDevice(p, in.floats(), n, out.get(), stream) == kNone);
  const auto got = FromDevice<uint8_t>(out.get(), size);
  size_t first_diff = size;
  for (size_t i = 0; i < size && first_diff == size; i++) {
    if (got[i] != want[i]) first_diff = i;
  }
  INFO("first differing byte " << first_diff << " of " << size);
  CHECK(first_diff == size);

  // Dequantize the reference bytes on the GPU: the reference's floats, bit for bit.
  std::vector<float> want_x(n);
  REQUIRE(kernels::ReferenceKernels().dequantize(p, want.data(), n, want_x.data()) == kNone);
  DeviceBytes enc(size, offset), dec(n * sizeof(float));
  ToDevice(enc.get(), want);
  REQUIRE(DequantizeOnDevice(p, enc.get(), n, dec.floats(), stream) == kNone);
  const auto got_x = FromDevice<float>(dec.get(), n);
  CHECK(std::memcmp(got_x.data(), want_x.data(), n * sizeof(float)) == 0);
  LONGHAUL_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_CASE("GPU codec errors name the same element or block as the CPU", "[codec][errors]") {
  QuantParams p;
  p.bits = GENERATE(8, 4);
  p.asymmetric = GENERATE(false, true);
  p.block = 64;
  const size_t n = 10000;
  auto x = TestValues(n, 2);
  x[7777] = std::numeric_limits<float>::quiet_NaN();
  x[5000] = INFINITY;
  x[5001] = -INFINITY;
  std::vector<uint8_t> scratch(kernels::QuantizedSize(p, n));
  const int64_t want = kernels::ReferenceKernels().quantize(p, x.data(), n, scratch.data());
  REQUIRE(want == 5000);
  DeviceBytes in(n * sizeof(float)), out(scratch.size());
  ToDevice(in.get(), x);
  CHECK(QuantizeOnDevice(p, in.floats(), n, out.get(), nullptr) == want);

  // Malformed blocks: a negative scale, a NaN scale, an infinite mid.
  x = TestValues(n, 3);
  std::vector<uint8_t> enc(kernels::QuantizedSize(p, n));
  REQUIRE(kernels::ReferenceKernels().quantize(p, x.data(), n, enc.data()) == kNone);
  const float bad_scale = GENERATE(-1.0f, std::numeric_limits<float>::quiet_NaN(), INFINITY);
  std::memcpy(enc.data() + 4 * 100, &bad_scale, 4);
  std::memcpy(enc.data() + 4 * 120, &bad_scale, 4);
  std::vector<float> dec(n);
  const int64_t want_block = kernels::ReferenceKernels().dequantize(p, enc.data(), n, dec.data());
  REQUIRE(want_block == 100);
  DeviceBytes denc(enc.size()), ddec(n * sizeof(float));
  ToDevice(denc.get(), enc);
  CHECK(DequantizeOnDevice(p, denc.get(), n, ddec.floats(), nullptr) == want_block);
}

TEST_CASE("GPU bf16 conversion gives the CPU reference's bytes", "[codec][bf16]") {
  const size_t n = GENERATE(size_t{0}, size_t{1}, size_t{1001}, size_t{(1 << 22) + 1});
  const size_t offset = GENERATE(size_t{0}, size_t{1});
  INFO("n=" << n << " offset=" << offset);
  auto x = TestValues(n, 4);
  if (n > 3) x[3] = FLT_MAX;  // saturates to the largest bf16
  std::vector<uint8_t> want(2 * n);
  REQUIRE(kernels::ReferenceKernels().floats_to_bf16(x.data(), n, want.data()) == kNone);
  DeviceBytes in(n * sizeof(float)), out(2 * n, offset);
  ToDevice(in.get(), x);
  REQUIRE(FloatsToBf16OnDevice(in.floats(), n, out.get(), nullptr) == kNone);
  CHECK(FromDevice<uint8_t>(out.get(), 2 * n) == want);

  std::vector<float> want_x(n);
  REQUIRE(kernels::ReferenceKernels().bf16_to_floats(want.data(), n, want_x.data()) == kNone);
  DeviceBytes back(n * sizeof(float));
  REQUIRE(Bf16ToFloatsOnDevice(out.get(), n, back.floats(), nullptr) == kNone);
  const auto got_x = FromDevice<float>(back.get(), n);
  CHECK(std::memcmp(got_x.data(), want_x.data(), n * sizeof(float)) == 0);

  if (n > 100) {
    x[100] = std::numeric_limits<float>::quiet_NaN();
    x[50] = -INFINITY;
    ToDevice(in.get(), x);
    CHECK(FloatsToBf16OnDevice(in.floats(), n, out.get(), nullptr) == 50);
    auto bad = want;
    bad[2 * 70 + 1] = 0x7f;  // 0x7f80 | low byte: an infinity or NaN
    bad[2 * 70] = 0x80;
    ToDevice(out.get(), bad);
    CHECK(Bf16ToFloatsOnDevice(out.get(), n, back.floats(), nullptr) == 70);
  }
}

}  // namespace
}  // namespace longhaul::compression::cuda
