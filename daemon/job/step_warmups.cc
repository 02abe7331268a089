// StepWarmups (step_warmups.h).
#include "daemon/job/step_warmups.h"

#include <algorithm>
#include <cmath>

#include "scheduler/in_flight.h"
#include "scheduler/pipeline_order.h"

namespace longhaul::daemon {
namespace {

// The report's link towards `to`: its round trip and one tensor's wire time (0 when the
// link has carried nothing or has no estimate yet).
void LinkTimes(const v1::StepReport& r, const std::string& to, double* rtt, double* wire) {
  *rtt = 0;
  *wire = 0;
  for (const v1::LinkUsage& l : r.links()) {
    if (l.to_site() != to) continue;
    if (std::isfinite(l.rtt_seconds()) && l.rtt_seconds() > 0) *rtt = l.rtt_seconds();
    const double bw = l.bandwidth_bytes_per_second();
    if (l.tensors() > 0 && !std::isnan(bw) && bw > 0) {  // an infinite rate: instant
      *wire = static_cast<double>(l.wire_bytes()) / static_cast<double>(l.tensors()) / bw;
    }
    return;  // the neighbour link comes first (StageExchange::Usage)
  }
}

}  // namespace

std::vector<uint32_t> StepWarmups(const StageGrid& grid, const std::vector<std::string>& sites,
                                  const std::vector<int>& microbatches,
                                  const std::map<uint32_t, v1::StepReport>& reports) {
  std::vector<uint32_t> out(static_cast<size_t>(grid.size()), 0);
  for (int r = 0; r < grid.replicas; ++r) {
    const int S = grid.stages(r);
    const int M = r < static_cast<int>(microbatches.size()) ? std::max(microbatches[r], 1) : 1;
    scheduler::InFlightInputs in;
    in.microbatches = M;
    bool complete = true;
    for (int p = 0; p < S && complete; ++p) {
      const int flat = grid.flat(r, p);
      auto it = reports.find(static_cast<uint32_t>(flat));
      if (it == reports.end() || static_cast<size_t>(flat) >= sites.size()) {
        complete = false;
        break;
      }
      const v1::StepReport& rep = it->second;
      const double c = rep.compute_seconds() / M;
      in.compute.push_back(std::isfinite(c) && c > 0 ? c : 0);
      in.max_warmup.push_back(static_cast<int>(std::min<uint32_t>(rep.max_warmup(), M)));
      in.max_ahead.push_back(static_cast<int>(std::min<uint32_t>(rep.max_ahead(), M)));
      if (p + 1 < S) {
        const auto next = reports.find(static_cast<uint32_t>(flat + 1));
        if (next == reports.end() || static_cast<size_t>(flat + 1) >= sites.size()) {
          complete = false;
          break;
        }
        double rtt = 0, act = 0, back_rtt = 0, grad = 0;
        LinkTimes(rep, sites[flat + 1], &rtt, &act);
        LinkTimes(next->second, sites[flat], &back_rtt, &grad);
        in.rtt.push_back(std::max(rtt, back_rtt));
        in.act_wire.push_back(act);
        in.grad_wire.push_back(grad);
      }
    }
    std::vector<int> w(S);
    if (complete) {
      w = scheduler::WanAwareWarmups(in);
    } else {
      for (int p = 0; p < S; ++p) w[p] = scheduler::StandardWarmup(p, S, M);
    }
    for (int p = 0; p < S; ++p) out[grid.flat(r, p)] = static_cast<uint32_t>(w[p]);
  }
  return out;
}

}  // namespace longhaul::daemon
