// The discrete-event simulator (see simulator.h): stages, links and the coordinator react to
// time-ordered events; every op's duration is priced by the cost model's primitives, every
// send decided by a compression::Controller as StageRunner does.
#include "scheduler/simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <queue>
#include <random>

#include "absl/strings/str_cat.h"
#include "scheduler/pipeline_order.h"

namespace longhaul::scheduler {
namespace {

enum EventKind { kWake, kOpDone, kWireDone, kArrival, kTiedCoded, kReported, kDecision, kOptDone };
enum TensorKind { kAct, kGrad, kTied };

struct Event {
  double t;
  int64_t seq;
  EventKind kind;
  int a = 0, b = 0;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

struct Transfer {
  TensorKind kind;
  int step = 0, mb = 0, rung = 0, dest = 0;
  double bytes = 0;
};

struct Link {
  int from = 0, to = 0;  // model site indices
  double profile_bandwidth = 0, latency = 0, estimate = 0;
  const std::vector<TracePoint>* trace = nullptr;
  std::deque<Transfer> queue;
  bool busy = false;
  double started = 0;
};

struct Stage {
  int site = 0, n = 0;
  bool first = false, last = false;
  std::vector<PipelineOp> program;  // the 1F1B order
  size_t pc = 0;
  bool busy = false, in_step = false;
  // Arrivals by step parity: rung of the received tensor, -1 while missing.
  std::vector<int> act_in[2], grad_in[2];
  double budget = 0;
  compression::ControllerState to_next, to_prev;
  int step = 0;
  double step_start = 0, compute = 0, wait = 0, waiting_since = -1, reported_at = 0;
  double pending_compute = 0;  // compute part of the running op
  bool tied_coded = false, tied_arrived = false;
  int tied_rung = 0;
};

double ValueAt(const std::vector<TracePoint>* trace, double t, double before) {
  double v = before;
  if (trace) {
    for (const TracePoint& p : *trace) {
      if (p.time_seconds > t) break;
      v = p.value;
    }
  }
  return v;
}

class Sim {
 public:
  Sim(const CostModel& m, const Pipeline& p, const SimulatorOptions& o)
      : m_(m), o_(o), rng_(o.seed), S_(static_cast<int>(p.sites.size())), M_(m.microbatches()) {
    for (const ComputeTrace& c : o.compute) slow_[m.profiles().SiteIndex(c.site)] = &c.slowdown;
    coordinator_ = m.coordinator() >= 0 ? m.coordinator() : p.sites[0];
    for (int i = 0; i < S_; ++i) {
      Stage s;
      s.site = p.sites[i], s.n = p.layers[i], s.first = i == 0, s.last = i == S_ - 1;
      s.program = OneFOneBOrder(i, S_, M_);
      for (int k = 0; k < 2; ++k) s.act_in[k].assign(M_, -1), s.grad_in[k].assign(M_, -1);
      stages_.push_back(std::move(s));
    }
    act_codecs_.resize(S_ - 1), grad_codecs_.resize(S_ - 1);
  }

  Status Run(SimulationResult* out) {
    decisions_.push_back(o_.start_seconds);
    for (int i = 0; i < S_; ++i) {
      Push(o_.start_seconds + m_.HalfRtt(coordinator_, stages_[i].site), kOptDone, i);
    }
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      now_ = e.t;
      if (!std::isfinite(now_)) return absl::FailedPreconditionError("simulator: a link stalled");
      RETURN_IF_ERROR(Handle(e));
    }
    for (int k = 0; k + 1 < static_cast<int>(decisions_.size()); ++k) {
      SimulatedStep step;
      step.step = k;
      step.start_seconds = decisions_[k], step.end_seconds = decisions_[k + 1];
      step.stages =
          k < static_cast<int>(measured_.size()) ? measured_[k] : std::vector<StageMeasurement>{};
      step.activation_codecs = codecs_[k].first, step.gradient_codecs = codecs_[k].second;
      out->steps.push_back(std::move(step));
    }
    return absl::OkStatus();
  }

 private:
  void Push(double t, EventKind kind, int a, int b = 0) { events_.push({t, seq_++, kind, a, b}); }
  double Slowdown(int site) const {
    auto it = slow_.find(site);
    return ValueAt(it == slow_.end() ? nullptr : it->second, now_, 1.0);
  }
  double Jitter() {
    if (o_.compute_jitter <= 0) return 1;
    return std::exp(std::normal_distribution<double>(0, o_.compute_jitter)(rng_));
  }
  int LinkIndex(int from, int to) {
    auto [it, added] = link_index_.try_emplace({from, to}, static_cast<int>(links_.size()));
    if (added) {
      Link l;
      l.from = from, l.to = to;
      const TransferCost t = m_.PriceRung(from, to, 0, false);
      l.profile_bandwidth = t.wire_bytes / t.wire_seconds;
      l.latency = t.latency_seconds;
      for (const LinkTrace& tr : o_.links) {
        if (m_.profiles().SiteIndex(tr.from) == from && m_.profiles().SiteIndex(tr.to) == to) {
          l.trace = &tr.bandwidth;
        }
      }
      l.estimate = ValueAt(l.trace, now_, l.profile_bandwidth);
      links_.push_back(l);
    }
    return it->second;
  }
  // The controller's pick for a tensor from stage i to stage j.
  int Decide(Stage& s, int to_site, bool activation) {
    if (m_.fixed_rung() >= 0) return m_.fixed_rung();
    Link& l = links_[LinkIndex(s.site, to_site)];
    compression::ControllerInput in;
    in.bandwidth_bytes_per_second = l.estimate;
    in.rtt_seconds = 0;  // as the stage runner feeds its controllers (cost_model.cc, PickRung)
    in.tensor_bytes = static_cast<uint64_t>(m_.ActivationBytes());
    in.budget_seconds = s.budget > 0 ? s.budget : m_.options().initial_budget_seconds;
    in.quality_floor = m_.floor_rung();
    in.now_seconds = now_;
    compression::ControllerState& state = activation ? s.to_next : s.to_prev;
    auto d = m_.controller().Decide(in, state);
    if (!d.ok()) return m_.floor_rung();
    state = d->next;
    return d->rung;
  }
  void Send(int from_stage, int to_stage, Transfer t) {
    const int li = LinkIndex(stages_[from_stage].site, stages_[to_stage].site);
    t.dest = to_stage;
    links_[li].queue.push_back(t);
    StartWire(li);
  }
  void StartWire(int li) {
    Link& l = links_[li];
    if (l.busy || l.queue.empty()) return;
    l.busy = true;
    l.started = now_;
    // Integrate the bandwidth trace until the bytes are through.
    double t = now_, left = l.queue.front().bytes;
    while (true) {
      const double bw = ValueAt(l.trace, t, l.profile_bandwidth);
      double next = kInfeasible;
      if (l.trace) {
        for (const TracePoint& p : *l.trace) {
          if (p.time_seconds > t) {
            next = p.time_seconds;
            break;
          }
        }
      }
      if (bw > 0 && left <= bw * (next - t)) {
        t += left / bw;
        break;
      }
      if (!std::isfinite(next)) {
        t = kInfeasible;
        break;
      }
      left -= std::max(0.0, bw) * (next - t);
      t = next;
    }
    Push(t, kWireDone, li);
  }
  void TryStart(int i) {
    Stage& s = stages_[i];
    if (s.busy || !s.in_step || s.pc >= s.program.size()) return;
    const auto [forward, mb] = s.program[s.pc];
    const int par = s.step % 2;
    const int in_rung =
        forward ? (s.first ? 0 : s.act_in[par][mb]) : (s.last ? 0 : s.grad_in[par][mb]);
    if (in_rung < 0) {
      if (s.waiting_since < 0) s.waiting_since = now_;
      return;
    }
    if (s.waiting_since >= 0) s.wait += now_ - s.waiting_since, s.waiting_since = -1;
    double decode = 0, encode = 0;
    const double compute =
        (forward ? m_.Forward(s.site, s.n, s.last) : m_.Backward(s.site, s.n, s.last)) *
        Slowdown(s.site) * Jitter();
    if (forward && !s.first) {
      decode = m_.PriceRung(stages_[i - 1].site, s.site, in_rung, true).decode_seconds;
    }
    if (!forward && !s.last)
      decode = m_.PriceRung(stages_[i + 1].site, s.site, in_rung, false).decode_seconds;
    if (!forward) s.budget = s.budget == 0 ? 2 * compute : 0.8 * s.budget + 0.4 * compute;
    out_rung_ = -1;
    if (forward && !s.last) {
      out_rung_ = Decide(s, stages_[i + 1].site, true);
      encode = m_.PriceRung(s.site, stages_[i + 1].site, out_rung_, true).encode_seconds;
      act_codecs_[i] = m_.controller().name(out_rung_);
    } else if (!forward && !s.first) {
      out_rung_ = Decide(s, stages_[i - 1].site, false);
      encode = m_.PriceRung(s.site, stages_[i - 1].site, out_rung_, false).encode_seconds;
      grad_codecs_[i - 1] = m_.controller().name(out_rung_);
    }
    s.busy = true;
    s.pending_compute = compute;
    Push(now_ + decode + compute + encode, kOpDone, i, out_rung_);
  }
  Status Handle(const Event& e) {
    switch (e.kind) {
      case kWake:
        TryStart(e.a);
        break;
      case kOpDone: {
        Stage& s = stages_[e.a];
        const auto [forward, mb] = s.program[s.pc];
        s.busy = false;
        s.compute += s.pending_compute;
        ++s.pc;
        if (forward && !s.last) {
          const TransferCost t = m_.PriceRung(s.site, stages_[e.a + 1].site, e.b, true);
          Send(e.a, e.a + 1, {kAct, s.step, mb, e.b, 0, t.wire_bytes});
        } else if (!forward && !s.first) {
          const TransferCost t = m_.PriceRung(s.site, stages_[e.a - 1].site, e.b, false);
          Send(e.a, e.a - 1, {kGrad, s.step, mb, e.b, 0, t.wire_bytes});
        }
        if (s.pc == s.program.size()) {
          if (S_ == 1 || (!s.first && !s.last) || !m_.TiedExchange()) {
            Report(e.a);
          } else {
            s.busy = true;  // encoding its part of the tied gradient
            const int peer = s.first ? S_ - 1 : 0;
            Push(now_ + m_.TiedGradient(s.site, stages_[peer].site).encode_seconds, kTiedCoded,
                 e.a);
          }
        }
        TryStart(e.a);
        break;
      }
      case kWireDone: {
        Link& l = links_[e.a];
        const Transfer t = l.queue.front();
        l.queue.pop_front();
        l.busy = false;
        if (now_ > l.started) {
          const double rate = t.bytes / (now_ - l.started);
          l.estimate = o_.bandwidth_alpha * rate + (1 - o_.bandwidth_alpha) * l.estimate;
        }
        arrivals_.push_back(t);
        Push(now_ + l.latency, kArrival, static_cast<int>(arrivals_.size()) - 1);
        StartWire(e.a);
        break;
      }
      case kArrival: {
        const Transfer& t = arrivals_[e.a];
        Stage& d = stages_[t.dest];
        if (t.kind == kAct) d.act_in[t.step % 2][t.mb] = t.rung;
        if (t.kind == kGrad) d.grad_in[t.step % 2][t.mb] = t.rung;
        if (t.kind == kTied) d.tied_arrived = true, MaybeCombineTied(t.dest);
        TryStart(t.dest);
        break;
      }
      case kTiedCoded: {
        Stage& s = stages_[e.a];
        const int peer = s.first ? S_ - 1 : 0;
        s.tied_coded = true;
        Send(e.a, peer,
             {kTied, s.step, 0, 0, 0, m_.TiedGradient(s.site, stages_[peer].site).wire_bytes});
        MaybeCombineTied(e.a);
        break;
      }
      case kReported:
        if (++reports_ == S_) {
          reports_ = 0;
          decisions_.push_back(now_);
          codecs_.push_back({act_codecs_, grad_codecs_});
          for (int i = 0; i < S_; ++i)
            Push(now_ + m_.HalfRtt(coordinator_, stages_[i].site), kDecision, i);
        }
        break;
      case kDecision: {
        Stage& s = stages_[e.a];
        s.wait += now_ - s.reported_at;
        const double opt = m_.Optimizer(s.site, s.n, s.first, s.last) * Slowdown(s.site);
        s.compute += opt;
        Push(now_ + opt, kOptDone, e.a);
        break;
      }
      case kOptDone: {
        Stage& s = stages_[e.a];
        if (s.in_step) {  // close the step's measurement
          if (static_cast<int>(measured_.size()) <= s.step) measured_.resize(s.step + 1);
          measured_[s.step].push_back(
              {e.a, static_cast<uint64_t>(s.step), s.compute, s.wait, now_ - s.step_start});
          std::sort(measured_[s.step].begin(), measured_[s.step].end(),
                    [](const StageMeasurement& a, const StageMeasurement& b) {
                      return a.stage < b.stage;
                    });
          s.act_in[s.step % 2].assign(M_, -1), s.grad_in[s.step % 2].assign(M_, -1);
          ++s.step;
        }
        if (s.step >= o_.steps) break;
        s.in_step = true, s.busy = false, s.pc = 0;
        s.step_start = now_, s.compute = 0, s.wait = 0, s.waiting_since = -1;
        s.tied_coded = s.tied_arrived = false;
        TryStart(e.a);
        break;
      }
    }
    return absl::OkStatus();
  }
  void MaybeCombineTied(int i) {
    Stage& s = stages_[i];
    if (!s.tied_coded || !s.tied_arrived) return;
    s.tied_coded = s.tied_arrived = false;
    const int peer = s.first ? S_ - 1 : 0;
    // The peer's part decoded and added, the stage reports.
    ReportAt(i, now_ + m_.TiedGradient(stages_[peer].site, s.site).decode_seconds);
  }
  void Report(int i) { ReportAt(i, now_); }
  void ReportAt(int i, double t) {
    stages_[i].reported_at = t;
    Push(t + m_.HalfRtt(stages_[i].site, coordinator_), kReported, i);
  }

  const CostModel& m_;
  const SimulatorOptions& o_;
  std::mt19937_64 rng_;
  int S_, M_, coordinator_ = 0;
  std::map<int, const std::vector<TracePoint>*> slow_;
  std::vector<Stage> stages_;
  std::vector<Link> links_;
  std::map<std::pair<int, int>, int> link_index_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  std::vector<Transfer> arrivals_;
  int64_t seq_ = 0;
  double now_ = 0;
  int reports_ = 0, out_rung_ = -1;
  std::vector<double> decisions_;
  std::vector<std::vector<StageMeasurement>> measured_;
  std::vector<std::string> act_codecs_, grad_codecs_;  // per boundary, the latest
  std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> codecs_;  // per step
};

}  // namespace

double SimulationResult::MeanStepSeconds(int from) const {
  double sum = 0;
  int n = 0;
  for (size_t k = std::max(from, 0); k < steps.size(); ++k) sum += steps[k].seconds(), ++n;
  return n ? sum / n : 0;
}

StatusOr<SimulationResult> Simulate(const CostModel& model, const std::vector<StagePlan>& plan,
                                    const SimulatorOptions& options) {
  ASSIGN_OR_RETURN(const Pipeline p, model.FromPlan(plan));
  if (options.steps < 1) return absl::InvalidArgumentError("simulator: steps must be >= 1");
  if (model.StepSeconds(p) == kInfeasible) {
    return absl::FailedPreconditionError(
        absl::StrCat("simulator: plan ", PlanDebugString(plan), " does not fit or lacks a link"));
  }
  for (const LinkTrace& t : options.links) {
    if (model.profiles().SiteIndex(t.from) < 0 || model.profiles().SiteIndex(t.to) < 0) {
      return absl::NotFoundError(
          absl::StrCat("simulator: trace of unknown link ", t.from, " -> ", t.to));
    }
  }
  for (const ComputeTrace& t : options.compute) {
    if (model.profiles().SiteIndex(t.site) < 0) {
      return absl::NotFoundError(absl::StrCat("simulator: trace of unknown site ", t.site));
    }
  }
  Sim sim(model, p, options);
  SimulationResult r;
  RETURN_IF_ERROR(sim.Run(&r));
  return r;
}

}  // namespace longhaul::scheduler
