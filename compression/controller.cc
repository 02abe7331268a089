// The adaptive controller's prediction and decision rules (see controller.h).
#include "compression/controller.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "compression/codec.h"
#include "compression/strings.h"

namespace longhaul::compression {
namespace {

std::string Ms(double seconds) {
  if (!std::isfinite(seconds)) return "inf ms";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f ms", seconds * 1e3);
  return buf;
}

std::string MBps(double bytes_per_second) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB/s", bytes_per_second / 1e6);
  return buf;
}

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

}  // namespace

StatusOr<Controller> Controller::Create(const ControllerOptions& options) {
  if (options.ladder.empty()) return absl::InvalidArgumentError("controller: empty codec ladder");
  if (!(options.upgrade_margin >= 0 && options.upgrade_margin < 1)) {
    return absl::InvalidArgumentError("controller: upgrade_margin must be in [0, 1)");
  }
  if (!(options.hysteresis_window_seconds >= 0)) {
    return absl::InvalidArgumentError("controller: hysteresis_window_seconds must be >= 0");
  }
  for (double rate : {options.cast_bytes_per_second, options.quantize_bytes_per_second,
                      options.topk_bytes_per_second, options.zstd_bytes_per_second}) {
    if (!(rate > 0)) return absl::InvalidArgumentError("controller: throughputs must be > 0");
  }
  if (!(options.zstd_ratio > 0 && options.zstd_ratio <= 1)) {
    return absl::InvalidArgumentError("controller: zstd_ratio must be in (0, 1]");
  }
  Controller controller(options);
  for (size_t i = 0; i < options.ladder.size(); ++i) {
    auto spec = ParseCodecSpec(options.ladder[i]);
    if (!spec.ok()) return Annotate(spec.status(), Cat("controller: ladder rung ", i));
    controller.specs_.push_back(*spec);
    controller.names_.push_back(spec->ToString());
  }
  return controller;
}

StatusOr<int> Controller::FindRung(std::string_view spec) const {
  ASSIGN_OR_RETURN(CodecSpec parsed, ParseCodecSpec(spec));
  std::string known;
  for (int i = 0; i < rungs(); ++i) {
    if (specs_[i] == parsed) return i;
    known += Cat(i == 0 ? "" : ", ", names_[i]);
  }
  return absl::NotFoundError(
      Cat("codec '", parsed.ToString(), "' is not on the controller's ladder (", known, ")"));
}

double Controller::Predict(int rung, const ControllerInput& in) const {
  if (!(in.bandwidth_bytes_per_second > 0)) return std::numeric_limits<double>::infinity();
  const CodecSpec& s = specs_[rung];
  const uint64_t n = in.tensor_bytes / 4;
  const double raw = static_cast<double>(in.tensor_bytes);
  const double inner = static_cast<double>(EstimateEncodedSize(s, n));
  const double wire = s.zstd.enabled ? inner * options_.zstd_ratio : inner;
  double compute = 0;
  double coded = raw;  // fp32 bytes the value codec sees
  if (s.topk.enabled) {
    compute += raw / options_.topk_bytes_per_second;
    coded = raw * s.topk.fraction;
  }
  compute += coded / (s.value.quantized() ? options_.quantize_bytes_per_second
                                          : options_.cast_bytes_per_second);
  if (s.zstd.enabled) compute += inner / options_.zstd_bytes_per_second;
  return in.rtt_seconds / 2 + wire / in.bandwidth_bytes_per_second + compute;
}

StatusOr<Decision> Controller::Decide(const ControllerInput& in,
                                      const ControllerState& previous) const {
  if (!(in.budget_seconds > 0) || !std::isfinite(in.budget_seconds)) {
    return absl::InvalidArgumentError(
        Cat("controller: budget ", in.budget_seconds, " s must be positive and finite"));
  }
  if (!(in.rtt_seconds >= 0) || !std::isfinite(in.rtt_seconds)) {
    return absl::InvalidArgumentError(Cat("controller: rtt ", in.rtt_seconds, " s is invalid"));
  }
  if (std::isnan(in.bandwidth_bytes_per_second)) {
    return absl::InvalidArgumentError("controller: bandwidth estimate is NaN");
  }
  if (in.quality_floor < 0 || in.quality_floor >= rungs()) {
    return absl::InvalidArgumentError(Cat("controller: quality floor ", in.quality_floor,
                                          " is not a rung of the ", rungs(), "-rung ladder"));
  }
  const int floor = in.quality_floor;
  const double budget = in.budget_seconds;
  const double margin_budget = (1 - options_.upgrade_margin) * budget;
  std::vector<double> t(floor + 1);
  int best_fit = -1, best_margin = -1, fastest = 0;
  for (int i = 0; i <= floor; ++i) {
    t[i] = Predict(i, in);
    if (best_fit < 0 && t[i] <= budget) best_fit = i;
    if (best_margin < 0 && t[i] <= margin_budget) best_margin = i;
    if (t[i] < t[fastest]) fastest = i;
  }

  const int prev = previous.rung;
  ControllerState next = previous;
  int choice = prev;
  std::string why;
  if (!(in.bandwidth_bytes_per_second > 0)) {
    next.upgrade_since_seconds = -1;
    if (prev >= 0 && prev <= floor) {
      why = "kept: no bandwidth estimate";
    } else {
      choice = floor;
      next.provisional = true;
      why = "no bandwidth estimate yet: the quality floor";
    }
  } else if (prev < 0 || prev > floor || previous.provisional) {
    choice = best_fit >= 0 ? best_fit : fastest;
    next.provisional = false;
    why = Cat(prev > floor ? "quality floor moved" : "first estimate", ": ",
              best_fit >= 0 ? "least lossy that fits" : "nothing fits, fastest allowed");
  } else if (t[prev] > budget) {
    if (best_fit >= 0) {
      choice = best_margin >= 0 ? best_margin : best_fit;
      why = Cat(names_[prev], " no longer fits (", Ms(t[prev]), ")");
    } else if (fastest != prev && t[fastest] < (1 - options_.upgrade_margin) * t[prev]) {
      choice = fastest;
      why = "nothing fits: fastest allowed";
    } else {
      why = "kept: nothing fits and no allowed codec is much faster";
    }
  } else if (best_margin >= 0 && best_margin < prev) {
    if (next.upgrade_since_seconds < 0) next.upgrade_since_seconds = in.now_seconds;
    const double waited = in.now_seconds - next.upgrade_since_seconds;
    if (waited >= options_.hysteresis_window_seconds) {
      choice = best_margin;
      why = Cat("upgrade: fit with margin for ", Seconds(waited));
    } else {
      why = Cat("kept: ", names_[best_margin], " fits with margin (", Ms(t[best_margin]), ") for ",
                Seconds(waited), " of ", Seconds(options_.hysteresis_window_seconds));
    }
  } else {
    next.upgrade_since_seconds = -1;
    why = "kept: fits";
  }

  Decision d;
  d.rung = choice;
  d.codec = names_[choice];
  d.predicted_seconds = t[choice];
  d.fits = t[choice] <= budget;
  d.changed = choice != prev;
  if (d.changed) {
    next.rung = choice;
    next.changed_at_seconds = in.now_seconds;
    next.upgrade_since_seconds = -1;
  }
  d.next = next;
  // The round trip it priced, or none: a pipelined sender passes 0 (only serialisation counts),
  // and "rtt 0.0 ms" beside a link measured at 20 ms read as a wrong measurement.
  d.explanation = Cat(d.codec, ": ", why, "; predicted ", Ms(t[choice]), " vs budget ", Ms(budget),
                      " at ", MBps(in.bandwidth_bytes_per_second),
                      in.rtt_seconds > 0 ? Cat(" + rtt ", Ms(in.rtt_seconds))
                                         : std::string(" (round trip not priced: pipelined)"),
                      ", floor ", names_[floor]);
  if (choice > 0 && in.bandwidth_bytes_per_second > 0) {
    d.explanation += Cat("; ", names_[choice - 1], " would take ", Ms(t[choice - 1]));
  }
  return d;
}

}  // namespace longhaul::compression
