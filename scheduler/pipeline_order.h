// The 1F1B order of one pipeline stage: the one schedule that the stage runner follows
// (daemon/job/stage_runner.cc), the cost model plays (schedule.cc) and the simulator replays
// (simulator.cc). Stage i of S, over M microbatches, runs w = min(M, S - i - 1) warm-up
// forwards, then alternates one forward and one backward, then drains the backwards; at most
// w + 1 microbatches are in flight on it, and the last stage never waits between its forward
// and backward of a microbatch.
#pragma once

#include <algorithm>
#include <vector>

namespace longhaul::scheduler {

struct PipelineOp {
  bool forward = true;
  int microbatch = 0;
  bool operator==(const PipelineOp&) const = default;
};

// The k-th of the stage's 2M ops (0 <= k < 2M), in O(1).
constexpr PipelineOp OneFOneB(int stage, int stages, int microbatches, int k) {
  const int warmup = std::min(microbatches, stages - stage - 1);
  if (k < warmup) return {true, k};
  if (k < 2 * microbatches - warmup) {
    const int t = k - warmup;  // forward/backward pairs
    return t % 2 == 0 ? PipelineOp{true, warmup + t / 2} : PipelineOp{false, t / 2};
  }
  return {false, k - microbatches};  // the drain
}

// All 2M ops of the stage, in order.
inline std::vector<PipelineOp> OneFOneBOrder(int stage, int stages, int microbatches) {
  std::vector<PipelineOp> ops;
  ops.reserve(2 * static_cast<size_t>(microbatches));
  for (int k = 0; k < 2 * microbatches; ++k) {
    ops.push_back(OneFOneB(stage, stages, microbatches, k));
  }
  return ops;
}

}  // namespace longhaul::scheduler
