// The planner's driver (see planner.h): restricts the profiles to the request's candidates,
// runs the exact or the heuristic search, prices the winners exactly and explains the best.
#include "scheduler/planner.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "scheduler/planner_dp.h"
#include "scheduler/planner_search.h"

namespace longhaul::scheduler {
namespace {

using Clock = std::chrono::steady_clock;

// The candidates (in request order), then the coordinator when it is not one of them.
StatusOr<Profiles> Restrict(const Profiles& all, const PlacementRequest& r) {
  std::vector<std::string> names = r.sites;
  std::set<std::string> unique(names.begin(), names.end());
  if (names.empty()) return absl::InvalidArgumentError("planner: no candidate sites");
  if (unique.size() != names.size()) {
    return absl::InvalidArgumentError("planner: a candidate site is listed twice");
  }
  // Every candidate needs a profile; a missing link is no direct link (no pipeline uses it).
  for (const std::string& n : names) {
    if (!all.Site(n)) {
      return absl::NotFoundError(absl::StrCat("planner: no profile for site '", n, "'"));
    }
  }
  const std::string& coord = r.workload.coordinator;
  if (!coord.empty() && !unique.count(coord)) {
    if (!all.Site(coord)) {
      return absl::NotFoundError(
          absl::StrCat("planner: no profile for the coordinator '", coord, "'"));
    }
    names.push_back(coord);
    unique.insert(coord);
  }
  Profiles p;
  for (const std::string& n : names) p.sites.push_back(*all.Site(n));
  for (const LinkProfile& l : all.links) {
    if (unique.count(l.from) && unique.count(l.to)) p.links.push_back(l);
  }
  return p;
}

std::string MiB(double bytes) {
  return absl::StrCat(static_cast<int64_t>(bytes / (1 << 20)), " MiB");
}

}  // namespace

StatusOr<CostModel> Planner::Model(const PlacementRequest& request) const {
  RETURN_IF_ERROR(ValidateProfiles(profiles_));
  ASSIGN_OR_RETURN(Profiles restricted, Restrict(profiles_, request));
  return CostModel::Create(request.model, request.workload, restricted, options_.cost);
}

StatusOr<std::vector<StagePlan>> Planner::Place(const PlacementRequest& request) {
  ASSIGN_OR_RETURN(PlanResult r, Plan(request));
  return r.stages;
}

StatusOr<PlanResult> Planner::Plan(const PlacementRequest& request) const {
  const auto start = Clock::now();
  if (options_.exact_max_sites > 12) {
    return absl::InvalidArgumentError("planner: exact_max_sites must be <= 12");
  }
  ASSIGN_OR_RETURN(const CostModel m, Model(request));
  const int N = static_cast<int>(request.sites.size());
  internal::SearchContext ctx;
  ctx.model = &m;
  for (int i = 0; i < N; ++i) ctx.candidates.push_back(i);
  ctx.allow_leaving_out = options_.allow_leaving_out_sites && !options_.keep_order;
  ctx.keep_order = options_.keep_order;
  ctx.deadline = start + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(options_.time_budget_seconds));

  PlanResult result;
  std::vector<Pipeline> starts;
  internal::DpOptions dp;
  dp.allow_subsets = options_.allow_leaving_out_sites && !options_.keep_order;
  if (options_.keep_order) {
    result.method = "in-order";
    for (const auto& c : internal::SolveInOrder(m, ctx.candidates, dp)) {
      starts.push_back(c.pipeline);
    }
  } else if (N <= options_.exact_max_sites) {
    result.method = "exact";
    for (const auto& c : internal::SolveAnyOrder(m, ctx.candidates, dp))
      starts.push_back(c.pipeline);
  } else {
    result.method = "heuristic";
    starts = internal::ChainStarts(&ctx, 6);
    // The DP over orders on the neighbourhood of the best chain: its sites and the unused
    // sites closest to them, up to exact_max_sites.
    if (!starts.empty() && static_cast<int>(starts[0].sites.size()) <= options_.exact_max_sites) {
      std::vector<int> hood = starts[0].sites;
      std::vector<std::pair<double, int>> near;
      for (int u : ctx.candidates) {
        if (std::find(hood.begin(), hood.end(), u) != hood.end()) continue;
        double closest = kInfeasible;
        for (int s : starts[0].sites)
          closest = std::min(closest, m.HalfRtt(s, u) + m.HalfRtt(u, s));
        near.push_back({closest - 1e-3 * m.profiles().sites[u].flops / 1e15, u});
      }
      std::sort(near.begin(), near.end());
      for (size_t i = 0;
           i < near.size() && static_cast<int>(hood.size()) < options_.exact_max_sites; ++i) {
        hood.push_back(near[i].second);
      }
      if (ctx.TimeLeft()) {
        for (const auto& c : internal::SolveAnyOrder(m, hood, dp)) starts.push_back(c.pipeline);
      }
    }
  }
  // The job's own order, evenly split, when every candidate is needed or as a fallback.
  if (N <= m.num_layers()) {
    Pipeline even;
    for (int i = 0; i < N; ++i) {
      even.sites.push_back(i);
      even.layers.push_back(m.num_layers() / N + (i < m.num_layers() % N ? 1 : 0));
    }
    starts.push_back(even);
  }
  // Price every start, polish the best few.
  std::vector<std::pair<double, Pipeline>> priced;
  for (const Pipeline& p : starts) {
    const double t = ctx.Price(p);
    if (t < kInfeasible) priced.push_back({t, p});
  }
  if (priced.empty()) {
    const int64_t need = m.Memory(m.num_layers(), true, true, 1);
    int64_t have = 0;
    for (int i = 0; i < N; ++i) have += m.profiles().sites[i].memory_bytes;
    return absl::ResourceExhaustedError(absl::StrCat(
        "planner: no placement of the ", m.num_layers(), "-layer model fits the sites' memory (",
        "the whole model needs about ", MiB(need), " for one stage; the ", N, " sites allow ",
        MiB(have), " together, and every stage also holds its activations)"));
  }
  std::stable_sort(priced.begin(), priced.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  Pipeline best = priced[0].second;
  double best_t = priced[0].first;
  for (size_t i = 0; i < priced.size() && i < 4; ++i) {
    if (i > 0 && !ctx.TimeLeft()) break;
    const Pipeline p = internal::LocalSearch(&ctx, priced[i].second);
    const double t = ctx.Price(p);
    if (t < best_t) best = p, best_t = t;
  }

  result.stages = m.ToPlan(best);
  ASSIGN_OR_RETURN(result.estimate, m.Estimate(result.stages));
  for (int i = 0; i < N; ++i) {
    if (std::find(best.sites.begin(), best.sites.end(), i) == best.sites.end()) {
      result.unused_sites.push_back(request.sites[i]);
    }
  }
  result.plans_priced = ctx.priced;
  result.planning_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

std::unique_ptr<Placer> MakePlanner(Profiles profiles, PlannerOptions options) {
  return std::make_unique<Planner>(std::move(profiles), std::move(options));
}

}  // namespace longhaul::scheduler
