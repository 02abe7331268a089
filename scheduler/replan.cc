// Re-planning decisions and layer moves (see replan.h).
#include "scheduler/replan.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "common/layer_range.h"
#include "model/layout.h"

namespace longhaul::scheduler {
namespace {

std::string Owner(const std::vector<StagePlan>& plan, int layer) {
  for (const StagePlan& s : plan) {
    if (layer >= s.layer_begin && layer < s.layer_end) return s.site;
  }
  return "";
}

std::string Ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f ms", s * 1e3);
  return buf;
}

}  // namespace

Profiles ApplyStraggler(const Profiles& profiles, const StragglerEvent& event) {
  Profiles p = profiles;
  if (event.component != "compute" || !(event.slowdown > 0)) return p;
  for (SiteProfile& s : p.sites) {
    if (s.name == event.site) {
      s.flops /= event.slowdown;
      s.optimizer_params_per_second /= event.slowdown;
    }
  }
  return p;
}

Profiles FromMeasurements(const Profiles& profiles, const StepEstimate& plan,
                          const std::vector<StageMeasurement>& recent) {
  Profiles p = profiles;
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    std::vector<double> measured;
    for (const StageMeasurement& m : recent) {
      if (m.stage == static_cast<int>(i) && m.compute_seconds > 0) {
        measured.push_back(m.compute_seconds);
      }
    }
    if (measured.empty() || !(plan.stages[i].compute_seconds > 0)) continue;
    std::sort(measured.begin(), measured.end());
    const double factor = plan.stages[i].compute_seconds / measured[measured.size() / 2];
    for (SiteProfile& s : p.sites) {
      if (s.name == plan.stages[i].site) {
        s.flops *= factor;
        s.optimizer_params_per_second *= factor;
      }
    }
  }
  return p;
}

Profiles WithLinks(const Profiles& profiles, const std::vector<LinkProfile>& links) {
  Profiles p = profiles;
  for (const LinkProfile& fresh : links) {
    for (LinkProfile& l : p.links) {
      if (l.from == fresh.from && l.to == fresh.to) l = fresh;
    }
  }
  return p;
}

std::vector<LayerMove> LayerMoves(const CostModel& model, const std::vector<StagePlan>& current,
                                  const std::vector<StagePlan>& next) {
  const model::ModelConfig& c = model.model();
  const int L = c.num_layers;
  // Per-layer parameters: the per-layer tensors of those layers, as the family's layout has
  // them (the subspace-cut variant's constrained layers are smaller; a llama's has no biases).
  const model::ParameterLayout layout(c);
  auto layer_params = [&](int begin, int end) {
    int64_t n = 0;
    for (int i = 0; i < model::kNumTensors; ++i) {
      const auto t = static_cast<model::Tensor>(i);
      if (model::IsPerLayer(t)) n += layout.offset(t, end) - layout.offset(t, begin);
    }
    return n;
  };
  const int64_t state = 3 * 4;  // params, m, v in fp32
  auto seconds = [&](const std::string& from, const std::string& to, int64_t bytes) {
    const LinkProfile* l = model.profiles().Link(from, to);
    return l ? bytes / l->bandwidth_bytes_per_second + l->rtt_seconds / 2 : 0.0;
  };
  std::vector<LayerMove> moves;
  for (int layer = 0; layer < L;) {
    const std::string from = Owner(current, layer), to = Owner(next, layer);
    int end = layer + 1;
    while (end < L && Owner(current, end) == from && Owner(next, end) == to) ++end;
    if (from != to) {
      LayerMove m;
      m.what = "layers " + LayerRange(layer, end);
      m.layer_begin = layer, m.layer_end = end;
      m.from_site = from, m.to_site = to;
      m.bytes = layer_params(layer, end) * state;
      m.seconds = seconds(from, to, m.bytes);
      moves.push_back(m);
    }
    layer = end;
  }
  const int64_t wte = layout.size(model::Tensor::kWte), wpe = layout.size(model::Tensor::kWpe);
  // The last stage's head: its copy of wte, or the subspace-cut variant's untied head.
  const int64_t head = model::TiedHead(c) ? wte : layout.size(model::Tensor::kHead);
  auto move_end = [&](const std::string& what, const std::string& from, const std::string& to,
                      int64_t params) {
    if (from == to) return;
    LayerMove m;
    m.what = what, m.from_site = from, m.to_site = to;
    m.bytes = params * state;
    m.seconds = seconds(from, to, m.bytes);
    moves.push_back(m);
  };
  move_end(wpe > 0 ? "wte+wpe (first stage)" : "wte (first stage)", current.front().site,
           next.front().site, wte + wpe);
  const int64_t lnf = layout.size(model::Tensor::kLnfw) + layout.size(model::Tensor::kLnfb);
  move_end(model::TiedHead(c) ? "wte+lnf (last stage)" : "head+lnf (last stage)",
           current.back().site, next.back().site, head + lnf);
  return moves;
}

StatusOr<ReplanDecision> Replan(const PlacementRequest& request, const Profiles& measured,
                                const std::vector<StagePlan>& current,
                                const PlannerOptions& planner_options,
                                const ReplanOptions& options) {
  const Planner planner(measured, planner_options);
  ASSIGN_OR_RETURN(const CostModel model, planner.Model(request));
  ReplanDecision d;
  ASSIGN_OR_RETURN(d.current, model.Estimate(current));
  ASSIGN_OR_RETURN(PlanResult best, planner.Plan(request));
  d.proposed = best.estimate;
  d.moves = LayerMoves(model, current, best.stages);
  std::map<std::pair<std::string, std::string>, double> per_link;
  for (const LayerMove& m : d.moves) per_link[{m.from_site, m.to_site}] += m.seconds;
  for (const auto& [link, s] : per_link) d.migration_seconds = std::max(d.migration_seconds, s);
  const double now = d.current.fits_memory ? d.current.step_seconds : kInfeasible;
  const double gain = now - d.proposed.step_seconds;
  const bool faster = gain > options.min_gain * std::min(now, 1e300);
  const bool pays = gain * options.horizon_steps > d.migration_seconds;
  d.apply = best.stages != current && faster && pays;
  d.plan = d.apply ? best.stages : current;
  if (best.stages == current) {
    d.explanation = "the current plan is still the best";
  } else if (!faster) {
    d.explanation = absl::StrCat("a new plan would gain only ", Ms(gain), " per step (",
                                 Ms(d.proposed.step_seconds), " vs ", Ms(now), ")");
  } else if (!pays) {
    d.explanation =
        absl::StrCat("moving ", d.moves.size(), " pieces takes ", Ms(d.migration_seconds),
                     ", more than ", options.horizon_steps, " steps x ", Ms(gain), " gained");
  } else {
    d.explanation =
        absl::StrCat("re-plan: ", Ms(now), " -> ", Ms(d.proposed.step_seconds), " per step; ",
                     d.moves.size(), " moves, ", Ms(d.migration_seconds), " of migration");
  }
  return d;
}

}  // namespace longhaul::scheduler
