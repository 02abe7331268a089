// The WAN-aware schedule: how many microbatches each stage of one pipeline keeps in flight.
// Plain 1F1B (pipeline_order.h) warms stage i up with S - i - 1 forwards, which covers the
// compute of the stages downstream but not the links: over a long round trip the stage sends
// its last warm-up forward and then waits for the first gradient, and the wait repeats every
// microbatch once the round trip exceeds the window. Here each stage adds enough warm-up
// forwards to cover the round trips downstream of it at the pipeline's period:
//
//   extra_i = ceil(sum over boundaries k >= i of (rtt_k + act_wire_k + grad_wire_k) / period
//                  - 0.1)   (a bubble under a tenth of a period is not worth a slot)
//   period  = max(the slowest stage's forward + backward, the slowest link's wire time)
//   w_i     = min(M, S - i - 1 + extra_i, max_warmup_i)
//
// then lowered where needed so that w_i >= min(M, w_{i+1} + 1) (as plain 1F1B; no deadlock,
// see pipeline_order.h) and w_{i-1} <= w_i + max_ahead_i (the activations stage i - 1 sends
// ahead wait in stage i's inbox, whose budget the gradients coming back share: a full one
// would block them, and the pipeline with it). The gradients are the same bit for bit whatever the
// warm-ups: only when each forward runs moves, not what it computes or the order backwards
// accumulate in.
#pragma once

#include <vector>

namespace longhaul::scheduler {

struct InFlightInputs {
  int microbatches = 1;
  std::vector<double> compute;  // per stage: one microbatch's forward + backward, seconds
  // Per boundary k (between stage k and k + 1): the round trip, one activation's wire time
  // k -> k + 1 and one gradient's k + 1 -> k.
  std::vector<double> rtt, act_wire, grad_wire;
  // Per stage: the most warm-up forwards its activation slots hold (slots - 1); empty: M.
  // Never below plain 1F1B's (a stage always holds those slots).
  std::vector<int> max_warmup;
  // Per stage: how many more warm-ups the stage before it may run than it does, so that the
  // activations sent ahead fit its inbox (values below 1 count as 1, plain 1F1B's gap);
  // empty: no bound.
  std::vector<int> max_ahead;
};

// The WAN-aware warm-ups, one per stage (compute.size() stages). Non-finite or negative
// inputs count as 0; a period of 0 (nothing measured yet) gives plain 1F1B.
std::vector<int> WanAwareWarmups(const InFlightInputs& in);

// Plain 1F1B's warm-ups plus `extra` (>= 0) on every stage but the last, within max_warmup
// (as in InFlightInputs) and M.
std::vector<int> ExtraWarmups(int stages, int microbatches, int extra,
                              const std::vector<int>& max_warmup = {},
                              const std::vector<int>& max_ahead = {});

// Whether warm-ups w (one per stage) are within [plain 1F1B's, M] and keep
// w_i >= min(M, w_{i+1} + 1) (so deadlock-free).
bool ValidWarmups(const std::vector<int>& w, int microbatches);

}  // namespace longhaul::scheduler
