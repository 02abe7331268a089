// The step schedule played as a dependency recurrence (see schedule.h). Every time carries,
// when tracing, the node that determined it, so the critical path can be walked backwards.
#include "scheduler/schedule.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <utility>

#include "scheduler/in_flight.h"
#include "scheduler/pipeline_order.h"

namespace longhaul::scheduler {
namespace {

struct Node {
  double t;
  int pred;
  PathSegment::Kind kind;
  int index;
};

// A time and (when tracing) the node that produced it.
struct Ev {
  double t = 0;
  int node = 0;  // 0 is the root: the previous decision, at time 0
};

class Recorder {
 public:
  explicit Recorder(bool trace) : trace_(trace) {
    if (trace_) nodes_.push_back({0, -1, PathSegment::kRelease, 0});
  }
  Ev Add(Ev from, double dt, PathSegment::Kind kind, int index) {
    Ev e{from.t + dt, 0};
    if (trace_) {
      e.node = static_cast<int>(nodes_.size());
      nodes_.push_back({e.t, from.node, kind, index});
    }
    return e;
  }
  static Ev Later(Ev a, Ev b) { return b.t > a.t ? b : a; }
  std::vector<PathSegment> Path(Ev end) const {
    std::map<std::pair<int, int>, double> merged;
    for (int n = end.node; n > 0; n = nodes_[n].pred) {
      const Node& x = nodes_[n];
      merged[{x.kind, x.index}] += x.t - nodes_[x.pred].t;
    }
    std::vector<PathSegment> out;
    for (const auto& [key, seconds] : merged) {
      if (seconds > 0) out.push_back({PathSegment::Kind(key.first), key.second, seconds});
    }
    return out;
  }

 private:
  bool trace_;
  std::vector<Node> nodes_;
};

constexpr int kUnknown = -1;

}  // namespace

double PlayStep(const ScheduleInputs& in, ScheduleResult* result, bool trace) {
  const int S = in.stages(), M = in.microbatches;
  Recorder rec(trace && result != nullptr);
  const Ev root;
  std::vector<Ev> free(S);
  for (int i = 0; i < S; ++i) {
    free[i] = rec.Add(rec.Add(root, in.release[i], PathSegment::kRelease, i), in.optimizer[i],
                      PathSegment::kOptimizer, i);
  }
  // Arrivals: act[i * M + j] at stage i from i - 1; grad[i * M + j] at stage i from i + 1.
  std::vector<Ev> act(static_cast<size_t>(S) * M), grad(act.size());
  std::vector<char> act_known(act.size(), 0), grad_known(act.size(), 0);
  std::vector<Ev> act_link(S > 0 ? S - 1 : 0), grad_link(act_link.size());
  // Program counters: ops issued per stage, in the 1F1B order with each stage's warm-ups.
  std::vector<int> pc(S, 0);
  std::vector<int> warmup = in.warmup;
  if (static_cast<int>(warmup.size()) != S || !ValidWarmups(warmup, M)) {
    warmup.resize(S);
    for (int i = 0; i < S; ++i) warmup[i] = StandardWarmup(i, S, M);
  }
  int done = 0;
  const int total = 2 * S * M;

  // Runs stage i's next op if its input is there; returns whether it ran.
  auto step_stage = [&](int i) -> bool {
    if (pc[i] == 2 * M) return false;
    const PipelineOp op = OneFOneBWarm(warmup[i], M, pc[i]);
    const int j = op.microbatch;
    if (op.forward) {
      Ev start = free[i];
      if (i > 0) {
        if (!act_known[i * M + j]) return false;
        start = Recorder::Later(start, act[i * M + j]);
      }
      const Ev end = rec.Add(start, in.forward[i], PathSegment::kCompute, i);
      free[i] = end;
      if (i + 1 < S) {
        const Ev send = Recorder::Later(end, act_link[i]);
        act_link[i] = rec.Add(send, in.act_wire[i], PathSegment::kActWire, i);
        act[(i + 1) * M + j] = rec.Add(act_link[i], in.act_latency[i], PathSegment::kActLatency, i);
        act_known[(i + 1) * M + j] = 1;
      }
    } else {
      Ev start = free[i];
      if (i + 1 < S) {
        if (!grad_known[i * M + j]) return false;
        start = Recorder::Later(start, grad[i * M + j]);
      }
      const Ev end = rec.Add(start, in.backward[i], PathSegment::kCompute, i);
      free[i] = end;
      if (i > 0) {
        const int k = i - 1;
        const Ev send = Recorder::Later(end, grad_link[k]);
        grad_link[k] = rec.Add(send, in.grad_wire[k], PathSegment::kGradWire, k);
        grad[k * M + j] = rec.Add(grad_link[k], in.grad_latency[k], PathSegment::kGradLatency, k);
        grad_known[k * M + j] = 1;
      }
    }
    ++pc[i];
    ++done;
    return true;
  };
  // Forwards flow down, gradients up: alternate sweeps in both directions until all ran.
  while (done < total) {
    const int before = done;
    for (int i = 0; i < S; ++i) {
      while (step_stage(i)) {
      }
    }
    for (int i = S - 1; i >= 0; --i) {
      while (step_stage(i)) {
      }
    }
    if (done == before) return kUnknown;  // cannot happen: valid warm-ups do not deadlock
  }

  std::vector<Ev> reported = free;
  double tied_seconds = 0;
  if (S > 1 && in.tied_exchange) {
    const int last = S - 1;
    const Ev first_coded = rec.Add(free[0], in.tied_encode, PathSegment::kTiedCodec, 0);
    const Ev last_coded = rec.Add(free[last], in.tied_encode, PathSegment::kTiedCodec, last);
    // With two stages the exchange shares the neighbour links' senders.
    Ev fl = first_coded, lf = last_coded;
    if (S == 2) {
      fl = Recorder::Later(fl, act_link[0]);
      lf = Recorder::Later(lf, grad_link[0]);
    }
    fl = rec.Add(rec.Add(fl, in.tied_fl_wire, PathSegment::kTiedWire, 0), in.tied_fl_latency,
                 PathSegment::kTiedLatency, 0);
    lf = rec.Add(rec.Add(lf, in.tied_lf_wire, PathSegment::kTiedWire, 1), in.tied_lf_latency,
                 PathSegment::kTiedLatency, 1);
    reported[0] =
        rec.Add(Recorder::Later(first_coded, lf), in.tied_decode, PathSegment::kTiedCodec, 0);
    reported[last] =
        rec.Add(Recorder::Later(last_coded, fl), in.tied_decode, PathSegment::kTiedCodec, last);
    tied_seconds = reported[0].t - free[0].t;
  }
  Ev decision = root;
  for (int i = 0; i < S; ++i) {
    decision =
        Recorder::Later(decision, rec.Add(reported[i], in.report[i], PathSegment::kReport, i));
  }
  if (result) {
    result->step_seconds = decision.t;
    result->stage_end.resize(S);
    for (int i = 0; i < S; ++i) result->stage_end[i] = free[i].t;
    result->tied_seconds = tied_seconds;
    result->critical_path = trace ? rec.Path(decision) : std::vector<PathSegment>{};
  }
  return decision.t;
}

}  // namespace longhaul::scheduler
