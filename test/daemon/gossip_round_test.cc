// The daemons' gossip rounds (daemon/job/sync/gossip_round.h): the link matrix a gossip
// attempt draws its graphs from (each replica pair's slowest link between stages that sync the
// same layers, a slow link raised to a tenth of its row's fastest, unknown links making it
// empty), the graphs drawn from it (a link that is down
// never, fast links more often than slow ones, the same graph for every caller), and the
// checks a site makes of an assignment's matrix.
#include "daemon/job/sync/gossip_round.h"

#include <catch2/catch.hpp>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "daemon/job/checks/job_checks.h"
#include "daemon/job/spec/job_spec.h"

namespace longhaul::daemon {
namespace {

using Stages = google::protobuf::RepeatedPtrField<v1::StageInfo>;
using Links = std::map<std::pair<std::string, std::string>, double>;

// Replica r on sites[r] (its stages in order), the layers [0, 4) split evenly.
Stages Plan(const std::vector<std::vector<std::string>>& sites) {
  Stages stages;
  for (size_t r = 0; r < sites.size(); ++r) {
    const int n = static_cast<int>(sites[r].size());
    for (int k = 0; k < n; ++k) {
      v1::StageInfo* s = stages.Add();
      s->set_index(static_cast<uint32_t>(stages.size() - 1));
      s->set_site(sites[r][static_cast<size_t>(k)]);
      s->set_replica(static_cast<uint32_t>(r));
      s->set_layer_begin(static_cast<uint32_t>(4 * k / n));
      s->set_layer_end(static_cast<uint32_t>(4 * (k + 1) / n));
    }
  }
  return stages;
}

std::vector<double> Matrix(const Stages& plan, int replicas, const Links& links,
                           std::vector<bool> live = {}) {
  if (live.empty()) live.assign(static_cast<size_t>(replicas), true);
  return GossipLinkMatrix(StageGrid::OfPlan(replicas, plan), plan, live,
                          [&](const std::string& from, const std::string& to) {
                            const auto it = links.find({from, to});
                            return it == links.end() ? 0.0 : it->second;
                          });
}

// Every directed link between `sites` at `bw`, then the overrides.
Links AllLinks(const std::vector<std::string>& sites, double bw, const Links& overrides = {}) {
  Links l;
  for (const auto& a : sites) {
    for (const auto& b : sites) {
      if (a != b) l[{a, b}] = bw;
    }
  }
  for (const auto& [k, v] : overrides) l[k] = v;
  return l;
}

TEST_CASE("a replica pair's link is its slowest stage link", "[gossip]") {
  // Two replicas of two stages: a|b and c|d. Stage 0 syncs with stage 0, stage 1 with 1.
  const Stages plan = Plan({{"a", "b"}, {"c", "d"}});
  const Links links = AllLinks({"a", "b", "c", "d"}, 100,
                               {{{"a", "c"}, 50},
                                {{"b", "d"}, 20},
                                {{"c", "a"}, 70},
                                {{"d", "b"}, 90},
                                {{"a", "d"}, 1},
                                {{"b", "c"}, 1}});
  const std::vector<double> m = Matrix(plan, 2, links);
  REQUIRE(m.size() == 4);
  CHECK(m[0] == 0);
  CHECK(m[1] == 20);  // replica 0 -> 1: min(a->c 50, b->d 20); a->d and b->c carry nothing
  CHECK(m[2] == 70);  // replica 1 -> 0: min(c->a 70, d->b 90)
  CHECK(m[3] == 0);
  CHECK(GossipLinksDebugString(m) == "0->1 0.00016, 1->0 0.00056");
}

TEST_CASE("replicas of different depths pair by layers, ends with ends", "[gossip]") {
  // Replica 0 is one stage on a; replica 1 is two stages on c|d: a syncs with both.
  const Stages plan = Plan({{"a"}, {"c", "d"}});
  const std::vector<double> m =
      Matrix(plan, 2, AllLinks({"a", "c", "d"}, 100, {{{"a", "d"}, 30}, {{"c", "a"}, 40}}));
  REQUIRE(m.size() == 4);
  CHECK(m[1] == 30);
  CHECK(m[2] == 40);
}

TEST_CASE("an unknown link leaves every link alike", "[gossip]") {
  const Stages plan = Plan({{"a", "b"}, {"c", "d"}, {"e", "f"}});
  Links links = AllLinks({"a", "b", "c", "d", "e", "f"}, 100);
  CHECK(Matrix(plan, 3, links).size() == 9);
  links.erase({"d", "f"});  // replica 1 -> 2, stage 1
  CHECK(Matrix(plan, 3, links).empty());
  // ... unless the replica it concerns sits out the attempt: its row and column are 0.
  const std::vector<double> m = Matrix(plan, 3, links, {true, true, false});
  REQUIRE(m.size() == 9);
  CHECK(m[1] == 100);
  CHECK(m[3] == 100);
  CHECK(m[2] == 0);
  CHECK(m[5] == 0);
  CHECK(m[6] == 0);
  CHECK(m[7] == 0);
}

TEST_CASE("a slow link counts at least a tenth of its row's fastest", "[gossip]") {
  // Replica 0 on a reaches b at 1000 and c at 1: c is drawn a tenth as often as b, not a
  // thousandth (push-sum would starve c of weight). Rows whose links are close stay as measured.
  const Stages plan = Plan({{"a"}, {"b"}, {"c"}});
  const std::vector<double> m =
      Matrix(plan, 3, AllLinks({"a", "b", "c"}, 50, {{{"a", "b"}, 1000}, {{"a", "c"}, 1}}));
  REQUIRE(m.size() == 9);
  CHECK(m[1] == 1000);
  CHECK(m[2] == 100);
  CHECK(m[3] == 50);
  CHECK(m[5] == 50);
  // A reported figure beyond kMaxGossipLinkBandwidth is held to it.
  const std::vector<double> huge =
      Matrix(plan, 3, AllLinks({"a", "b", "c"}, 50, {{{"b", "a"}, 1e300}}));
  REQUIRE(huge.size() == 9);
  CHECK(huge[3] == kMaxGossipLinkBandwidth);
  CHECK(huge[5] == kMaxGossipLinkBandwidth * kGossipLinkFloor);  // hence the coordinator's bound
  CHECK_FALSE(UsableLinkEstimate(1e300));
  CHECK_FALSE(UsableLinkEstimate(0));
  CHECK(UsableLinkEstimate(1.25e6));
}

TEST_CASE("graphs drawn from measured links favour fast links and skip down ones", "[gossip]") {
  fleet::SyncOptions sync;
  sync.reduce = fleet::SyncReduce::kGossip;
  sync.fanout = 1;
  sync.every = 1;
  // Replica 0's links: 1000 to 1, 100 to 2, 10 to 3; the others alike. Replica 3 -> 0 down.
  std::vector<double> links(16, 50.0);
  links[1] = 1000;
  links[2] = 100;
  links[3] = 10;
  links[12] = 0;
  for (int i = 0; i < 4; ++i) links[static_cast<size_t>(i) * 5] = 0;
  const std::vector<bool> live(4, true);
  std::vector<int> drawn(4, 0);
  int to_zero_from_3 = 0;
  for (uint64_t step = 0; step < 600; ++step) {
    const fleet::GossipGraph g = GossipRoundGraph(sync, live, 7, step, links);
    REQUIRE(g.nodes() == 4);
    REQUIRE(g.out[0].size() == 1);
    ++drawn[static_cast<size_t>(g.out[0][0])];
    for (int q : g.out[3]) to_zero_from_3 += q == 0;
    // Every site computes the same graph from the same inputs.
    CHECK(GossipRoundGraph(sync, live, 7, step, links).out == g.out);
  }
  CHECK(to_zero_from_3 == 0);
  CHECK(drawn[0] == 0);
  // Shares 1000 : 100 : 10 of 600 draws: about 541, 54 and 5.
  CHECK(drawn[1] > 480);
  CHECK(drawn[2] > 25);
  CHECK(drawn[2] < 90);
  CHECK(drawn[3] < 20);
  // Without a matrix every link is alike: replica 0 reaches 3 about as often as 1.
  std::vector<int> alike(4, 0);
  for (uint64_t step = 0; step < 600; ++step) {
    ++alike[static_cast<size_t>(GossipRoundGraph(sync, live, 7, step).out[0][0])];
  }
  CHECK(alike[3] > 150);
  CHECK(alike[1] > 150);
  // A dropped replica is never drawn, whatever its links.
  for (uint64_t step = 0; step < 100; ++step) {
    const fleet::GossipGraph g = GossipRoundGraph(sync, {true, false, true, true}, 7, step, links);
    for (int r : {0, 2, 3}) {
      for (int q : g.out[static_cast<size_t>(r)]) CHECK(q != 1);
    }
  }
}

TEST_CASE(
    "sync.graph exponential: offsets 1, 2 and then -1, -2 in turn by the syncs before, a dropped "
    "replica's links down",
    "[gossip]") {
  fleet::SyncOptions sync;
  sync.reduce = fleet::SyncReduce::kGossip;
  sync.every = 2;
  sync.exponential_graph = true;
  const std::vector<bool> live(4, true);
  // The syncs after steps 2, 4, 6, ... are rounds 0, 1, 2, ...: offsets 1, 2, 3 (-1), 2, 1.
  const int offsets[] = {1, 2, 3, 2, 1};
  for (uint64_t step : {1u, 3u, 5u, 7u, 9u}) {
    const uint64_t round = GossipRoundOf(sync, step);
    const fleet::GossipGraph g = GossipRoundGraph(sync, live, 7, step);
    for (size_t i = 0; i < 4; ++i) {
      REQUIRE(g.out[i].size() == 1);
      CHECK(g.out[i][0] == static_cast<int>((i + offsets[round]) % 4));
    }
    // The seed and the measured rates do not move it: only links that are down.
    CHECK(GossipRoundGraph(sync, live, 99, step, std::vector<double>(16, 5.0)).out == g.out);
  }
  // Replica 1 dropped: nothing goes to it or from it; the others keep their offsets.
  const fleet::GossipGraph g = GossipRoundGraph(sync, {true, false, true, true}, 7, 1);
  CHECK(g.out[0].empty());  // 0 -> 1, down
  CHECK(g.out[1].empty());
  CHECK(g.out[2] == std::vector<int>{3});
  CHECK(g.out[3] == std::vector<int>{0});
}

TEST_CASE("a gossip slice frame decodes as the job sends it", "[gossip]") {
  // Two replicas; slice 3 of 8 coordinates. Over q4 links a round's frame (microbatch below
  // the final tag, 2) is a link frame, the final average's a push-sum frame; without a link
  // codec every frame is a push-sum frame. Each kind is refused where the other is due.
  const auto codec = fleet::GossipLinkCodec("q4");
  REQUIRE(codec.ok());
  const std::vector<fleet::SyncSlice> slices = {{3, 0, 8}};
  auto node = fleet::LinkGossipNode::Create(0, 2, slices, 8, "q4", false);
  REQUIRE(node.ok());
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.25f, 0.0f, 1.5f, -0.75f, 3.0f};
  (*node)->Reset(x);
  auto link = (*node)->Frame(0, 1, 0, x);
  REQUIRE(link.ok());
  std::vector<uint32_t> all(8);
  for (uint32_t c = 0; c < 8; ++c) all[c] = c;
  const std::vector<uint8_t> push = fleet::EncodeGossipFrame(3, all, x, std::vector<float>(8, 1));
  const std::optional<compression::CodecSpec> q4 = *codec, none;
  auto round = DecodeGossipSliceFrame(*link, 3, 8, q4, false, /*microbatch=*/1, 2);
  REQUIRE(round.ok());
  CHECK(round->link.has_value());
  CHECK_FALSE(round->gossip.has_value());
  CHECK(GossipLinkRoundFrame(true, 1, 2));
  auto final_average = DecodeGossipSliceFrame(push, 3, 8, q4, false, GossipFinalTag(2), 2);
  REQUIRE(final_average.ok());
  CHECK(final_average->gossip.has_value());
  CHECK(final_average->gossip->x == x);
  CHECK_FALSE(GossipLinkRoundFrame(true, GossipFinalTag(2), 2));
  auto plain = DecodeGossipSliceFrame(push, 3, 8, none, false, 1, 2);
  REQUIRE(plain.ok());
  CHECK(plain->gossip.has_value());
  CHECK_FALSE(DecodeGossipSliceFrame(push, 3, 8, q4, false, 1, 2).ok());
  CHECK_FALSE(DecodeGossipSliceFrame(*link, 3, 8, none, false, 1, 2).ok());
  CHECK_FALSE(DecodeGossipSliceFrame(*link, 4, 8, q4, false, 1, 2).ok());  // another slice
}

TEST_CASE("a site checks an assignment's gossip links", "[gossip]") {
  const std::string job =
      "name: g\nmodel: {layers: 4, channels: 32, heads: 2, vocab: 256, context: 32}\n"
      "data: {train: builtin}\nsteps: 10\nbatch_size: 4\nmicrobatch_size: 2\nseq_len: 32\n"
      "sites: [a, b, c, d]\nplacement: even\nreplicas: 2\ncheckpoint: {every: 2}\n";
  auto gossip =
      ParseJobSpec(job + "sync: {mode: local, every: 2, reduce: gossip}\n", "job.yaml", ".");
  REQUIRE(gossip.ok());
  auto ring = ParseJobSpec(job + "sync: {mode: local, every: 2, reduce: ring}\n", "job.yaml", ".");
  REQUIRE(ring.ok());
  v1::StageAssignment a;
  a.set_job_id("j1");
  a.set_coordinator("a");
  *a.mutable_stages() = Plan({{"a", "b"}, {"c", "d"}});
  a.set_stage(2);
  CHECK(CheckAssignment(a, *gossip, "c").ok());  // no matrix: every link alike
  for (double v : {0.0, 5e6, 7e6, 0.0}) a.add_gossip_links(v);
  CHECK(CheckAssignment(a, *gossip, "c").ok());
  auto refused = [&](const JobSpec& spec) {
    const Status s = CheckAssignment(a, spec, "c");
    CHECK_FALSE(s.ok());
    return std::string(s.message());
  };
  CHECK_THAT(refused(*ring), Catch::Contains("sync.reduce is ring"));
  a.set_gossip_links(2, -1);
  CHECK_THAT(refused(*gossip), Catch::Contains("from replica 1 to replica 0"));
  for (double bad : {std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity(), 2e15, 0.0}) {
    a.set_gossip_links(2, bad);
    CHECK_THAT(refused(*gossip), Catch::Contains("want a bandwidth in (0, 1e15]"));
  }
  a.set_gossip_links(2, 1);
  a.set_gossip_links(0, 3);  // the diagonal is never drawn: any figure in range
  CHECK(CheckAssignment(a, *gossip, "c").ok());
  a.add_gossip_links(3);
  CHECK_THAT(refused(*gossip), Catch::Contains("5 values for 2 replicas (want 4)"));
}

TEST_CASE("an attempt's link matrices by round, and when the links moved enough", "[gossip]") {
  GossipLinkSchedule s({0, 5, 5, 0});
  CHECK(s.At(0).epoch == 0);
  CHECK(s.At(100).links == std::vector<double>{0, 5, 5, 0});
  REQUIRE(s.Add(1, 4, {0, 50, 5, 0}).ok());
  REQUIRE(s.Add(2, 9, {0, 50, 50, 0}).ok());
  CHECK(s.At(3).epoch == 0);
  CHECK(s.At(4).epoch == 1);
  CHECK(s.At(8).links[1] == 50);
  CHECK(s.At(9).epoch == 2);
  CHECK(s.At(1000).epoch == 2);
  CHECK(s.latest().from_round == 9);
  CHECK(s.Add(2, 9, {0, 50, 50, 0}).ok());  // told again: nothing changes
  CHECK(s.At(9).epoch == 2);
  CHECK_FALSE(s.Add(2, 10, {0, 50, 50, 0}).ok());  // epoch 2 otherwise
  CHECK_FALSE(s.Add(4, 20, {}).ok());              // skips epoch 3
  CHECK_FALSE(s.Add(3, 9, {}).ok());               // not after epoch 2's round
  CHECK_FALSE(s.Add(0, 20, {}).ok());              // the assignment's
  // A factor of 2 either way, or a shape that changed, moves the links.
  CHECK_FALSE(GossipLinksMoved({0, 10, 10, 0}, {0, 19, 6, 0}));
  CHECK(GossipLinksMoved({0, 10, 10, 0}, {0, 20, 10, 0}));
  CHECK(GossipLinksMoved({0, 10, 10, 0}, {0, 10, 5, 0}));
  CHECK(GossipLinksMoved({}, {0, 10, 10, 0}));
  CHECK(GossipLinksMoved({0, 10, 10, 0}, {0, 10, 0, 0}));
}

}  // namespace
}  // namespace longhaul::daemon
