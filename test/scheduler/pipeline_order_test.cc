// The 1F1B order: the loops it replaced, and the properties a pipeline relies on.
#include "scheduler/pipeline_order.h"

#include <catch2/catch.hpp>
#include <vector>

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

}  // namespace
}  // namespace longhaul::scheduler
