// The 1F1B order of one pipeline stage: the one schedule that the stage runner follows
// (daemon/job/stage/stage_runner.cc), the cost model plays (schedule.cc) and the simulator replays
// (simulator.cc). Stage i of S, over M microbatches, runs w warm-up forwards, then alternates
// one forward and one backward, then drains the backwards; at most w + 1 microbatches are in
// flight on it, and the last stage never waits between its forward and backward of a
// microbatch. Plain 1F1B has w = min(M, S - i - 1), just enough to cover the stages
// downstream when links are instant; the WAN-aware schedule (in_flight.h) adds warm-up
// forwards to cover the links' round trips. Any w in [0, M] gives the same microbatches in
// the same forward and backward order, so the same gradients bit for bit. A stage runs w + 1
// forwards before its first backward, so the pipeline deadlocks when a stage warms up more
// than the one before it; the schedules here keep w_i >= min(M, w_{i+1} + 1), as plain 1F1B
// does, which also keeps each stage one forward ahead of the next.
#pragma once

#include <algorithm>
#include <vector>

namespace longhaul::scheduler {

struct PipelineOp {
  bool forward = true;
  int microbatch = 0;
  bool operator==(const PipelineOp&) const = default;
};

// Plain 1F1B's warm-up forwards of stage `stage` of `stages`.
constexpr int StandardWarmup(int stage, int stages, int microbatches) {
  return std::min(microbatches, stages - stage - 1);
}

// The k-th of a stage's 2M ops (0 <= k < 2M) when it runs `warmup` (in [0, M]) warm-up
// forwards, in O(1).
constexpr PipelineOp OneFOneBWarm(int warmup, int microbatches, int k) {
  if (k < warmup) return {true, k};
  if (k < 2 * microbatches - warmup) {
    const int t = k - warmup;  // forward/backward pairs
    return t % 2 == 0 ? PipelineOp{true, warmup + t / 2} : PipelineOp{false, t / 2};
  }
  return {false, k - microbatches};  // the drain
}

// The k-th op of stage `stage` of `stages` in plain 1F1B.
constexpr PipelineOp OneFOneB(int stage, int stages, int microbatches, int k) {
  return OneFOneBWarm(StandardWarmup(stage, stages, microbatches), microbatches, k);
}

// All 2M ops of a stage with `warmup` warm-up forwards, in order.
inline std::vector<PipelineOp> OneFOneBWarmOrder(int warmup, int microbatches) {
  std::vector<PipelineOp> ops;
  ops.reserve(2 * static_cast<size_t>(microbatches));
  for (int k = 0; k < 2 * microbatches; ++k) ops.push_back(OneFOneBWarm(warmup, microbatches, k));
  return ops;
}

// All 2M ops of the stage in plain 1F1B, in order.
inline std::vector<PipelineOp> OneFOneBOrder(int stage, int stages, int microbatches) {
  return OneFOneBWarmOrder(StandardWarmup(stage, stages, microbatches), microbatches);
}

}  // namespace longhaul::scheduler
