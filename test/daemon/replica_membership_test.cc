// Replica membership without daemons (replica_membership.h): which replicas a lost site
// drops (never the last), when a dropped replica may rejoin, which replica it copies; the job
// file's sync.on_site_loss; the checks a site makes of an assignment's dropped and rejoining
// replicas (hostile coordinators included); and the barrier over the live replicas only.
#include "daemon/job/sync/replica_membership.h"

#include <catch2/catch.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "daemon/job/checks/job_checks.h"
#include "daemon/job/coordinator/step_barrier.h"
#include "daemon/job/spec/job_spec.h"

namespace longhaul::daemon {
namespace {

std::string Job(const std::string& extra) {
  return "name: r\nmodel: {layers: 4, channels: 32, heads: 2, vocab: 256, context: 32}\n"
         "data: {train: builtin}\nsteps: 10\nbatch_size: 4\nmicrobatch_size: 2\nseq_len: 32\n"
         "sites: [a, b, c, d, e, f]\nplacement: even\nreplicas: 3\ncheckpoint: {every: 2}\n" +
         extra;
}

// Three replicas of two stages on sites a..f, replica-major.
google::protobuf::RepeatedPtrField<v1::StageInfo> Plan() {
  google::protobuf::RepeatedPtrField<v1::StageInfo> stages;
  const char* sites[] = {"a", "b", "c", "d", "e", "f"};
  for (int i = 0; i < 6; ++i) {
    v1::StageInfo* s = stages.Add();
    s->set_index(static_cast<uint32_t>(i));
    s->set_site(sites[i]);
    s->set_replica(static_cast<uint32_t>(i / 2));
    s->set_layer_begin(i % 2 == 0 ? 0 : 2);
    s->set_layer_end(i % 2 == 0 ? 2 : 4);
  }
  return stages;
}

TEST_CASE("a lost site drops its replicas, never the last one", "[replicas]") {
  const StageGrid grid = StageGrid::Of(3, 6);
  const auto plan = Plan();
  CHECK(ReplicasToDrop(grid, plan, {}, {}, {"d"}) == ReplicaList{1});
  CHECK(ReplicasToDrop(grid, plan, {}, {}, {"a", "f"}) == ReplicaList{0, 2});
  CHECK(ReplicasToDrop(grid, plan, {}, {}, {"x"}).empty());            // not a site of the job
  CHECK(ReplicasToDrop(grid, plan, {}, {}, {"a", "c", "e"}).empty());  // none would be left
  CHECK(ReplicasToDrop(grid, plan, {1}, {}, {"a"}) == ReplicaList{0});
  CHECK(ReplicasToDrop(grid, plan, {0, 1}, {}, {"e"}).empty());  // the last live replica
  CHECK(ReplicasToDrop(grid, plan, {1}, {}, {"c"}).empty());     // already dropped
  // A replica still taking its state cannot go on alone; one rejoining can be dropped again.
  CHECK(ReplicasToDrop(grid, plan, {2}, {1}, {"a"}).empty());
  CHECK(ReplicasToDrop(grid, plan, {}, {1}, {"a"}) == ReplicaList{0});
  CHECK(ReplicasToDrop(grid, plan, {}, {1}, {"c"}) == ReplicaList{1});
  CHECK(Union({2, 0}, {1, 2}) == ReplicaList{0, 1, 2});
  CHECK(LiveStages(grid, {1}) == std::vector<int>{0, 1, 4, 5});
  CHECK(LiveSites(grid, plan, {0, 2}) == std::vector<std::string>{"c", "d"});
}

TEST_CASE("a join or comeback waits for the next commit unless now redoes fewer steps",
          "[replicas]") {
  // A join or comeback asked at committed step 20 (checkpoints every 10 of 100 steps; each
  // live replica's step given) is made now or at step 30's commit, whichever redoes fewer
  // replica-steps: those made since 20, against the slowest replica's steps to 30.
  CHECK(NextCheckpointStep(20, 10) == 30);
  CHECK(NextCheckpointStep(25, 10) == 30);
  CHECK(NextCheckpointStep(20, 0) == UINT64_MAX);
  CHECK(MembershipChangeDue(20, 20, {20, 20}, 10, 100));            // nothing to redo
  CHECK(MembershipChangeDue(20, 20, {23, 23}, 10, 100));            // 3 + 3 redone <= 7 waited
  CHECK_FALSE(MembershipChangeDue(20, 20, {24, 24}, 10, 100));      // 4 + 4 > 6
  CHECK_FALSE(MembershipChangeDue(20, 20, {23, 23, 23}, 10, 100));  // 9 > 7
  CHECK(MembershipChangeDue(20, 20, {21, 21, 21}, 10, 100));        // 3 <= 9
  // Gossip: a fast replica far past the commit counts its own steps; the slow one sets the wait.
  CHECK_FALSE(MembershipChangeDue(20, 20, {29, 21}, 10, 100));  // 9 + 1 > 9
  CHECK(MembershipChangeDue(20, 20, {25, 20}, 10, 100));        // 5 <= 10
  CHECK_FALSE(MembershipChangeDue(20, 20, {31, 31}, 10, 100));  // past 30: its commit is near
  CHECK(MembershipChangeDue(30, 20, {31, 31}, 10, 100));        // committed since it was asked
  CHECK(MembershipChangeDue(20, 20, {29, 29}, 0, 100));         // no checkpoints to wait for
  CHECK(MembershipChangeDue(90, 90, {95, 95}, 10, 100));        // the next is the job's end
}

TEST_CASE("a dropped replica rejoins at a later committed step, from a live replica",
          "[replicas]") {
  // The attempt started at step 20, 100 steps.
  CHECK_FALSE(RejoinDue(20, 20, 100));  // not past the attempt's start
  CHECK(RejoinDue(25, 20, 100));
  CHECK_FALSE(RejoinDue(100, 20, 100));  // the job's end
  CHECK(RejoinSource(StageGrid::Of(3, 3), {0}, {1}) == 2);
  CHECK(RejoinSource(StageGrid::Of(3, 3), {}, {0}) == 1);
  CHECK(RejoinSource(StageGrid::Of(2, 2), {0}, {1}) == -1);
  // However the replicas are split: a rejoining stage takes its layers from the stages of
  // the source that hold them.
  google::protobuf::RepeatedPtrField<v1::StageInfo> plan;
  for (const auto& [site, begin, end, replica] :
       std::vector<std::tuple<std::string, int, int, int>>{
           {"a", 0, 4, 0}, {"b", 0, 2, 1}, {"c", 2, 4, 1}}) {
    v1::StageInfo* s = plan.Add();
    s->set_site(site);
    s->set_layer_begin(begin);
    s->set_layer_end(end);
    s->set_replica(replica);
  }
  const StageGrid split = StageGrid::OfPlan(2, plan);
  CHECK(RejoinSource(split, {1}, {1}) == 0);
  CHECK(RejoinSource(split, {0}, {0}) == 1);
}

TEST_CASE("step mode's dropped microbatches go to the live replicas, the union batch kept",
          "[replicas]") {
  CHECK(RedistributeMicrobatches({4, 4}, {false, true}) == std::vector<int>{8, 0});
  CHECK(RedistributeMicrobatches({4, 4}, {false, false}) == std::vector<int>{4, 4});
  CHECK(RedistributeMicrobatches({4, 4}, {true, true}) == std::vector<int>{4, 4});  // none live
  // In proportion to each live replica's own, the remainder one each in replica order.
  CHECK(RedistributeMicrobatches({3, 1, 2}, {false, false, true}) == std::vector<int>{5, 1, 0});
  CHECK(RedistributeMicrobatches({1, 1, 1, 1}, {true, false, false, false}) ==
        std::vector<int>{0, 2, 1, 1});
  CHECK(RedistributeMicrobatches({2, 2, 3}, {false, true, true}) == std::vector<int>{7, 0, 0});
  // Only in sync mode step: local mode's replicas train their own counts.
  auto step = ParseJobSpec(Job("sync: {mode: step, on_site_loss: drop}\n"), "job.yaml", ".");
  REQUIRE(step.ok());
  auto local = ParseJobSpec(Job(""), "job.yaml", ".");
  REQUIRE(local.ok());
  const std::vector<uint32_t> dropped = {1};
  const std::vector<v1::StageInfo> none;
  CHECK(AttemptMicrobatches(*step, 2, none, dropped) == std::vector<int>{4, 0});
  CHECK(AttemptMicrobatches(*local, 2, none, dropped) == std::vector<int>{2, 2});
}

TEST_CASE("sync.on_site_loss in a job file", "[replicas]") {
  auto local = ParseJobSpec(Job(""), "job.yaml", ".");
  REQUIRE(local.ok());
  CHECK(local->sync.on_site_loss == fleet::SiteLoss::kDrop);  // local mode's default
  auto wait = ParseJobSpec(Job("sync: {on_site_loss: wait}\n"), "job.yaml", ".");
  REQUIRE(wait.ok());
  CHECK(wait->sync.on_site_loss == fleet::SiteLoss::kWait);
  auto step = ParseJobSpec(Job("sync: {mode: step}\n"), "job.yaml", ".");
  REQUIRE(step.ok());
  CHECK(step->sync.on_site_loss == fleet::SiteLoss::kWait);  // step mode's
  // Step mode drops when asked: the live replicas take the dropped one's microbatches.
  auto step_drop = ParseJobSpec(Job("sync: {mode: step, on_site_loss: drop}\n"), "job.yaml", ".");
  REQUIRE(step_drop.ok());
  CHECK(step_drop->sync.on_site_loss == fleet::SiteLoss::kDrop);
  // Without checkpoints before the end there is nothing to go on from.
  std::string none = Job("sync: {on_site_loss: drop}\n");
  none.replace(none.find("checkpoint: {every: 2}"), 22, "checkpoint: {every: 0}");
  auto bad = ParseJobSpec(none, "job.yaml", ".");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("checkpoint.every > 0"));
  none = Job("");
  none.replace(none.find("checkpoint: {every: 2}"), 22, "checkpoint: {every: 0}");
  auto fallback = ParseJobSpec(none, "job.yaml", ".");
  REQUIRE(fallback.ok());
  CHECK(fallback->sync.on_site_loss == fleet::SiteLoss::kWait);
  bad = ParseJobSpec(Job("sync: {on_site_loss: retry}\n"), "job.yaml", ".");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("drop or wait"));
}

TEST_CASE("a site checks the replicas an assignment drops and rejoins", "[replicas]") {
  auto spec = ParseJobSpec(Job("sync: {every: 2}\n"), "job.yaml", ".");
  REQUIRE(spec.ok());
  v1::StageAssignment a;
  a.set_job_id("j1");
  a.set_coordinator("a");
  *a.mutable_stages() = Plan();
  a.set_stage(0);
  CHECK(CheckReplicaMembership(a, *spec, "job j1").ok());
  a.add_dropped_replicas(1);
  CHECK(CheckReplicaMembership(a, *spec, "job j1").ok());
  a.add_rejoining_replicas(2);
  a.set_rejoin_source(0);
  CHECK(CheckReplicaMembership(a, *spec, "job j1").ok());
  auto refused = [&](const std::function<void(v1::StageAssignment*)>& edit) {
    v1::StageAssignment b = a;
    edit(&b);
    const Status s = CheckReplicaMembership(b, *spec, "job j1");
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    return std::string(s.message());
  };
  CHECK_THAT(refused([](auto* b) { b->add_dropped_replicas(7); }), Catch::Contains("3 replicas"));
  refused([](auto* b) { b->add_dropped_replicas(1); });    // twice
  refused([](auto* b) { b->set_rejoin_source(1); });       // a dropped source
  refused([](auto* b) { b->set_rejoin_source(2); });       // a rejoining source
  refused([](auto* b) { b->set_rejoin_source(9); });       // out of range
  refused([](auto* b) { b->add_rejoining_replicas(1); });  // dropped and rejoining (and order)
  refused([](auto* b) { b->set_stage(2); });               // this stage's replica is dropped
  refused([](auto* b) {                                    // none live
    b->clear_rejoining_replicas();
    b->add_dropped_replicas(2);
    b->set_stage(0);
    b->mutable_dropped_replicas()->Set(0, 0);
    b->mutable_dropped_replicas()->Set(1, 1);
    b->add_dropped_replicas(2);
  });
  auto step = ParseJobSpec(Job("sync: {mode: step}\n"), "job.yaml", ".");
  REQUIRE(step.ok());
  CHECK_FALSE(CheckReplicaMembership(a, *step, "job j1").ok());  // no drops in step mode
}

TEST_CASE("sites joining a running job form a new replica; leaving ones take theirs out",
          "[replicas]") {
  const auto plan = Plan();
  // Two sites: the model's four layers split evenly, replica 3, the next flat indices.
  auto two = PlanAddedReplica(plan, {"g", "h"}, 4, 2);
  REQUIRE(two.ok());
  REQUIRE(two->size() == 8);
  for (int i = 6; i < 8; ++i) {
    CHECK(two->Get(i).index() == static_cast<uint32_t>(i));
    CHECK(two->Get(i).replica() == 3);
    CHECK(two->Get(i).microbatches() == 2);
  }
  CHECK(two->Get(6).site() == "g");
  CHECK(std::make_pair(two->Get(6).layer_begin(), two->Get(6).layer_end()) ==
        std::make_pair(0u, 2u));
  CHECK(std::make_pair(two->Get(7).layer_begin(), two->Get(7).layer_end()) ==
        std::make_pair(2u, 4u));
  // Uneven: the first ones a layer more. The plan every site checks accepts it.
  auto three = PlanAddedReplica(plan, {"g", "h", "i"}, 4, 0);
  REQUIRE(three.ok());
  CHECK(three->Get(6).layer_end() == 2);
  CHECK(three->Get(7).layer_end() == 3);
  CHECK(three->Get(8).layer_end() == 4);
  auto spec = ParseJobSpec(Job("sync: {every: 2}\n"), "job.yaml", ".");
  REQUIRE(spec.ok());
  spec->replicas = 4;
  CHECK(CheckPlan(*three, *spec, "plan").ok());
  CHECK(StageGrid::OfPlan(4, *three).stages(3) == 3);
  // Refused, naming the site: one of the job's, twice, none, more sites than layers.
  CHECK_THAT(std::string(PlanAddedReplica(plan, {"g", "c"}, 4, 0).status().message()),
             Catch::Contains("'c'") && Catch::Contains("already"));
  CHECK_THAT(std::string(PlanAddedReplica(plan, {"g", "g"}, 4, 0).status().message()),
             Catch::Contains("'g' is named twice"));
  CHECK_FALSE(PlanAddedReplica(plan, {}, 4, 0).ok());
  CHECK_FALSE(PlanAddedReplica(plan, {"g", "h", "i", "j", "k"}, 4, 0).ok());
  // The planner's split (placement: planned): each site's stage ends where it says.
  auto planned = PlanAddedReplica(plan, {"h", "g"}, 4, 0, {3, 4});
  REQUIRE(planned.ok());
  CHECK(planned->Get(6).site() == "h");
  CHECK(std::make_pair(planned->Get(6).layer_begin(), planned->Get(6).layer_end()) ==
        std::make_pair(0u, 3u));
  CHECK(std::make_pair(planned->Get(7).layer_begin(), planned->Get(7).layer_end()) ==
        std::make_pair(3u, 4u));
  // Ends that are no split of the layers: one short, an empty stage, one per site missing.
  for (const std::vector<int>& ends : {std::vector<int>{3, 3}, std::vector<int>{2, 3},
                                       std::vector<int>{0, 4}, std::vector<int>{4}}) {
    CHECK_THAT(std::string(PlanAddedReplica(plan, {"g", "h"}, 4, 0, ends).status().message()),
               Catch::Contains("split the model's 4 layers"));
  }

  const StageGrid grid = StageGrid::Of(3, 6);
  CHECK(*ReplicasToRemove(grid, plan, {}, {}, {}, {"d"}) == ReplicaList{1});
  CHECK(*ReplicasToRemove(grid, plan, {}, {}, {}, {"f", "a", "b"}) == ReplicaList{0, 2});
  // A dropped replica may be removed too (it then never rejoins).
  CHECK(*ReplicasToRemove(grid, plan, {1}, {}, {}, {"c"}) == ReplicaList{1});
  auto refused = [&](const ReplicaList& dropped, const ReplicaList& rejoining,
                     const ReplicaList& removed, const std::vector<std::string>& sites) {
    auto r = ReplicasToRemove(grid, plan, dropped, rejoining, removed, sites);
    CHECK_FALSE(r.ok());
    return std::string(r.status().message());
  };
  CHECK_THAT(refused({}, {}, {}, {"x"}), Catch::Contains("'x' runs no stage"));
  CHECK_THAT(refused({1}, {}, {1}, {"d"}), Catch::Contains("removed already"));
  CHECK_THAT(refused({}, {}, {}, {"a", "c", "e"}), Catch::Contains("no replica training"));
  CHECK_THAT(refused({2}, {1}, {}, {"a"}), Catch::Contains("no replica training"));
  CHECK(ReplicaNames({1}) == "replica 1");
  CHECK(ReplicaNames({0, 2}) == "replicas 0, 2");
}

TEST_CASE("a removed replica's sites named again bring it back, all of them or none",
          "[replicas]") {
  const auto plan = Plan();  // replica 1 on c, d
  const StageGrid grid = StageGrid::Of(3, 6);
  auto back = [&](const ReplicaList& removed, const std::vector<std::string>& sites) {
    auto r = ReturningReplica(grid, plan, removed, removed, sites);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    return *r;
  };
  // Its sites in any order: replica 1. Sites that never ran a stage: a new replica (-1).
  CHECK(back({1}, {"c", "d"}) == 1);
  CHECK(back({1}, {"d", "c"}) == 1);
  CHECK(back({1}, {"g", "h"}) == -1);
  CHECK(back({}, {"g"}) == -1);
  auto refused = [&](const ReplicaList& dropped, const ReplicaList& removed,
                     const std::vector<std::string>& sites) {
    auto r = ReturningReplica(grid, plan, dropped, removed, sites);
    CHECK_FALSE(r.ok());
    return std::string(r.status().message());
  };
  // Part of its sites, or its sites beside a new one: the message lists its sites.
  CHECK_THAT(refused({1}, {1}, {"c"}),
             Catch::Contains("all 2 of its sites") && Catch::Contains("'c', 'd'"));
  CHECK_THAT(refused({1}, {1}, {"c", "d", "g"}), Catch::Contains("and no other"));
  CHECK_THAT(refused({1}, {1}, {"g", "c"}), Catch::Contains("replica 1 was removed"));
  // A site of a replica still in the job (not removed): refused, as PlanAddedReplica does; one
  // that sits out (dropped) is said to rejoin by itself.
  CHECK_THAT(refused({1}, {1}, {"a"}),
             Catch::Contains("'a' runs a stage of replica 0") && !Catch::Contains("sits out"));
  CHECK_THAT(refused({}, {}, {"c", "d"}), Catch::Contains("'c' runs a stage of replica 1"));
  CHECK_THAT(refused({1}, {}, {"c", "d"}), Catch::Contains("rejoins by itself"));
  CHECK_THAT(refused({1, 2}, {1, 2}, {"c", "d", "e", "f"}),
             Catch::Contains("one replica back at a time"));
  CHECK_THAT(refused({1}, {1}, {"c", "c", "d"}), Catch::Contains("'c' is named twice"));
}

TEST_CASE("a site checks the replicas of a job that sites joined", "[replicas]") {
  // In local mode membership lists come from site changes too, whatever on_site_loss says;
  // the plan must form the assignment's replica count.
  auto spec = ParseJobSpec(Job("sync: {every: 2, on_site_loss: wait}\n"), "job.yaml", ".");
  REQUIRE(spec.ok());
  v1::StageAssignment a;
  a.set_job_id("j1");
  a.set_coordinator("a");
  auto plan = PlanAddedReplica(Plan(), {"g"}, 4, 0);
  REQUIRE(plan.ok());
  *a.mutable_stages() = *plan;
  a.set_stage(6);
  a.add_rejoining_replicas(3);
  a.set_rejoin_source(0);
  CHECK_FALSE(CheckAssignment(a, *spec, "g").ok());  // the job file's 3 replicas
  spec->replicas = 4;
  CHECK(CheckAssignment(a, *spec, "g").ok());
}

TEST_CASE("the barrier waits for the live replicas' stages only", "[replicas]") {
  StepBarrier b(1.0f);
  auto report = [](uint32_t stage, double sum) {
    v1::StepReport r;
    r.set_attempt(3);
    r.set_step(4);
    r.set_stage(stage);
    r.add_grad_sums(sum);
    return r;
  };
  // Replica 1 (stages 2, 3) of three replicas of two stages is dropped: four reports decide.
  CHECK(b.Add(report(0, 9.0), 4, 2, 3, 2) == nullptr);
  CHECK(b.Add(report(1, 16.0), 4, 2, 3, 2) == nullptr);
  CHECK(b.Add(report(4, 0.25), 4, 2, 3, 2) == nullptr);
  const auto* all = b.Add(report(5, 0.0), 4, 2, 3, 2);
  REQUIRE(all != nullptr);
  CHECK(all->size() == 4);
  v1::StepDecision d;
  REQUIRE(b.Lookup(3, 4, &d) == StepBarrier::State::kDecided);
  REQUIRE(d.replica_grad_scales_size() == 3);
  CHECK(d.replica_grad_scales(0) == Approx(0.2).epsilon(1e-3));  // sqrt(9 + 16) = 5
  CHECK(d.replica_grad_scales(1) == 1.0f);                       // no reports: unclipped
  CHECK(d.replica_grad_scales(2) == 1.0f);                       // norm 0.5 under the clip
  CHECK(b.NoteCheckpoint(0, 4, 4) == 0);
  CHECK(b.NoteCheckpoint(1, 4, 4) == 0);
  CHECK(b.NoteCheckpoint(4, 4, 4) == 0);
  CHECK(b.NoteCheckpoint(5, 4, 4) == 4);
}

}  // namespace
}  // namespace longhaul::daemon
