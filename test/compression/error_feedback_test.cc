// Error feedback: the residual holds exactly what was not sent, the sum of what was sent
// tracks the sum of the true tensors up to one residual, and top-k with error feedback
// eventually sends every coordinate of a repeated gradient.
#include "compression/error_feedback.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "compression/frame.h"
#include "test/compression/test_util.h"

namespace longhaul::compression {
namespace {

using testing::InputKind;
using testing::MakeInput;

TEST_CASE("sent + residual accounts for every value ever given") {
  for (std::string_view spec : {"topk:0.01+q8", "q2", "topk:0.1,approx+q4:asym+zstd"}) {
    auto codec = MakeCodec(spec);
    REQUIRE(codec.ok());
    ErrorFeedback ef(codec->get());
    const size_t n = 5000;
    std::vector<double> given(n), sent(n);
    for (int step = 0; step < 50; ++step) {
      const auto g = MakeInput(InputKind::kGaussian, n, step);
      std::vector<uint8_t> frame;
      REQUIRE(
          ef.EncodeFrame(g, std::vector<int64_t>{50, 100}, EncodeOptions{uint64_t(step)}, &frame)
              .ok());
      auto decoded = DecodeFrame(frame);
      REQUIRE(decoded.ok());
      for (size_t i = 0; i < n; ++i) {
        given[i] += g[i];
        sent[i] += decoded->values[i];
      }
    }
    double max_gap = 0;
    for (size_t i = 0; i < n; ++i) {
      // NaN sticks (std::max(max_gap, NaN) would be max_gap): a NaN fails the check below.
      const double d = std::fabs(given[i] - sent[i] - ef.residual()[i]);
      max_gap = std::isnan(d) ? d : std::max(max_gap, d);
    }
    INFO(spec << " max |given - sent - residual| = " << max_gap);
    CHECK(max_gap < 1e-3);
  }
}

TEST_CASE("top-k with error feedback sends every coordinate of a repeated gradient") {
  auto codec = MakeCodec("topk:0.05+fp32");
  REQUIRE(codec.ok());
  ErrorFeedback ef(codec->get());
  const size_t n = 2000;
  auto g = MakeInput(InputKind::kGaussian, n, 9);
  for (float& v : g) v = 0.1f + std::fabs(v);  // every coordinate matters
  std::vector<double> sent(n);
  const int steps = 1000;
  for (int step = 0; step < steps; ++step) {
    std::vector<uint8_t> frame;
    REQUIRE(ef.EncodeFrame(g, std::vector<int64_t>{static_cast<int64_t>(n)}, {}, &frame).ok());
    auto decoded = DecodeFrame(frame);
    REQUIRE(decoded.ok());
    for (size_t i = 0; i < n; ++i) sent[i] += decoded->values[i];
  }
  // Without feedback the same 100 coordinates would be sent every step; with it, every
  // coordinate's average converges to its true value.
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(sent[i] / steps - g[i]) / g[i];
    worst = std::isnan(d) ? d : std::max(worst, d);  // NaN sticks: it fails the check
  }
  INFO("worst relative error of the average " << worst);
  CHECK(worst < 0.35);
}

TEST_CASE("the residual restarts when the tensor size changes and survives errors") {
  auto codec = MakeCodec("topk:0.1+fp32");
  REQUIRE(codec.ok());
  ErrorFeedback ef(codec->get());
  std::vector<float> a(100, 1.0f);
  std::vector<uint8_t> frame;
  REQUIRE(ef.EncodeFrame(a, std::vector<int64_t>{100}, {}, &frame).ok());
  CHECK(ef.residual().size() == 100);
  auto before = ef.residual();
  a[3] = NAN;
  CHECK_FALSE(ef.EncodeFrame(a, std::vector<int64_t>{100}, {}, &frame).ok());
  CHECK(ef.residual() == before);
  std::vector<float> b(10, 1.0f);
  REQUIRE(ef.EncodeFrame(b, std::vector<int64_t>{10}, {}, &frame).ok());
  CHECK(ef.residual().size() == 10);
  ef.Reset();
  CHECK(ef.residual().empty());
}

}  // namespace
}  // namespace longhaul::compression
