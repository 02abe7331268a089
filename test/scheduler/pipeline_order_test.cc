// The 1F1B order: the loops it replaced, and the properties a pipeline relies on; the
// WAN-aware schedule's warm-ups (in_flight.h): valid, and faster over long round trips when
// the step is played (schedule.h).
#include "scheduler/pipeline_order.h"

#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "scheduler/in_flight.h"
#include "scheduler/schedule.h"

namespace longhaul::scheduler {
namespace {

// The order as the stage runner used to write it out.
std::vector<PipelineOp> Loops(int stage, int stages, int m) {
  std::vector<PipelineOp> ops;
  const int warmup = std::min(m, stages - stage - 1);
  int f = 0, b = 0;
  for (; f < warmup; ++f) ops.push_back({true, f});
  while (f < m) ops.push_back({true, f++}), ops.push_back({false, b++});
  while (b < m) ops.push_back({false, b++});
  return ops;
}

TEST_CASE("1F1B: the op at each index is the runner's loops, for every shape") {
  for (int stages = 1; stages <= 9; ++stages) {
    for (int m = 1; m <= 12; ++m) {
      for (int i = 0; i < stages; ++i) {
        INFO("stages " << stages << " microbatches " << m << " stage " << i);
        CHECK(OneFOneBOrder(i, stages, m) == Loops(i, stages, m));
      }
    }
  }
}

TEST_CASE("1F1B: each microbatch forward once, then backward once, with bounded memory") {
  for (int stages = 1; stages <= 6; ++stages) {
    for (int m = 1; m <= 8; ++m) {
      for (int i = 0; i < stages; ++i) {
        INFO("stages " << stages << " microbatches " << m << " stage " << i);
        std::vector<int> seen(m, 0);  // 0 none, 1 forward, 2 backward
        int in_flight = 0, peak = 0, next_forward = 0, next_backward = 0;
        for (const PipelineOp& op : OneFOneBOrder(i, stages, m)) {
          REQUIRE(op.microbatch >= 0);
          REQUIRE(op.microbatch < m);
          if (op.forward) {
            CHECK(op.microbatch == next_forward++);
            CHECK(seen[op.microbatch] == 0);
            seen[op.microbatch] = 1;
            peak = std::max(peak, ++in_flight);
          } else {
            CHECK(op.microbatch == next_backward++);
            CHECK(seen[op.microbatch] == 1);
            seen[op.microbatch] = 2;
            --in_flight;
          }
        }
        CHECK(next_forward == m);
        CHECK(next_backward == m);
        CHECK(peak == std::min(m, stages - i));  // the runner's activation slots
      }
    }
  }
}

TEST_CASE("1F1B: the last stage alternates from the start") {
  const auto ops = OneFOneBOrder(3, 4, 3);
  const std::vector<PipelineOp> want = {{true, 0},  {false, 0}, {true, 1},
                                        {false, 1}, {true, 2},  {false, 2}};
  CHECK(ops == want);
}

// Whether the stages, each running its order with its warm-ups, all finish: forwards need
// the previous stage's forward of the microbatch, backwards the next stage's backward.
bool RunsToTheEnd(const std::vector<int>& warmup, int m) {
  const int stages = static_cast<int>(warmup.size());
  std::vector<std::vector<PipelineOp>> order;
  for (int w : warmup) order.push_back(OneFOneBWarmOrder(w, m));
  std::vector<int> pc(stages, 0), forwards(stages, 0), backwards(stages, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int i = 0; i < stages; ++i) {
      while (pc[i] < 2 * m) {
        const PipelineOp op = order[i][pc[i]];
        const bool ready = op.forward ? (i == 0 || forwards[i - 1] > op.microbatch)
                                      : (i + 1 == stages || backwards[i + 1] > op.microbatch);
        if (!ready) break;
        ++(op.forward ? forwards[i] : backwards[i]);
        ++pc[i];
        progress = true;
      }
    }
  }
  for (int i = 0; i < stages; ++i) {
    if (pc[i] != 2 * m) return false;
  }
  return true;
}

TEST_CASE("warm-ups: any valid choice keeps the order of forwards and backwards") {
  for (int m = 1; m <= 8; ++m) {
    for (int w = 0; w <= m; ++w) {
      INFO("microbatches " << m << " warm-up " << w);
      std::vector<PipelineOp> forwards, backwards;
      for (const PipelineOp& op : OneFOneBWarmOrder(w, m)) {
        (op.forward ? forwards : backwards).push_back(op);
      }
      REQUIRE(forwards.size() == static_cast<size_t>(m));
      REQUIRE(backwards.size() == static_cast<size_t>(m));
      for (int j = 0; j < m; ++j) {
        CHECK(forwards[j].microbatch == j);
        CHECK(backwards[j].microbatch == j);
      }
    }
  }
}

TEST_CASE("warm-ups: what ValidWarmups accepts runs to the end, what it refuses deadlocks") {
  CHECK(ValidWarmups({2, 1, 0}, 8));
  CHECK(ValidWarmups({5, 4, 0}, 8));
  CHECK(ValidWarmups({8, 8, 7, 0}, 8));
  CHECK_FALSE(ValidWarmups({1, 1, 0}, 8));  // below plain 1F1B
  CHECK_FALSE(ValidWarmups({4, 4, 0}, 8));  // not one more than the next
  CHECK_FALSE(ValidWarmups({9, 1, 0}, 8));  // past M
  CHECK_FALSE(ValidWarmups({2, 3, 0}, 8));
  CHECK_FALSE(RunsToTheEnd({2, 3, 0}, 8));  // a stage warming up more than the one before
  // Every assignment of warm-ups on small pipelines: valid ones finish.
  for (int stages = 1; stages <= 4; ++stages) {
    for (int m = 1; m <= 5; ++m) {
      std::vector<int> w(stages, 0);
      for (;;) {
        if (ValidWarmups(w, m)) {
          INFO("stages " << stages << " microbatches " << m);
          CHECK(RunsToTheEnd(w, m));
        }
        int i = 0;
        while (i < stages && ++w[i] > m) w[i++] = 0;
        if (i == stages) break;
      }
    }
  }
}

TEST_CASE("warm-ups: the WAN-aware and fixed-extra choices are valid and cover the round trip") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 0.2);
  for (int trial = 0; trial < 500; ++trial) {
    const int stages = 1 + static_cast<int>(rng() % 6), m = 1 + static_cast<int>(rng() % 12);
    InFlightInputs in;
    in.microbatches = m;
    for (int i = 0; i < stages; ++i) {
      in.compute.push_back(u(rng));
      in.max_warmup.push_back(static_cast<int>(rng() % (m + 2)));
      in.max_ahead.push_back(static_cast<int>(rng() % 4));
    }
    for (int k = 0; k + 1 < stages; ++k) {
      in.rtt.push_back(u(rng));
      in.act_wire.push_back(u(rng) / 4);
      in.grad_wire.push_back(u(rng) / 4);
    }
    INFO("trial " << trial);
    const std::vector<int> w = WanAwareWarmups(in);
    CHECK(ValidWarmups(w, m));
    for (int i = 1; i < stages; ++i) CHECK(w[i - 1] - w[i] <= std::max(1, in.max_ahead[i]));
    CHECK(ValidWarmups(ExtraWarmups(stages, m, static_cast<int>(rng() % 4), in.max_warmup), m));
  }
  // 3 stages, 18 ms of compute per microbatch, 200 ms round trips: the first stage covers
  // both links (ceil(0.42 / 0.018) = 24, capped at M), the middle one its own.
  InFlightInputs in;
  in.microbatches = 8;
  in.compute = {0.018, 0.018, 0.018};
  in.rtt = {0.2, 0.2};
  in.act_wire = {0.005, 0.005};
  in.grad_wire = {0.005, 0.005};
  CHECK(WanAwareWarmups(in) == std::vector<int>{8, 8, 0});
  in.rtt = {0.02, 0.02};  // 30 ms round trips: two more in flight on the middle stage
  CHECK(WanAwareWarmups(in) == std::vector<int>{6, 3, 0});
  in.rtt = {0, 0};
  in.act_wire = in.grad_wire = {0, 0};  // instant links: plain 1F1B
  CHECK(WanAwareWarmups(in) == std::vector<int>{2, 1, 0});
  in.compute = {0, 0, 0};  // nothing measured: plain 1F1B
  in.rtt = {0.2, 0.2};
  CHECK(WanAwareWarmups(in) == std::vector<int>{2, 1, 0});
  in.compute = {0.018, 0.018, 0.018};
  in.max_warmup = {3, 8, 0};  // the first stage's slots hold 4: the middle one gives way
  CHECK(WanAwareWarmups(in) == std::vector<int>{3, 2, 0});
  CHECK(ExtraWarmups(3, 8, 2) == std::vector<int>{4, 3, 0});
  CHECK(ExtraWarmups(3, 2, 5) == std::vector<int>{2, 2, 0});
}

// The step of the pipeline_bench job played with 100 ms one-way links: the WAN-aware warm-ups
// against plain 1F1B.
TEST_CASE("warm-ups: over long links the played step is shorter with the WAN-aware schedule") {
  ScheduleInputs in;
  in.microbatches = 8;
  const int stages = 3;
  in.release.assign(stages, 0.1);
  in.optimizer.assign(stages, 0.002);
  in.forward.assign(stages, 0.006);
  in.backward.assign(stages, 0.012);
  in.report.assign(stages, 0.1);
  in.act_wire.assign(stages - 1, 0.004);
  in.grad_wire.assign(stages - 1, 0.004);
  in.act_latency.assign(stages - 1, 0.1);
  in.grad_latency.assign(stages - 1, 0.1);
  const double plain = PlayStep(in, nullptr, false);
  InFlightInputs f;
  f.microbatches = 8;
  f.compute.assign(stages, 0.018);
  f.rtt.assign(stages - 1, 0.2);
  f.act_wire = in.act_wire;
  f.grad_wire = in.grad_wire;
  in.warmup = WanAwareWarmups(f);
  const double aware = PlayStep(in, nullptr, false);
  CHECK(aware > 0);
  CHECK(plain / aware > 1.5);
  in.warmup = {3, 3, 0};  // invalid: played as plain 1F1B
  CHECK(PlayStep(in, nullptr, false) == plain);
}

}  // namespace
}  // namespace longhaul::scheduler
