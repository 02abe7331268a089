// Replicated placement priced by hand: two single-stage replicas whose sync is one model's
// parameters in q4 over a known link (one sync's seconds, hidden behind `every` steps or
// exposed), lockstep against paced throughput when one replica is slower, the planner finding
// as many replicas as the sites allow when the network is fast, and replicas aligned to one
// stage count and one split (the runtime's shape), with an exact count or none; replicas paced
// by microbatches (a slower one trains fewer per step).
#include "scheduler/replica_planner.h"

#include <catch2/catch.hpp>
#include <set>

#include "fleet/sync_slices.h"
#include "model/layout.h"
#include "test/scheduler/test_util.h"

namespace longhaul::scheduler {
namespace {

using testing::Mesh;
using testing::SmallModel;
using testing::Workload;

PlanResult OneStage(const std::string& site, int layers, double step_seconds, int64_t tokens) {
  PlanResult r;
  r.stages = {{site, 0, layers}};
  r.estimate.step_seconds = step_seconds;
  r.estimate.tokens_per_step = tokens;
  return r;
}

TEST_CASE("a sync is each stage's parameters over the slowest flow, hidden behind the steps",
          "[replicas]") {
  const auto config = SmallModel(4);
  const PipelineWorkload w = Workload(4);
  const int64_t tokens = int64_t{w.microbatch_size} * w.seq_len * w.microbatches;
  Profiles p = Mesh({1e12, 1e12}, 1e6, 0.01);  // 1 MB/s, 10 ms
  const double params = static_cast<double>(model::NumParameters(config));
  SyncCostOptions sync;
  sync.every = 10;
  sync.overlap = 10;
  sync.bytes_per_value = 0.5;
  const ReplicaPlan a = PriceReplicas(
      p, config, w, {OneStage("s0", 4, 1.0, tokens), OneStage("s1", 4, 1.0, tokens)}, sync);
  const double one_sync = params * 0.5 / 1e6 + 0.01;
  CHECK(a.sync_seconds == Approx(one_sync));
  CHECK(a.sync_bytes == Approx(2 * params * 0.5));
  CHECK(a.sites_used == 2);
  // Streamed behind 10 steps of 1 s: exposed only beyond them.
  CHECK(a.exposed_sync_per_step == Approx(std::max(0.0, one_sync - 10) / 10));
  CHECK(a.tokens_per_second == Approx(2 * tokens / (1.0 + a.exposed_sync_per_step)));
  sync.overlap = 0;
  const ReplicaPlan b = PriceReplicas(
      p, config, w, {OneStage("s0", 4, 1.0, tokens), OneStage("s1", 4, 1.0, tokens)}, sync);
  CHECK(b.exposed_sync_per_step == Approx(one_sync / 10));
  // Staggered in 2 phases: blocking, the same time per round; streamed, each half hides
  // behind its own 4 steps.
  sync.stagger = 2;
  const ReplicaPlan halves = PriceReplicas(
      p, config, w, {OneStage("s0", 4, 1.0, tokens), OneStage("s1", 4, 1.0, tokens)}, sync);
  CHECK(halves.exposed_sync_per_step == Approx(one_sync / 10));
  sync.overlap = 4;
  const ReplicaPlan streamed_halves = PriceReplicas(
      p, config, w, {OneStage("s0", 4, 1.0, tokens), OneStage("s1", 4, 1.0, tokens)}, sync);
  const std::vector<double> shares = fleet::PhaseShares(model::ParameterLayout(config), 2);
  CHECK(streamed_halves.exposed_sync_per_step ==
        Approx((std::max(0.0, one_sync * shares[0] - 4) + std::max(0.0, one_sync * shares[1] - 4)) /
               10));
  CHECK(streamed_halves.exposed_sync_per_step < halves.exposed_sync_per_step);
  sync.stagger = 1;
  // A warm-up of a fifth of the steps (sync.warmup): each of them syncs the whole model,
  // blocking; the rest every 10 steps as before. The same in the paced figure.
  sync.overlap = 0;
  sync.warmup_fraction = 0.2;
  const ReplicaPlan warm = PriceReplicas(
      p, config, w, {OneStage("s0", 4, 1.0, tokens), OneStage("s1", 4, 1.0, tokens)}, sync);
  CHECK(warm.exposed_sync_per_step == Approx(0.8 * one_sync / 10 + 0.2 * one_sync));
  CHECK(warm.tokens_per_second == Approx(2 * tokens / (1.0 + warm.exposed_sync_per_step)));
  CHECK(warm.paced_tokens_per_second == Approx(warm.tokens_per_second));
  CHECK(warm.tokens_per_second < b.tokens_per_second);
  sync.warmup_fraction = 0;

  // One replica twice as slow: lockstep goes at its pace, paced adds each one's own rate.
  sync.overlap = sync.every;
  sync.bytes_per_value = 1e-9;  // a free sync
  const ReplicaPlan c = PriceReplicas(
      p, config, w, {OneStage("s0", 4, 1.0, tokens), OneStage("s1", 4, 2.0, tokens)}, sync);
  CHECK(c.tokens_per_second == Approx(2 * tokens / 2.0).epsilon(1e-3));
  CHECK(c.paced_tokens_per_second == Approx(tokens / 1.0 + tokens / 2.0).epsilon(1e-3));
}

TEST_CASE("gathered or around a ring: a site's sync flows share its uplink", "[replicas]") {
  const auto config = SmallModel(4);
  const PipelineWorkload w = Workload(4);
  const int64_t tokens = int64_t{w.microbatch_size} * w.seq_len * w.microbatches;
  const Profiles p = Mesh({1e12, 1e12, 1e12, 1e12}, 1e6, 0.01);                  // 1 MB/s, 10 ms
  const double frame = static_cast<double>(model::NumParameters(config)) * 0.5;  // bytes
  std::vector<PlanResult> four;
  for (int i = 0; i < 4; ++i) four.push_back(OneStage("s" + std::to_string(i), 4, 1.0, tokens));
  SyncCostOptions sync;
  sync.bytes_per_value = 0.5;
  // Gather: 3 frames out of each site through its one uplink; each flow alone would take one.
  ReplicaPlan g = PriceReplicas(p, config, w, four, sync);
  CHECK(!g.ring);
  CHECK(g.sync_seconds == Approx(3 * frame / 1e6 + 0.01));
  CHECK(g.sync_bytes == Approx(12 * frame));
  sync.shared_uplink = false;
  CHECK(PriceReplicas(p, config, w, four, sync).sync_seconds == Approx(frame / 1e6 + 0.01));
  sync.shared_uplink = true;
  // Ring: 2 (N - 1) / N = 1.5 frames to the next site, 6 hops of latency.
  sync.reduce = SyncReduceCost::kRing;
  ReplicaPlan r = PriceReplicas(p, config, w, four, sync);
  CHECK(r.ring);
  CHECK(r.sync_seconds == Approx(1.5 * frame / 1e6 + 6 * 0.01));
  CHECK(r.sync_bytes == Approx(4 * 1.5 * frame));
  CHECK(r.sync_bottleneck == "s0 -> s1");  // ties: the first ring member priced
  // Cheaper: the ring for four, the gather for two (one flow each; the ring's second hop only
  // adds latency).
  sync.reduce = SyncReduceCost::kCheaper;
  ReplicaPlan c = PriceReplicas(p, config, w, four, sync);
  CHECK(c.ring);
  CHECK(c.gather_seconds == Approx(g.sync_seconds));
  CHECK(c.ring_seconds == Approx(r.sync_seconds));
  const std::vector<PlanResult> two(four.begin(), four.begin() + 2);
  ReplicaPlan c2 = PriceReplicas(p, config, w, two, sync);
  CHECK(!c2.ring);
  CHECK(c2.ring_seconds == Approx(frame / 1e6 + 2 * 0.01));
  CHECK(c2.sync_seconds == Approx(frame / 1e6 + 0.01));
  // A replica on one stage beside one on two holds the tied embedding differently: no ring
  // agrees on it (the runtime gathers), so none is priced, asked for or not.
  PlanResult split;
  split.stages = {{"s2", 0, 2}, {"s3", 2, 4}};
  split.estimate.step_seconds = 1.0;
  split.estimate.tokens_per_step = tokens;
  const std::vector<PlanResult> mixed = {four[0], four[1], split};
  for (SyncReduceCost reduce : {SyncReduceCost::kRing, SyncReduceCost::kCheaper}) {
    sync.reduce = reduce;
    const ReplicaPlan m = PriceReplicas(p, config, w, mixed, sync);
    CHECK(!m.ring);
    CHECK(m.ring_seconds == 0);
    CHECK(m.gather_seconds > 0);
  }
}

TEST_CASE("the ring's order: the replicas ordered so that no hop takes a slow link", "[replicas]") {
  const auto config = SmallModel(4);
  const PipelineWorkload w = Workload(4);
  const int64_t tokens = int64_t{w.microbatch_size} * w.seq_len * w.microbatches;
  Profiles p = Mesh({1e12, 1e12, 1e12, 1e12}, 1e7, 0.001);
  // s0 <-> s1 and s2 <-> s3 are slow: the ring in replica order takes both.
  for (LinkProfile& l : p.links) {
    const std::set<std::string> ends = {l.from, l.to};
    if (ends == std::set<std::string>{"s0", "s1"} || ends == std::set<std::string>{"s2", "s3"}) {
      l.bandwidth_bytes_per_second = 1e5;
    }
  }
  std::vector<PlanResult> four;
  for (int i = 0; i < 4; ++i) four.push_back(OneStage("s" + std::to_string(i), 4, 1.0, tokens));
  std::vector<int> microbatches = {1, 2, 3, 4};
  const std::vector<PlanResult> ordered = OrderForRing(p, config, four, &microbatches);
  REQUIRE(ordered.size() == 4);
  std::vector<std::string> sites;
  for (const auto& r : ordered) sites.push_back(r.stages[0].site);
  INFO(sites[0] << " " << sites[1] << " " << sites[2] << " " << sites[3]);
  CHECK(sites[0] == "s0");
  for (size_t i = 0; i < 4; ++i) {
    const std::set<std::string> hop = {sites[i], sites[(i + 1) % 4]};
    CHECK(hop != std::set<std::string>{"s0", "s1"});
    CHECK(hop != std::set<std::string>{"s2", "s3"});
  }
  // The microbatches went with their replicas.
  for (size_t i = 0; i < 4; ++i) CHECK(microbatches[i] == 1 + (sites[i][1] - '0'));
  SyncCostOptions sync;
  sync.reduce = SyncReduceCost::kRing;
  sync.bytes_per_value = 0.5;
  const double frame = static_cast<double>(model::NumParameters(config)) * 0.5;
  CHECK(PriceReplicas(p, config, w, four, sync).sync_seconds ==
        Approx(1.5 * frame / 1e5 + 6 * 0.001));
  CHECK(PriceReplicas(p, config, w, ordered, sync).sync_seconds ==
        Approx(1.5 * frame / 1e7 + 6 * 0.001));
}

TEST_CASE("gossip: a round is each site's fanout flows over its fastest links", "[replicas]") {
  const auto config = SmallModel(4);
  const PipelineWorkload w = Workload(4);
  const int64_t tokens = int64_t{w.microbatch_size} * w.seq_len * w.microbatches;
  Profiles p = Mesh({1e12, 1e12, 1e12, 1e12}, 1e7, 0.001);  // 10 MB/s, 1 ms
  // s0's links to s1 and s2 are slow: its gossip goes to s3.
  for (LinkProfile& l : p.links) {
    if (l.from == "s0" && (l.to == "s1" || l.to == "s2")) l.bandwidth_bytes_per_second = 1e5;
  }
  const double frame = static_cast<double>(model::NumParameters(config)) * 0.5;
  std::vector<PlanResult> four;
  for (int i = 0; i < 4; ++i) four.push_back(OneStage("s" + std::to_string(i), 4, 1.0, tokens));
  SyncCostOptions sync;
  sync.bytes_per_value = 0.5;
  sync.reduce = SyncReduceCost::kGossip;
  sync.fanout = 1;
  const ReplicaPlan g1 = PriceReplicas(p, config, w, four, sync);
  CHECK(g1.gossip);
  CHECK_FALSE(g1.ring);
  // One frame from each site to one other, over a fast link, one hop of latency.
  CHECK(g1.sync_bytes == Approx(4 * frame));
  CHECK(g1.sync_seconds == Approx(frame / 1e7 + 0.001));
  CHECK(g1.gossip_seconds == g1.sync_seconds);
  CHECK(g1.gossip_rounds > 1);
  CHECK(g1.gossip_rounds < 1000);
  // Fanout 2: s0 has only one fast link left, so its second flow is a slow one; twice the bytes.
  sync.fanout = 2;
  const ReplicaPlan g2 = PriceReplicas(p, config, w, four, sync);
  CHECK(g2.sync_bytes == Approx(8 * frame));
  CHECK(g2.sync_seconds == Approx(frame / 1e5 + 0.001));
  CHECK(g2.sync_bottleneck == "s0 -> s1");
  CHECK(g2.gossip_rounds <= g1.gossip_rounds);
  // Fanout 3 is the gather's traffic; gather and ring are not priced for a gossip job.
  sync.fanout = 3;
  const ReplicaPlan g3 = PriceReplicas(p, config, w, four, sync);
  sync.reduce = SyncReduceCost::kGather;
  CHECK(g3.sync_bytes == Approx(PriceReplicas(p, config, w, four, sync).sync_bytes));
  CHECK(g3.ring_seconds == 0);
  // A replica whose links are all down is no cheap round: priced as no link, and named.
  Profiles cut = p;
  for (LinkProfile& l : cut.links) {
    if (l.from == "s2") l.bandwidth_bytes_per_second = 0;
  }
  sync.reduce = SyncReduceCost::kGossip;
  sync.fanout = 1;
  const ReplicaPlan stranded = PriceReplicas(cut, config, w, four, sync);
  CHECK(stranded.sync_seconds >= 1e30);
  CHECK(stranded.sync_bottleneck == "s2 -> none");
  // Never chosen by `cheaper`: it trades rounds for bytes, which the study weighs, not this.
  sync.reduce = SyncReduceCost::kCheaper;
  CHECK_FALSE(PriceReplicas(p, config, w, four, sync).gossip);
}

TEST_CASE("on a fast network the planner runs a replica on every site", "[replicas]") {
  const auto config = SmallModel(4);
  const Profiles p = Mesh({1e12, 1e12, 1e12, 1e12}, 1e11, 0.001);
  PlannerOptions po;
  po.time_budget_seconds = 1;
  const Planner planner(p, po);
  ReplicaPlanRequest r;
  r.request.model = config;
  r.request.workload = Workload(4);
  r.request.sites = {"s0", "s1", "s2", "s3"};
  auto single = planner.Plan(r.request);
  auto fleet = PlanReplicas(planner, r);
  REQUIRE(single.ok());
  REQUIRE(fleet.ok());
  CHECK(fleet->sites_used == 4);
  CHECK(fleet->tokens_per_second > 1.5 * single->estimate.tokens_per_second);
  r.max_replicas = 1;
  auto one = PlanReplicas(planner, r);
  REQUIRE(one.ok());
  CHECK(one->replicas.size() == 1);
}

PlanResult Stages(std::vector<StagePlan> stages) {
  PlanResult r;
  r.stages = std::move(stages);
  return r;
}

// Every replica has the same stage count and layer ranges, on sites of its own.
void CheckAligned(const std::vector<PlanResult>& replicas, int layers) {
  REQUIRE(!replicas.empty());
  std::set<std::string> sites;
  for (const PlanResult& r : replicas) {
    REQUIRE(r.stages.size() == replicas[0].stages.size());
    CHECK(r.stages.front().layer_begin == 0);
    CHECK(r.stages.back().layer_end == layers);
    for (size_t i = 0; i < r.stages.size(); ++i) {
      CHECK(r.stages[i].layer_begin == replicas[0].stages[i].layer_begin);
      CHECK(r.stages[i].layer_end == replicas[0].stages[i].layer_end);
      CHECK(sites.insert(r.stages[i].site).second);  // no site in two replicas
    }
    CHECK(r.estimate.step_seconds > 0);
  }
}

TEST_CASE("gossip: the tied embedding goes between first stages and on to the last stage",
          "[replicas]") {
  const auto config = SmallModel(4);
  REQUIRE(model::TiedHead(config));
  const PipelineWorkload w = Workload(4);
  Profiles p = Mesh({1e12, 1e12, 1e12, 1e12}, 1e7, 0.001);  // 10 MB/s, 1 ms
  const std::vector<PlanResult> two = {Stages({{"s0", 0, 2}, {"s1", 2, 4}}),
                                       Stages({{"s2", 0, 2}, {"s3", 2, 4}})};
  SyncCostOptions sync;
  sync.bytes_per_value = 0.5;
  sync.fanout = 1;
  sync.reduce = SyncReduceCost::kGather;
  const ReplicaPlan gather = PriceReplicas(p, config, w, two, sync);
  sync.reduce = SyncReduceCost::kGossip;
  const ReplicaPlan gossip = PriceReplicas(p, config, w, two, sync);
  // With two replicas each has one in-neighbour: the wte frame the last stages no longer send
  // each other crosses each replica's first-to-last link instead, the same bytes in all.
  CHECK(gossip.sync_bytes == Approx(gather.sync_bytes));
  // A slow link inside replica 0, from its first stage to its last, is now a gossip round's
  // bottleneck: the forwarded frame crosses it.
  const double wte =
      static_cast<double>(model::ParameterLayout(config).size(model::Tensor::kWte)) * 0.5;
  for (LinkProfile& l : p.links) {
    if (l.from == "s0" && l.to == "s1") l.bandwidth_bytes_per_second = 1e4;
  }
  const ReplicaPlan slow = PriceReplicas(p, config, w, two, sync);
  CHECK(slow.sync_bottleneck == "s0 -> s1");
  CHECK(slow.sync_seconds == Approx(wte / 1e4 + 0.001));
  sync.reduce = SyncReduceCost::kGather;
  CHECK(PriceReplicas(p, config, w, two, sync).sync_seconds < slow.sync_seconds / 10);
}

TEST_CASE("replicas are aligned to one stage count and one split", "[replicas]") {
  const auto config = SmallModel(4);
  // s0 and s2 four times as fast as the others.
  const Profiles p = Mesh({4e9, 1e9, 4e9, 1e9, 1e9}, 1e9, 0.001);
  PlannerOptions po;
  po.time_budget_seconds = 1;
  const Planner planner(p, po);
  PlacementRequest request;
  request.model = config;
  request.workload = Workload(4);
  request.sites = {"s0", "s1", "s2", "s3", "s4"};
  // A: two stages, 3 + 1 layers; B: three stages.
  const std::vector<PlanResult> given = {
      Stages({{"s0", 0, 3}, {"s1", 3, 4}}),
      Stages({{"s3", 0, 1}, {"s2", 1, 2}, {"s4", 2, 4}}),
  };
  auto aligned = AlignReplicas(planner, request, given);
  INFO(aligned.status().ToString());
  REQUIRE(aligned.ok());
  REQUIRE(aligned->size() == 2);
  CheckAligned(*aligned, 4);
  REQUIRE((*aligned)[0].stages.size() == 2);
  // B keeps its two sites of most FLOP/s (s2 and one of s3, s4), and its fast site takes
  // the stage with more layers whichever split won.
  const auto& b = (*aligned)[1].stages;
  CHECK((b[0].site == "s2" || b[1].site == "s2"));
  const size_t big = b[0].layers() >= b[1].layers() ? 0 : 1;
  CHECK(b[big].site == "s2");
  // Priced by the cost model as given.
  auto model = planner.Model(request);
  REQUIRE(model.ok());
  for (const PlanResult& r : *aligned) {
    auto e = model->Estimate(r.stages);
    REQUIRE(e.ok());
    CHECK(e->step_seconds == Approx(r.estimate.step_seconds));
  }
}

TEST_CASE("the planner's aligned replicas: an exact count, or a clear error", "[replicas]") {
  const auto config = SmallModel(4);
  const Profiles p = Mesh({4e9, 1e9, 2e9, 1e9, 3e9, 1e9}, 1e8, 0.005);
  PlannerOptions po;
  po.time_budget_seconds = 1;
  const Planner planner(p, po);
  ReplicaPlanRequest r;
  r.request.model = config;
  r.request.workload = Workload(4);
  r.request.sites = {"s0", "s1", "s2", "s3", "s4", "s5"};
  r.aligned = true;
  auto any = PlanReplicas(planner, r);
  REQUIRE(any.ok());
  CheckAligned(any->replicas, 4);
  for (int n : {1, 2, 3}) {
    INFO(n << " replicas");
    r.max_replicas = n;
    r.exact_count = true;
    auto exact = PlanReplicas(planner, r);
    INFO(exact.status().ToString());
    REQUIRE(exact.ok());
    CHECK(exact->replicas.size() == static_cast<size_t>(n));
    CheckAligned(exact->replicas, 4);
  }
  r.max_replicas = 7;  // more than the sites
  auto too_many = PlanReplicas(planner, r);
  REQUIRE_FALSE(too_many.ok());
  CHECK_THAT(std::string(too_many.status().message()),
             Catch::Contains("no 7 replicas fit on the 6 candidate sites"));
}

TEST_CASE("replicas paced by microbatches: a slower replica trains fewer, none waits",
          "[replicas]") {
  const auto config = SmallModel(4);
  // Four single-site replicas: s0 four times as fast as s3, s1 and s2 in between.
  const Profiles p = Mesh({4e9, 3e9, 2e9, 1e9}, 1e11, 0.001);
  PlannerOptions po;
  po.time_budget_seconds = 1;
  const Planner planner(p, po);
  PlacementRequest request;
  request.model = config;
  request.workload = Workload(8);
  request.sites = {"s0", "s1", "s2", "s3"};
  std::vector<PlanResult> replicas = {Stages({{"s0", 0, 4}}), Stages({{"s1", 0, 4}}),
                                      Stages({{"s2", 0, 4}}), Stages({{"s3", 0, 4}})};
  auto counts = PaceReplicas(planner, request, &replicas);
  INFO(counts.status().ToString());
  REQUIRE(counts.ok());
  REQUIRE(counts->size() == 4);
  CHECK((*counts)[0] == 8);  // the fastest keeps the job's count
  double pace = 0;
  for (const PlanResult& r : replicas) pace = std::max(pace, r.estimate.step_seconds);
  for (size_t r = 1; r < 4; ++r) {
    INFO("replica " << r);
    CHECK((*counts)[r] <= (*counts)[r - 1]);  // slower, no more
    CHECK((*counts)[r] >= 1);
    if ((*counts)[r] == 8) continue;
    // One more microbatch would not fit the pace.
    PlacementRequest more = request;
    more.workload.microbatches = (*counts)[r] + 1;
    auto model = planner.Model(more);
    REQUIRE(model.ok());
    auto e = model->Estimate(replicas[r].stages);
    REQUIRE(e.ok());
    CHECK(e->step_seconds > pace);
  }
  CHECK((*counts)[3] < 8);  // a quarter of the speed: paced, not lockstep
  // Priced in lockstep at those counts: more tokens/s than all four at the slowest's pace,
  // the tokens each replica's own.
  SyncCostOptions sync;
  sync.bytes_per_value = 1e-9;
  const ReplicaPlan paced = PriceReplicas(p, config, request.workload, replicas, sync, *counts);
  std::vector<PlanResult> even = {Stages({{"s0", 0, 4}}), Stages({{"s1", 0, 4}}),
                                  Stages({{"s2", 0, 4}}), Stages({{"s3", 0, 4}})};
  auto model = planner.Model(request);
  REQUIRE(model.ok());
  for (PlanResult& r : even) r.estimate = *model->Estimate(r.stages);
  const ReplicaPlan lockstep = PriceReplicas(p, config, request.workload, even, sync);
  CHECK(paced.tokens_per_second > 1.5 * lockstep.tokens_per_second);
  int sum = 0;
  for (int c : *counts) sum += c;
  const PipelineWorkload& w = request.workload;
  CHECK(paced.tokens_per_second ==
        Approx(double(sum) * w.microbatch_size * w.seq_len / paced.step_seconds));

  // The planner, aligned and paced: every site used, counts by replica in the plan.
  ReplicaPlanRequest r;
  r.request = request;
  r.aligned = true;
  r.paced = true;
  r.sync = sync;
  auto plan = PlanReplicas(planner, r);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  CheckAligned(plan->replicas, 4);
  CHECK(plan->sites_used == 4);
  REQUIRE(plan->microbatches.size() == plan->replicas.size());
  r.paced = false;
  auto unpaced = PlanReplicas(planner, r);
  REQUIRE(unpaced.ok());
  CHECK(unpaced->microbatches.empty());
  CHECK(plan->tokens_per_second > unpaced->tokens_per_second);
}

}  // namespace
TEST_CASE("replicas each with its own split, paced by microbatches", "[replicas]") {
  const auto config = SmallModel(4);
  const Profiles p = Mesh({4e9, 1e9, 4e9, 1e9, 1e9, 2e9}, 1e9, 0.001);
  PlannerOptions po;
  po.time_budget_seconds = 1;
  const Planner planner(p, po);
  ReplicaPlanRequest r;
  r.request.model = config;
  r.request.workload = Workload(8);
  r.request.sites = {"s0", "s1", "s2", "s3", "s4", "s5"};
  r.microbatch_paced = true;
  auto plan = PlanReplicas(planner, r);
  INFO(plan.status().ToString());
  REQUIRE(plan.ok());
  REQUIRE(plan->microbatches.size() == plan->replicas.size());
  std::set<std::string> sites;
  int used = 0;
  for (size_t k = 0; k < plan->replicas.size(); ++k) {
    INFO("replica " << k);
    const auto& stages = plan->replicas[k].stages;
    CHECK(stages.front().layer_begin == 0);
    CHECK(stages.back().layer_end == 4);
    for (size_t i = 1; i < stages.size(); ++i) {
      CHECK(stages[i].layer_begin == stages[i - 1].layer_end);
    }
    for (const auto& st : stages) sites.insert(st.site);
    used += static_cast<int>(stages.size());
    CHECK(plan->microbatches[k] >= 1);
    CHECK(plan->microbatches[k] <= 8);
  }
  CHECK(static_cast<int>(sites.size()) == used);  // each site in one replica
  CHECK(plan->sites_used == used);
  // Priced in lockstep at its counts, as PriceReplicas gives them.
  const ReplicaPlan again =
      PriceReplicas(p, config, r.request.workload, plan->replicas, r.sync, plan->microbatches);
  CHECK(again.tokens_per_second == Approx(plan->tokens_per_second));
  // With an exact count, that many.
  r.max_replicas = 2;
  r.exact_count = true;
  auto two = PlanReplicas(planner, r);
  REQUIRE(two.ok());
  CHECK(two->replicas.size() == 2);
  CHECK(two->microbatches.size() == 2);
}

}  // namespace longhaul::scheduler
