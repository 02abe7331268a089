// MeasuredTimes, StepWarmups and CodecBudgets (step_schedule.h).
#include "daemon/job/coordinator/step_schedule.h"

#include <algorithm>
#include <cmath>

#include "compression/codec.h"
#include "compression/codec_spec.h"
#include "scheduler/pipeline_order.h"
#include "scheduler/schedule.h"

namespace longhaul::daemon {
namespace {

// The report's link towards `to`: its round trip and one tensor's wire time under its
// current codec (the mean so far when the codec does not parse; 0 when the link has carried
// nothing or has no estimate yet).
void LinkTimes(const v1::StepReport& r, const std::string& to, double* rtt, double* wire) {
  *rtt = 0;
  *wire = 0;
  for (const v1::LinkUsage& l : r.links()) {
    if (l.to_site() != to) continue;
    if (std::isfinite(l.rtt_seconds()) && l.rtt_seconds() > 0) *rtt = l.rtt_seconds();
    const double bw = l.bandwidth_bytes_per_second();
    if (l.tensors() > 0 && !std::isnan(bw) && bw > 0) {  // an infinite rate: instant
      double bytes = static_cast<double>(l.wire_bytes()) / static_cast<double>(l.tensors());
      if (auto spec = compression::ParseCodecSpec(l.codec()); spec.ok()) {
        const uint64_t floats = l.raw_bytes() / l.tensors() / sizeof(float);
        bytes = static_cast<double>(compression::EstimateEncodedSize(*spec, floats));
      }
      *wire = bytes / bw;
    }
    return;  // the neighbour link comes first (StageExchange::Usage)
  }
}

int MicrobatchesOf(const std::vector<int>& microbatches, int replica) {
  return replica < static_cast<int>(microbatches.size()) ? std::max(microbatches[replica], 1) : 1;
}

// Replica r's measured schedule.
ReplicaTimes ReplicaMeasured(const StageGrid& grid, int r, const std::vector<std::string>& sites,
                             const std::vector<int>& microbatches,
                             const std::map<uint32_t, v1::StepReport>& reports) {
  ReplicaTimes t;
  const int S = grid.stages(r);
  const int M = MicrobatchesOf(microbatches, r);
  scheduler::InFlightInputs& in = t.in;
  in.microbatches = M;
  for (int p = 0; p < S; ++p) {
    const int flat = grid.flat(r, p);
    auto it = reports.find(static_cast<uint32_t>(flat));
    if (it == reports.end() || static_cast<size_t>(flat) >= sites.size()) return t;
    const v1::StepReport& rep = it->second;
    const double c = rep.compute_seconds() / M;
    in.compute.push_back(std::isfinite(c) && c > 0 ? c : 0);
    in.max_warmup.push_back(static_cast<int>(std::min<uint32_t>(rep.max_warmup(), M)));
    in.max_ahead.push_back(static_cast<int>(std::min<uint32_t>(rep.max_ahead(), M)));
    if (p + 1 < S) {
      const auto next = reports.find(static_cast<uint32_t>(flat + 1));
      if (next == reports.end() || static_cast<size_t>(flat + 1) >= sites.size()) return t;
      double rtt = 0, act = 0, back_rtt = 0, grad = 0;
      LinkTimes(rep, sites[flat + 1], &rtt, &act);
      LinkTimes(next->second, sites[flat], &back_rtt, &grad);
      in.rtt.push_back(std::max(rtt, back_rtt));
      in.act_wire.push_back(act);
      in.grad_wire.push_back(grad);
    }
  }
  t.complete = true;
  return t;
}

}  // namespace

std::vector<ReplicaTimes> MeasuredTimes(const StageGrid& grid,
                                        const std::vector<std::string>& sites,
                                        const std::vector<int>& microbatches,
                                        const std::map<uint32_t, v1::StepReport>& reports) {
  std::vector<ReplicaTimes> out;
  out.reserve(static_cast<size_t>(grid.replicas));
  for (int r = 0; r < grid.replicas; ++r) {
    out.push_back(ReplicaMeasured(grid, r, sites, microbatches, reports));
  }
  return out;
}

std::vector<uint32_t> StepWarmups(const StageGrid& grid, const std::vector<int>& microbatches,
                                  const std::vector<ReplicaTimes>& times) {
  std::vector<uint32_t> out(static_cast<size_t>(grid.size()), 0);
  for (int r = 0; r < grid.replicas; ++r) {
    const int S = grid.stages(r);
    const int M = MicrobatchesOf(microbatches, r);
    static const ReplicaTimes kNone;
    const ReplicaTimes& t = static_cast<size_t>(r) < times.size() ? times[r] : kNone;
    std::vector<int> w(S);
    if (t.complete) {
      w = scheduler::WanAwareWarmups(t.in);
    } else {
      for (int p = 0; p < S; ++p) w[p] = scheduler::StandardWarmup(p, S, M);
    }
    for (int p = 0; p < S; ++p) out[grid.flat(r, p)] = static_cast<uint32_t>(w[p]);
  }
  return out;
}

double CodecBudgetWork(const StageGrid& grid, const std::vector<int>& microbatches) {
  double work = 0;
  for (int r = 0; r < grid.replicas; ++r) {
    const double S = grid.stages(r), M = MicrobatchesOf(microbatches, r);
    work += 2 * (S - 1) * 31 * 2 * S * M;
  }
  return work;
}

StepBudgets CodecBudgets(const StageGrid& grid, const std::vector<ReplicaTimes>& times,
                         const std::vector<uint32_t>& warmups, double tolerance) {
  StepBudgets b;
  b.act.assign(static_cast<size_t>(grid.size()), 0);
  b.grad.assign(b.act.size(), 0);
  if (!(tolerance > 0)) return b;
  for (int r = 0; r < grid.replicas; ++r) {
    const int S = grid.stages(r);
    if (S < 2) continue;
    if (static_cast<size_t>(r) >= times.size() || !times[r].complete) continue;
    const ReplicaTimes& t = times[r];
    scheduler::ScheduleInputs in;
    in.microbatches = t.in.microbatches;
    for (int p = 0; p < S; ++p) {
      in.forward.push_back(t.in.compute[p] / 3);
      in.backward.push_back(2 * t.in.compute[p] / 3);
      const size_t flat = static_cast<size_t>(grid.flat(r, p));
      if (flat < warmups.size()) in.warmup.push_back(static_cast<int>(warmups[flat]));
    }
    in.release.assign(S, 0);
    in.optimizer.assign(S, 0);
    in.report.assign(S, 0);
    for (int k = 0; k + 1 < S; ++k) {
      in.act_latency.push_back(t.in.rtt[k] / 2);
      in.grad_latency.push_back(t.in.rtt[k] / 2);
    }
    in.act_wire = t.in.act_wire;
    in.grad_wire = t.in.grad_wire;
    // Each directed link's share of the tolerance.
    const double share = tolerance / (2.0 * (S - 1));
    for (int k = 0; k + 1 < S; ++k) {
      for (std::vector<double>* wire : {&in.act_wire, &in.grad_wire}) {
        const double measured = (*wire)[k];
        (*wire)[k] = 0;
        const double instant = scheduler::PlayStep(in, nullptr, false);
        double budget = 0;
        if (instant > 0) {
          // The step grows with this link's time (monotone): the largest time within the
          // share, by bisection up to the whole step.
          double lo = 0, hi = std::max(instant, 1e-3);
          for (int i = 0; i < 30; ++i) {
            const double mid = (lo + hi) / 2;
            (*wire)[k] = mid;
            (PlayStep(in, nullptr, false) <= (1 + share) * instant ? lo : hi) = mid;
          }
          budget = lo;
        }
        (*wire)[k] = measured;
        const size_t sender = static_cast<size_t>(grid.flat(r, wire == &in.act_wire ? k : k + 1));
        (wire == &in.act_wire ? b.act : b.grad)[sender] = budget;
      }
    }
  }
  return b;
}

}  // namespace longhaul::daemon
