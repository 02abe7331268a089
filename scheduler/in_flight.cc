// The WAN-aware warm-ups (in_flight.h).
#include "scheduler/in_flight.h"

#include <algorithm>
#include <cmath>

#include "scheduler/pipeline_order.h"

namespace longhaul::scheduler {
namespace {

// Not a number or negative: nothing measured; infinite (a link too slow to time): huge.
double Clean(double v) {
  if (std::isnan(v) || v <= 0) return 0;
  return std::min(v, 1e9);
}

double At(const std::vector<double>& v, size_t i) { return i < v.size() ? Clean(v[i]) : 0; }

// Clamps each stage's warm-ups to [plain 1F1B, min(M, max_warmup)], lowers stages from the
// front so that each warms up by at least one more than the next, then from the back so that
// none runs more than max_ahead ahead of the next.
std::vector<int> Settle(std::vector<int> w, int M, const std::vector<int>& max_warmup,
                        const std::vector<int>& max_ahead) {
  const int S = static_cast<int>(w.size());
  for (int i = 0; i < S; ++i) {
    const int standard = StandardWarmup(i, S, M);
    int cap = M;
    if (static_cast<size_t>(i) < max_warmup.size()) cap = std::min(cap, max_warmup[i]);
    w[i] = std::max(standard, std::min(w[i], cap));
  }
  for (int i = 1; i < S; ++i) {
    if (w[i - 1] < M) w[i] = std::min(w[i], w[i - 1] - 1);
  }
  // Lowering w[i - 1] to w[i] + a (a >= 1) keeps it one ahead of w[i] and, since plain 1F1B's
  // warm-ups differ by one, at or above its own.
  for (int i = S - 1; i >= 1; --i) {
    if (static_cast<size_t>(i) >= max_ahead.size()) continue;
    w[i - 1] = std::min(w[i - 1], w[i] + std::max(1, max_ahead[i]));
  }
  return w;
}

}  // namespace

std::vector<int> WanAwareWarmups(const InFlightInputs& in) {
  const int S = static_cast<int>(in.compute.size());
  const int M = std::max(in.microbatches, 1);
  double period = 0;
  for (int i = 0; i < S; ++i) period = std::max(period, At(in.compute, i));
  for (int k = 0; k + 1 < S; ++k) {
    period = std::max({period, At(in.act_wire, k), At(in.grad_wire, k)});
  }
  std::vector<int> w(S);
  double downstream = 0;  // round trips from stage i to the end
  for (int i = S - 1; i >= 0; --i) {
    if (i + 1 < S) downstream += At(in.rtt, i) + At(in.act_wire, i) + At(in.grad_wire, i);
    // Rounded up, but a bubble under a tenth of a period is not worth a slot.
    double extra = period > 0 ? std::ceil(downstream / period - 0.1) : 0;
    extra = std::max(extra, 0.0);
    extra = std::min(extra, static_cast<double>(M));
    w[i] = i + 1 < S ? StandardWarmup(i, S, M) + static_cast<int>(extra) : 0;
  }
  return Settle(std::move(w), M, in.max_warmup, in.max_ahead);
}

std::vector<int> ExtraWarmups(int stages, int microbatches, int extra,
                              const std::vector<int>& max_warmup,
                              const std::vector<int>& max_ahead) {
  const int M = std::max(microbatches, 1);
  std::vector<int> w(std::max(stages, 0));
  for (int i = 0; i < stages; ++i) {
    w[i] = i + 1 < stages ? StandardWarmup(i, stages, M) + std::clamp(extra, 0, M) : 0;
  }
  return Settle(std::move(w), M, max_warmup, max_ahead);
}

bool ValidWarmups(const std::vector<int>& w, int microbatches) {
  const int S = static_cast<int>(w.size());
  for (int i = 0; i < S; ++i) {
    if (w[i] < StandardWarmup(i, S, microbatches) || w[i] > microbatches) return false;
    if (i + 1 < S && w[i] < std::min(microbatches, w[i + 1] + 1)) return false;
  }
  return true;
}

}  // namespace longhaul::scheduler
