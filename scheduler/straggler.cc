// CUSUM change detection and the per-stage straggler monitor (see straggler.h).
#include "scheduler/straggler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

namespace longhaul::scheduler {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string Fixed(double x, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

}  // namespace

ChangeDetector::ChangeDetector(const StragglerOptions& options, double reference)
    : options_(options) {
  Reset(reference);
}

void ChangeDetector::Reset(double reference) {
  reference_ = reference > 0 ? reference : 0;  // 0: learnt from the first observations
  warmup_.clear();
  recent_.clear();
  statistic_ = 0;
  fired_ = false;
}

bool ChangeDetector::Observe(double value) {
  if (!(value > 0) || !std::isfinite(value)) return fired_;
  if (reference_ <= 0) {
    warmup_.push_back(value);
    if (static_cast<int>(warmup_.size()) >= std::max(1, options_.warmup_steps)) {
      reference_ = Median(warmup_);
    }
    return fired_;
  }
  const double x = std::log(value / reference_);
  recent_.push_back(x);
  if (static_cast<int>(recent_.size()) > std::max(1, options_.estimate_window)) {
    recent_.erase(recent_.begin());
  }
  const double k = std::log(options_.min_slowdown) / 2;
  statistic_ = std::max(0.0, statistic_ + std::min(x - k, options_.clip));
  if (statistic_ > options_.threshold) fired_ = true;
  return fired_;
}

double ChangeDetector::slowdown() const {
  if (recent_.empty()) return 1;
  double sum = 0;
  for (double x : recent_) sum += x;
  return std::exp(sum / recent_.size());
}

StragglerMonitor::StragglerMonitor(const StepEstimate& plan, const StragglerOptions& options)
    : options_(options) {
  Reset(plan);
}

void StragglerMonitor::Reset(const StepEstimate& plan) {
  plan_ = plan;
  const bool learn = options_.warmup_steps > 0;
  compute_.clear();
  for (const StageEstimate& s : plan.stages) {
    compute_.emplace_back(options_, learn ? 0 : s.compute_seconds);
  }
  step_ = ChangeDetector(options_, learn ? 0 : plan.step_seconds);
  reported_ = false;
}

std::optional<StragglerEvent> StragglerMonitor::Observe(const std::vector<StageMeasurement>& step) {
  if (step.empty()) return std::nullopt;
  int worst = -1;
  double step_seconds = 0;
  for (const StageMeasurement& m : step) {
    if (m.stage < 0 || m.stage >= static_cast<int>(compute_.size())) continue;
    ChangeDetector& d = compute_[m.stage];
    if (d.Observe(m.compute_seconds) && (worst < 0 || d.slowdown() > compute_[worst].slowdown())) {
      worst = m.stage;
    }
    step_seconds = std::max(step_seconds, m.step_seconds);
  }
  const bool step_fired = step_.Observe(step_seconds);
  if (reported_) return std::nullopt;
  StragglerEvent e;
  e.step = step.front().step;
  if (worst >= 0) {
    const ChangeDetector& d = compute_[worst];
    e.stage = worst;
    e.site = plan_.stages[worst].site;
    e.component = "compute";
    e.slowdown = d.slowdown();
    e.explanation = absl::StrCat("stage ", worst, " (", e.site, ") computes ", Fixed(e.slowdown, 2),
                                 "x slower than its reference of ", Fixed(d.reference() * 1e3, 1),
                                 " ms per step (CUSUM ", Fixed(d.statistic(), 2), " > ",
                                 Fixed(options_.threshold, 2), ")");
  } else if (step_fired) {
    // A slower step without a slower stage: blame no site.
    e.stage = -1;
    e.component = "step";
    e.slowdown = step_.slowdown();
    e.explanation =
        absl::StrCat("steps take ", Fixed(e.slowdown, 2), "x their reference of ",
                     Fixed(step_.reference() * 1e3, 1),
                     " ms while no stage computes slower: links are slower than planned");
  } else {
    return std::nullopt;
  }
  reported_ = true;
  return e;
}

}  // namespace longhaul::scheduler
