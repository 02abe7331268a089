// The grad-sums frame (daemon/job/exchange/grad_sums_frame.h): the sums come back bit for bit,
// and a frame that is short, long, not one, of another version or slice count, corrupt, or
// carries a negative sum is refused, saying which; a diverged gradient's NaN or +inf passes.
#include "daemon/job/exchange/grad_sums_frame.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace longhaul::daemon {
namespace {

bool Says(const Status& s, const std::string& what) {
  return std::string(s.message()).find(what) != std::string::npos;
}

TEST_CASE("grad-sums frame: round trip, bit for bit") {
  const std::vector<double> sums = {0.0, 1.0 / 3.0, 12345.678901234567, 5e-310, 0.0, 7.0};
  const std::vector<uint8_t> f = EncodeGradSums(sums);
  CHECK(f.size() == GradSumsFrameBytes(sums.size()));
  auto back = DecodeGradSums(f, sums.size());
  REQUIRE(back.ok());
  CHECK(std::memcmp(back->data(), sums.data(), sums.size() * sizeof(double)) == 0);
  CHECK(DecodeGradSums(EncodeGradSums({}), 0).ok());
}

TEST_CASE("grad-sums frame: hostile frames are refused, naming what is wrong") {
  const std::vector<double> sums = {1.0, 2.0, 3.0};
  const std::vector<uint8_t> good = EncodeGradSums(sums);
  auto refused = [](std::vector<uint8_t> f, size_t slices, const std::string& what) {
    const auto r = DecodeGradSums(f, slices);
    INFO(r.status().ToString());
    REQUIRE(!r.ok());
    CHECK(Says(r.status(), what));
  };
  refused({}, 3, "shorter than its header");
  refused(std::vector<uint8_t>(good.begin(), good.begin() + 19), 3, "shorter than its header");
  std::vector<uint8_t> f = good;
  f[0] = 'X';
  refused(f, 3, "bad magic");
  f = good;
  f[4] = 2;
  refused(f, 3, "version 2");
  refused(good, 4, "3 sums, the model has 4 slices");
  f = good;
  f.push_back(0);  // a byte past the checksum
  refused(f, 3, "take 44 bytes");
  f = good;
  f[5 * 4] ^= 0x40;  // a flipped bit in a sum
  const auto corrupt = DecodeGradSums(f, 3);
  CHECK(absl::IsDataLoss(corrupt.status()));
  // A count of 2^32 - 1 with a small frame: refused on the count, nothing allocated.
  f = good;
  for (int i = 8; i < 12; ++i) f[static_cast<size_t>(i)] = 0xff;
  refused(f, 3, "4294967295 sums");
  for (double bad : {-1.0, -std::numeric_limits<double>::infinity(), -0.5e-300}) {
    refused(EncodeGradSums(std::vector<double>{1.0, bad, 3.0}), 3, "sum 1 is");
  }
  // A diverged gradient's sums come through, to clip as the coordinator's decision would.
  for (double diverged :
       {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    auto got = DecodeGradSums(EncodeGradSums(std::vector<double>{1.0, diverged, 3.0}), 3);
    REQUIRE(got.ok());
    CHECK(std::isnan((*got)[1]) == std::isnan(diverged));
  }
}

}  // namespace
}  // namespace longhaul::daemon
