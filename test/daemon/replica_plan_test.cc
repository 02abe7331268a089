// The pieces of replicated jobs that need no network: the job file's `replicas` and `sync`
// keys (defaults, values, errors naming the key), the adaptive sync codec's choices, the stage
// grid, plan checks with replicas,
// the barrier's per-replica clipping scales, and sync state files (round trip; a flipped byte,
// a truncation or sizes that do not fit the fragment are DataLoss, never loaded).
#include <xxhash.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/job/checks/job_checks.h"
#include "daemon/job/coordinator/step_barrier.h"
#include "daemon/job/spec/job_spec.h"
#include "daemon/job/spec/stage_grid.h"
#include "daemon/job/state/sync_checkpoint.h"
#include "daemon/job/sync/sync_codec.h"
#include "daemon/job/sync/sync_routes.h"
#include "model/durable_file.h"
#include "model/layout.h"
#include "test/daemon/test_util.h"

namespace longhaul::daemon {
namespace {

std::string Job(const std::string& extra) {
  return "name: r\nmodel: {layers: 4, channels: 32, heads: 2, vocab: 256, context: 32}\n"
         "data: {train: builtin}\nsteps: 10\nbatch_size: 4\nmicrobatch_size: 2\nseq_len: 32\n"
         "sites: [a, b, c, d]\nplacement: even\n" +
         extra;
}

// Why a two-replica job with `sync` and checkpoints every `checkpoint_every` of `steps` steps
// is refused.
std::string ScheduleError(const std::string& sync, int steps, int checkpoint_every) {
  std::string yaml = Job("replicas: 2\nsync: " + sync + "\n");
  yaml.replace(yaml.find("steps: 10"), 9,
               "steps: " + std::to_string(steps) +
                   "\ncheckpoint: {every: " + std::to_string(checkpoint_every) + "}");
  const auto parsed = ParseJobSpec(yaml, "job.yaml", ".");
  REQUIRE_FALSE(parsed.ok());
  return std::string(parsed.status().message());
}

model::ModelConfig TinyConfig() { return model::MakeConfig(4, 32, 2, 256, 32); }

TEST_CASE("replicas and sync in a job file", "[replicas]") {
  auto one = ParseJobSpec(Job(""), "job.yaml", ".");
  REQUIRE(one.ok());
  CHECK(one->replicas == 1);
  CHECK(one->stages() == 4);

  auto two = ParseJobSpec(Job("replicas: 2\n"), "job.yaml", ".");
  REQUIRE(two.ok());
  CHECK(two->stages() == 2);
  CHECK(two->sync.mode == fleet::SyncMode::kLocal);
  CHECK(two->sync.codec == "q4");  // local mode's default
  CHECK(two->sync.every == 50);
  CHECK_FALSE(two->replan);  // not re-planned with replicas

  auto step = ParseJobSpec(Job("replicas: 2\nsync: {mode: step}\n"), "job.yaml", ".");
  REQUIRE(step.ok());
  CHECK(step->sync.codec == "exact");

  auto full = ParseJobSpec(Job("replicas: 4\nsync:\n  mode: local\n  every: 10\n"
                               "  outer: {lr: 0.5, momentum: 0.8, nesterov: false}\n"
                               "  codec: topk:0.03+q4\n"),
                           "job.yaml", ".");
  REQUIRE(full.ok());
  CHECK(full->stages() == 1);
  CHECK(full->sync.every == 10);
  CHECK(full->sync.outer.lr == 0.5f);
  CHECK(full->sync.outer.momentum == 0.8f);
  CHECK_FALSE(full->sync.outer.nesterov);
  CHECK(full->sync.codec == "topk:0.03+q4");
  // With top-k the outer step defaults to plain averaging (a given value stays).
  auto topk = ParseJobSpec(Job("replicas: 2\nsync: {codec: topk:0.03+q4}\n"), "job.yaml", ".");
  REQUIRE(topk.ok());
  CHECK(topk->sync.outer.lr == 1.0f);
  CHECK(topk->sync.outer.momentum == 0.0f);
  auto topk_lr = ParseJobSpec(Job("replicas: 2\nsync: {codec: topk:0.03+q4, outer: {lr: 0.5}}\n"),
                              "job.yaml", ".");
  REQUIRE(topk_lr.ok());
  CHECK(topk_lr->sync.outer.lr == 0.5f);
  CHECK(topk_lr->sync.outer.momentum == 0.0f);
  // q4 every 50 (local mode's default cadence): Nesterov lr 1, momentum 0.5.
  CHECK(two->sync.outer.lr == 1.0f);
  CHECK(two->sync.outer.momentum == 0.5f);
  CHECK(two->sync.outer.nesterov);
  // The cadence decides for dense codecs: plain averaging below every 10, momentum from 10 on;
  // with gossip always plain averaging; a given value stays and the other follows the rule.
  auto outer_of = [](const std::string& sync) {
    auto s = ParseJobSpec(Job("replicas: 2\nsync: " + sync + "\n"), "job.yaml", ".");
    REQUIRE(s.ok());
    return s->sync.outer;
  };
  CHECK(outer_of("{every: 9}").momentum == 0.0f);
  CHECK(outer_of("{every: 9}").lr == 1.0f);
  CHECK(outer_of("{every: 5, codec: exact, reduce: ring}").momentum == 0.0f);
  CHECK(outer_of("{every: 10}").momentum == 0.5f);
  CHECK(outer_of("{every: 10, codec: adaptive}").momentum == 0.5f);
  CHECK(outer_of("{every: 10, reduce: gossip}").momentum == 0.0f);
  CHECK(outer_of("{every: 20, codec: topk:0.05+q4}").momentum == 0.0f);
  CHECK(outer_of("{every: 5, outer: {momentum: 0.3}}").momentum == 0.3f);
  CHECK(outer_of("{every: 5, outer: {momentum: 0.3}}").lr == 1.0f);
  CHECK(outer_of("{every: 50, outer: {lr: 0.7}}").momentum == 0.5f);
  CHECK(outer_of("{every: 50, outer: {lr: 0.7}}").lr == 0.7f);

  auto error = [](const std::string& extra) {
    auto s = ParseJobSpec(Job(extra), "job.yaml", ".");
    REQUIRE_FALSE(s.ok());
    return std::string(s.status().message());
  };
  CHECK_THAT(error("replicas: 3\n"), Catch::Contains("4 sites do not form 3 replicas"));
  // Each replica its own stage count: the sites replica by replica.
  auto split = ParseJobSpec(Job("replicas: 2\nreplica_stages: [3, 1]\n"), "job.yaml", ".");
  REQUIRE(split.ok());
  CHECK(split->stages(0) == 3);
  CHECK(split->stages(1) == 1);
  CHECK(split->first_site(1) == 3);
  auto three = ParseJobSpec(Job("replicas: 3\nreplica_stages: [2, 1, 1]\n"), "job.yaml", ".");
  REQUIRE(three.ok());
  CHECK(three->first_site(2) == 3);
  CHECK_THAT(error("replicas: 2\nreplica_stages: [2, 1]\n"),
             Catch::Contains("3 stages in all, but 4 sites"));
  CHECK_THAT(error("replicas: 2\nreplica_stages: [4]\n"), Catch::Contains("a list of 2"));
  CHECK_THAT(error("replica_stages: [4]\n"), Catch::Contains("replicas: a number of 2"));
  CHECK_THAT(error("replicas: 2\nreplica_stages: [0, 4]\n"), Catch::Contains("replica_stages[0]"));
  CHECK_THAT(error("replicas: 2\nreplica_stages: [5, -1]\n"), Catch::Contains("replica_stages[0]"));
  std::string planned_split = Job("replicas: 2\nreplica_stages: [3, 1]\n");
  planned_split.replace(planned_split.find("placement: even"), 15, "placement: planned");
  const auto planned_error = ParseJobSpec(planned_split, "job.yaml", ".");
  REQUIRE_FALSE(planned_error.ok());
  CHECK_THAT(std::string(planned_error.status().message()),
             Catch::Contains("needs placement: even"));
  CHECK_THAT(error("replicas: 0\n"), Catch::Contains("replicas"));
  CHECK_THAT(error("replicas: auto\n"), Catch::Contains("auto needs placement: planned"));
  CHECK_THAT(error("replicas: 2\nsync: {mode: async}\n"), Catch::Contains("step or local"));
  CHECK_THAT(error("replicas: 2\nsync: {codec: q3}\n"), Catch::Contains("sync.codec"));
  auto adaptive = ParseJobSpec(Job("replicas: 2\nsync: {codec: adaptive}\n"), "job.yaml", ".");
  REQUIRE(adaptive.ok());
  CHECK(adaptive->sync.codec == "adaptive");
  CHECK_THAT(error("replicas: 2\nsync: {every: 0}\n"), Catch::Contains("every"));
  CHECK_THAT(error("replicas: 2\nsync: {outer: {momentum: 1}}\n"), Catch::Contains("momentum"));
  CHECK_THAT(error("replicas: 2\nsync: {cadence: 3}\n"), Catch::Contains("cadence"));
  // Streaming syncs: below every, local mode only, no checkpoint inside one.
  auto streamed = ParseJobSpec(Job("replicas: 2\nsync: {every: 5, overlap: 3}\n"), "job.yaml", ".");
  REQUIRE(streamed.ok());
  CHECK(streamed->sync.overlap == 3);
  CHECK(two->sync.overlap == 0);
  CHECK_THAT(error("replicas: 2\nsync: {every: 5, overlap: 5}\n"), Catch::Contains("overlap"));
  CHECK_THAT(error("replicas: 2\nsync: {mode: step, overlap: 1}\n"),
             Catch::Contains("needs mode local"));
  CHECK_THAT(ScheduleError("{every: 4, overlap: 3}", 10, 6),
             Catch::Contains("checkpoint step 6 (every 6) falls inside the streaming sync started "
                             "at step 4"));
  // Staggered syncs: 1 .. layers phases, local mode with replicas, a streaming sync shorter
  // than the phases' distance, no checkpoint inside any phase's streaming sync.
  CHECK(two->sync.stagger == 1);
  auto staggered =
      ParseJobSpec(Job("replicas: 2\nsync: {every: 8, stagger: 2, overlap: 3}\n"), "job.yaml", ".");
  INFO(staggered.status().ToString());
  REQUIRE(staggered.ok());
  CHECK(staggered->sync.stagger == 2);
  CHECK_THAT(error("replicas: 2\nsync: {every: 8, stagger: 2, overlap: 4}\n"),
             Catch::Contains("[0, every / stagger) = [0, 4)"));
  CHECK_THAT(error("replicas: 2\nsync: {stagger: 5}\n"), Catch::Contains("more phases than"));
  CHECK_THAT(error("replicas: 2\nsync: {stagger: 0}\n"), Catch::Contains("stagger"));
  CHECK_THAT(error("replicas: 2\nsync: {mode: step, stagger: 2}\n"),
             Catch::Contains("needs mode local"));
  CHECK_THAT(error("sync: {stagger: 2}\n"), Catch::Contains("needs replicas"));
  // Volunteers: sites that may join by themselves, not the job's own, in local mode.
  CHECK(two->volunteers.empty());
  auto volunteers =
      ParseJobSpec(Job("replicas: 2\nvolunteers: [epsilon, zeta]\n"), "job.yaml", ".");
  INFO(volunteers.status().ToString());
  REQUIRE(volunteers.ok());
  CHECK(volunteers->volunteers == std::vector<std::string>{"epsilon", "zeta"});
  CHECK_THAT(error("replicas: 2\nvolunteers: [epsilon, epsilon]\n"),
             Catch::Contains("'epsilon' is listed twice"));
  CHECK_THAT(error("replicas: 2\nvolunteers: [Eps]\n"), Catch::Contains("invalid name 'Eps'"));
  CHECK_THAT(error("replicas: 2\nvolunteers: [c]\n"),
             Catch::Contains("'c' is one of the job's sites already"));
  CHECK_THAT(error("replicas: 2\nvolunteers: epsilon\n"),
             Catch::Contains("expected a list of site names"));
  CHECK_THAT(error("replicas: 2\nsync: {mode: step}\nvolunteers: [epsilon]\n"),
             Catch::Contains("sync.mode local"));
  // A warm-up: every step synced at the start, in local mode around rings or gathered.
  CHECK(two->sync.warmup == 0);
  auto warm = ParseJobSpec(Job("replicas: 2\nsync: {every: 8, warmup: 20, reduce: ring}\n"),
                           "job.yaml", ".");
  INFO(warm.status().ToString());
  REQUIRE(warm.ok());
  CHECK(warm->sync.warmup == 20);
  CHECK_THAT(error("replicas: 2\nsync: {warmup: -1}\n"), Catch::Contains("warmup"));
  auto gossip_warm =
      ParseJobSpec(Job("replicas: 2\nsync: {warmup: 5, reduce: gossip}\n"), "job.yaml", ".");
  INFO(gossip_warm.status().ToString());
  CHECK(gossip_warm.ok());  // gossip's plain averaging, a round after each warm-up step
  CHECK_THAT(error("replicas: 2\nsync: {warmup: 5, reduce: gossip, outer: {momentum: 0.5}}\n"),
             Catch::Contains("needs no outer step of its own"));
  CHECK_THAT(error("replicas: 2\nsync: {mode: step, warmup: 5}\n"),
             Catch::Contains("not mode step"));
  // A checkpoint after a warm-up sync is outside any streaming sync (that sync blocked); one
  // inside a streaming sync after the warm-up is still refused.
  {
    std::string yaml = Job("replicas: 2\nsync: {every: 10, overlap: 3, warmup: 20}\n");
    yaml.replace(yaml.find("steps: 10"), 9, "steps: 30\ncheckpoint: {every: 21}");
    const auto parsed = ParseJobSpec(yaml, "job.yaml", ".");
    INFO(parsed.status().ToString());
    CHECK(parsed.ok());
  }
  CHECK_THAT(ScheduleError("{every: 10, overlap: 3}", 30, 21),
             Catch::Contains("checkpoint step 21 (every 21) falls inside"));
  CHECK_THAT(ScheduleError("{every: 10, overlap: 3, warmup: 20}", 100, 21),
             Catch::Contains("checkpoint step 42 (every 21) falls inside the streaming sync "
                             "started at step 40"));
  // Phase 1 starts after step 4 and streams until 7.
  CHECK_THAT(ScheduleError("{every: 8, stagger: 2, overlap: 3}", 10, 6),
             Catch::Contains("checkpoint step 6 (every 6) falls inside the streaming sync started "
                             "at step 4"));
  // A checkpoint before any sync has started, and the same place in the round later inside one.
  CHECK_THAT(ScheduleError("{every: 8, overlap: 3}", 20, 2),
             Catch::Contains("checkpoint step 10 (every 2) falls inside the streaming sync "
                             "started at step 8"));
  // Each replica's microbatches: one count per replica, each at least 1.
  CHECK(two->replica_microbatches.empty());
  CHECK(two->microbatches(1) == 2);  // batch_size / microbatch_size
  auto paced = ParseJobSpec(Job("replicas: 2\nreplica_microbatches: [3, 1]\n"), "job.yaml", ".");
  REQUIRE(paced.ok());
  CHECK(paced->microbatches(0) == 3);
  CHECK(paced->microbatches(1) == 1);
  CHECK_THAT(error("replicas: 2\nreplica_microbatches: [3]\n"),
             Catch::Contains("a list of 2 microbatch counts"));
  CHECK_THAT(error("replicas: 2\nreplica_microbatches: [3, 0]\n"),
             Catch::Contains("replica_microbatches[1]"));
  CHECK_THAT(error("replica_microbatches: [3]\n"), Catch::Contains("needs replicas"));
  CHECK_THAT(error("replicas: 2\nreplica_microbatches: 3\n"), Catch::Contains("a list of 2"));
  // Their shards: a round of all replicas' windows, replica 1's after replica 0's 3 x 2.
  model::DataLoaderOptions shard;
  SetReplicaShard(*paced, {3, 1}, 1, &shard);
  CHECK(shard.shard_block == 2);
  CHECK(shard.shard_round == 8);
  CHECK(shard.shard_offset == 6);
  SetReplicaShard(*two, {2, 2}, 1, &shard);  // equal counts: the equal blocks they always had
  CHECK(shard.round() == 2 * shard.shard_block);
  CHECK(shard.offset() == shard.shard_block);
  // The tied-embedding exchange's codec (compression.tied): exact by default.
  CHECK(one->tied_codec == "exact");
  auto tied = ParseJobSpec(Job("compression: {mode: off, tied: topk:0.1+q8}\n"), "job.yaml", ".");
  REQUIRE(tied.ok());
  CHECK(tied->tied_codec == "topk:0.1+q8");
  const std::string bad_tied = error("compression: {tied: q3}\n");
  CHECK_THAT(bad_tied, Catch::Contains("job.yaml:"));  // where
  CHECK_THAT(bad_tied, Catch::Contains("tied-embedding codec"));
  // With placement: planned the sites are candidates: any count of them, and auto.
  auto planned = [](const std::string& extra) {
    std::string yaml = Job(extra);
    yaml.replace(yaml.find("placement: even"), 15, "placement: planned");
    return ParseJobSpec(yaml, "job.yaml", ".");
  };
  auto p3 = planned("replicas: 3\n");
  REQUIRE(p3.ok());
  CHECK(p3->replicas == 3);
  CHECK_FALSE(p3->replan);
  auto pmb = planned("replicas: 2\nreplica_microbatches: [3, 1]\n");
  REQUIRE_FALSE(pmb.ok());
  CHECK_THAT(std::string(pmb.status().message()), Catch::Contains("say paced"));
  auto ppaced = planned("replicas: auto\nreplica_microbatches: paced\n");
  REQUIRE(ppaced.ok());
  CHECK(ppaced->paced);
  CHECK(ReplicaPlanRequestFor(*ppaced, PlacementRequestFor(*ppaced, ppaced->sites))->paced);
  CHECK_THAT(error("replicas: 2\nreplica_microbatches: paced\n"),
             Catch::Contains("paced needs placement: planned"));
  auto one_paced = planned("replica_microbatches: paced\n");
  REQUIRE_FALSE(one_paced.ok());
  CHECK_THAT(std::string(one_paced.status().message()), Catch::Contains("paced needs replicas"));
  // The planner prices a gossip sync by its frames' bytes: fp32 value and push-sum weight of
  // every coordinate (8), a quarter of them with indices (12) and drifts (16).
  auto bytes_per_value = [&](const std::string& sync) {
    auto spec = planned("replicas: 2\nsync: " + sync + "\n");
    INFO(sync << ": " << spec.status().ToString());
    REQUIRE(spec.ok());
    return ReplicaPlanRequestFor(*spec, PlacementRequestFor(*spec, spec->sites))
        ->sync.bytes_per_value;
  };
  CHECK(bytes_per_value("{mode: local, reduce: gossip}") == Approx(8.0).epsilon(1e-4));
  CHECK(bytes_per_value("{mode: local, reduce: gossip, codec: topk:0.25, tracking: true}") ==
        Approx(4.0).epsilon(1e-4));
  CHECK(bytes_per_value("{mode: local, codec: q4}") == Approx(0.5625).epsilon(0.01));
  auto pauto = planned("replicas: auto\n");
  REQUIRE(pauto.ok());
  CHECK(pauto->replicas == 0);
  CHECK_FALSE(pauto->replan);
  const std::string tokens = testing::TempDir("replica-tokens") + "/tokens.bin";
  std::ofstream(tokens, std::ios::binary) << std::string(4096, '\1');
  std::string files = Job("replicas: auto\n");
  files.replace(files.find("placement: even"), 15, "placement: planned");
  files.replace(files.find("train: builtin"), 14, "train: " + tokens);
  auto pf = ParseJobSpec(files, "job.yaml", ".");
  REQUIRE_FALSE(pf.ok());
  CHECK_THAT(std::string(pf.status().message()),
             Catch::Contains("only for data: {train: builtin}"));
}

v1::LinkEstimate Link(double bytes_per_second, double rtt) {
  v1::LinkEstimate e;
  e.set_bandwidth_bytes_per_second(bytes_per_second);
  e.set_rtt_seconds(rtt);
  return e;
}

TEST_CASE("the adaptive sync codec: the least lossy that fits a tenth of the compute",
          "[replicas]") {
  const uint64_t bytes = 4'000'000;  // a 1M-parameter fragment
  auto choose = [&](const std::vector<v1::LinkEstimate>& links, double compute) {
    auto chooser = SyncCodecChooser::Create();
    REQUIRE(chooser.ok());
    auto d = chooser->Choose(links, bytes, compute, 100.0);
    REQUIRE(d.ok());
    INFO(d->explanation);
    return d->codec;
  };
  // No estimate yet (a member not measured): the floor, provisionally.
  CHECK(choose({Link(1e9, 0.001), Link(0, 0)}, 1.0) == "q4");
  CHECK(choose({}, 1.0) == "q4");
  // 4 MB in 4 ms of a 100 ms budget: exact.
  CHECK(choose({Link(1e9, 0.001), Link(2e9, 0.001)}, 1.0) == "fp32");
  // The slowest member decides: 4 MB at 2e7 B/s is 0.2 s, bf16 0.1 s and a bit: q8 fits.
  CHECK(choose({Link(1e9, 0.001), Link(2e7, 0.001)}, 1.0) == "q8");
  // Nothing fits: the fastest, q4.
  CHECK(choose({Link(1e5, 0.001)}, 1.0) == "q4");
  // More compute between syncs (local mode's inner steps) buys a less lossy codec.
  CHECK(choose({Link(2e7, 0.001)}, 10.0) == "fp32");
  // Step by step the controller keeps state: a link that slows down drops the codec at once.
  auto chooser = SyncCodecChooser::Create();
  REQUIRE(chooser.ok());
  auto first = chooser->Choose({Link(1e9, 0.001)}, bytes, 1.0, 1.0);
  REQUIRE(first.ok());
  CHECK(first->codec == "fp32");
  auto second = chooser->Choose({Link(1e5, 0.001)}, bytes, 1.0, 2.0);
  REQUIRE(second.ok());
  CHECK(second->codec == "q4");
  CHECK(second->changed);
}

TEST_CASE("the example replica job parses", "[replicas]") {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const std::string path =
      (srcdir ? std::string(srcdir) + "/longhaul/" : std::string()) + "configs/replicas-job.yaml";
  std::ifstream in(path);
  REQUIRE(in);
  const std::string yaml((std::istreambuf_iterator<char>(in)), {});
  auto spec = ParseJobSpec(yaml, path, ".");
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  CHECK(spec->replicas == 2);
  CHECK(spec->stages() == 2);
  CHECK(spec->sync.every == 10);
}

google::protobuf::RepeatedPtrField<v1::StageInfo> Plan(
    const std::vector<std::tuple<std::string, int, int, int>>& stages) {
  google::protobuf::RepeatedPtrField<v1::StageInfo> plan;
  for (const auto& [site, begin, end, replica] : stages) {
    v1::StageInfo* s = plan.Add();
    s->set_site(site);
    s->set_layer_begin(begin);
    s->set_layer_end(end);
    s->set_replica(replica);
  }
  return plan;
}

TEST_CASE("the stage grid: neighbours and tied partners within a replica, groups across",
          "[replicas]") {
  const StageGrid g = StageGrid::Of(3, 9);  // 3 replicas of 3 stages
  CHECK(g.stages(1) == 3);
  CHECK(g.aligned());
  CHECK(g.replica(4) == 1);
  CHECK(g.position(4) == 1);
  CHECK(g.prev(3) == -1);
  CHECK(g.next(5) == -1);
  CHECK(g.next(4) == 5);
  CHECK(g.tied(3) == 5);
  CHECK(g.tied(5) == 3);
  CHECK(g.tied(4) == -1);
  const model::ModelConfig config = TinyConfig();
  CHECK(SyncGroupsOf(g, config) == std::vector<std::vector<int>>{{0, 3, 6}, {1, 4, 7}, {2, 5, 8}});
  const StageGrid single = StageGrid::Of(2, 2);
  CHECK(single.tied(0) == -1);
  CHECK(single.prev(1) == -1);
  CHECK(SyncGroupsOf(single, config) == std::vector<std::vector<int>>{{0, 1}});
  CHECK(SyncGroupsOf(StageGrid::Of(1, 3), config).empty());
}

TEST_CASE("replicas split differently: each slice from the holder at the same end", "[replicas]") {
  // Replica 0: a 0..1, b 1..4; replica 1: c 0..4 (one stage); replica 2: d 0..3, e 3..4.
  const auto plan =
      Plan({{"a", 0, 1, 0}, {"b", 1, 4, 0}, {"c", 0, 4, 1}, {"d", 0, 3, 2}, {"e", 3, 4, 2}});
  const StageGrid g = StageGrid::OfPlan(3, plan);
  REQUIRE(g.replicas == 3);
  CHECK(g.start == std::vector<int>{0, 2, 3, 5});
  CHECK_FALSE(g.aligned());
  CHECK(g.replica(2) == 1);
  CHECK(g.replica(4) == 2);
  CHECK(g.tied(2) == -1);  // a one-stage replica keeps its embedding to itself
  CHECK(g.tied(0) == 1);
  CHECK(g.tied(4) == 3);
  CHECK(g.holder(2, 3) == 4);
  CHECK(g.holder(0, 2) == 1);
  const model::ModelConfig config = TinyConfig();
  const model::ParameterLayout layout(config);
  const int wte = layout.SliceIndex(model::Tensor::kWte, 0);
  auto route_of = [&](int stage, int slice) {
    for (const SyncRoute& r : SyncRoutes(g, config, stage)) {
      if (r.slice.index == slice) return r;
    }
    FAIL("stage " << stage << " has no slice " << slice);
    return SyncRoute{};
  };
  // The tied embedding: first stages take the first's copy, the others the last's; the
  // one-stage replica sends its copy to both ends of the others.
  CHECK(route_of(0, wte).source == std::vector<int>{0, 2, 3});
  CHECK(route_of(1, wte).source == std::vector<int>{1, 2, 4});
  CHECK(route_of(2, wte).source == std::vector<int>{0, 2, 3});
  CHECK(route_of(2, wte).to == std::vector<int>{0, 1, 3, 4});
  CHECK(route_of(0, wte).to == std::vector<int>{2, 3});
  CHECK(route_of(1, wte).to == std::vector<int>{4});
  // Layer 3's attention weights: b, c and e hold them.
  const int layer3 = layout.SliceIndex(model::Tensor::kQkvw, 3);
  CHECK(route_of(1, layer3).source == std::vector<int>{1, 2, 4});
  CHECK(route_of(1, layer3).to == std::vector<int>{2, 4});
  CHECK(route_of(3, layout.SliceIndex(model::Tensor::kQkvw, 2)).source ==
        std::vector<int>{1, 2, 3});
  CHECK(SyncPeers(SyncRoutes(g, config, 0), 0) == std::vector<int>{2, 3});
  CHECK(SyncPeers(SyncRoutes(g, config, 2), 2) == std::vector<int>{0, 1, 3, 4});
  // Every frame a stage takes is one its source sends it.
  for (int i = 0; i < g.size(); ++i) {
    for (const SyncRoute& r : SyncRoutes(g, config, i)) {
      for (int q = 0; q < g.replicas; ++q) {
        if (q == g.replica(i)) continue;
        const SyncRoute back = route_of(r.source[q], r.slice.index);
        CHECK(std::count(back.to.begin(), back.to.end(), i) == 1);
      }
    }
  }
  CHECK(SyncGroupsOf(g, config) == std::vector<std::vector<int>>{{0, 1, 2, 3, 4}});
  // Two replicas that overlap in pairs keep two groups.
  const StageGrid two = StageGrid::OfPlan(
      2, Plan({{"a", 0, 2, 0}, {"b", 2, 3, 0}, {"c", 3, 4, 0}, {"d", 0, 2, 1}, {"e", 2, 4, 1}}));
  CHECK(SyncGroupsOf(two, config) == std::vector<std::vector<int>>{{0, 3}, {1, 2, 4}});
}

TEST_CASE("plans with replicas are checked", "[replicas]") {
  auto spec = ParseJobSpec(Job("replicas: 2\n"), "job.yaml", ".");
  REQUIRE(spec.ok());
  CHECK(CheckPlan(Plan({{"a", 0, 2, 0}, {"b", 2, 4, 0}, {"c", 0, 2, 1}, {"d", 2, 4, 1}}), *spec,
                  "stages")
            .ok());
  auto error_for = [&](const google::protobuf::RepeatedPtrField<v1::StageInfo>& plan,
                       const JobSpec& job) {
    const Status s = CheckPlan(plan, job, "stages");
    REQUIRE_FALSE(s.ok());
    return std::string(s.message());
  };
  auto error = [&](const google::protobuf::RepeatedPtrField<v1::StageInfo>& plan) {
    return error_for(plan, *spec);
  };
  CHECK(CheckPlan(Plan({{"a", 0, 2, 0}, {"b", 2, 4, 0}, {"c", 0, 4, 1}}), *spec, "stages").ok());
  CHECK_THAT(error(Plan({{"a", 0, 2, 0}, {"b", 2, 4, 0}})), Catch::Contains("do not form"));
  CHECK_THAT(error(Plan({{"a", 0, 2, 0}, {"b", 2, 4, 0}, {"c", 0, 4, 2}})),
             Catch::Contains("do not form"));
  // Replicas may be split differently, each covering the layers once.
  CHECK(CheckPlan(Plan({{"a", 0, 2, 0}, {"b", 2, 4, 0}, {"c", 0, 1, 1}, {"d", 1, 4, 1}}), *spec,
                  "stages")
            .ok());
  CHECK(CheckPlan(Plan({{"a", 0, 1, 0}, {"b", 1, 2, 0}, {"c", 2, 4, 0}, {"d", 0, 4, 1}}), *spec,
                  "stages")
            .ok());
  CHECK_THAT(error(Plan({{"a", 0, 2, 0}, {"b", 2, 4, 0}, {"c", 0, 2, 0}, {"d", 2, 4, 1}})),
             Catch::Contains("do not continue the plan at layer 4"));
  CHECK_THAT(error(Plan({{"a", 0, 4, 0}, {"b", 0, 4, 1}, {"c", 0, 2, 0}, {"d", 2, 4, 1}})),
             Catch::Contains("replica 0 after replica 1"));
  CHECK_THAT(error(Plan({{"a", 0, 4, 1}, {"b", 0, 4, 1}})), Catch::Contains("replica 1 after"));
  CHECK_THAT(error(Plan({{"a", 0, 2, 0}, {"b", 2, 4, 0}, {"c", 0, 1, 1}, {"d", 1, 3, 1}})),
             Catch::Contains("cover layers [0,3)"));
  CHECK_THAT(error(Plan({{"a", 0, 2, 0}, {"b", 2, 4, 0}, {"a", 0, 2, 1}, {"d", 2, 4, 1}})),
             Catch::Contains("runs another stage"));

  // replicas: auto: the plan's last stage says how many, and every stage must agree.
  std::string yaml = Job("replicas: auto\n");
  yaml.replace(yaml.find("placement: even"), 15, "placement: planned");
  auto autospec = ParseJobSpec(yaml, "job.yaml", ".");
  REQUIRE(autospec.ok());
  const auto three = Plan({{"a", 0, 4, 0}, {"b", 0, 4, 1}, {"c", 0, 4, 2}});
  CHECK(CheckPlan(three, *autospec, "stages").ok());
  CHECK(StageGrid::OfPlan(autospec->replicas, three).replicas == 3);
  CHECK(StageGrid::OfPlan(autospec->replicas, three).stages(2) == 1);
  CHECK(CheckPlan(Plan({{"a", 0, 2, 0}, {"b", 2, 4, 0}}), *autospec, "stages").ok());
  const Status wrong = CheckPlan(Plan({{"a", 0, 4, 0}, {"b", 0, 4, 2}}), *autospec, "stages");
  CHECK_THAT(std::string(wrong.message()), Catch::Contains("do not form 3 replicas"));
  const Status huge = CheckPlan(Plan({{"a", 0, 4, 0}, {"b", 0, 4, 4000000000u}}), *autospec, "x");
  CHECK_FALSE(huge.ok());

  // Each replica's microbatches: the job's (or 0, a plan from before they were recorded), the
  // same on each of its stages; with a paced job any count from 1 to the most.
  auto with = [](google::protobuf::RepeatedPtrField<v1::StageInfo> plan, std::vector<int> m) {
    for (int i = 0; i < plan.size(); ++i) plan[i].set_microbatches(m[static_cast<size_t>(i)]);
    return plan;
  };
  const auto four = Plan({{"a", 0, 2, 0}, {"b", 2, 4, 0}, {"c", 0, 2, 1}, {"d", 2, 4, 1}});
  CHECK(CheckPlan(with(four, {2, 2, 2, 2}), *spec, "stages").ok());
  CHECK(PlanMicrobatches(*spec, 2, with(four, {2, 2, 2, 2})) == std::vector<int>{2, 2});
  CHECK(PlanMicrobatches(*spec, 2, four) == std::vector<int>{2, 2});  // the job's
  CHECK_THAT(error(with(four, {2, 2, 3, 3})),
             Catch::Contains("3 microbatches per step for replica 1"));
  CHECK_THAT(error(with(four, {2, 2, 2, 1})), Catch::Contains("its first stage: 2"));
  auto listed = ParseJobSpec(Job("replicas: 2\nreplica_microbatches: [3, 1]\n"), "job.yaml", ".");
  REQUIRE(listed.ok());
  CHECK(CheckPlan(with(four, {3, 3, 1, 1}), *listed, "stages").ok());
  CHECK_FALSE(CheckPlan(with(four, {1, 1, 3, 3}), *listed, "stages").ok());
  std::string paced_yaml = Job("replicas: 2\nreplica_microbatches: paced\n");
  paced_yaml.replace(paced_yaml.find("placement: even"), 15, "placement: planned");
  auto paced = ParseJobSpec(paced_yaml, "job.yaml", ".");
  REQUIRE(paced.ok());
  CHECK(CheckPlan(with(four, {2, 2, 1, 1}), *paced, "stages").ok());
  CHECK(PlanMicrobatches(*paced, 2, with(four, {2, 2, 1, 1})) == std::vector<int>{2, 1});
  CHECK_FALSE(CheckPlan(with(four, {2, 2, 0, 0}), *paced, "stages").ok());
  CHECK_THAT(error_for(with(four, {3, 3, 1, 1}), *paced), Catch::Contains("paced, 1..2"));
  // A job's own count is never refused, however many microbatches it has (no cap but the
  // job file's own rules).
  auto big = ParseJobSpec(
      Job("replicas: 2\n").replace(Job("").find("batch_size: 4"), 13, "batch_size: 10000"),
      "job.yaml", ".");
  REQUIRE(big.ok());
  CHECK(big->microbatches(0) == 5000);
  CHECK(CheckPlan(with(four, {5000, 5000, 5000, 5000}), *big, "stages").ok());
}

TEST_CASE("the barrier clips each replica by its own stages' gradient norm", "[replicas]") {
  StepBarrier barrier(/*grad_clip=*/1.0f);
  auto report = [](uint32_t stage, double sum) {
    v1::StepReport r;
    r.set_attempt(1);
    r.set_step(0);
    r.set_stage(stage);
    r.add_grad_sums(stage % 2 == 0 ? sum : 0);  // slice 0 lives on each replica's first stage
    r.add_grad_sums(stage % 2 == 1 ? sum : 0);
    return r;
  };
  // Replica 0: norm sqrt(2 + 2) = 2 -> scale 0.5; replica 1: norm sqrt(0.5) -> no clipping.
  CHECK(barrier.Add(report(0, 2.0), 4, 0, 2) == nullptr);
  CHECK(barrier.Add(report(1, 2.0), 4, 0, 2) == nullptr);
  CHECK(barrier.Add(report(2, 0.25), 4, 0, 2) == nullptr);
  REQUIRE(barrier.Add(report(3, 0.25), 4, 0, 2) != nullptr);
  v1::StepDecision d;
  REQUIRE(barrier.Lookup(1, 0, &d) == StepBarrier::State::kDecided);
  REQUIRE(d.replica_grad_scales_size() == 2);
  CHECK(d.replica_grad_scales(0) == Approx(0.5));
  CHECK(d.replica_grad_scales(1) == 1.0);
  CHECK(d.grad_scale() == d.replica_grad_scales(0));
}

TEST_CASE("sync state files of version 1 (no tied residual) still load", "[replicas]") {
  const std::string dir = testing::TempDir("sync-state-v1");
  const std::string path = SyncCheckpointPath(dir, 3, 0, 1);
  // magic, step 3, anchor 2, momentum 2, one residual of 1; floats; XXH64.
  std::string v1 = "LHSYNC01";
  for (uint64_t x : {uint64_t{3}, uint64_t{2}, uint64_t{2}, uint64_t{1}, uint64_t{1}}) {
    v1.append(reinterpret_cast<const char*>(&x), 8);
  }
  for (float f : {1.0f, 2.0f, 0.5f, 0.25f, 9.0f}) v1.append(reinterpret_cast<const char*>(&f), 4);
  const uint64_t sum = XXH64(v1.data(), v1.size(), 0);
  v1.append(reinterpret_cast<const char*>(&sum), 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << v1;
  auto back = ReadSyncState(*FileEnv::Default(), path, 3, 2, {1}, 4);
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(back->anchor == std::vector<float>{1, 2});
  CHECK(back->momentum == std::vector<float>{0.5f, 0.25f});
  CHECK(back->residuals == std::vector<std::vector<float>>{{9}});
  CHECK(back->tied_residual.empty());
}

TEST_CASE("sync state files of version 2 (before the durable-file shape) still load",
          "[replicas]") {
  const std::string dir = testing::TempDir("sync-state-v2");
  const std::string path = SyncCheckpointPath(dir, 3, 0, 1);
  // magic, step 3, anchor 2, momentum 2, one residual, tied 1, its size 1; floats; XXH64.
  std::string v2 = "LHSYNC02";
  for (uint64_t x :
       {uint64_t{3}, uint64_t{2}, uint64_t{2}, uint64_t{1}, uint64_t{1}, uint64_t{1}}) {
    v2.append(reinterpret_cast<const char*>(&x), 8);
  }
  for (float f : {1.0f, 2.0f, 0.5f, 0.25f, 9.0f, -3.0f}) {
    v2.append(reinterpret_cast<const char*>(&f), 4);
  }
  const uint64_t sum = XXH64(v2.data(), v2.size(), 0);
  v2.append(reinterpret_cast<const char*>(&sum), 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << v2;
  auto back = ReadSyncState(*FileEnv::Default(), path, 3, 2, {1}, 1);
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(back->anchor == std::vector<float>{1, 2});
  CHECK(back->residuals == std::vector<std::vector<float>>{{9}});
  CHECK(back->tied_residual == std::vector<float>{-3});
  // Its checksum still guards it.
  v2[20] ^= 0x01;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << v2;
  CHECK(ReadSyncState(*FileEnv::Default(), path, 3, 2, {1}, 1).status().code() ==
        absl::StatusCode::kDataLoss);
}

TEST_CASE("sync state files keep gossip's tracking state; version 1 files still load",
          "[replicas]") {
  const std::string dir = testing::TempDir("sync-state-tracking");
  const std::string path = SyncCheckpointPath(dir, 4, 0, 1);
  SyncState s;
  s.step = 4;
  s.anchor = {1, 2, 3};
  s.momentum = {1, 0.5f, 2};
  s.corrections = {0.1f, -0.2f, 0.3f};
  s.drift_anchor = {1.5f, 2.5f, 3.5f};
  s.lr_sum = 0.0075;
  REQUIRE(WriteSyncState(*FileEnv::Default(), path, s).ok());
  auto back = ReadSyncState(*FileEnv::Default(), path, 4, 3, {3}, 0);
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(back->corrections == s.corrections);
  CHECK(back->drift_anchor == s.drift_anchor);
  CHECK(back->lr_sum == s.lr_sum);
  CHECK(back->anchor == s.anchor);
  // Written as version 2 with a tracking state, as version 1 (what builds before read)
  // without one.
  auto version = [&] {
    std::ifstream in(path, std::ios::binary);
    std::string bytes(std::istreambuf_iterator<char>(in), {});
    uint32_t v = 0;
    if (bytes.size() >= 12) std::memcpy(&v, bytes.data() + 8, 4);
    return v;
  };
  CHECK(version() == 2);
  SyncState plain = s;
  plain.corrections.clear();
  plain.drift_anchor.clear();
  REQUIRE(WriteSyncState(*FileEnv::Default(), path, plain).ok());
  CHECK(version() == 1);
  auto untracked = ReadSyncState(*FileEnv::Default(), path, 4, 3, {3}, 0);
  REQUIRE(untracked.ok());
  CHECK(untracked->corrections.empty());
  CHECK(untracked->anchor == s.anchor);
  // Tracking state of another fragment's size, or a learning-rate sum below 0: refused.
  s.corrections.push_back(0);
  s.drift_anchor.push_back(0);
  REQUIRE(WriteSyncState(*FileEnv::Default(), path, s).ok());
  CHECK(ReadSyncState(*FileEnv::Default(), path, 4, 3, {3}, 0).status().code() ==
        absl::StatusCode::kDataLoss);
  s.corrections.pop_back();
  s.drift_anchor.pop_back();
  s.lr_sum = -1;
  REQUIRE(WriteSyncState(*FileEnv::Default(), path, s).ok());
  CHECK_THAT(std::string(ReadSyncState(*FileEnv::Default(), path, 4, 3, {3}, 0).status().message()),
             Catch::Contains("learning-rate sum of -1"));
  // The previous build's durable file (version 1: no tracking fields) loads without them.
  std::string head;
  for (uint64_t x : {uint64_t{4}, uint64_t{3}, uint64_t{3}, uint64_t{0}, uint64_t{0}}) {
    head.append(reinterpret_cast<const char*>(&x), 8);
  }
  std::string floats;
  for (float f : {1.0f, 2.0f, 3.0f, 1.0f, 0.5f, 2.0f}) {
    floats.append(reinterpret_cast<const char*>(&f), 4);
  }
  model::DurableFormat v1{{'L', 'H', 'S', 'Y', 'N', 'C', 'S', 'T'}, 1, UINT64_MAX, "sync state"};
  REQUIRE(model::WriteDurableFile(*FileEnv::Default(), path, v1, {head, floats}).ok());
  auto old = ReadSyncState(*FileEnv::Default(), path, 4, 3, {3}, 0);
  INFO(old.status().ToString());
  REQUIRE(old.ok());
  CHECK(old->anchor == std::vector<float>{1, 2, 3});
  CHECK(old->momentum == std::vector<float>{1, 0.5f, 2});
  CHECK(old->corrections.empty());
  CHECK(old->lr_sum == 0);
  // A gossip outer step's anchor and momentum: version 3, with tracking and without; one of
  // another fragment's size is refused.
  s.lr_sum = 0.0075;
  s.gossip_outer_anchor = {0.5f, 1.5f, 2.5f};
  s.gossip_outer_momentum = {0.01f, -0.02f, 0.03f};
  for (const bool tracked : {true, false}) {
    SyncState o = s;
    if (!tracked) {
      o.corrections.clear();
      o.drift_anchor.clear();
    }
    REQUIRE(WriteSyncState(*FileEnv::Default(), path, o).ok());
    CHECK(version() == 3);
    auto with_outer = ReadSyncState(*FileEnv::Default(), path, 4, 3, {3}, 0);
    INFO(with_outer.status().ToString());
    REQUIRE(with_outer.ok());
    CHECK(with_outer->gossip_outer_anchor == o.gossip_outer_anchor);
    CHECK(with_outer->gossip_outer_momentum == o.gossip_outer_momentum);
    CHECK(with_outer->corrections == o.corrections);
    CHECK(with_outer->anchor == o.anchor);
  }
  s.gossip_outer_anchor.push_back(0);
  s.gossip_outer_momentum.push_back(0);
  REQUIRE(WriteSyncState(*FileEnv::Default(), path, s).ok());
  CHECK_THAT(std::string(ReadSyncState(*FileEnv::Default(), path, 4, 3, {3}, 0).status().message()),
             Catch::Contains("gossip outer state of 4 floats"));
  // A gossip link state (fleet/gossip_link_node.h) as its node saved it: version 4, read back
  // byte for byte where the reader allows that much, refused where it allows less.
  SyncState l;
  l.step = 4;
  l.residuals = {{0.5f, 0.25f, 0.125f}};
  l.gossip_links = {'L', 'H', 'G', 'N', 1, 2, 3, 4, 5, 6, 7};
  REQUIRE(WriteSyncState(*FileEnv::Default(), path, l).ok());
  CHECK(version() == 4);
  auto links = ReadSyncState(*FileEnv::Default(), path, 4, 3, {3}, 0, 64);
  INFO(links.status().ToString());
  REQUIRE(links.ok());
  CHECK(links->gossip_links == l.gossip_links);
  CHECK(links->residuals == l.residuals);
  CHECK(links->anchor.empty());
  const Status small = ReadSyncState(*FileEnv::Default(), path, 4, 3, {3}, 0, 10).status();
  CHECK(small.code() == absl::StatusCode::kDataLoss);
}

TEST_CASE("sync state files: round trip, and nothing corrupt is loaded", "[replicas]") {
  const std::string dir = testing::TempDir("sync-state");
  const std::string path = SyncCheckpointPath(dir, 12, 0, 2);
  CHECK(path == dir + "/sync_00000012_0-2.bin");
  SyncState s;
  s.step = 12;
  s.anchor = {1, 2, 3, 4, 5};
  s.momentum = {0.5f, 0, 0, 0, -1};
  s.residuals = {{0.25f, 0.5f}, {}, {1, 2, 3}};
  s.tied_residual = {7, 8, 9, 10};
  REQUIRE(WriteSyncState(*FileEnv::Default(), path, s).ok());
  const std::vector<int64_t> sizes = {2, 0, 3};
  auto back = ReadSyncState(*FileEnv::Default(), path, 12, 5, sizes, 4);
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(back->anchor == s.anchor);
  CHECK(back->momentum == s.momentum);
  CHECK(back->residuals == s.residuals);
  CHECK(back->tied_residual == s.tied_residual);
  CHECK(ReadSyncState(*FileEnv::Default(), path, 12, 5, sizes, 5).status().code() ==
        absl::StatusCode::kDataLoss);
  CHECK(ReadSyncState(*FileEnv::Default(), path, 13, 5, sizes, 4).status().code() ==
        absl::StatusCode::kDataLoss);
  CHECK(ReadSyncState(*FileEnv::Default(), path, 12, 6, sizes, 4).status().code() ==
        absl::StatusCode::kDataLoss);
  CHECK(ReadSyncState(*FileEnv::Default(), path, 12, 5, {2, 0, 4}, 4).status().code() ==
        absl::StatusCode::kDataLoss);
  CHECK(ReadSyncState(*FileEnv::Default(), dir + "/none.bin", 12, 5, sizes, 4).status().code() ==
        absl::StatusCode::kNotFound);

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  for (size_t at : {size_t{3}, size_t{20}, bytes.size() / 2, bytes.size() - 1}) {
    std::string flipped = bytes;
    flipped[at] ^= 0x04;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << flipped;
    INFO("byte " << at);
    CHECK(ReadSyncState(*FileEnv::Default(), path, 12, 5, sizes, 4).status().code() ==
          absl::StatusCode::kDataLoss);
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 9);
  CHECK(ReadSyncState(*FileEnv::Default(), path, 12, 5, sizes, 4).status().code() ==
        absl::StatusCode::kDataLoss);
  // A header announcing a huge anchor is refused before anything is allocated.
  std::string huge = bytes;
  const uint64_t big = uint64_t{1} << 60;
  std::memcpy(huge.data() + 16, &big, 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << huge;
  CHECK(ReadSyncState(*FileEnv::Default(), path, 12, 5, sizes, 4).status().code() ==
        absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace longhaul::daemon
