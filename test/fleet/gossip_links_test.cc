// Push-sum over compressed links (fleet/gossip_links.h): a round moves mass per coordinate and
// never makes or loses it, whatever the codec rounds away (q4, q8, bf16; q2 is refused); changing
// graphs bring the replicas to the average they started from, closer than one frame's rounding,
// because each link's copy carries its error into the next frame; tracking keeps the corrections'
// sum at zero and meets at the minimizer of the sum; the final average is the push-sum average; the
// bytes are the frames'; codecs that are not dense and lossy are refused.
#include "fleet/gossip_links.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/splitmix64.h"
#include "compression/codec.h"
#include "test/fleet/gossip_test_util.h"

namespace longhaul::fleet {
namespace {

constexpr int kN = 5;
constexpr size_t kP = 200;

std::vector<SyncSlice> Slices() { return {{0, 0, 72}, {1, 72, 128}}; }

std::vector<std::vector<float>> Start(uint64_t seed) { return testing::UniformStart(kN, kP, seed); }

std::vector<std::vector<double>> AllLinks() { return testing::AllLinks(kN); }

// Per coordinate: the sum over replicas of w x (the push-sum value), and of w.
std::pair<std::vector<double>, std::vector<double>> Mass(const LinkGossipMixer& m,
                                                         const std::vector<std::vector<float>>& x) {
  std::vector<double> v(kP, 0.0), w(kP, 0.0);
  for (int r = 0; r < kN; ++r) {
    for (size_t k = 0; k < Slices().size(); ++k) {
      const SyncSlice s = Slices()[k];
      for (size_t c = s.offset; c < static_cast<size_t>(s.offset + s.size); ++c) {
        v[c] += m.weight(r, k) * x[static_cast<size_t>(r)][c];
        w[c] += m.weight(r, k);
      }
    }
  }
  return {v, w};
}

std::unique_ptr<LinkGossipMixer> Mixer(const std::string& codec, bool tracking = false) {
  auto m = LinkGossipMixer::Create(kN, kP, Slices(), codec, tracking);
  REQUIRE(m.ok());
  return std::move(*m);
}

using testing::Distance;
using testing::Mean;

}  // namespace

TEST_CASE("a round over compressed links moves mass and never makes or loses it") {
  for (const std::string codec : {"q4", "q8", "bf16"}) {
    INFO(codec);
    auto x = Start(1);
    auto m = Mixer(codec);
    m->Reset(std::vector<float>(kP, 0.0f));
    for (int round = 0; round < 20; ++round) {
      const auto [v0, w0] = Mass(*m, x);
      REQUIRE(
          m->Round(ChooseGossipGraph(AllLinks(), 1 + round % 2, 7, static_cast<uint64_t>(round)),
                   &x)
              .ok());
      const auto [v1, w1] = Mass(*m, x);
      for (size_t c = 0; c < kP; ++c) {
        INFO("round " << round << " coordinate " << c);
        CHECK(w1[c] == Approx(w0[c]).epsilon(1e-9));
        CHECK(v1[c] == Approx(v0[c]).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("compressed links reach the starting average, past one frame's rounding") {
  auto x = Start(2);
  const std::vector<double> mean = Mean(x);
  auto m = Mixer("q4");
  m->Reset(std::vector<float>(kP, 0.0f));
  const double start = Distance(x);
  // One q4 frame of values in [0, 1) rounds by up to 1/14 of a block's largest: the replicas
  // come far closer than that only if every link's copy carries its error onwards.
  for (int round = 0; round < 150; ++round) {
    REQUIRE(m->Round(ChooseGossipGraph(AllLinks(), 1, 9, static_cast<uint64_t>(round)), &x).ok());
  }
  CHECK(Distance(x) < 1e-3 * start);
  for (size_t c = 0; c < kP; ++c) CHECK(x[3][c] == Approx(mean[c]).epsilon(1e-3));
  // Each link's copy is where its sender was when it last sent, within the codec's rounding.
  for (int j = 0; j < kN; ++j) {
    for (int i = 0; i < kN; ++i) {
      if (i == j) continue;
      for (size_t c = 0; c < kP; ++c) CHECK(m->copy(j, i)[c] == Approx(mean[c]).margin(1e-2));
    }
  }
}

TEST_CASE("the bytes are the frames': q4 sends 1.4 bytes a value fewer than bf16") {
  auto x = Start(4);
  auto q4 = Mixer("q4");
  auto bf16 = Mixer("bf16");
  q4->Reset(x[0]);
  bf16->Reset(x[0]);
  const GossipGraph graph = ChooseGossipGraph(AllLinks(), 2, 3, 0);
  auto y = x;
  const auto b4 = q4->Round(graph, &x);
  const auto b16 = bf16->Round(graph, &y);
  REQUIRE(b4.ok());
  REQUIRE(b16.ok());
  // Two out-links per replica, a frame of every slice on each: every value once a link, 2 bytes
  // in bf16 and about 0.56 in q4 (with its block scales), beside the same headers.
  const uint64_t values = uint64_t{kN} * 2 * kP;
  INFO("q4 " << *b4 << " bf16 " << *b16 << " for " << values << " values");
  CHECK(*b4 > uint64_t{kN} * 2 * 2 * kLinkFrameFixedBytes + values / 2);
  CHECK(*b16 > *b4 + values * 13 / 10);
  CHECK(*b16 < *b4 + values * 3 / 2);
}

TEST_CASE(
    "tracking over compressed links: the corrections sum to zero, the replicas meet at "
    "the minimizer of the sum") {
  for (const bool tracking : {false, true}) {
    INFO("tracking " << tracking);
    auto b = Start(3);
    const std::vector<double> target = Mean(b);
    std::vector<std::vector<float>> x(kN, std::vector<float>(kP, 0.0f));
    auto m = Mixer("q4", tracking);
    CHECK(m->tracking() == tracking);
    m->Reset(x[0]);
    const double lr = 0.1;
    for (int round = 0; round < 300; ++round) {
      for (int r = 0; r < kN; ++r) {
        auto& xr = x[static_cast<size_t>(r)];
        for (int s = 0; s < 5; ++s) {
          for (size_t c = 0; c < kP; ++c) {
            xr[c] -= static_cast<float>(lr * (xr[c] - b[static_cast<size_t>(r)][c]));
          }
          m->Correct(r, xr, lr);
        }
      }
      REQUIRE(m->Round(ChooseGossipGraph(AllLinks(), 1, 5, static_cast<uint64_t>(round)), &x).ok());
      if (!tracking) continue;
      for (size_t c = 0; c < kP; ++c) {
        double sum = 0, scale = 0;
        for (int r = 0; r < kN; ++r) {
          sum += m->corrections(r)[c];
          scale += std::fabs(m->corrections(r)[c]);
        }
        if (std::fabs(sum) > 1e-5 * (1 + scale)) {
          FAIL("round " << round << ": the corrections of " << c << " sum to " << sum);
        }
      }
    }
    double worst = 0;
    for (const auto& row : x) {
      for (size_t c = 0; c < kP; ++c) worst = std::max(worst, std::fabs(row[c] - target[c]));
    }
    INFO("worst distance from the minimizer of the sum " << worst);
    if (tracking) {
      CHECK(worst < 2e-2);
    } else {
      CHECK(worst > 0.05);
    }
  }
}

TEST_CASE("the final average over compressed links is the push-sum average, weights 1") {
  auto x = Start(5);
  auto m = Mixer("q4");
  m->Reset(x[0]);
  for (int round = 0; round < 3; ++round) {
    REQUIRE(m->Round(ChooseGossipGraph(AllLinks(), 1, 11, static_cast<uint64_t>(round)), &x).ok());
  }
  const auto [v, w] = Mass(*m, x);
  REQUIRE(m->Average(&x).ok());
  for (int r = 0; r < kN; ++r) {
    for (size_t c = 0; c < kP; ++c) {
      CHECK(x[static_cast<size_t>(r)][c] == Approx(v[c] / w[c]).epsilon(1e-6));
    }
    for (size_t k = 0; k < Slices().size(); ++k) CHECK(m->weight(r, k) == 1.0);
  }
}

TEST_CASE("compressed links take dense lossy codecs of 4 bits or more only") {
  for (const std::string codec :
       {"exact", "fp32", "topk:0.1", "topk:0.1+q4", "adaptive", "q9", "q2", "q2:32"}) {
    INFO(codec);
    auto m = LinkGossipMixer::Create(kN, kP, Slices(), codec, false);
    REQUIRE_FALSE(m.ok());
    CHECK(m.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(m.status() == GossipLinkCodec(codec).status());
  }
  for (const std::string codec : {"q4", "q8", "bf16", "fp16", "q4:32"}) {
    INFO(codec);
    CHECK(GossipLinkCodec(codec).ok());
  }
  CHECK_FALSE(LinkGossipMixer::Create(0, kP, Slices(), "q4", false).ok());
  std::vector<std::vector<float>> x(kN - 1, std::vector<float>(kP, 0.0f));
  auto m = Mixer("q8");
  m->Reset(x[0]);
  CHECK_FALSE(m->Round(ChooseGossipGraph(AllLinks(), 1, 1, 0), &x).ok());  // 4 arrays for 5
  // Before Reset no link has a copy; a graph that sends to itself or outside the replicas, or
  // a replica's array of another size, is refused before anything moves.
  auto fresh = Mixer("q4");
  auto y = Start(6);
  CHECK(fresh->Round(ChooseGossipGraph(AllLinks(), 1, 1, 0), &y).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  fresh->Reset(y[0]);
  GossipGraph self;
  self.out.assign(kN, {});
  self.out[2] = {2};
  CHECK_FALSE(fresh->Round(self, &y).ok());
  self.out[2] = {kN};
  CHECK_FALSE(fresh->Round(self, &y).ok());
  y[1].pop_back();
  CHECK_FALSE(fresh->Round(ChooseGossipGraph(AllLinks(), 1, 1, 0), &y).ok());
}

TEST_CASE(
    "links share one copy until they carry a frame: the exponential graph's node holds 15 "
    "arrays of 30 with 16 replicas, restored as saved") {
  constexpr int n = 16;
  auto created = LinkGossipMixer::Create(n, kP, Slices(), "q4", /*tracking=*/false);
  REQUIRE(created.ok());
  auto& m = *created;
  auto x = testing::UniformStart(n, kP, 3);
  m->Reset(std::vector<float>(kP, 0.0f));
  const size_t array = kP * sizeof(float);
  for (int r = 0; r < n; ++r) CHECK(m->node(r).CopyBytes() == array);  // the start, shared
  const auto links = testing::AllLinks(n);
  for (uint64_t round = 0; round < 24; ++round) {
    REQUIRE(m->Round(ExponentialGossipGraph(links, round), &x).ok());
  }
  // Offsets 1, 2, 4, 8 each way (+8 and -8 the same peer): 7 out-links and 7 in-links of 15
  // each carried frames, each its own array; the 16 links that never did share the start.
  for (int r = 0; r < n; ++r) CHECK(m->node(r).CopyBytes() == 15 * array);
  // A link that never carried a frame still holds the start; one that did does not.
  CHECK(m->copy(5, 6) != std::vector<float>(kP, 0.0f));  // 5 -> 6: offset 1
  CHECK(m->copy(5, 8) == std::vector<float>(kP, 0.0f));  // 5 -> 8: offset 3, never drawn
  // Saved whole (every link's copy, as before), restored sharing what it holds alike.
  const LinkGossipNode& node = m->node(5);
  const std::vector<uint8_t> state = node.Save();
  CHECK(state.size() == node.StateBytes());
  auto fresh = LinkGossipNode::Create(5, n, Slices(), kP, "q4", /*tracking=*/false);
  REQUIRE(fresh.ok());
  REQUIRE((*fresh)->Restore(state).ok());
  CHECK((*fresh)->CopyBytes() == 15 * array);
  CHECK((*fresh)->Save() == state);
  for (int q = 0; q < n; ++q) {
    if (q == 5) continue;
    CHECK((*fresh)->out_copy(q) == node.out_copy(q));
    CHECK((*fresh)->in_copy(q) == node.in_copy(q));
  }
  // A frame on a restored link that shared the start moves that link's copy alone.
  auto frame = (*fresh)->Frame(0, 8, 24, x[5]);
  REQUIRE(frame.ok());
  CHECK((*fresh)->out_copy(8) != node.out_copy(8));
  CHECK((*fresh)->out_copy(9) == node.out_copy(9));
  CHECK((*fresh)->in_copy(8) == node.in_copy(8));
  CHECK((*fresh)->CopyBytes() == 16 * array);
}

TEST_CASE("a restore shares copies of the same bits only: -0 and 0 stay apart") {
  auto created = LinkGossipNode::Create(0, 3, Slices(), kP, "q4", /*tracking=*/false);
  REQUIRE(created.ok());
  auto& node = *created;
  node->Reset(std::vector<float>(kP, 0.0f));
  std::vector<uint8_t> state = node->Save();
  // The copies follow the header, the weights and the key flags: out 1, in 1, out 2, in 2.
  const size_t copies = state.size() - 4 * kP * sizeof(float);
  float minus = -0.0f;
  std::memcpy(state.data() + copies + 2 * kP * sizeof(float), &minus, sizeof(float));
  REQUIRE(node->Restore(state).ok());
  CHECK(node->CopyBytes() == 2 * kP * sizeof(float));
  CHECK(std::signbit(node->out_copy(2)[0]));
  CHECK_FALSE(std::signbit(node->out_copy(1)[0]));
}

}  // namespace longhaul::fleet
