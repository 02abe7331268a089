// Property tests of every codec pipeline: round trips for sizes 0, 1, odd and large on every
// input class, each reconstructed value within the bound docs/compression.md states, the
// NaN/Inf policy (rejected with an error naming the index), top-k's selection rule, zstd's
// losslessness and the unbiasedness of stochastic rounding.
#include "compression/codec.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <limits>

#include "compression/topk.h"
#include "test/compression/test_util.h"

namespace longhaul::compression {
namespace {

using testing::AllInputKinds;
using testing::DenseBounds;
using testing::InputKind;
using testing::KindName;
using testing::MakeInput;

const std::vector<std::string> kSpecs = {
    "fp32",
    "fp16",
    "bf16",
    "q8",
    "q8:asym",
    "q8:sr",
    "q4",
    "q4:block=32,asym",
    "q4:asym,sr",
    "q2",
    "q2:block=16,asym",
    "q2:block=128,sr",
    "q8:block=8",
    "fp32+zstd",
    "q8+zstd:level=1",
    "topk:0.01+fp32",
    "topk:0.1+q8",
    "topk:0.01+q4:asym",
    "topk:0.3,approx+bf16",
    "topk:0.05+fp16",
    "topk:0.01,approx+q8+zstd",
    "topk:1+q2:asym+zstd",
};

const std::vector<size_t> kSizes = {0, 1, 2, 7, 31, 33, 64, 1000, 4099, 100003};

std::unique_ptr<Codec> Make(std::string_view spec) {
  auto codec = MakeCodec(spec);
  INFO(spec << ": " << codec.status().ToString());
  REQUIRE(codec.ok());
  return std::move(codec).value();
}

// The indices top-k keeps for this spec (the same deterministic selection the codec runs).
std::vector<uint32_t> Kept(const CodecSpec& spec, std::span<const float> x) {
  std::vector<uint32_t> kept;
  const uint64_t k = TopKCount(spec.topk, x.size());
  REQUIRE((spec.topk.approximate ? TopKApprox(x, k, &kept) : TopKExact(x, k, &kept)).ok());
  return kept;
}

// Checks every element of `y` against the codec's bound for input `x`.
void CheckBounds(const CodecSpec& spec, std::span<const float> x, std::span<const float> y) {
  REQUIRE(x.size() == y.size());
  for (float v : y) REQUIRE(std::isfinite(v));
  if (!spec.topk.enabled) {
    const auto bounds = DenseBounds(spec.value, x);
    for (size_t i = 0; i < x.size(); ++i) {
      INFO("i=" << i << " x=" << x[i] << " y=" << y[i] << " bound=" << bounds[i]);
      REQUIRE(std::fabs(static_cast<double>(y[i]) - x[i]) <= bounds[i]);
    }
    return;
  }
  const auto kept = Kept(spec, x);
  std::vector<float> kept_values;
  for (uint32_t i : kept) kept_values.push_back(x[i]);
  const auto bounds = DenseBounds(spec.value, kept_values);
  std::vector<bool> is_kept(x.size());
  double min_kept = std::numeric_limits<double>::infinity();
  for (size_t j = 0; j < kept.size(); ++j) {
    const uint32_t i = kept[j];
    is_kept[i] = true;
    min_kept = std::min(min_kept, std::fabs(static_cast<double>(x[i])));
    INFO("kept i=" << i << " x=" << x[i] << " y=" << y[i] << " bound=" << bounds[j]);
    REQUIRE(std::fabs(static_cast<double>(y[i]) - x[i]) <= bounds[j]);
  }
  for (size_t i = 0; i < x.size(); ++i) {
    if (is_kept[i]) continue;
    INFO("dropped i=" << i << " x=" << x[i]);
    REQUIRE(y[i] == 0.0f);
    REQUIRE(std::fabs(static_cast<double>(x[i])) <= min_kept);
  }
}

TEST_CASE("every codec round trips every size and input class within its bound") {
  for (const std::string& text : kSpecs) {
    auto codec = Make(text);
    const CodecSpec& spec = codec->spec();
    for (size_t n : kSizes) {
      for (InputKind kind : AllInputKinds()) {
        INFO(text << " n=" << n << " kind=" << KindName(kind));
        const auto x = MakeInput(kind, n, n * 7 + static_cast<int>(kind));
        std::vector<uint8_t> encoded = {0xde, 0xad};  // Encode appends
        Status status = codec->Encode(x, EncodeOptions{n}, &encoded);
        bool out_of_fp16_range = false;
        for (float v : x) out_of_fp16_range |= std::fabs(v) >= 65520.0f;
        if (spec.value.format == ValueFormat::kFp16 && out_of_fp16_range) {
          REQUIRE(status.code() == absl::StatusCode::kOutOfRange);
          CHECK(encoded.size() == 2);
          continue;
        }
        REQUIRE(status.ok());
        REQUIRE(encoded.size() >= 2);
        const std::span<const uint8_t> payload = std::span(encoded).subspan(2);
        REQUIRE(payload.size() <= codec->MaxEncodedSize(n));
        std::vector<float> y(n, 123.0f);
        REQUIRE(codec->Decode(payload, y).ok());
        CheckBounds(spec, x, y);
        if (spec.lossless() && n > 0) REQUIRE(std::memcmp(x.data(), y.data(), 4 * n) == 0);
      }
    }
  }
}

TEST_CASE("NaN and infinity are rejected with the index of the first one") {
  for (const std::string& text : kSpecs) {
    auto codec = Make(text);
    for (size_t n : {size_t{1}, size_t{40}, size_t{100003}}) {
      for (float bad :
           {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
            -std::numeric_limits<float>::infinity()}) {
        INFO(text << " n=" << n << " bad=" << bad);
        auto x = MakeInput(InputKind::kGaussian, n, 3);
        const size_t at = n / 2;
        x[at] = bad;
        if (n > 2) x[n - 1] = bad;
        std::vector<uint8_t> encoded;
        Status status = codec->Encode(x, {}, &encoded);
        REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
        CHECK(std::string(status.message()).find("index " + std::to_string(at)) !=
              std::string::npos);
        CHECK(encoded.empty());
      }
    }
  }
}

TEST_CASE("decoding rejects a payload of the wrong size") {
  for (const std::string& text : kSpecs) {
    auto codec = Make(text);
    const auto x = MakeInput(InputKind::kGaussian, 1000, 1);
    std::vector<uint8_t> encoded;
    REQUIRE(codec->Encode(x, {}, &encoded).ok());
    std::vector<float> y(1000);
    INFO(text);
    auto shorter = std::span<const uint8_t>(encoded).first(encoded.size() - 1);
    CHECK_FALSE(codec->Decode(shorter, y).ok());
    auto longer = encoded;
    longer.push_back(0);
    CHECK_FALSE(codec->Decode(longer, y).ok());
    std::vector<float> wrong_count(500);
    CHECK_FALSE(codec->Decode(encoded, wrong_count).ok());
  }
}

TEST_CASE("zstd is lossless over any inner codec") {
  const auto x = MakeInput(InputKind::kSkewed, 50000, 11);
  for (std::string_view inner : {"fp32", "bf16", "q4:asym", "topk:0.05+q8"}) {
    auto plain = Make(inner);
    auto zstd = Make(std::string(inner) + "+zstd");
    std::vector<uint8_t> a, b;
    REQUIRE(plain->Encode(x, {}, &a).ok());
    REQUIRE(zstd->Encode(x, {}, &b).ok());
    std::vector<float> ya(x.size()), yb(x.size());
    REQUIRE(plain->Decode(a, ya).ok());
    REQUIRE(zstd->Decode(b, yb).ok());
    CHECK(std::memcmp(ya.data(), yb.data(), 4 * x.size()) == 0);
  }
}

TEST_CASE("stochastic rounding is unbiased; nearest rounding is not") {
  // Values a third of a step above a level: nearest rounding always errs by -1/3 step.
  const size_t n = 4096;
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = (i % 64 == 0) ? 1.0f : 0.0f + (1.0f / 3.0f);
  for (std::string_view text : {"q2", "q2:sr"}) {
    auto codec = Make(text);
    std::vector<double> sum(n);
    const int trials = 400;
    for (int t = 0; t < trials; ++t) {
      std::vector<uint8_t> enc;
      REQUIRE(codec->Encode(x, EncodeOptions{static_cast<uint64_t>(t)}, &enc).ok());
      std::vector<float> y(n);
      REQUIRE(codec->Decode(enc, y).ok());
      for (size_t i = 0; i < n; ++i) sum[i] += y[i];
    }
    double bias = 0;
    for (size_t i = 0; i < n; ++i) bias += sum[i] / trials - x[i];
    bias /= n;
    INFO(text << " mean bias " << bias);
    if (codec->spec().value.stochastic) {
      CHECK(std::fabs(bias) < 0.01);
    } else {
      CHECK(std::fabs(bias) > 0.3);
    }
  }
}

TEST_CASE("encoded sizes match the formulas the controller relies on") {
  const size_t n = 1 << 16;
  const auto x = MakeInput(InputKind::kGaussian, n, 2);
  for (std::string_view text :
       {"fp32", "bf16", "q8", "q4", "q2:asym", "topk:0.1+q8", "topk:0.01+q4"}) {
    auto codec = Make(text);
    std::vector<uint8_t> enc;
    REQUIRE(codec->Encode(x, {}, &enc).ok());
    const double estimate = static_cast<double>(EstimateEncodedSize(codec->spec(), n));
    INFO(text << " actual " << enc.size() << " estimate " << estimate);
    CHECK(std::fabs(enc.size() - estimate) <= 0.05 * estimate);
  }
  CHECK(EstimateEncodedSize(Make("q8")->spec(), 64) == 64 + 4);
  CHECK(EstimateEncodedSize(Make("q4:asym")->spec(), 64) == 32 + 8);
}

TEST_CASE("MakeCodec reports bad specs") {
  auto codec = MakeCodec("q3");
  REQUIRE_FALSE(codec.ok());
  CHECK(std::string(codec.status().message()).find("q3") != std::string::npos);
  CodecSpec bad;
  bad.value.block = 7;
  CHECK_FALSE(MakeCodec(bad).ok());
}

}  // namespace
}  // namespace longhaul::compression
