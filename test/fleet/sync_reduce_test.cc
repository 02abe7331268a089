// Contributions summed over a sync group: exact sums bit for bit in member order, error
// feedback carrying what lossy codecs drop into the next send (so the sent total tracks the
// true total), checkpointed residuals, and hostile frames refused with the member named.
#include "fleet/sync_reduce.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "compression/frame.h"

namespace longhaul::fleet {
namespace {

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<uint8_t> Encode(ContributionEncoder& e, const std::vector<float>& v, uint64_t seed) {
  std::vector<uint8_t> frame;
  REQUIRE(e.Encode(v, seed, &frame).ok());
  return frame;
}

TEST_CASE("exact contributions sum bit for bit in member order", "[fleet]") {
  const size_t n = 1001;
  const std::vector<float> a = Random(n, 1), b = Random(n, 2), c = Random(n, 3);
  auto ea = ContributionEncoder::Create("exact");
  auto eb = ContributionEncoder::Create("exact");
  auto ec = ContributionEncoder::Create("exact");
  REQUIRE(ea.ok());
  const auto fa = Encode(**ea, a, 0), fb = Encode(**eb, b, 0), fc = Encode(**ec, c, 0);
  std::vector<float> sum(n), again(n);
  const std::vector<float> w = {1.0f, 1.0f, 1.0f};
  REQUIRE(SumContributions({fa, fb, fc}, w, sum).ok());
  for (size_t i = 0; i < n; ++i) REQUIRE(sum[i] == (a[i] + b[i]) + c[i]);
  // Any member summing the same frames gets the same bits.
  REQUIRE(SumContributions({fa, fb, fc}, w, again).ok());
  CHECK(again == sum);
  const std::vector<float> half = {0.5f, 0.5f, 0.5f};
  REQUIRE(SumContributions({fa, fb, fc}, half, sum).ok());
  for (size_t i = 0; i < n; ++i) REQUIRE(sum[i] == (0.5f * a[i] + 0.5f * b[i]) + 0.5f * c[i]);
  for (float r : (*ea)->residual()) REQUIRE(r == 0.0f);
}

// Sends `steps` contributions of a fixed tensor and returns max |sent total - true total|
// relative to the true total's scale, and the largest residual.
void Track(const std::string& codec, int steps, double* error, double* residual) {
  const size_t n = 4096;
  const std::vector<float> v = Random(n, 7);
  auto e = ContributionEncoder::Create(codec);
  REQUIRE(e.ok());
  std::vector<double> sent(n, 0.0);
  std::vector<float> decoded(n);
  for (int s = 0; s < steps; ++s) {
    const auto frame = Encode(**e, v, uint64_t(s));
    REQUIRE(SumContributions({frame}, std::vector<float>{1.0f}, decoded).ok());
    for (size_t i = 0; i < n; ++i) sent[i] += decoded[i];
  }
  *error = 0;
  *residual = 0;
  // NaN sticks (std::max(worst, NaN) would be worst): a NaN fails the callers' checks.
  auto worse = [](double worst, double d) { return std::isnan(d) ? d : std::max(worst, d); };
  for (size_t i = 0; i < n; ++i) {
    *error = worse(*error, std::fabs(sent[i] - double(v[i]) * steps) / steps);
    *residual = worse(*residual, double(std::fabs((*e)->residual()[i])));
  }
}

TEST_CASE("error feedback carries what a lossy codec drops into the next send", "[fleet]") {
  double error = 0, residual = 0;
  // q4: one send is off by up to half a quantization step; over 50 sends the total is off by
  // at most the one residual still carried, so the mean error shrinks 50-fold.
  Track("q4", 1, &error, &residual);
  const double one_send = error;
  CHECK(one_send > 0.01);
  Track("q4", 50, &error, &residual);
  CHECK(residual > 0);
  CHECK(error <= residual / 50 + 1e-5);
  CHECK(error < one_send / 10);
  // top-k 1%: one send carries 41 of 4096 values; with feedback every value gets through,
  // late: a value waits in the residual until it is among the largest, so the total sent is
  // off by at most that one residual however many sends there were.
  Track("topk:0.01+q8", 1, &error, &residual);
  const double first = error;
  CHECK(first > 1.0);  // what was not sent is missing entirely
  Track("topk:0.01+q8", 400, &error, &residual);
  CHECK(error <= residual / 400 + 1e-3);
  CHECK(error < first / 4);
}

TEST_CASE("a restored residual continues the sends exactly", "[fleet]") {
  const size_t n = 777;
  auto a = ContributionEncoder::Create("q4");
  REQUIRE(a.ok());
  Encode(**a, Random(n, 1), 1);
  auto b = ContributionEncoder::Create("q4");
  REQUIRE(b.ok());
  REQUIRE((*b)->RestoreResidual((*a)->residual(), n).ok());
  const std::vector<float> next = Random(n, 2);
  CHECK(Encode(**a, next, 2) == Encode(**b, next, 2));
  CHECK(!(*b)->RestoreResidual(std::vector<float>(5), n).ok());
  CHECK((*b)->RestoreResidual({}, n).ok());  // none carried
  CHECK(!ContributionEncoder::Create("adaptive").ok());
  CHECK(!ContributionEncoder::Create("q3").ok());
}

TEST_CASE("pseudo-gradients weigh by the tokens their replicas trained", "[fleet]") {
  CHECK(TokenWeights({3, 1}) == std::vector<float>{0.75f, 0.25f});
  CHECK(TokenWeights({3, 1, 4}, {true, false, true}) == std::vector<float>{3.0f / 7, 0, 4.0f / 7});
  // Equal counts: exactly 1 / N, as the weights of equal replicas always were.
  for (int n = 1; n <= 7; ++n) {
    for (float w : TokenWeights(std::vector<int>(static_cast<size_t>(n), 6))) {
      CHECK(w == 1.0f / static_cast<float>(n));
    }
  }
  CHECK(TokenWeights({2, 2}, {false, false}) == std::vector<float>{0, 0});
}

TEST_CASE("hostile contributions are refused and name the member", "[fleet]") {
  const size_t n = 100;
  auto e = ContributionEncoder::Create("q8");
  REQUIRE(e.ok());
  const auto good = Encode(**e, Random(n, 1), 0);
  const auto small = Encode(**e, Random(n - 1, 1), 0);
  std::vector<float> out(n);
  const std::vector<float> w2 = {1.0f, 1.0f};
  Status s = SumContributions({good, small}, w2, out);
  CHECK(!s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("member 1") && Catch::Contains("99"));
  std::vector<uint8_t> flipped = good;
  flipped.back() ^= 0x10;
  s = SumContributions({flipped, good}, w2, out);
  CHECK(!s.ok());
  CHECK_THAT(std::string(s.message()), Catch::Contains("member 0"));
  const std::vector<uint8_t> empty;
  CHECK(!SumContributions({good, empty}, w2, out).ok());
  CHECK(!SumContributions({good}, w2, out).ok());  // one frame, two weights
  // A frame announcing far more values than the tensor is refused before any allocation.
  const auto big = Encode(**e, Random(4 * n, 1), 0);
  CHECK(!SumContributions({big}, std::vector<float>{1.0f}, out).ok());
}

}  // namespace
}  // namespace longhaul::fleet
