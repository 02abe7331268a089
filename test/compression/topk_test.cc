// Top-k selection: the sampled exact selection equals the sorting reference (ties included),
// the approximate one stays within its tolerance and keeps the largest magnitudes, and both
// reject NaN/Inf wherever they are, on small and large (sampled-path) tensors.
#include "compression/topk.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "test/compression/test_util.h"

namespace longhaul::compression {
namespace {

using testing::InputKind;
using testing::MakeInput;

std::vector<float> WithTies(size_t n, uint64_t seed) {
  auto x = MakeInput(InputKind::kGaussian, n, seed);
  for (float& v : x) v = std::round(v * 4) / 4;  // few distinct magnitudes
  return x;
}

TEST_CASE("exact top-k equals the reference") {
  for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}, size_t{32768}, size_t{32769},
                   size_t{100003}, size_t{1} << 20}) {
    for (int input = 0; input < 4; ++input) {
      std::vector<float> x = input == 0   ? MakeInput(InputKind::kGaussian, n, n)
                             : input == 1 ? WithTies(n, n)
                             : input == 2 ? MakeInput(InputKind::kConstant, n, 0)
                                          : MakeInput(InputKind::kMixed, n, n);
      for (double fraction : {0.0, 0.001, 0.01, 0.1, 0.5, 1.0}) {
        const uint64_t k = static_cast<uint64_t>(fraction * n) + (fraction > 0 ? 1 : 0);
        INFO("n=" << n << " input=" << input << " k=" << k);
        std::vector<uint32_t> a, b;
        REQUIRE(TopKExact(x, k, &a).ok());
        REQUIRE(TopKExactReference(x, k, &b).ok());
        REQUIRE(a.size() == std::min<uint64_t>(k, n));
        REQUIRE(a == b);
      }
    }
  }
}

TEST_CASE("approximate top-k stays within tolerance and keeps the largest values") {
  for (size_t n : {size_t{1000}, size_t{100003}, size_t{1} << 20}) {
    for (int input = 0; input < 3; ++input) {
      std::vector<float> x = input == 0   ? MakeInput(InputKind::kGaussian, n, n + 1)
                             : input == 1 ? WithTies(n, n + 1)
                                          : MakeInput(InputKind::kSkewed, n, n + 1);
      for (double fraction : {0.001, 0.01, 0.1, 0.5}) {
        const uint64_t k = static_cast<uint64_t>(fraction * n);
        for (double tolerance : {0.0, 0.02, 0.1, 0.3}) {
          INFO("n=" << n << " input=" << input << " k=" << k << " tol=" << tolerance);
          std::vector<uint32_t> idx;
          REQUIRE(TopKApprox(x, k, &idx, tolerance).ok());
          REQUIRE(idx.size() >= std::ceil((1 - tolerance) * k));
          REQUIRE(idx.size() <= std::max<double>(k, std::floor((1 + tolerance) * k)));
          REQUIRE(std::is_sorted(idx.begin(), idx.end()));
          REQUIRE(std::adjacent_find(idx.begin(), idx.end()) == idx.end());
          std::vector<bool> kept(n);
          float min_kept = std::numeric_limits<float>::infinity();
          for (uint32_t i : idx) {
            kept[i] = true;
            min_kept = std::min(min_kept, std::fabs(x[i]));
          }
          for (size_t i = 0; i < n; ++i) {
            if (!kept[i]) REQUIRE(std::fabs(x[i]) <= min_kept);
          }
        }
      }
    }
  }
}

TEST_CASE("top-k rejects NaN and infinity and names the first one") {
  for (size_t n : {size_t{10}, size_t{100003}}) {
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
      for (size_t at : {size_t{0}, n / 3, n - 1}) {
        auto x = MakeInput(InputKind::kGaussian, n, 4);
        x[at] = bad;
        if (at + 1 < n) x[n - 1] = bad;
        for (int variant = 0; variant < 3; ++variant) {
          std::vector<uint32_t> idx;
          Status s = variant == 0   ? TopKExact(x, n / 100 + 1, &idx)
                     : variant == 1 ? TopKApprox(x, n / 100 + 1, &idx)
                                    : TopKExactReference(x, 1, &idx);
          INFO("n=" << n << " at=" << at << " variant=" << variant);
          REQUIRE_FALSE(s.ok());
          CHECK(std::string(s.message()).find("index " + std::to_string(at) + " ") !=
                std::string::npos);
        }
      }
    }
  }
  // Many NaNs: likely in the sample itself.
  std::vector<float> x(200000, std::numeric_limits<float>::quiet_NaN());
  x[0] = 1;
  std::vector<uint32_t> idx;
  CHECK_FALSE(TopKExact(x, 100, &idx).ok());
  CHECK_FALSE(TopKApprox(x, 100, &idx).ok());
}

}  // namespace
}  // namespace longhaul::compression
