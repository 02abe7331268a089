// StepBarrier: the committed step, the finish, one decision per (attempt, step) from all
// stages' gradient sums, and pruning.
#include "daemon/job/step_barrier.h"

#include <catch2/catch.hpp>
#include <cmath>

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

TEST_CASE("step barrier: pruning ends older attempts and long-past steps") {
  StepBarrier b(1.0f);
  v1::StepDecision d;
  (void)b.Add(Report(1, 5, 0, 1.0), 2, 0);
  (void)b.Add(Report(2, 5, 0, 1.0), 2, 0);
  (void)b.Add(Report(2, 9, 0, 1.0), 2, 0);
  b.Prune(2, 8);
  CHECK(b.Lookup(1, 5, &d) == StepBarrier::State::kGone);
  CHECK(b.Lookup(2, 5, &d) == StepBarrier::State::kGone);  // more than two steps back
  CHECK(b.Lookup(2, 9, &d) == StepBarrier::State::kGathering);
}

}  // namespace
}  // namespace longhaul::daemon
