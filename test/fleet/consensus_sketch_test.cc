// Consensus distance from sketches (fleet/consensus_sketch.h): the sketch is linear and names
// a coordinate by its slice and index, so replicas cut into stages differently sketch alike;
// equal replicas read 0; the estimate is close to the exact distance (fleet/gossip.h).
#include "fleet/consensus_sketch.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "fleet/gossip.h"

namespace longhaul::fleet {
namespace {

std::vector<double> Sketch(uint32_t slice, const std::vector<float>& v) {
  std::vector<double> s(kConsensusSketchSize, 0.0);
  AddToSketch(slice, v, s);
  return s;
}

TEST_CASE("consensus sketch: linear, named by slice and index, 0 for equal replicas") {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(1000), y(1000), sum(1000);
  for (size_t j = 0; j < x.size(); ++j) {
    x[j] = normal(rng);
    y[j] = normal(rng);
    sum[j] = x[j] + y[j];
  }
  const std::vector<double> sx = Sketch(7, x), sy = Sketch(7, y), ss = Sketch(7, sum);
  for (int b = 0; b < kConsensusSketchSize; ++b) {
    CHECK(ss[static_cast<size_t>(b)] ==
          Approx(sx[static_cast<size_t>(b)] + sy[static_cast<size_t>(b)]).margin(1e-4));
  }
  // Split in two pieces of the same slice? No: pieces are whole slices; two slices sketched
  // into one sketch are their sum, and another slice's name sketches elsewhere.
  std::vector<double> both = Sketch(7, x);
  AddToSketch(8, y, both);
  const std::vector<double> s8 = Sketch(8, y);
  for (int b = 0; b < kConsensusSketchSize; ++b) {
    CHECK(both[static_cast<size_t>(b)] ==
          Approx(sx[static_cast<size_t>(b)] + s8[static_cast<size_t>(b)]).margin(1e-4));
  }
  CHECK(Sketch(8, x) != sx);
  CHECK(SketchConsensusDistance({sx, sx, sx}) == 0.0);
  CHECK(SketchConsensusDistance({sx}) == 0.0);
}

TEST_CASE("consensus sketch: the estimate is close to the exact distance") {
  // Four replicas of 20000 parameters in 5 slices: a common part and each replica's own
  // spread, of a size that differs by replica.
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n = 20000, slices = 5;
  std::vector<float> common(n);
  for (float& v : common) v = normal(rng);
  for (const float spread : {1.0f, 0.01f}) {
    std::vector<std::vector<double>> exact, sketches;
    for (int r = 0; r < 4; ++r) {
      std::vector<float> x(n);
      for (size_t j = 0; j < n; ++j) x[j] = common[j] + spread * (1.0f + r) * normal(rng);
      exact.emplace_back(x.begin(), x.end());
      std::vector<double> s(kConsensusSketchSize, 0.0);
      const size_t per = n / slices;
      for (size_t k = 0; k < slices; ++k) {
        AddToSketch(static_cast<uint32_t>(k), std::span<const float>(x).subspan(k * per, per), s);
      }
      sketches.push_back(std::move(s));
    }
    const double want = ConsensusDistance(exact), got = SketchConsensusDistance(sketches);
    INFO("spread " << spread << ": exact " << want << ", sketched " << got);
    CHECK(got == Approx(want).epsilon(0.2));
  }
}

}  // namespace
}  // namespace longhaul::fleet
