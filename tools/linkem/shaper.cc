#include "tools/linkem/shaper.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace longhaul::linkem {

Shaper::Shaper(LinkParams params, uint64_t seed) : params_(params), rng_(seed) {}

double Shaper::Schedule(double arrival, uint64_t bytes) {
  const double start = std::max(arrival, wire_free_at_);
  const double serialise =
      params_.rate_bits_per_second > 0 ? bytes * 8.0 / params_.rate_bits_per_second : 0.0;
  wire_free_at_ = start + serialise;
  double jitter = 0;
  if (params_.jitter_seconds > 0) {
    std::uniform_real_distribution<double> u(-params_.jitter_seconds, params_.jitter_seconds);
    jitter = u(rng_);
  }
  const double delivery =
      std::max(last_delivery_, wire_free_at_ + std::max(0.0, params_.delay_seconds + jitter));
  last_delivery_ = delivery;
  return delivery;
}

namespace {

// Splits "12.5mbit" into 12.5 and "mbit"; false if there is no number.
bool SplitNumber(const std::string& text, double* value, std::string* unit) {
  if (text.empty()) return false;
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *value < 0) return false;
  *unit = std::string(end);
  std::transform(unit->begin(), unit->end(), unit->begin(), ::tolower);
  return true;
}

}  // namespace

double ParseRate(const std::string& text) {
  if (text == "unlimited") return 0;
  double v;
  std::string unit;
  if (!SplitNumber(text, &v, &unit)) return -1;
  if (unit.empty() || unit == "bit" || unit == "bps") return v;
  if (unit == "kbit") return v * 1e3;
  if (unit == "mbit") return v * 1e6;
  if (unit == "gbit") return v * 1e9;
  return -1;
}

double ParseDuration(const std::string& text) {
  double v;
  std::string unit;
  if (!SplitNumber(text, &v, &unit)) return -1;
  if (unit.empty() && v == 0) return 0;
  if (unit == "s") return v;
  if (unit == "ms") return v * 1e-3;
  if (unit == "us") return v * 1e-6;
  return -1;
}

}  // namespace longhaul::linkem
