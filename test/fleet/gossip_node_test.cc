// One replica's side of a gossip round (fleet/gossip_node.h): frames round-trip, hostile frames
// are refused naming what is wrong, and a node's round on the frames it takes is the push-sum
// arithmetic worked by hand.
#include "fleet/gossip_node.h"

#include <xxhash.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace longhaul::fleet {
namespace {

std::string Error(const std::vector<uint8_t>& bytes, uint32_t slice, uint64_t size) {
  auto f = DecodeGossipFrame(bytes, slice, size);
  REQUIRE(!f.ok());
  return std::string(f.status().message());
}

void Poke32(std::vector<uint8_t>* bytes, size_t at, uint32_t v) {
  std::memcpy(bytes->data() + at, &v, 4);
}

TEST_CASE("gossip frames round-trip, sparse and dense") {
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 3.5f}, w = {1.0f, 0.5f, 0.25f, 2.0f};
  const std::vector<uint32_t> some = {1, 3};
  const std::vector<uint8_t> sparse = EncodeGossipFrame(7, some, x, w);
  CHECK(sparse.size() == GossipFrameBytes(2, 4));
  CHECK(sparse.size() == 16 + 2 * 12 + 8);
  auto f = DecodeGossipFrame(sparse, 7, 4);
  REQUIRE(f.ok());
  CHECK(!f->dense);
  CHECK(f->index == some);
  CHECK(f->x == std::vector<float>{-1.0f, 3.5f});
  CHECK(f->w == std::vector<float>{0.5f, 2.0f});
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  const std::vector<uint8_t> dense = EncodeGossipFrame(7, all, x, w);
  CHECK(dense.size() == 16 + 4 * 8 + 8);
  auto d = DecodeGossipFrame(dense, 7, 4);
  REQUIRE(d.ok());
  CHECK(d->dense);
  CHECK(d->x == x);
  CHECK(d->w == w);
  CHECK(d->at(2) == 2);
}

TEST_CASE("hostile gossip frames are refused, naming what is wrong") {
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 3.5f}, w = {1.0f, 0.5f, 0.25f, 2.0f};
  const std::vector<uint32_t> some = {1, 3};
  const std::vector<uint8_t> good = EncodeGossipFrame(7, some, x, w);
  CHECK_THAT(Error(std::vector<uint8_t>(good.begin(), good.begin() + 10), 7, 4),
             Catch::Contains("shorter than its 16-byte header"));
  CHECK_THAT(Error(std::vector<uint8_t>(good.begin(), good.end() - 1), 7, 4),
             Catch::Contains("47 bytes for 2 coordinates"));
  CHECK_THAT(Error(good, 8, 4), Catch::Contains("names slice 7"));
  CHECK_THAT(Error(good, 7, 1), Catch::Contains("2 coordinates of a slice of 1"));
  auto bad = good;
  bad[0] = 'X';
  CHECK_THAT(Error(bad, 7, 4), Catch::Contains("not a version-1 gossip frame"));
  bad = good;
  bad[5] = 1;  // dense, but not every coordinate
  CHECK_THAT(Error(bad, 7, 4), Catch::Contains("(dense) of a slice of 4"));
  bad = good;
  Poke32(&bad, 12, 0xFFFFFFFFu);  // 2^32 - 1 coordinates
  CHECK_THAT(Error(bad, 7, 4), Catch::Contains("4294967295 coordinates"));
  bad = good;
  bad[30] ^= 1;  // a value's bit
  CHECK_THAT(Error(bad, 7, 4), Catch::Contains("checksum mismatch"));
  auto resum = [](std::vector<uint8_t>* b) {  // a hostile sender's frame sums right
    const uint64_t sum = XXH64(b->data(), b->size() - 8, 0);
    std::memcpy(b->data() + b->size() - 8, &sum, 8);
  };
  bad = good;
  Poke32(&bad, 16, 3);  // indices 3, 3: not ascending
  resum(&bad);
  CHECK_THAT(Error(bad, 7, 4), Catch::Contains("indices ascend"));
  bad = good;
  Poke32(&bad, 20, 4);  // index 4 of a slice of 4
  resum(&bad);
  CHECK_THAT(Error(bad, 7, 4), Catch::Contains("index 1 is 4"));
  bad = good;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(bad.data() + 24, &nan, 4);  // the first value
  resum(&bad);
  CHECK_THAT(Error(bad, 7, 4), Catch::Contains("values finite"));
  bad = good;
  const float zero = 0.0f;
  std::memcpy(bad.data() + 32 + 4, &zero, 4);  // the second weight
  resum(&bad);
  CHECK_THAT(Error(bad, 7, 4), Catch::Contains("weights positive"));
}

TEST_CASE("a node's round: it keeps its share of what it sent and adds what it takes") {
  // One slice of 4 at offset 0 of 4 parameters. This node sends coordinates 0 and 2 to one
  // neighbour (share 1/2); it takes coordinate 2 and 3 from a sender of out-degree 3 (share
  // 1/4).
  GossipNode node({{0, 0, 4}}, 4, 0.5);
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  node.Reset(x);
  CHECK(node.Picked(4) == 2);
  const std::vector<uint32_t> picked = {0, 2};
  const std::vector<float> peer_x = {0, 0, 7.0f, 8.0f}, peer_w = {1, 1, 1.0f, 2.0f};
  const std::vector<uint32_t> peer_picked = {2, 3};
  auto f = DecodeGossipFrame(EncodeGossipFrame(0, peer_picked, peer_x, peer_w), 0, 4);
  REQUIRE(f.ok());
  const std::vector<GossipNode::Received> received = {{0.25, &*f}};
  node.Apply(0, picked, 0.5, received, x);
  CHECK(x[0] == 1.0f);  // sent half, received nothing: value / weight unchanged
  CHECK(node.weights()[0] == 0.5f);
  CHECK(x[1] == 2.0f);  // untouched
  CHECK(node.weights()[1] == 1.0f);
  // (0.5 x 3 + 0.25 x 7) / (0.5 + 0.25)
  CHECK(x[2] == static_cast<float>((1.5 + 1.75) / 0.75));
  CHECK(node.weights()[2] == 0.75f);
  // (4 + 0.25 x 2 x 8) / (1 + 0.5)
  CHECK(x[3] == static_cast<float>(8.0 / 1.5));
  CHECK(node.weights()[3] == 1.5f);
  // The sent coordinates' references move to their new values.
  CHECK(node.refs()[0] == x[0]);
  CHECK(node.refs()[2] == x[2]);
  CHECK(node.refs()[3] == 4.0f);
  // The exact average of two replicas' (x, w): sum w x / sum w, weights back to 1.
  const std::vector<float> other = {3.0f, 3.0f, 3.0f, 3.0f}, ones(4, 1.0f);
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  auto mine = DecodeGossipFrame(node.Frame(0, all, x), 0, 4);
  auto theirs = DecodeGossipFrame(EncodeGossipFrame(0, all, other, ones), 0, 4);
  REQUIRE(mine.ok());
  REQUIRE(theirs.ok());
  const std::vector<const GossipFrame*> both = {&*mine, &*theirs};
  const float w0 = node.weights()[0];
  REQUIRE(node.Average(0, both, x).ok());
  CHECK(x[0] == static_cast<float>((double(w0) * 1.0 + 3.0) / (double(w0) + 1.0)));
  CHECK(x[1] == 2.5f);
  CHECK(node.weights() == ones);
  CHECK(node.refs() == x);
  // A sparse frame is no average's: refused, nothing changed.
  auto sparse = DecodeGossipFrame(EncodeGossipFrame(0, picked, other, ones), 0, 4);
  REQUIRE(sparse.ok());
  const std::vector<const GossipFrame*> with_sparse = {&*mine, &*sparse};
  const std::vector<float> before = x;
  const Status s = node.Average(0, with_sparse, x);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("not dense"));
  CHECK(x == before);
}

TEST_CASE("a node's picks: the turning window and the largest moves, the same for the same state") {
  GossipNode node({{0, 0, 10}}, 10, 0.4);  // 4 of 10: a window of 2, the 2 largest moves
  std::vector<float> x(10, 0.0f);
  node.Reset(x);
  x[5] = 3.0f;
  x[8] = -4.0f;
  x[0] = 9.0f;  // in round 0's window [0, 2) anyway
  CHECK(node.Pick(0, x, 0) == std::vector<uint32_t>{0, 1, 5, 8});
  CHECK(node.Pick(0, x, 1) == std::vector<uint32_t>{0, 2, 3, 8});  // window [2, 4); 0 is largest
  CHECK(node.Pick(0, x, 4) == std::vector<uint32_t>{0, 5, 8, 9});  // window [8, 10)
  CHECK(node.Restore(std::vector<float>(10, 1.0f), std::vector<float>(9, 0.0f)).code() ==
        absl::StatusCode::kDataLoss);
  std::vector<float> w(10, 1.0f);
  w[3] = -1.0f;
  CHECK(node.Restore(w, x).code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("tracked gossip frames carry drifts; a receiver refuses the other kind") {
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 3.5f}, w = {1.0f, 0.5f, 0.25f, 2.0f};
  const std::vector<float> z = {0.1f, -0.2f, 0.3f, -0.4f};
  const std::vector<uint32_t> some = {1, 3};
  const std::vector<uint8_t> tracked = EncodeGossipFrame(7, some, x, w, z);
  CHECK(tracked.size() == GossipFrameBytes(2, 4, true));
  CHECK(tracked.size() == 16 + 2 * 16 + 8);
  auto f = DecodeGossipFrame(tracked, 7, 4, true);
  REQUIRE(f.ok());
  CHECK(f->x == std::vector<float>{-1.0f, 3.5f});
  CHECK(f->w == std::vector<float>{0.5f, 2.0f});
  CHECK(f->z == std::vector<float>{-0.2f, -0.4f});
  CHECK_THAT(Error(tracked, 7, 4), Catch::Contains("drifts in a frame of an untracked job"));
  auto untracked = DecodeGossipFrame(EncodeGossipFrame(7, some, x, w), 7, 4, true);
  REQUIRE(!untracked.ok());
  CHECK_THAT(std::string(untracked.status().message()),
             Catch::Contains("no drifts in a frame of a tracked job"));
  // A drift that is not finite, checksum recomputed: refused by name.
  std::vector<float> bad_z = z;
  bad_z[3] = std::numeric_limits<float>::infinity();
  auto bad = DecodeGossipFrame(EncodeGossipFrame(7, some, x, w, bad_z), 7, 4, true);
  REQUIRE(!bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("coordinate 3 has drift inf"));
}

TEST_CASE("tracking: the correction moves by the mixed drift less the own, and steps apply it") {
  // One slice of 4 parameters, every coordinate sent to one neighbour (share 1/2), which sends
  // every coordinate back (share 1/2). Two local steps of learning rate 0.25 each moved this
  // node by -z_own x 0.5.
  GossipNode node({{0, 0, 4}}, 4, 1.0, /*tracking=*/true);
  const std::vector<float> start = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<float> x = start;
  node.Reset(x);
  node.Correct(x, 0.25);  // the correction is 0: nothing moves
  node.Correct(x, 0.25);
  CHECK(x == start);
  const std::vector<float> z_own = {0.5f, -1.0f, 0.0f, 2.0f}, z_peer = {1.5f, -1.0f, 1.0f, 0.0f};
  for (size_t c = 0; c < 4; ++c) x[c] = start[c] - 0.5f * z_own[c];
  node.BeginRound(x);
  const std::vector<uint32_t> all = {0, 1, 2, 3};
  // The node's frame carries its drift.
  auto mine = DecodeGossipFrame(node.Frame(0, all, x), 0, 4, true);
  REQUIRE(mine.ok());
  CHECK(mine->z == z_own);
  const std::vector<float> peer_x = {0, 0, 0, 0}, ones(4, 1.0f);
  auto f = DecodeGossipFrame(EncodeGossipFrame(0, all, peer_x, ones, z_peer), 0, 4, true);
  REQUIRE(f.ok());
  const std::vector<GossipNode::Received> received = {{0.5, &*f}};
  node.Apply(0, all, 0.5, received, x);
  // c = (z_own + z_peer) / 2 - z_own = (z_peer - z_own) / 2.
  const std::vector<float> c = {0.5f, 0.0f, 0.5f, -1.0f};
  CHECK(node.corrections() == c);
  // A step of learning rate 0.1 then moves x by -0.1 c, and the next drift is measured from
  // the mixed x.
  const std::vector<float> mixed = x;
  node.Correct(x, 0.1);
  for (size_t k = 0; k < 4; ++k) CHECK(x[k] == mixed[k] - 0.1f * c[k]);
  node.BeginRound(x);
  auto next = DecodeGossipFrame(node.Frame(0, all, x), 0, 4, true);
  REQUIRE(next.ok());
  for (size_t k = 0; k < 4; ++k) CHECK(next->z[k] == Approx(c[k]).margin(1e-6));
  // An untracked node sends no drifts and its steps move nothing.
  GossipNode plain({{0, 0, 4}}, 4, 1.0);
  plain.Reset(start);
  std::vector<float> y = start;
  plain.Correct(y, 1.0);
  CHECK(y == start);
  CHECK(DecodeGossipFrame(plain.Frame(0, all, y), 0, 4).ok());
}

}  // namespace
}  // namespace longhaul::fleet
