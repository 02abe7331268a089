// CostModel::Estimate: the step played with its critical path, and everything a person (or
// `longhaul plan`) needs to read the plan: per-stage and per-link figures, the codec the
// controller would pick and why, the steady-state period and the bottleneck.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "scheduler/cost_model.h"
#include "scheduler/schedule.h"

namespace longhaul::scheduler {
namespace {

std::string Ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f ms", seconds * 1e3);
  return buf;
}

std::string Pct(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f%%", whole > 0 ? 100 * part / whole : 0);
  return buf;
}

}  // namespace

StatusOr<Pipeline> CostModel::FromPlan(const std::vector<StagePlan>& plan) const {
  RETURN_IF_ERROR(ValidatePlan(plan, num_layers()));
  Pipeline p;
  for (const StagePlan& s : plan) {
    const int i = profiles_.SiteIndex(s.site);
    if (i < 0) return absl::NotFoundError(absl::StrCat("plan: no profile for site '", s.site, "'"));
    p.sites.push_back(i);
    p.layers.push_back(s.layers());
  }
  return p;
}

std::vector<StagePlan> CostModel::ToPlan(const Pipeline& p) const {
  std::vector<StagePlan> plan;
  int begin = 0;
  for (size_t i = 0; i < p.sites.size(); ++i) {
    plan.push_back({profiles_.sites[p.sites[i]].name, begin, begin + p.layers[i]});
    begin += p.layers[i];
  }
  return plan;
}

double CostModel::PeriodSeconds(const Pipeline& p, std::string* limit) const {
  ScheduleInputs in;
  if (!BuildSchedule(p, &in, false)) return kInfeasible;
  const int S = in.stages();
  const auto& site = [&](int i) { return profiles_.sites[p.sites[i]].name; };
  double period = 0;
  std::string why;
  auto consider = [&](double t, const std::function<std::string()>& name) {
    if (t > period) period = t, why = name();
  };
  double window = 0;  // round trip from stage i through the end and back
  for (int i = S - 1; i >= 0; --i) {
    const double c = in.forward[i] + in.backward[i];
    consider(c, [&] { return absl::StrCat("compute of stage ", i, " (", site(i), ")"); });
    window += c;
    if (i + 1 < S) {
      consider(in.act_wire[i],
               [&] { return absl::StrCat("wire time of link ", site(i), " -> ", site(i + 1)); });
      consider(in.grad_wire[i],
               [&] { return absl::StrCat("wire time of link ", site(i + 1), " -> ", site(i)); });
      window += in.act_wire[i] + in.act_latency[i] + in.grad_wire[i] + in.grad_latency[i];
    }
    consider(window / (S - i), [&] {
      return absl::StrCat("round trip from stage ", i, " (", site(i),
                          ") to the last stage and back (", Ms(window), ") over its ", S - i,
                          " microbatches in flight");
    });
  }
  if (limit) *limit = why;
  return period;
}

StatusOr<StepEstimate> CostModel::Estimate(const std::vector<StagePlan>& plan) const {
  ASSIGN_OR_RETURN(const Pipeline p, FromPlan(plan));
  const int S = static_cast<int>(p.sites.size()), M = workload_.microbatches;
  const auto& site = [&](int i) -> const std::string& { return profiles_.sites[p.sites[i]].name; };
  for (int i = 0; i + 1 < S; ++i) {
    for (auto [a, b] : {std::pair{i, i + 1}, std::pair{i + 1, i}}) {
      if (!HasLink(p.sites[a], p.sites[b])) {
        return absl::NotFoundError(absl::StrCat("plan: no link ", site(a), " -> ", site(b)));
      }
    }
  }
  ScheduleInputs in;
  if (!BuildSchedule(p, &in, false)) {
    return absl::NotFoundError(absl::StrCat("plan: a link between ", site(0), ", ", site(S - 1),
                                            " and the coordinator is missing"));
  }
  ScheduleResult r;
  PlayStep(in, &r, true);

  StepEstimate e;
  e.microbatches = M;
  e.tokens_per_step = int64_t(workload_.microbatch_size) * workload_.seq_len * M;
  e.step_seconds = r.step_seconds;
  e.tokens_per_second = e.tokens_per_step / r.step_seconds;
  e.period_seconds = PeriodSeconds(p, &e.period_limit);
  e.tied_exchange_seconds = r.tied_seconds;
  for (int i = 0; i < S; ++i) {
    const int s = p.sites[i], n = p.layers[i];
    const bool first = i == 0, last = i == S - 1;
    StageEstimate st;
    st.site = site(i);
    st.layer_begin = plan[i].layer_begin, st.layer_end = plan[i].layer_end;
    st.forward_seconds = Forward(s, n, last);
    st.backward_seconds = Backward(s, n, last);
    st.codec_seconds = in.forward[i] + in.backward[i] - st.forward_seconds - st.backward_seconds;
    st.optimizer_seconds = in.optimizer[i];
    st.compute_seconds = M * (st.forward_seconds + st.backward_seconds) + st.optimizer_seconds;
    st.idle_seconds = std::max(0.0, r.step_seconds - st.compute_seconds - M * st.codec_seconds);
    st.slots = std::min(M, S - i);
    st.memory_bytes = SiteMemory(s, n, first, last, st.slots);
    st.memory_limit_bytes = profiles_.sites[s].memory_bytes;
    st.parameters = Parameters(n, first, last);
    e.fits_memory = e.fits_memory && Fits(s, n, first, last, st.slots);
    e.stages.push_back(st);
  }
  auto link = [&](int a, int b, const char* kind, double raw, const TransferCost& cost,
                  double budget, double first_budget) {
    LinkEstimate l;
    l.from = site(a), l.to = site(b), l.kind = kind, l.tensor_bytes = raw, l.cost = cost;
    l.codec = controller_.name(cost.rung);
    l.busy_seconds = cost.wire_seconds * (std::string(kind) == "tied-embedding" ? 1 : M);
    if (budget <= 0) {
      l.reason = "exact: both copies of the tied embedding must take identical steps";
    } else if (fixed_rung_ >= 0) {
      l.reason = absl::StrCat("compression ", workload_.compression, ": ", l.codec);
    } else {
      l.reason = SteadyDecision(p.sites[a], p.sites[b], raw, budget, first_budget).explanation;
    }
    e.links.push_back(l);
  };
  int boundary = 0;
  for (int i = 0; i + 1 < S; ++i) {
    const int a = p.sites[i], b = p.sites[i + 1];
    const double ba = Budget(a, p.layers[i], false),
                 bb = Budget(b, p.layers[i + 1], i + 1 == S - 1);
    boundary += p.layers[i];
    const bool wide = WideCut(boundary);
    link(i, i + 1, "activations", ActivationBytes(wide), Activation(a, b, ba, wide), ba,
         options_.initial_budget_seconds);
    link(i + 1, i, "gradients", ActivationBytes(wide), Gradient(b, a, bb, wide), bb, 0);
  }
  if (S > 1 && TiedExchange()) {
    link(0, S - 1, "tied-embedding", tied_bytes_, TiedGradient(p.sites[0], p.sites[S - 1]), 0, 0);
    link(S - 1, 0, "tied-embedding", tied_bytes_, TiedGradient(p.sites[S - 1], p.sites[0]), 0, 0);
  }

  // The critical path by resource, then by kind.
  const std::string coordinator = coordinator_ >= 0 ? profiles_.sites[coordinator_].name : site(0);
  std::map<std::pair<std::string, std::string>, double> parts;
  for (const PathSegment& seg : r.critical_path) {
    const int k = seg.index;
    std::pair<std::string, std::string> key;
    switch (seg.kind) {
      case PathSegment::kRelease:
      case PathSegment::kReport:
        key = {"barrier", absl::StrCat("coordinator ", coordinator, " <-> ", site(k))};
        break;
      case PathSegment::kOptimizer:
        key = {"optimizer", absl::StrCat("stage ", k, " (", site(k), ")")};
        break;
      case PathSegment::kCompute:
        key = {"compute", absl::StrCat("stage ", k, " (", site(k), ")")};
        break;
      case PathSegment::kActWire:
        key = {"bandwidth", absl::StrCat("link ", site(k), " -> ", site(k + 1))};
        break;
      case PathSegment::kGradWire:
        key = {"bandwidth", absl::StrCat("link ", site(k + 1), " -> ", site(k))};
        break;
      case PathSegment::kActLatency:
        key = {"latency", absl::StrCat("link ", site(k), " -> ", site(k + 1))};
        break;
      case PathSegment::kGradLatency:
        key = {"latency", absl::StrCat("link ", site(k + 1), " -> ", site(k))};
        break;
      default:
        key = {"tied-exchange", absl::StrCat(site(0), " <-> ", site(S - 1))};
    }
    parts[key] += seg.seconds;
  }
  std::map<std::string, double> kinds;
  for (const auto& [key, seconds] : parts) {
    e.critical_path.push_back({key.first, key.second, seconds});
    kinds[key.first] += seconds;
  }
  std::sort(e.critical_path.begin(), e.critical_path.end(),
            [](const CriticalShare& a, const CriticalShare& b) { return a.seconds > b.seconds; });
  std::string top;
  for (const auto& [kind, seconds] : kinds) {
    if (top.empty() || seconds > kinds[top]) top = kind;
  }
  for (const CriticalShare& c : e.critical_path) {
    if (c.kind == top) {
      e.bottleneck = {top, c.resource, kinds[top]};
      break;
    }
  }
  const std::string share = Pct(kinds[top], e.step_seconds);
  const std::string& res = e.bottleneck.resource;
  if (top == "compute") {
    e.bottleneck_description =
        absl::StrCat("compute: ", share, " of the step is computation, most of it on ", res);
  } else if (top == "bandwidth") {
    e.bottleneck_description = absl::StrCat(
        "bandwidth: ", share, " of the step waits for bytes on the wire, most on ", res);
  } else if (top == "latency") {
    e.bottleneck_description =
        absl::StrCat("latency: ", share,
                     " of the step is WAN round trips the 1F1B window cannot hide, most on ", res);
  } else if (top == "tied-exchange") {
    e.bottleneck_description = absl::StrCat(
        "tied-embedding exchange: ", share, " of the step swaps ",
        absl::StrFormat("%.0f MB", tied_bytes_ / 1e6), " of wte gradient each way (fp32) ", res);
  } else {
    e.bottleneck_description = absl::StrCat(top, ": ", share, " of the step, most on ", res);
  }
  return e;
}

}  // namespace longhaul::scheduler
