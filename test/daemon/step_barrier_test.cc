// StepBarrier: the committed step, the finish, one decision per (attempt, step) from all
// stages' gradient sums, and pruning; StepWarmups, the WAN-aware warm-ups the coordinator adds
// to the decision.
#include "daemon/job/coordinator/step_barrier.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "daemon/job/coordinator/step_schedule.h"
#include "model/optimizer.h"

namespace longhaul::daemon {
namespace {

v1::StepReport Report(uint32_t attempt, uint64_t step, uint32_t stage, double grad_sum) {
  v1::StepReport r;
  r.set_attempt(attempt);
  r.set_step(step);
  r.set_stage(stage);
  r.add_grad_sums(grad_sum);
  return r;
}

TEST_CASE("step barrier: the committed step is the oldest of the stages' newest checkpoints") {
  StepBarrier b(1.0f);
  CHECK(b.NoteCheckpoint(0, 4, 3) == 0);  // stages 1 and 2 have not reported one yet
  CHECK(b.NoteCheckpoint(1, 6, 3) == 0);
  CHECK(b.NoteCheckpoint(2, 5, 3) == 4);
  CHECK(b.NoteCheckpoint(0, 8, 3) == 5);
  CHECK(b.NoteCheckpoint(0, 2, 3) == 5);  // an older checkpoint never moves it back
  b.NewAssignment();                      // every stage reports again before a step is committed
  CHECK(b.NoteCheckpoint(0, 8, 3) == 0);
  CHECK(b.NoteCheckpoint(1, 8, 3) == 0);
  CHECK(b.NoteCheckpoint(2, 7, 3) == 7);
}

TEST_CASE("step barrier: stages that left are forgotten, and what waited for them decided") {
  // Four stages; stages 2 and 3 (a removed replica) stop at step 4 while 0 and 1 go on.
  StepBarrier b(1.0f);
  for (uint32_t s = 0; s < 4; ++s) b.NoteCheckpoint(s, s < 2 ? 6 : 4, 4);
  CHECK(b.Committed(4) == 4);
  for (uint64_t step = 5; step <= 6; ++step) {
    CHECK(b.Add(Report(1, step, 0, 1.0), 4, 4) == nullptr);
    CHECK(b.Add(Report(1, step, 1, 1.0), 4, 4) == nullptr);
  }
  CHECK(b.Add(Report(1, 5, 2, 1.0), 4, 4) == nullptr);  // stage 2 got one more report in
  CHECK(b.Complete(1, 2).empty() == false);
  b.Forget({2, 3});
  CHECK(b.Committed(2) == 6);  // the others' checkpoints only
  const std::vector<v1::StepReport> complete = b.Complete(1, 2);
  REQUIRE(complete.size() == 2);  // steps 5 and 6, in order
  CHECK(complete[0].step() == 5);
  CHECK(complete[1].step() == 6);
  for (const auto& r : complete) {
    const auto* reports = b.Add(r, 2, 6);
    REQUIRE(reports != nullptr);
    CHECK(reports->size() == 2);  // stage 2's report of step 5 is gone
  }
  CHECK(b.Complete(1, 2).empty());
  CHECK(b.Committed(3) == 0);  // fewer stages noted than asked for
  // Another attempt's barriers are not this one's to decide.
  CHECK(b.Add(Report(1, 7, 0, 1.0), 4, 6) == nullptr);
  CHECK(b.Complete(2, 1).empty());
  CHECK(b.Complete(1, 1).size() == 1);
  CHECK_FALSE(b.AllFinished(2));
  b.NoteFinished(0, 2);
  b.NoteFinished(1, 2);
  CHECK(b.AllFinished(2));
}

TEST_CASE("step barrier: finished once every stage ran its last step") {
  StepBarrier b(1.0f);
  CHECK_FALSE(b.NoteFinished(1, 2));
  CHECK_FALSE(b.NoteFinished(1, 2));
  CHECK(b.NoteFinished(0, 2));
}

TEST_CASE("step barrier: one decision when the last stage reports, from all their sums") {
  StepBarrier b(1.0f);
  v1::StepDecision d;
  CHECK(b.Add(Report(1, 7, 0, 9.0), 2, 3) == nullptr);
  CHECK(b.Lookup(1, 7, &d) == StepBarrier::State::kGathering);
  CHECK(b.Add(Report(1, 7, 0, 9.0), 2, 3) == nullptr);  // a repeated report changes nothing
  const auto* reports = b.Add(Report(1, 7, 1, 16.0), 2, 3);
  REQUIRE(reports != nullptr);
  CHECK(reports->size() == 2);
  REQUIRE(b.Lookup(1, 7, &d) == StepBarrier::State::kDecided);
  // The global norm is sqrt(9 + 16) = 5 over a clip of 1.
  CHECK(d.grad_scale() == Approx(model::ClipScale(5.0f, 1.0f)));
  CHECK(d.grad_scale() == Approx(0.2).epsilon(1e-3));
  CHECK(d.committed_step() == 3);
  CHECK(b.Add(Report(1, 7, 1, 16.0), 2, 3) == nullptr);  // decided once
  CHECK(b.Lookup(2, 7, &d) == StepBarrier::State::kGone);
}

TEST_CASE("step barrier: pruning ends older attempts and long-past decided steps") {
  StepBarrier b(1.0f);
  v1::StepDecision d;
  (void)b.Add(Report(1, 5, 0, 1.0), 2, 0);
  (void)b.Add(Report(2, 5, 0, 1.0), 2, 0);
  (void)b.Add(Report(2, 5, 1, 1.0), 2, 0);
  (void)b.Add(Report(2, 6, 0, 1.0), 2, 0);  // a replica behind the others still gathers it
  (void)b.Add(Report(2, 9, 0, 1.0), 2, 0);
  b.Prune(2, 9);
  CHECK(b.Lookup(1, 5, &d) == StepBarrier::State::kGone);
  CHECK(b.Lookup(2, 5, &d) == StepBarrier::State::kGone);  // decided, more than two steps back
  CHECK(b.Lookup(2, 6, &d) == StepBarrier::State::kGathering);
  CHECK(b.Lookup(2, 9, &d) == StepBarrier::State::kGathering);
}

}  // namespace
}  // namespace longhaul::daemon

namespace longhaul::daemon {
namespace {

// A stage's report for StepWarmups: compute over the step, its slots, one neighbour link.
v1::StepReport FlightReport(uint32_t stage, double compute, uint32_t max_warmup,
                            const std::string& to, double rtt, double bandwidth, uint64_t wire) {
  v1::StepReport r;
  r.set_stage(stage);
  r.set_compute_seconds(compute);
  r.set_max_warmup(max_warmup);
  r.set_max_ahead(64);
  if (!to.empty()) {
    v1::LinkUsage* l = r.add_links();
    l->set_to_site(to);
    l->set_rtt_seconds(rtt);
    l->set_bandwidth_bytes_per_second(bandwidth);
    l->set_tensors(10);
    l->set_wire_bytes(10 * wire);
  }
  return r;
}

// Sites a, b, c in a pipeline: 8 microbatches of 18 ms each; every link with this round
// trip and rate, carrying 262 kB tensors.
std::map<uint32_t, v1::StepReport> ThreeStages(double rtt, double bandwidth) {
  std::map<uint32_t, v1::StepReport> reports;
  reports[0] = FlightReport(0, 8 * 0.018, 8, "b", rtt, bandwidth, 262000);
  reports[1] = FlightReport(1, 8 * 0.018, 8, "c", rtt, bandwidth, 262000);
  reports[1].add_links()->CopyFrom(reports[0].links(0));  // its link back to a
  reports[1].mutable_links(1)->set_to_site("a");
  reports[2] = FlightReport(2, 8 * 0.018, 0, "b", rtt, bandwidth, 262000);
  return reports;
}

// The coordinator's two decisions from one step's reports, as it makes them.
std::vector<uint32_t> Warmups(const StageGrid& grid, const std::vector<std::string>& sites,
                              const std::vector<int>& microbatches,
                              const std::map<uint32_t, v1::StepReport>& reports) {
  return StepWarmups(grid, microbatches, MeasuredTimes(grid, sites, microbatches, reports));
}
StepBudgets Budgets(const StageGrid& grid, const std::vector<std::string>& sites,
                    const std::vector<int>& microbatches,
                    const std::map<uint32_t, v1::StepReport>& reports,
                    const std::vector<uint32_t>& warmups, double tolerance = 0.03) {
  return CodecBudgets(grid, MeasuredTimes(grid, sites, microbatches, reports), warmups, tolerance);
}

TEST_CASE("step warm-ups: the WAN-aware schedule from one step's reports, per replica") {
  const std::vector<std::string> sites = {"a", "b", "c"};
  const StageGrid grid = StageGrid::Of(1, 3);
  // 30 ms round trips, 262 kB at 100 MB/s (2.6 ms) each way.
  std::map<uint32_t, v1::StepReport> reports = ThreeStages(0.03, 1e8);
  // Stage 1: ceil((0.03 + 2 x 0.00262) / 0.018) = 2 more than 1F1B's 1; stage 0: both links.
  CHECK(Warmups(grid, sites, {8}, reports) == std::vector<uint32_t>{6, 3, 0});
  // Stage 1's inbox holds two activations ahead: stage 0 runs at most two ahead of it.
  reports[1].set_max_ahead(2);
  CHECK(Warmups(grid, sites, {8}, reports) == std::vector<uint32_t>{5, 3, 0});
  reports[1].set_max_ahead(0);  // an old or hostile report: plain 1F1B's gap
  CHECK(Warmups(grid, sites, {8}, reports) == std::vector<uint32_t>{4, 3, 0});
  reports[1].set_max_ahead(64);
  // Stage 0's slots hold 4: it and the next stay deadlock-free.
  reports[0].set_max_warmup(3);
  CHECK(Warmups(grid, sites, {8}, reports) == std::vector<uint32_t>{3, 2, 0});
  // A missing report: plain 1F1B.
  reports.erase(2);
  CHECK(Warmups(grid, sites, {8}, reports) == std::vector<uint32_t>{2, 1, 0});
  // Hostile figures (negative, not finite) count as nothing measured.
  reports[2] = FlightReport(2, -1, 0, "b", std::nan(""), -5, 1);
  reports[0] =
      FlightReport(0, std::nan(""), 8, "b", -1, std::numeric_limits<double>::infinity(), 262000);
  reports[1] = FlightReport(1, 0, 8, "c", 0, 0, 0);
  CHECK(Warmups(grid, sites, {8}, reports) == std::vector<uint32_t>{2, 1, 0});
  // Two replicas of two stages: each its own.
  const StageGrid two = StageGrid::Of(2, 4);
  const std::vector<std::string> four = {"a", "b", "c", "d"};
  std::map<uint32_t, v1::StepReport> r2;
  r2[0] = FlightReport(0, 4 * 0.01, 4, "b", 0.1, 1e8, 1000);
  r2[1] = FlightReport(1, 4 * 0.01, 0, "a", 0.1, 1e8, 1000);
  r2[2] = FlightReport(2, 4 * 0.01, 4, "d", 0, 1e8, 1000);
  r2[3] = FlightReport(3, 4 * 0.01, 0, "c", 0, 1e8, 1000);
  CHECK(Warmups(two, four, {4, 4}, r2) == std::vector<uint32_t>{4, 0, 1, 0});
}

// The adaptive controllers' budgets priced on the played step (step_schedule.h).
TEST_CASE("codec budgets: a link's share of the step's critical path, not a microbatch") {
  const std::vector<std::string> sites = {"a", "b", "c"};
  const StageGrid grid = StageGrid::Of(1, 3);
  // 20 ms round trips, 262 kB tensors at 25 MB/s.
  std::map<uint32_t, v1::StepReport> reports = ThreeStages(0.02, 25e6);
  const std::vector<uint32_t> plain = {2, 1, 0};
  const StepBudgets b = Budgets(grid, sites, {8}, reports, plain);
  REQUIRE(b.act.size() == 3);
  REQUIRE(b.grad.size() == 3);
  CHECK(b.act[2] == 0);   // the last stage sends no activations
  CHECK(b.grad[0] == 0);  // the first no gradients
  for (double v : {b.act[0], b.act[1], b.grad[1], b.grad[2]}) {
    CHECK(v > 0);
    // Under plain 1F1B with 20 ms round trips every transfer is on the critical path: far
    // less than the microbatch's compute that a transfer used to have to fit.
    CHECK(v < 0.018);
  }
  // A looser tolerance, looser budgets; the round trips covered by warm-ups leave the first
  // link's activations more room.
  const StepBudgets loose = Budgets(grid, sites, {8}, reports, plain, 0.2);
  for (int i = 0; i < 3; ++i) {
    CHECK(loose.act[i] >= b.act[i]);
    CHECK(loose.grad[i] >= b.grad[i]);
  }
  CHECK(loose.act[0] > b.act[0]);
  const StepBudgets wide = Budgets(grid, sites, {8}, reports, {6, 3, 0});
  CHECK(wide.act[0] > b.act[0]);
  // The pacing figure: 4 directed links x 31 plays x 2 x 3 stages x 8 microbatches.
  CHECK(CodecBudgetWork(grid, {8}) == 4 * 31 * 2 * 3 * 8);
  // A replica with a missing report gets none; tolerance 0 gives none.
  reports.erase(1);
  const StepBudgets missing = Budgets(grid, sites, {8}, reports, plain);
  CHECK(missing.act == std::vector<double>{0, 0, 0});
  CHECK(Budgets(grid, sites, {8}, reports, plain, 0).grad == std::vector<double>{0, 0, 0});
}

}  // namespace
}  // namespace longhaul::daemon
