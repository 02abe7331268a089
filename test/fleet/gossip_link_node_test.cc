// One replica's side of gossip over compressed links (fleet/gossip_link_node.h): a frame decodes
// to what its sender's copy moved by; a frame from a peer is refused whole for every way it can
// be wrong (checksum, slice, count, codec, weight, sizes, values); two ends whose copies differ
// (a frame lost, a restart from an older state) never mix a difference built on the other's
// copy: the receiver skips it, asks for a key frame, and the link holds the same copy at both
// ends again after it; the state saves and restores whole and refuses what does not fit.
#include "fleet/gossip_link_node.h"

#include <xxhash.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "compression/frame.h"
#include "test/fleet/gossip_test_util.h"

namespace longhaul::fleet {
namespace {

constexpr size_t kP = 200;

std::vector<SyncSlice> Slices() { return {{0, 0, 72}, {1, 72, 128}}; }

std::unique_ptr<LinkGossipNode> Node(int r, int n = 2, const std::string& codec = "q4",
                                     bool tracking = false) {
  auto node = LinkGossipNode::Create(r, n, Slices(), kP, codec, tracking);
  REQUIRE(node.ok());
  return std::move(*node);
}

compression::CodecSpec Spec(const std::string& codec) {
  auto s = GossipLinkCodec(codec);
  REQUIRE(s.ok());
  return *s;
}

std::vector<float> Params(uint64_t seed) { return testing::UniformStart(1, kP, seed)[0]; }

// Rewrites a frame's trailing checksum to match its bytes (reaching the checks behind it).
void Reseal(std::vector<uint8_t>* f) {
  const uint64_t sum = XXH64(f->data(), f->size() - 8, 0);
  std::memcpy(f->data() + f->size() - 8, &sum, 8);
}

StatusOr<LinkFrame> Decode(const std::vector<uint8_t>& f, size_t k, bool tracked = false) {
  const SyncSlice s = Slices()[k];
  return DecodeLinkFrame(f, static_cast<uint32_t>(s.index), static_cast<uint64_t>(s.size),
                         Spec("q4"), tracked);
}

// One link a -> b for one round: a's frames of every slice to b, b's end of the round with
// them (a keeps its share; neither receives anything else).
void Send(LinkGossipNode& a, std::vector<float>& xa, LinkGossipNode& b, std::vector<float>& xb,
          uint64_t round, bool delivered = true) {
  const int to[1] = {b.replica()};
  for (size_t k = 0; k < Slices().size(); ++k) {
    auto f = a.Frame(k, b.replica(), round, xa);
    REQUIRE(f.ok());
    auto d = Decode(*f, k, a.tracking());
    REQUIRE(d.ok());
    a.Apply(k, to, {}, {}, xa);
    if (!delivered) continue;
    const LinkGossipNode::Received in[1] = {{a.replica(), 0.5, &*d}};
    b.Apply(k, {}, {}, in, xb);
  }
}

}  // namespace

TEST_CASE("a link frame carries the difference from the link's copy, and both ends move alike") {
  auto a = Node(0), b = Node(1);
  std::vector<float> xa = Params(1), xb = Params(2);
  a->Reset(xa);
  b->Reset(xa);  // every replica starts from the same parameters
  for (size_t c = 0; c < kP; ++c) xa[c] += 0.01f * static_cast<float>(c % 7);
  auto f = a->Frame(0, 1, 0, xa);
  REQUIRE(f.ok());
  auto d = Decode(*f, 0);
  REQUIRE(d.ok());
  CHECK_FALSE(d->key);
  CHECK(d->weight == 1.0);
  REQUIRE(d->values.size() == 72);
  // The copy moved by the decoded difference, close to x (q4's rounding of the difference).
  for (size_t c = 0; c < 72; ++c) {
    CHECK(a->out_copy(1)[c] == Approx(xa[c]).margin(0.01));
  }
  const LinkGossipNode::Received in[1] = {{0, 0.5, &*d}};
  b->Apply(0, {}, {}, in, xb);
  for (size_t c = 0; c < 72; ++c) CHECK(b->in_copy(0)[c] == a->out_copy(1)[c]);
  CHECK(b->stale_frames() == 0);
  // b's weight of slice 0: its own 1 and half of a's.
  CHECK(b->weight(0) == 1.5);
}

TEST_CASE("a link frame from a peer is refused whole for every way it can be wrong") {
  auto a = Node(0);
  std::vector<float> x = Params(3);
  a->Reset(x);
  auto good = a->Frame(1, 1, 0, x);
  REQUIRE(good.ok());
  REQUIRE(Decode(*good, 1).ok());
  auto refused = [&](std::vector<uint8_t> f, const std::string& says, size_t k = 1,
                     bool tracked = false) {
    const auto d = Decode(f, k, tracked);
    INFO(d.status().ToString());
    CHECK(d.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(d.status().message()), Catch::Contains(says));
  };
  std::vector<uint8_t> f = *good;
  f[f.size() / 2] ^= 1;
  refused(f, "checksum mismatch");
  refused(*good, "names slice 1 of 128 coordinates, the slice has 72", 0);
  refused(*good, "no drift in a frame of a tracked job", 1, true);
  f = std::vector<uint8_t>(good->begin(), good->begin() + 30);
  refused(f, "shorter than its 40-byte header");
  f = *good;
  f.pop_back();
  refused(f, "bytes, its header describes");
  f = *good;
  f[0] = 'X';
  refused(f, "not a version-1 gossip link frame");
  for (const double w : {0.0, -1.0, std::nan(""), 1e7}) {
    f = *good;
    std::memcpy(f.data() + 24, &w, 8);
    Reseal(&f);
    refused(f, "push-sum weight");
  }
  // A key frame names no copy to build on.
  f = *good;
  f[5] |= 1;
  Reseal(&f);
  refused(f, "a key frame that names a copy");
  // A peer does not choose the codec: a q8 difference where the job's links send q4.
  auto q8 = Node(0, 2, "q8");
  q8->Reset(x);
  auto other = q8->Frame(1, 1, 0, x);
  REQUIRE(other.ok());
  refused(*other, "the job's links send q4");
  // A value that is not finite, behind both checksums.
  auto key_node = Node(0);
  key_node->Reset(x);
  key_node->ResyncAll();  // its next frame is a key frame: x in fp32
  auto key = key_node->Frame(1, 1, 0, x);
  REQUIRE(key.ok());
  auto kd = Decode(*key, 1);
  REQUIRE(kd.ok());
  CHECK(kd->key);
  CHECK(kd->want_key);
  f = *key;
  const float nan = std::nanf("");
  const size_t values_at = 40 + compression::FrameHeaderSize(1);
  std::memcpy(f.data() + values_at + 4 * 5, &nan, 4);
  compression::RecomputeFrameChecksum(std::span<uint8_t>(f).subspan(40, f.size() - 48));
  Reseal(&f);
  refused(f, "index 5 is NaN or infinite");
}

TEST_CASE("copies that differ are never mixed: the receiver skips, asks, and a key frame mends") {
  auto a = Node(0), b = Node(1);
  std::vector<float> start = Params(4), xa = Params(5), xb = Params(6);
  a->Reset(start);
  b->Reset(start);
  Send(*a, xa, *b, xb, 0);
  REQUIRE(b->stale_frames() == 0);
  // A frame lost in transit: a's copy moved, b's did not.
  for (float& v : xa) v += 0.05f;
  Send(*a, xa, *b, xb, 1, /*delivered=*/false);
  const std::vector<float> before = xb;
  const double weight = b->weight(0);
  for (float& v : xa) v += 0.05f;
  Send(*a, xa, *b, xb, 2);
  // Both slices' frames skipped whole: b's values and weights are its own.
  CHECK(b->stale_frames() == 2);
  CHECK(xb == before);
  CHECK(b->weight(0) == weight);
  // b's next frames to a ask for a key frame; a's next frames to b are key frames.
  for (size_t k = 0; k < Slices().size(); ++k) {
    auto f = b->Frame(k, 0, 3, xb);
    REQUIRE(f.ok());
    auto d = Decode(*f, k);
    REQUIRE(d.ok());
    CHECK(d->want_key);
    const LinkGossipNode::Received in[1] = {{1, 0.5, &*d}};
    a->Apply(k, {}, {}, in, xa);
  }
  const std::vector<float> sent = xa;
  Send(*a, xa, *b, xb, 4);
  CHECK(b->stale_frames() == 2);
  CHECK(b->in_copy(0) == a->out_copy(1));
  CHECK(b->in_copy(0) == sent);  // a key frame's copy is x itself, in fp32
  // And the link runs on differences again, the two ends alike.
  for (float& v : xa) v -= 0.02f;
  Send(*a, xa, *b, xb, 5);
  CHECK(b->stale_frames() == 2);
  CHECK(b->in_copy(0) == a->out_copy(1));
}

TEST_CASE("a slice that replays another node's rounds counts none of its key or skipped frames") {
  // As the test above, with b's slice 0 uncounted (a replica's last stage replaying its first
  // stage's rounds of the tied embedding) and a's too: each skip and key frame of slice 1 alone.
  auto a = Node(0), b = Node(1);
  a->Uncount(0);
  b->Uncount(0);
  std::vector<float> start = Params(4), xa = Params(5), xb = Params(6);
  a->Reset(start);
  b->Reset(start);
  Send(*a, xa, *b, xb, 0);
  for (float& v : xa) v += 0.05f;
  Send(*a, xa, *b, xb, 1, /*delivered=*/false);
  for (float& v : xa) v += 0.05f;
  Send(*a, xa, *b, xb, 2);
  CHECK(b->stale_frames() == 1);  // both skipped, one counted
  for (size_t k = 0; k < Slices().size(); ++k) {
    auto f = b->Frame(k, 0, 3, xb);
    REQUIRE(f.ok());
    auto d = Decode(*f, k);
    REQUIRE(d.ok());
    CHECK(d->want_key);  // asked all the same
    const LinkGossipNode::Received in[1] = {{1, 0.5, &*d}};
    a->Apply(k, {}, {}, in, xa);
  }
  Send(*a, xa, *b, xb, 4);
  CHECK(b->in_copy(0) == a->out_copy(1));  // mended all the same
  CHECK(a->key_frames() == 1);             // both sent, one counted
}

TEST_CASE("tracking: a skipped frame's drift still counts, so the corrections sum to zero") {
  auto a = Node(0, 2, "q4", true), b = Node(1, 2, "q4", true);
  std::vector<float> xa = Params(17), xb = Params(18);
  a->Reset(xa);
  b->Reset(Params(19));  // b's copy of link a -> b is not a's: a's differences are skipped
  for (size_t c = 0; c < kP; ++c) xa[c] -= 0.01f * static_cast<float>(c % 5);
  a->Correct(xa, 0.1);
  a->BeginRound(xa);
  b->BeginRound(xb);
  Send(*a, xa, *b, xb, 0);
  CHECK(b->stale_frames() == 2);
  double largest = 0;
  for (size_t c = 0; c < kP; ++c) {
    largest = std::max(largest, std::abs(static_cast<double>(a->corrections()[c])));
    CHECK(a->corrections()[c] + b->corrections()[c] == Approx(0.0).margin(1e-6));
  }
  CHECK(largest > 1e-3);  // the drifts moved the corrections
}

TEST_CASE("a frame the sender knows did not go makes its next one a key frame") {
  auto a = Node(0), b = Node(1);
  std::vector<float> start = Params(7), xa = Params(8), xb = Params(9);
  a->Reset(start);
  b->Reset(start);
  const int to[1] = {1};
  for (size_t k = 0; k < Slices().size(); ++k) {
    REQUIRE(a->Frame(k, 1, 0, xa).ok());
    const std::vector<float> kept = xa;
    a->Apply(k, {}, to, {}, xa);  // unsent: its share stays, nothing subtracted
    CHECK(a->weight(k) == 1.0);
    CHECK(xa == kept);
  }
  auto f = a->Frame(0, 1, 1, xa);
  REQUIRE(f.ok());
  auto d = Decode(*f, 0);
  REQUIRE(d.ok());
  CHECK(d->key);
  CHECK_FALSE(d->want_key);
  // A rejoining replica's links: key frames both ways, asked for and owed (ResyncWith), the
  // other links untouched.
  auto c = Node(0, 3);
  c->Reset(start);
  c->ResyncWith(2);
  for (const int q : {1, 2}) {
    auto g = c->Frame(1, q, 0, xa);
    REQUIRE(g.ok());
    auto e = Decode(*g, 1);
    REQUIRE(e.ok());
    CHECK(e->key == (q == 2));
    CHECK(e->want_key == (q == 2));
  }
}

TEST_CASE("a peer that asks for a key frame every round gets one every kKeyRequestFrames frames") {
  auto a = Node(0), b = Node(1);
  std::vector<float> start = Params(14), xa = Params(15), xb = Params(16);
  a->Reset(start);
  b->Reset(start);
  b->ResyncWith(0);  // its frames to a ask for a key frame until one comes
  auto asking = b->Frame(0, 0, 0, xb);
  REQUIRE(asking.ok());
  auto d = Decode(*asking, 0);
  REQUIRE(d.ok());
  REQUIRE(d->want_key);
  const int to[1] = {1};
  int keys = 0;
  std::vector<int> at;
  for (int round = 0; round < 40; ++round) {
    const LinkGossipNode::Received in[1] = {{1, 0.5, &*d}};  // the same request, every round
    a->Apply(0, {}, {}, in, xa);
    auto f = a->Frame(0, 1, static_cast<uint64_t>(round), xa);
    REQUIRE(f.ok());
    auto e = Decode(*f, 0);
    REQUIRE(e.ok());
    if (e->key) at.push_back(round);
    keys += e->key ? 1 : 0;
    a->Apply(0, to, {}, {}, xa);
  }
  // The first request at once, then one every kKeyRequestFrames + 1 frames.
  REQUIRE(!at.empty());
  CHECK(at[0] == 0);
  for (size_t i = 1; i < at.size(); ++i) {
    CHECK(at[i] - at[i - 1] == static_cast<int>(kKeyRequestFrames) + 1);
  }
  CHECK(keys == 5);
  CHECK(a->key_frames() == 5);  // each went (Apply was told so)
  // What this end knows itself (a frame that did not go) is not held back.
  a->Apply(0, {}, to, {}, xa);
  auto f = a->Frame(0, 1, 40, xa);
  REQUIRE(f.ok());
  auto e = Decode(*f, 0);
  REQUIRE(e.ok());
  CHECK(e->key);
  a->Apply(0, {}, to, {}, xa);  // that one did not go either: not counted
  CHECK(a->key_frames() == 5);
}

TEST_CASE("a link node's state saves and restores whole, and refuses what does not fit") {
  for (const bool tracking : {false, true}) {
    INFO("tracking " << tracking);
    auto a = Node(1, 3, "q4", tracking), b = Node(0, 3, "q4", tracking);
    std::vector<float> start = Params(10), xa = Params(11), xb = Params(12);
    a->Reset(start);
    b->Reset(start);
    a->Correct(xa, 0.1);
    a->BeginRound(xa);
    Send(*a, xa, *b, xb, 0);
    const std::vector<uint8_t> saved = a->Save();
    CHECK(saved.size() == a->StateBytes());
    auto c = Node(1, 3, "q4", tracking);
    REQUIRE(c->Restore(saved).ok());
    CHECK(c->Save() == saved);
    CHECK(c->out_copy(0) == a->out_copy(0));
    CHECK(c->weight(0) == a->weight(0));
    // Another replica's, another shape's, a truncation, a weight that is not positive.
    auto other = Node(2, 3, "q4", tracking);
    CHECK(other->Restore(saved).code() == absl::StatusCode::kDataLoss);
    auto fewer = Node(1, 2, "q4", tracking);
    CHECK(fewer->Restore(saved).code() == absl::StatusCode::kDataLoss);
    std::vector<uint8_t> cut(saved.begin(), saved.end() - 1);
    CHECK(c->Restore(cut).code() == absl::StatusCode::kDataLoss);
    std::vector<uint8_t> bad = saved;
    const double zero = 0;
    std::memcpy(bad.data() + 25, &zero, 8);
    const Status s = c->Restore(bad);
    CHECK(s.code() == absl::StatusCode::kDataLoss);
    CHECK_THAT(std::string(s.message()), Catch::Contains("push-sum weight"));
    CHECK(c->Save() == saved);  // nothing changed by a refused state
  }
}

TEST_CASE("an outer step moves x from the last round's mix, and its state saves with the node") {
  const OuterOptions outer{0.7f, 0.5f, true};
  auto make = [&](int r) {
    auto node = LinkGossipNode::Create(r, 2, Slices(), kP, "q4", false, outer);
    REQUIRE(node.ok());
    return std::move(*node);
  };
  auto a = make(0), b = make(1);
  REQUIRE(a->outer_step());
  const std::vector<float> start = Params(20);
  a->Reset(start);
  b->Reset(start);
  // The reference: the outer optimizer on a's own pseudo-gradients, anchored where a's rounds
  // leave it.
  OuterOptimizer ref;
  ref.Reset(start);
  std::vector<float> xa = Params(21), xb = Params(22), delta(kP);
  for (uint64_t round = 0; round < 3; ++round) {
    INFO("round " << round);
    ref.PseudoGradient(xa, delta);
    ref.Step(outer, delta);
    a->BeginRound(xa);
    b->BeginRound(xb);
    CHECK(xa == ref.anchor());  // x is the stepped anchor; the frames carry it
    Send(*a, xa, *b, xb, round);
    Send(*b, xb, *a, xa, round);
    CHECK(a->outer_state().anchor() == xa);  // the mixed x anchors the next round
    CHECK(a->outer_state().momentum() == ref.momentum());
    ref.MoveAnchorPart(0, xa);
    for (float& v : xa) v += 0.01f;  // local steps before the next round
    for (float& v : xb) v -= 0.02f;
  }
  CHECK(std::any_of(a->outer_state().momentum().begin(), a->outer_state().momentum().end(),
                    [](float m) { return m != 0.0f; }));
  // The state carries the anchor and the momentum; a node without the outer step refuses it.
  const std::vector<uint8_t> saved = a->Save();
  CHECK(saved.size() == a->StateBytes());
  CHECK(saved.size() == Node(0)->StateBytes() + 2 * kP * sizeof(float));
  auto c = make(0);
  REQUIRE(c->Restore(saved).ok());
  CHECK(c->outer_state().anchor() == a->outer_state().anchor());
  CHECK(c->outer_state().momentum() == a->outer_state().momentum());
  CHECK(c->Save() == saved);
  const Status s = Node(0)->Restore(saved);
  CHECK(s.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(s.message()), Catch::Contains("flags 2"));
  // Slice 0 replaced whole (a mended tied embedding): its anchor the new values, its momentum
  // 0, slice 1's state untouched; so two nodes that took the same copy step alike there again.
  {
    auto m = make(0);
    REQUIRE(m->Restore(saved).ok());
    std::vector<float> copy = Params(30);
    m->RestartOuter(0, copy);
    const SyncSlice s0 = Slices()[0], s1 = Slices()[1];
    for (int64_t c = 0; c < s0.size; ++c) {
      CHECK(m->outer_state().anchor()[static_cast<size_t>(c)] == copy[static_cast<size_t>(c)]);
      CHECK(m->outer_state().momentum()[static_cast<size_t>(c)] == 0.0f);
    }
    for (int64_t c = s1.offset; c < s1.offset + s1.size; ++c) {
      const size_t i = static_cast<size_t>(c);
      CHECK(m->outer_state().anchor()[i] == a->outer_state().anchor()[i]);
      CHECK(m->outer_state().momentum()[i] == a->outer_state().momentum()[i]);
    }
  }
  // An exact average: every weight 1, the anchor the average, the momentum kept.
  const std::vector<float> momentum = a->outer_state().momentum();
  a->Averaged(xb);
  CHECK(a->weight(0) == 1.0);
  CHECK(a->outer_state().anchor() == xb);
  CHECK(a->outer_state().momentum() == momentum);
  // An outer step out of range is refused at Create, naming it.
  auto bad = LinkGossipNode::Create(0, 2, Slices(), kP, "q4", false, {0.7f, 1.0f, true});
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("momentum"));
}

TEST_CASE("a link node refuses frames it cannot build") {
  auto a = Node(0, 3);
  std::vector<float> x = Params(13);
  a->Reset(x);
  CHECK(a->Frame(0, 0, 0, x).status().code() == absl::StatusCode::kInvalidArgument);  // itself
  CHECK(a->Frame(0, 3, 0, x).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(a->Frame(2, 1, 0, x).status().code() == absl::StatusCode::kInvalidArgument);
  std::vector<float> short_x(kP - 1);
  CHECK(a->Frame(0, 1, 0, short_x).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(LinkGossipNode::Create(0, 2, Slices(), kP, "q2", false).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(LinkGossipNode::Create(0, 2, {{0, 150, 72}}, kP, "q4", false).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("the exponential graph draws every link back: a link whose copies differ is mended") {
  // Four replicas over the one-peer exponential graph (offsets 1, 2, then -1, -2). Replica 0's
  // frame to 1 in round 0 is lost on the way (0 does not know): 1 skips 0's next frame (round
  // 4), asks in its next frame back (1 -> 0 is offset -1: round 6), and 0's next frame to 1
  // (round 8) is a key frame. Forward-only offsets would never draw 1 -> 0.
  constexpr int kN = 4;
  const std::vector<std::vector<double>> links(kN, std::vector<double>(kN, 1.0));
  std::vector<std::unique_ptr<LinkGossipNode>> nodes;
  std::vector<std::vector<float>> x;
  const std::vector<float> start = Params(4);
  for (int r = 0; r < kN; ++r) {
    nodes.push_back(Node(r, kN));
    nodes.back()->Reset(start);
    x.push_back(Params(10 + r));
  }
  for (uint64_t round = 0; round <= 8; ++round) {
    const GossipGraph g = ExponentialGossipGraph(links, round);
    // Every frame of the round, decoded, by receiver: (sender, frames by slice).
    std::vector<std::vector<std::pair<int, std::vector<LinkFrame>>>> in(kN);
    for (int i = 0; i < kN; ++i) {
      nodes[static_cast<size_t>(i)]->BeginRound(x[static_cast<size_t>(i)]);
      for (int j : g.out[static_cast<size_t>(i)]) {
        std::vector<LinkFrame> frames;
        for (size_t k = 0; k < Slices().size(); ++k) {
          auto f = nodes[static_cast<size_t>(i)]->Frame(k, j, round, x[static_cast<size_t>(i)]);
          REQUIRE(f.ok());
          auto d = Decode(*f, k);
          REQUIRE(d.ok());
          frames.push_back(std::move(*d));
        }
        if (round == 0 && i == 0) continue;  // lost on the way
        in[static_cast<size_t>(j)].emplace_back(i, std::move(frames));
      }
    }
    for (int j = 0; j < kN; ++j) {
      for (size_t k = 0; k < Slices().size(); ++k) {
        std::vector<LinkGossipNode::Received> received;
        for (const auto& [from, frames] : in[static_cast<size_t>(j)]) {
          received.push_back({from, 0.5, &frames[k]});
        }
        nodes[static_cast<size_t>(j)]->Apply(k, g.out[static_cast<size_t>(j)], {}, received,
                                             x[static_cast<size_t>(j)]);
      }
    }
    INFO("round " << round);
    // Skipped at round 4 only (both slices), the others' links never.
    CHECK(nodes[1]->stale_frames() == (round >= 4 ? 2u : 0u));
    for (int r : {0, 2, 3}) CHECK(nodes[static_cast<size_t>(r)]->stale_frames() == 0);
  }
  CHECK(nodes[0]->key_frames() == 2);  // one per slice, at round 8
  CHECK(nodes[1]->in_copy(0) == nodes[0]->out_copy(1));
}

}  // namespace longhaul::fleet
