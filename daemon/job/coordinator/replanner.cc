// Replanner: straggler detection and the re-plan on measured profiles (replanner.h).
#include "daemon/job/coordinator/replanner.h"

#include <algorithm>
#include <cstdio>

#include "daemon/job/site/site_profile.h"
#include "scheduler/cost_model.h"
#include "scheduler/planner.h"

namespace longhaul::daemon {

void Replanner::Observe(const std::map<uint32_t, v1::StepReport>& reports,
                        const v1::JobStatus& record) {
  const auto& stages = record.stages();
  const std::string& job_id = record.job_id();
  const size_t n = stages.size();
  if (n < 2 || !enabled_) return;
  if (detectors_.size() != n) {
    scheduler::StragglerOptions o;
    o.warmup_steps = 3;
    detectors_.assign(n, scheduler::ChangeDetector(o));
    recent_compute_.assign(n, {});
  }
  // Every stage's detector sees the step; when several fire, the slowest stage is named.
  int worst = -1;
  uint64_t step = 0;
  for (const auto& [stage, r] : reports) {
    if (stage >= n) continue;
    auto& recent = recent_compute_[stage];
    recent.push_back(std::max(r.compute_seconds(), 1e-6));
    if (recent.size() > 3) recent.erase(recent.begin());
    step = r.step();
    for (const v1::LinkUsage& l : r.links()) links_[{l.from_site(), l.to_site()}] = l;
    if (detectors_[stage].Observe(std::max(r.compute_seconds(), 1e-6)) &&
        (worst < 0 || detectors_[stage].slowdown() > detectors_[worst].slowdown())) {
      worst = static_cast<int>(stage);
    }
  }
  auto reason = [&](int stage, uint64_t since) {
    char why[256];
    std::snprintf(why, sizeof why,
                  "stage %d on %s computes %.1fx slower than its first steps (since step %llu)",
                  stage, stages[stage].site().c_str(), detectors_[stage].slowdown(),
                  static_cast<unsigned long long>(since));
    return std::string(why);
  };
  if (pending_) {
    // Until the re-plan runs, name the stage that has slowed down most of those detected (a
    // noisy stage can fire a step before the real straggler does).
    for (size_t k = 0; k < n; ++k) {
      if (detectors_[k].fired() && static_cast<int>(k) != stage_ &&
          detectors_[k].slowdown() > detectors_[stage_].slowdown()) {
        stage_ = static_cast<int>(k);
        reason_ = reason(stage_, detected_step_);
      }
    }
    return;
  }
  if (worst < 0) return;
  pending_ = true;
  detected_step_ = step + 1;
  stage_ = worst;
  reason_ = reason(worst, step + 1);
  log_->warn("job {}: straggler: {}; re-planning at the next checkpoint", job_id, reason_);
}

namespace {

// The re-plan's profiles: each stage's site FLOP/s from its measured compute (a nominal
// rate scaled by the cost model's predicted over the measured compute), each link's bandwidth
// and RTT from the stages' latest reports (the link monitors' estimates).
StatusOr<scheduler::Profiles> MeasuredProfiles(
    const scheduler::PlacementRequest& request, const std::vector<scheduler::StagePlan>& current,
    const std::vector<scheduler::StageMeasurement>& recent,
    const std::map<std::pair<std::string, std::string>, v1::LinkUsage>& links,
    const std::map<std::string, scheduler::SiteProfile>& limits) {
  constexpr double kNominalFlops = 1e12;
  scheduler::Profiles nominal;
  for (const auto& site : request.sites) {
    // The sites' memory and devices as profiled at submit (none known: no limit, one device).
    scheduler::SiteProfile p{site, kNominalFlops, 0, 0};
    if (auto it = limits.find(site); it != limits.end()) {
      p.memory_bytes = it->second.memory_bytes;
      p.devices = it->second.devices;
      p.device_memory_bytes = it->second.device_memory_bytes;
      p.device_link_bytes_per_second = it->second.device_link_bytes_per_second;
      p.device_link_latency_seconds = it->second.device_link_latency_seconds;
    }
    nominal.sites.push_back(p);
  }
  for (const auto& from : request.sites) {
    for (const auto& to : request.sites) {
      if (from == to) continue;
      scheduler::LinkProfile l{from, to, kUnmeasuredLinkBandwidth, 0};
      if (auto it = links.find({from, to}); it != links.end()) {
        if (it->second.bandwidth_bytes_per_second() > 0) {
          l.bandwidth_bytes_per_second = it->second.bandwidth_bytes_per_second();
        }
        l.rtt_seconds = std::max(0.0, it->second.rtt_seconds());
      }
      nominal.links.push_back(l);
    }
  }
  ASSIGN_OR_RETURN(const scheduler::CostModel model, scheduler::Planner(nominal).Model(request));
  ASSIGN_OR_RETURN(const scheduler::StepEstimate estimate, model.Estimate(current));
  return scheduler::FromMeasurements(nominal, estimate, recent);
}

}  // namespace

Replanner::Snapshot Replanner::Take(const v1::JobStatus& record, const JobSpec& spec,
                                    const std::string& coordinator) {
  Snapshot s;
  s.job_id = record.job_id();
  pending_ = false;
  std::vector<std::string> sites;
  for (int k = 0; k < record.stages_size(); ++k) {
    const auto& st = record.stages(k);
    s.current.push_back({st.site(), int(st.layer_begin()), int(st.layer_end())});
    sites.push_back(st.site());
    if (static_cast<size_t>(k) < recent_compute_.size()) {
      for (double v : recent_compute_[k]) s.recent.push_back({k, 0, v, 0, 0});
    }
  }
  s.request = PlacementRequestFor(spec, sites);
  s.request.workload.coordinator = coordinator;
  s.links = links_;
  s.limits = limits_;
  return s;
}

std::optional<Replanner::Move> Replanner::Plan(const Snapshot& snap) const {
  const std::string& job_id = snap.job_id;
  const std::vector<scheduler::StagePlan>& current = snap.current;
  scheduler::PlanResult plan;
  scheduler::StepEstimate now;
  Status planned = [&]() -> Status {
    ASSIGN_OR_RETURN(const scheduler::Profiles measured,
                     MeasuredProfiles(snap.request, current, snap.recent, snap.links, snap.limits));
    scheduler::PlannerOptions options;
    options.keep_order = true;
    options.time_budget_seconds = 1;
    const scheduler::Planner planner(measured, options);
    ASSIGN_OR_RETURN(plan, planner.Plan(snap.request));
    ASSIGN_OR_RETURN(const scheduler::CostModel model, planner.Model(snap.request));
    ASSIGN_OR_RETURN(now, model.Estimate(current));
    return absl::OkStatus();
  }();
  if (!planned.ok()) {
    log_->warn("job {}: re-planning failed ({}); keeping the plan", job_id,
               std::string(planned.message()));
    return std::nullopt;
  }
  if (plan.stages.size() != current.size() || plan.stages == current ||
      plan.estimate.step_seconds > 0.9 * now.step_seconds) {
    log_->info(
        "job {}: re-planning would not help (predicted {:.3f} s/step now, {:.3f} s with {}); "
        "keeping the plan",
        job_id, now.step_seconds, plan.estimate.step_seconds,
        scheduler::PlanDebugString(plan.stages));
    return std::nullopt;
  }
  log_->info(
      "job {}: the cost model predicts {:.3f} s/step now and {:.3f} s/step with {} "
      "(bottleneck: {})",
      job_id, now.step_seconds, plan.estimate.step_seconds, scheduler::PlanDebugString(plan.stages),
      plan.estimate.bottleneck_description);
  Move move;
  move.next = plan.stages;
  move.predicted_step_seconds = plan.estimate.step_seconds;
  // Name the slowest stage (measured compute per layer) of those that give up layers: the
  // detector that fired first can be a noisy one.
  std::vector<double> per_layer(current.size(), 0);
  for (const auto& m : snap.recent) {
    per_layer[m.stage] += m.compute_seconds / current[m.stage].layers();
  }
  int off = -1;
  for (size_t k = 0; k < move.next.size(); ++k) {
    if (move.next[k].layers() < current[k].layers() && (off < 0 || per_layer[k] > per_layer[off])) {
      off = static_cast<int>(k);
    }
  }
  if (off >= 0) {
    move.moved = "; layers move off stage " + std::to_string(off) + " on " + current[off].site;
  }
  return move;
}

void Replanner::Declined() {
  for (auto& d : detectors_) d.Reset();
}

void Replanner::Applied() {
  for (auto& d : detectors_) d.Reset();
  for (auto& recent : recent_compute_) recent.clear();
  pending_ = false;  // reports that arrived while planning fired the old detectors
}

}  // namespace longhaul::daemon
