// The ring reduction of a sync slice: its schedule (every chunk summed once around the ring
// and owned by one member), exact sums in ring order, every member applying the same bits,
// error feedback keeping a lossy ring's total on track over many syncs, the bytes a member
// sends (2 (L - 1) / L of a slice), and frames of the wrong hop or size refused.
#include "fleet/sync_ring.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "fleet/sync_reduce.h"
#include "test/kernels/test_util.h"

namespace longhaul::fleet {
namespace {

using kernels::testing::Random;

struct Ring {
  std::vector<std::vector<float>> values;
  std::vector<std::unique_ptr<ContributionEncoder>> encoders;
  Ring(const std::string& codec, int members, size_t n) {
    for (int p = 0; p < members; ++p) {
      values.push_back(Random(n, 10 + static_cast<uint32_t>(p)));
      auto e = ContributionEncoder::Create(codec);
      REQUIRE(e.ok());
      encoders.push_back(std::move(*e));
    }
  }
  Status Reduce(std::span<const float> weights, uint64_t seed, std::vector<float>* out,
                uint64_t* bytes) {
    std::vector<std::span<const float>> v(values.begin(), values.end());
    std::vector<compression::FeedbackEncoder*> e;
    std::vector<uint64_t> seeds;
    for (size_t p = 0; p < encoders.size(); ++p) {
      e.push_back(encoders[p].get());
      seeds.push_back(seed * 16 + p);
    }
    out->assign(values[0].size(), 0.0f);
    return RingReduce(v, weights, e, seeds, *out, bytes);
  }
};

TEST_CASE("ring schedule: each chunk summed once around the ring, owned by one member", "[fleet]") {
  for (int L = 2; L <= 7; ++L) {
    for (int p = 0; p < L; ++p) {
      std::set<int> sent;  // reduce-scatter sends and the owned chunk: every chunk once
      for (int h = 0; h < L - 1; ++h) sent.insert(RingSendChunk(L, p, h));
      REQUIRE(sent.size() == static_cast<size_t>(L - 1));
      REQUIRE(sent.count(RingSendChunk(L, p, L - 1)) == 0);  // the owned chunk, sent first
      std::set<int> received;  // the all-gather brings every chunk but the owned one
      for (int h = L - 1; h < RingHops(L); ++h) received.insert(RingReceiveChunk(L, p, h));
      REQUIRE(received.size() == static_cast<size_t>(L - 1));
      REQUIRE(received.count(RingSendChunk(L, p, L - 1)) == 0);
      // What a member forwards in hop h + 1 is what it took in hop h.
      for (int h = 0; h + 1 < RingHops(L); ++h) {
        if (h == L - 2) continue;  // the owner's sum, then the all-gather
        REQUIRE(RingSendChunk(L, p, h + 1) == RingReceiveChunk(L, p, h));
      }
    }
  }
  // Chunks cover the slice in order, sizes differing by at most one.
  int64_t at = 0;
  for (int c = 0; c < 7; ++c) {
    const RingChunk k = RingChunkOf(1000, 7, c);
    REQUIRE(k.begin == at);
    REQUIRE((k.size() == 142 || k.size() == 143));
    at = k.end;
  }
  REQUIRE(at == 1000);
}

TEST_CASE("exact ring: the weighted sum in ring order from each chunk's first member", "[fleet]") {
  const int L = 4;
  const size_t n = 1001;
  Ring ring("exact", L, n);
  const std::vector<float> w = {0.25f, 0.5f, 0.125f, 0.125f};
  std::vector<float> out;
  uint64_t bytes = 0;
  REQUIRE(ring.Reduce(w, 1, &out, &bytes).ok());  // RingReduce checks every member equal
  for (int c = 0; c < L; ++c) {
    const RingChunk k = RingChunkOf(static_cast<int64_t>(n), L, c);
    for (int64_t j = k.begin; j < k.end; ++j) {
      float s = 0.0f;
      for (int i = 0; i < L; ++i) {
        const int p = (c + i) % L;
        s = s + w[static_cast<size_t>(p)] * ring.values[static_cast<size_t>(p)][j];
      }
      REQUIRE(out[static_cast<size_t>(j)] == s);
    }
  }
  // Each member sends 2 (L - 1) chunks of about n / L values: 1.5 slices here, the gather 3.
  const double slice = static_cast<double>(n) * 4;
  CHECK(static_cast<double>(bytes) > L * 1.5 * slice);
  CHECK(static_cast<double>(bytes) < L * 1.5 * slice + L * RingHops(L) * 256.0);
  for (const auto& e : ring.encoders) {
    REQUIRE(e->residual().size() == n);
    for (float r : e->residual()) REQUIRE(r == 0.0f);
  }
}

TEST_CASE("ring of one member, and slices with fewer values than members", "[fleet]") {
  {
    Ring ring("exact", 1, 10);
    std::vector<float> out;
    uint64_t bytes = 0;
    const std::vector<float> w = {0.5f};
    REQUIRE(ring.Reduce(w, 1, &out, &bytes).ok());
    for (size_t j = 0; j < 10; ++j) REQUIRE(out[j] == 0.5f * ring.values[0][j]);
    CHECK(bytes == 0);
  }
  Ring ring("q8", 5, 3);
  std::vector<float> out;
  uint64_t bytes = 0;
  const std::vector<float> w(5, 0.2f);
  const Status s = ring.Reduce(w, 1, &out, &bytes);
  INFO(s.ToString());
  REQUIRE(s.ok());
  for (size_t j = 0; j < 3; ++j) {
    float want = 0;
    for (int p = 0; p < 5; ++p) want += 0.2f * ring.values[static_cast<size_t>(p)][j];
    REQUIRE(std::fabs(out[j] - want) < 0.05f);
  }
}

TEST_CASE("a lossy ring with error feedback keeps the applied total on the true total", "[fleet]") {
  // The same contributions every sync: the sum applied over K syncs must stay within a
  // bounded error of K x the true sum (what the residuals hold), however lossy each hop is.
  for (const std::string codec : {"q4", "topk:0.05+q4"}) {
    const int L = 4;
    const size_t n = 4096;
    Ring ring(codec, L, n);
    const std::vector<float> w(L, 0.25f);
    std::vector<float> truth(n, 0.0f);
    for (int p = 0; p < L; ++p) {
      for (size_t j = 0; j < n; ++j) truth[j] += 0.25f * ring.values[static_cast<size_t>(p)][j];
    }
    std::vector<double> applied(n, 0.0);
    std::vector<float> out;
    uint64_t bytes = 0;
    double one_sync = 0;  // |the true sum|, one sync's worth
    for (size_t j = 0; j < n; ++j) one_sync += std::fabs(truth[j]);
    auto error = [&](int k) {
      double e = 0;
      for (size_t j = 0; j < n; ++j) e += std::fabs(applied[j] - k * static_cast<double>(truth[j]));
      return e;
    };
    double half = 0;
    const int K = 200;
    for (int k = 0; k < K; ++k) {
      REQUIRE(ring.Reduce(w, static_cast<uint64_t>(k), &out, &bytes).ok());
      for (size_t j = 0; j < n; ++j) applied[j] += out[j];
      if (k + 1 == K / 2) half = error(K / 2);
    }
    const double full = error(K);
    INFO(codec << ": error " << half << " after " << K / 2 << " syncs, " << full << " after " << K
               << "; one sync's total " << one_sync);
    // Without feedback the error would double from K / 2 to K syncs; with it, it is what the
    // residuals hold: a few syncs' worth for a sparsifier (1 / its fraction), under one for q4.
    CHECK(full < 1.5 * half + 0.01 * one_sync);
    const double kept = codec == "q4" ? 1.0 : 0.05;
    CHECK(full < 2.0 * one_sync / kept);
  }
}

TEST_CASE("ring frames of the wrong hop or size are refused", "[fleet]") {
  const size_t n = 100;
  std::vector<float> values = Random(n, 3), out(n);
  auto e = ContributionEncoder::Create("exact");
  REQUIRE(e.ok());
  RingMember m(3, 1, values, 1.0f, e->get(), 7, out);
  std::vector<uint8_t> frame, next;
  REQUIRE(m.Begin(&frame).ok());
  // Hop 1 before hop 0.
  Status s = m.Take(1, frame, &next);
  REQUIRE(!s.ok());
  CHECK(s.ToString().find("waits for hop 0") != std::string::npos);
  // A whole slice where a chunk of 33 values belongs.
  auto other = ContributionEncoder::Create("exact");
  std::vector<uint8_t> whole;
  REQUIRE((*other)->Encode(values, 1, &whole).ok());
  s = m.Take(0, whole, &next);
  REQUIRE(!s.ok());
  INFO(s.ToString());
  CHECK(s.ToString().find("ring hop 0 of 4 (member 1 of 3)") != std::string::npos);
  CHECK(s.ToString().find("33") != std::string::npos);
  // Garbage.
  std::vector<uint8_t> junk(40, 0xAB);
  RingMember m2(3, 1, values, 1.0f, e->get(), 7, out);
  REQUIRE(m2.Begin(&frame).ok());
  CHECK(!m2.Take(0, junk, &next).ok());
}

}  // namespace
}  // namespace longhaul::fleet
