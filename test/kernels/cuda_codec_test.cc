// The GPU codec kernels (compression/cuda/device_codec.h) against the CPU reference kernels:
// identical bytes for block quantization (8, 4 and 2 bits, symmetric and asymmetric, nearest
// and stochastic rounding, block sizes 8 to 4096, sizes 0, 1, odd, not a multiple of the block
// and several million, zeros of both signs, subnormals, huge values, constant blocks),
// identical floats for dequantization, the same error index for non-finite input and
// malformed blocks, bf16 both ways, error feedback, and top-k selection against a sort.
// Every case runs with 16-byte-aligned float pointers (the vectorized kernels) and with float
// pointers 1 to 3 floats off (the general kernels), and with encoded buffers at every offset
// 0 to 3 (word or byte access to the encoded side). main() is gpu_test_main.cc; without a GPU
// only [no-gpu] runs.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <utility>
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
// cudaMalloc's pointers are 256-byte aligned, so offset 0 is aligned for every kernel.
class DeviceBytes {
 public:
  // Filled with a marker (0xa5 bytes), so a kernel that skips writes cannot pass on what an
  // earlier buffer at the same address held.
  explicit DeviceBytes(size_t n, size_t offset = 0) : offset_(offset) {
    LONGHAUL_CUDA_CHECK(cudaMalloc(&base_, n + offset + 1));
    LONGHAUL_CUDA_CHECK(cudaMemset(base_, 0xa5, n + offset + 1));
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

// Float buffers `floats` floats off a 16-byte boundary: 0 for the vectorized kernels, 1 to 3
// for the general ones.
class DeviceFloats : public DeviceBytes {
 public:
  DeviceFloats(size_t n, size_t floats) : DeviceBytes(n * sizeof(float), floats * sizeof(float)) {}
};

// (float offset, encoded-side byte offset) pairs: both aligned, the encoded side at every
// misalignment, and the float side misaligned.
const std::vector<std::pair<size_t, size_t>> kOffsets = {{0, 0}, {0, 1}, {0, 2}, {0, 3},
                                                         {1, 0}, {2, 1}, {3, 2}};

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

// The first byte at which a and b differ, or their size (they have the same size).
size_t FirstDiff(const void* a, const void* b, size_t bytes) {
  const auto* x = static_cast<const uint8_t*>(a);
  const auto* y = static_cast<const uint8_t*>(b);
  for (size_t i = 0; i < bytes; i++) {
    if (x[i] != y[i]) return i;
  }
  return bytes;
}

// Test data: normal values with, at fixed places, the cases that stress the rounding rules.
// Memoized: the large sizes are used by many cases.
const std::vector<float>& TestValues(size_t n, uint32_t seed) {
  static std::map<std::pair<size_t, uint32_t>, std::vector<float>> cache;
  auto [it, added] = cache.try_emplace({n, seed});
  if (!added) return it->second;
  std::vector<float>& v = it->second;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  v.resize(n);
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

QuantParams Params(int bits, bool asym, bool stochastic, uint32_t block) {
  QuantParams p;
  p.bits = bits;
  p.block = block;
  p.asymmetric = asym;
  p.stochastic = stochastic;
  p.seed = 0x1234567890abcdefull;
  return p;
}

// Quantizes x on the GPU and dequantizes the reference's bytes on the GPU, for every pair of
// kOffsets (or just `offsets`), against the reference kernels.
void CheckQuantization(const QuantParams& p, const std::vector<float>& x,
                       const std::vector<std::pair<size_t, size_t>>& offsets) {
  const size_t n = x.size();
  const size_t size = kernels::QuantizedSize(p, n);
  std::vector<uint8_t> want(size);
  REQUIRE(kernels::ReferenceKernels().quantize(p, x.data(), n, want.data()) == kNone);
  std::vector<float> want_x(n);
  REQUIRE(kernels::ReferenceKernels().dequantize(p, want.data(), n, want_x.data()) == kNone);

  cudaStream_t stream = nullptr;
  LONGHAUL_CUDA_CHECK(cudaStreamCreate(&stream));
  for (const auto& [float_offset, byte_offset] : offsets) {
    INFO("float offset " << float_offset << ", encoded offset " << byte_offset);
    DeviceFloats in(n, float_offset);
    DeviceBytes out(size, byte_offset);
    ToDevice(in.get(), x);
    REQUIRE(QuantizeOnDevice(p, in.floats(), n, out.get(), stream) == kNone);
    const auto got = FromDevice<uint8_t>(out.get(), size);
    INFO("quantize: first differing byte of " << size);
    CHECK(FirstDiff(got.data(), want.data(), size) == size);

    // Dequantize the reference bytes on the GPU: the reference's floats, bit for bit.
    DeviceBytes enc(size, byte_offset);
    DeviceFloats dec(n, float_offset);
    ToDevice(enc.get(), want);
    REQUIRE(DequantizeOnDevice(p, enc.get(), n, dec.floats(), stream) == kNone);
    const auto got_x = FromDevice<float>(dec.get(), n);
    INFO("dequantize: first differing byte of " << n * sizeof(float));
    CHECK(FirstDiff(got_x.data(), want_x.data(), n * sizeof(float)) == n * sizeof(float));
  }
  LONGHAUL_CUDA_CHECK(cudaStreamDestroy(stream));
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
  // 8 to 256: groups of 1 to 32 lanes; 512, 1024: a warp; 4096: a warp re-reading the block.
  const uint32_t block = GENERATE(8u, 16u, 64u, 256u, 512u, 1024u, 4096u);
  const size_t n = GENERATE(size_t{0}, size_t{1}, size_t{3}, size_t{7}, size_t{64}, size_t{65},
                            size_t{1001}, size_t{5003}, size_t{(1 << 20) + 3});
  INFO("bits=" << bits << " asym=" << asym << " sr=" << stochastic << " block=" << block
               << " n=" << n);
  CheckQuantization(Params(bits, asym, stochastic, block), TestValues(n, 1), kOffsets);
}

TEST_CASE("GPU quantization of several million values", "[codec][quantize][large]") {
  const int bits = GENERATE(8, 4, 2);
  const bool asym = GENERATE(false, true);
  const bool stochastic = GENERATE(false, true);
  const uint32_t block = GENERATE(8u, 64u, 1024u, 4096u);
  const size_t n = (size_t{5} << 20) + 7;  // neither a multiple of 4 nor of the block
  INFO("bits=" << bits << " asym=" << asym << " sr=" << stochastic << " block=" << block
               << " n=" << n);
  CheckQuantization(Params(bits, asym, stochastic, block), TestValues(n, 5), {{0, 0}, {1, 1}});
}

TEST_CASE("GPU codec errors name the same element or block as the CPU", "[codec][errors]") {
  const QuantParams p =
      Params(GENERATE(8, 4, 2), GENERATE(false, true), false, GENERATE(8u, 64u, 4096u));
  const size_t n = 10001;
  // Bad values: NaN and infinities in the middle; one in the last, partial float4; two in the
  // first float4.
  const std::vector<std::vector<size_t>> bad_sets = {{7777, 5000, 5001}, {n - 1}, {3, 2}};
  const size_t set = GENERATE(0, 1, 2);
  const size_t float_offset = GENERATE(size_t{0}, size_t{1});
  INFO("bits=" << p.bits << " asym=" << p.asymmetric << " block=" << p.block << " set=" << set
               << " float offset=" << float_offset);
  auto x = TestValues(n, 2);
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY};
  for (size_t j = 0; j < bad_sets[set].size(); j++) x[bad_sets[set][j]] = bad_values[j % 3];
  std::vector<uint8_t> scratch(kernels::QuantizedSize(p, n));
  const int64_t want = kernels::ReferenceKernels().quantize(p, x.data(), n, scratch.data());
  REQUIRE(want ==
          static_cast<int64_t>(*std::min_element(bad_sets[set].begin(), bad_sets[set].end())));
  DeviceFloats in(n, float_offset);
  DeviceBytes out(scratch.size());
  ToDevice(in.get(), x);
  CHECK(QuantizeOnDevice(p, in.floats(), n, out.get(), nullptr) == want);

  // Malformed blocks: a negative scale, a NaN scale, an infinite mid.
  const auto& y = TestValues(n, 3);
  std::vector<uint8_t> enc(kernels::QuantizedSize(p, n));
  REQUIRE(kernels::ReferenceKernels().quantize(p, y.data(), n, enc.data()) == kNone);
  const float bad_scale = GENERATE(-1.0f, std::numeric_limits<float>::quiet_NaN(), INFINITY);
  const size_t nb = kernels::QuantBlocks(p, n);
  const size_t first = nb > 100 ? 100 : 1, second = nb - 1;          // the last block is partial
  const size_t at = p.asymmetric && std::isinf(bad_scale) ? nb : 0;  // the mid, for infinity
  std::memcpy(enc.data() + 4 * (at + second), &bad_scale, 4);
  std::memcpy(enc.data() + 4 * (at + first), &bad_scale, 4);
  std::vector<float> dec(n);
  const int64_t want_block = kernels::ReferenceKernels().dequantize(p, enc.data(), n, dec.data());
  REQUIRE(want_block == static_cast<int64_t>(first));
  const size_t byte_offset = GENERATE(size_t{0}, size_t{1});
  DeviceBytes denc(enc.size(), byte_offset);
  DeviceFloats ddec(n, float_offset);
  ToDevice(denc.get(), enc);
  CHECK(DequantizeOnDevice(p, denc.get(), n, ddec.floats(), nullptr) == want_block);
}

TEST_CASE("GPU bf16 conversion gives the CPU reference's bytes", "[codec][bf16]") {
  const size_t n =
      GENERATE(size_t{0}, size_t{1}, size_t{3}, size_t{5}, size_t{1001}, size_t{(1 << 22) + 1});
  // The encoded side at every alignment class (8, 4, 2, 1) with aligned floats, then the
  // floats misaligned.
  const auto [float_offset, byte_offset] =
      GENERATE(std::pair<size_t, size_t>{0, 0}, std::pair<size_t, size_t>{0, 1},
               std::pair<size_t, size_t>{0, 2}, std::pair<size_t, size_t>{0, 4},
               std::pair<size_t, size_t>{0, 6}, std::pair<size_t, size_t>{1, 0},
               std::pair<size_t, size_t>{3, 5});
  INFO("n=" << n << " float offset=" << float_offset << " encoded offset=" << byte_offset);
  auto x = TestValues(n, 4);
  if (n > 3) x[3] = FLT_MAX;  // saturates to the largest bf16
  std::vector<uint8_t> want(2 * n);
  REQUIRE(kernels::ReferenceKernels().floats_to_bf16(x.data(), n, want.data()) == kNone);
  DeviceFloats in(n, float_offset);
  DeviceBytes out(2 * n, byte_offset);
  ToDevice(in.get(), x);
  REQUIRE(FloatsToBf16OnDevice(in.floats(), n, out.get(), nullptr) == kNone);
  const auto got = FromDevice<uint8_t>(out.get(), 2 * n);
  CHECK(FirstDiff(got.data(), want.data(), 2 * n) == 2 * n);

  std::vector<float> want_x(n);
  REQUIRE(kernels::ReferenceKernels().bf16_to_floats(want.data(), n, want_x.data()) == kNone);
  DeviceFloats back(n, float_offset);
  REQUIRE(Bf16ToFloatsOnDevice(out.get(), n, back.floats(), nullptr) == kNone);
  const auto got_x = FromDevice<float>(back.get(), n);
  CHECK(FirstDiff(got_x.data(), want_x.data(), n * sizeof(float)) == n * sizeof(float));

  if (n > 100) {
    x[100] = std::numeric_limits<float>::quiet_NaN();
    x[50] = -INFINITY;
    ToDevice(in.get(), x);
    CHECK(FloatsToBf16OnDevice(in.floats(), n, out.get(), nullptr) == 50);
    x[n - 1] = INFINITY;  // alone, in the last (partial) float4
    x[50] = x[100] = 1.0f;
    ToDevice(in.get(), x);
    CHECK(FloatsToBf16OnDevice(in.floats(), n, out.get(), nullptr) == static_cast<int64_t>(n - 1));
    auto bad = want;
    bad[2 * 70 + 1] = 0x7f;  // 0x7f80 | low byte: an infinity or NaN
    bad[2 * 70] = 0x80;
    bad[2 * 71 + 1] = 0xff;  // a NaN
    bad[2 * 71] = 0xc0;
    ToDevice(out.get(), bad);
    CHECK(Bf16ToFloatsOnDevice(out.get(), n, back.floats(), nullptr) == 70);
    bad = want;
    bad[2 * (n - 1) + 1] = 0xff;
    bad[2 * (n - 1)] = 0x80;
    ToDevice(out.get(), bad);
    CHECK(Bf16ToFloatsOnDevice(out.get(), n, back.floats(), nullptr) ==
          static_cast<int64_t>(n - 1));
  }
}

TEST_CASE("GPU error feedback gives the CPU's bytes and residual", "[codec][feedback]") {
  const int bits = GENERATE(8, 4, 2);
  const bool asym = GENERATE(false, true);
  const bool stochastic = GENERATE(false, true);
  const uint32_t block = GENERATE(8u, 64u, 4096u);
  const size_t n = GENERATE(size_t{1}, size_t{1001}, size_t{(1 << 20) + 3});
  const QuantParams p = Params(bits, asym, stochastic, block);
  INFO("bits=" << bits << " asym=" << asym << " sr=" << stochastic << " block=" << block
               << " n=" << n);
  const auto& x = TestValues(n, 6);
  // A residual of the size an earlier step leaves, with a few zeros of either sign.
  std::vector<float> residual(n);
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.01f);
  for (size_t i = 0; i < n; i++) residual[i] = i % 89 == 0 ? (i % 2 ? -0.0f : 0.0f) : dist(rng);

  // The CPU's error feedback (error_feedback.cc): compensate, encode, subtract what is decoded.
  const size_t size = kernels::QuantizedSize(p, n);
  std::vector<float> compensated(n), sent(n), want_residual(n);
  for (size_t i = 0; i < n; i++) compensated[i] = x[i] + residual[i];
  std::vector<uint8_t> want(size);
  REQUIRE(kernels::ReferenceKernels().quantize(p, compensated.data(), n, want.data()) == kNone);
  REQUIRE(kernels::ReferenceKernels().dequantize(p, want.data(), n, sent.data()) == kNone);
  for (size_t i = 0; i < n; i++) want_residual[i] = compensated[i] - sent[i];

  // Aligned; the encoded side off by one and three; the float side off (general kernels).
  const std::vector<std::pair<size_t, size_t>> offsets = {{0, 0}, {0, 1}, {0, 3}, {1, 0}, {3, 2}};
  for (const auto& [float_offset, byte_offset] : offsets) {
    for (const bool in_place : {true, false}) {
      INFO("float offset " << float_offset << ", encoded offset " << byte_offset
                           << (in_place ? ", in place" : ", into a second buffer"));
      DeviceFloats din(n, float_offset), dres(n, float_offset), dnext(n, float_offset);
      DeviceBytes dout(size, byte_offset);
      ToDevice(din.get(), x);
      ToDevice(dres.get(), residual);
      float* next = in_place ? dres.floats() : dnext.floats();
      REQUIRE(QuantizeWithFeedbackOnDevice(p, din.floats(), n, dres.floats(), next, dout.get(),
                                           nullptr) == kNone);
      const auto got = FromDevice<uint8_t>(dout.get(), size);
      CHECK(FirstDiff(got.data(), want.data(), size) == size);
      const auto got_residual = FromDevice<float>(in_place ? dres.get() : dnext.get(), n);
      CHECK(FirstDiff(got_residual.data(), want_residual.data(), n * sizeof(float)) ==
            n * sizeof(float));
      if (!in_place) CHECK(FromDevice<float>(dres.get(), n) == residual);
    }
  }

  // x + residual overflows to infinity: the quantizer's error, and the residual is kept.
  if (n > 500) {
    std::vector<float> big(x);
    std::vector<float> big_residual(residual);
    big[500] = 3e38f;
    big_residual[500] = 3e38f;
    for (size_t float_offset : {size_t{0}, size_t{1}}) {
      for (const bool in_place : {true, false}) {
        INFO("float offset " << float_offset << (in_place ? ", in place" : ", second buffer"));
        DeviceFloats din(n, float_offset), dres(n, float_offset), dnext(n, float_offset);
        DeviceBytes dout(size);
        ToDevice(din.get(), big);
        ToDevice(dres.get(), big_residual);
        CHECK(QuantizeWithFeedbackOnDevice(p, din.floats(), n, dres.floats(),
                                           in_place ? dres.floats() : dnext.floats(), dout.get(),
                                           nullptr) == 500);
        CHECK(FromDevice<float>(dres.get(), n) == big_residual);
      }
    }
  }
}

// compression::TopKExactReference's definition: the k largest magnitude bits, ties to the lower
// index, ascending. `order` is every index sorted by (magnitude descending, index ascending).
std::vector<uint32_t> TopKOrder(const std::vector<float>& x) {
  auto mag = [&](uint32_t i) {
    uint32_t u;
    std::memcpy(&u, &x[i], 4);
    return u & 0x7fffffffu;
  };
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return mag(a) != mag(b) ? mag(a) > mag(b) : a < b; });
  return order;
}

std::vector<uint32_t> TopKFromOrder(const std::vector<uint32_t>& order, size_t k) {
  std::vector<uint32_t> top(order.begin(), order.begin() + std::min(k, order.size()));
  std::sort(top.begin(), top.end());
  return top;
}

TEST_CASE("GPU top-k selects what TopKExact selects", "[codec][topk]") {
  const size_t n = GENERATE(size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{4096},
                            size_t{4097}, size_t{100003}, size_t{(1 << 22) + 5});
  // Values as the codec tests', few distinct magnitudes, or a sample that misleads: the kernel
  // first looks at every (n / 65536)-th value (every 64th for the largest n), here 1000 times
  // smaller than the rest, so its guess of where the k-th largest lies is wrong.
  enum class Values { kTest, kTies, kSampleMisled };
  const Values kind = GENERATE(Values::kTest, Values::kTies, Values::kSampleMisled);
  INFO("n=" << n << " values " << static_cast<int>(kind));
  std::vector<float> x(TestValues(n, 8));
  if (kind == Values::kTies) {
    // Few distinct magnitudes, both signs and both zeros: ties everywhere.
    const float levels[] = {0.0f, -0.0f, 0.5f, -0.5f, 1.0f, -1.0f, 2.0f, -2.0f, 1e-40f};
    std::mt19937 rng(9);
    for (float& v : x) v = levels[rng() % std::size(levels)];
  } else if (kind == Values::kSampleMisled) {
    const size_t stride = std::max<size_t>(1, n / 65536);
    for (size_t i = 0; i < n; i += stride) x[i] *= 1e-3f;
  }
  const auto order = TopKOrder(x);
  // Aligned (the float4 kernels) and off a 16-byte boundary (the scalar ones).
  const size_t offset = GENERATE(size_t{0}, size_t{1});
  INFO("float offset " << offset);
  DeviceFloats dx(n, offset);
  ToDevice(dx.get(), x);
  DeviceBytes didx((n + 8) * sizeof(uint32_t));
  for (size_t k :
       {size_t{0}, size_t{1}, size_t{10}, n / 100, n / 3, n / 2 + 1, n - 1 + (n == 0), n, n + 7}) {
    INFO("k=" << k);
    const auto want = TopKFromOrder(order, k);
    LONGHAUL_CUDA_CHECK(cudaMemset(didx.get(), 0xa5, (n + 8) * sizeof(uint32_t)));
    REQUIRE(TopKOnDevice(dx.floats(), n, k, reinterpret_cast<uint32_t*>(didx.get()), nullptr) ==
            kNone);
    auto got = FromDevice<uint32_t>(didx.get(), want.size() + 1);
    CHECK(got.back() == 0xa5a5a5a5u);  // nothing written past min(k, n)
    got.pop_back();
    CHECK(got == want);
  }
  if (n > 2000) {
    x[1999] = std::numeric_limits<float>::quiet_NaN();
    x[n - 1] = -INFINITY;
    ToDevice(dx.get(), x);
    for (size_t k : {size_t{0}, size_t{5}, n}) {
      CHECK(TopKOnDevice(dx.floats(), n, k, reinterpret_cast<uint32_t*>(didx.get()), nullptr) ==
            1999);
    }
  }
}

}  // namespace
}  // namespace longhaul::compression::cuda
