// The compressed tied-embedding exchange's codec (model/tied_exchange.h): "exact" needs none,
// a bad spec is refused by name, and a lossy codec hands back what its frame carries while
// the residual keeps the rest, so over two sends nothing is lost.
#include "model/tied_exchange.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "compression/frame.h"

namespace longhaul::model {
namespace {

std::vector<float> Gradient(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1e-3f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST_CASE("tied codec: exact needs no codec, a bad spec is refused") {
  for (const char* exact : {"exact", ""}) {
    auto c = TiedGradCodec::Create(exact);
    REQUIRE(c.ok());
    CHECK(*c == nullptr);
  }
  auto bad = TiedGradCodec::Create("q3");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("tied-embedding codec"));
}

TEST_CASE("tied codec: the part becomes what the frame carries, the residual the rest") {
  auto c = TiedGradCodec::Create("q2");
  REQUIRE(c.ok());
  REQUIRE(*c != nullptr);
  const int64_t shape[2] = {64, 48};
  const size_t n = 64 * 48;
  const std::vector<float> g = Gradient(n, 1);
  std::vector<float> part = g;
  std::vector<uint8_t> frame;
  REQUIRE((*c)->EncodeInPlace(part, shape, 1, &frame).ok());
  // The part is the frame's decoded values, exactly.
  auto decoded = compression::DecodeFrame(frame);
  REQUIRE(decoded.ok());
  CHECK(decoded->values == part);
  CHECK(decoded->header.shape == std::vector<int64_t>{64, 48});
  CHECK(frame.size() * 8 < n * sizeof(float));  // q2: well under an eighth of fp32
  // part + residual == the gradient (to float rounding): nothing dropped for good.
  REQUIRE((*c)->residual().size() == n);
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    // NaN sticks (std::max(worst, NaN) would be worst): a NaN fails the check below.
    const double d = double(std::fabs(part[i] + (*c)->residual()[i] - g[i]));
    worst = std::isnan(d) ? d : std::max(worst, d);
  }
  CHECK(worst < 1e-9);
  // The next send carries the residual: a zero gradient still sends what was held back.
  std::vector<float> next(n, 0.0f);
  REQUIRE((*c)->EncodeInPlace(next, shape, 2, &frame).ok());
  double sent = 0;
  for (float x : next) sent += std::fabs(x);
  CHECK(sent > 0);
  // A restored residual must fit the part.
  CHECK((*c)->RestoreResidual(std::vector<float>(3), n).code() == absl::StatusCode::kDataLoss);
  CHECK((*c)->RestoreResidual({}, n).ok());
}

}  // namespace
}  // namespace longhaul::model
