#include "tools/linkem/schedule.h"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace longhaul::linkem {

void LinkChange::ApplyTo(LinkParams* up, LinkParams* down) const {
  if (up_rate) up->rate_bits_per_second = *up_rate;
  if (down_rate) down->rate_bits_per_second = *down_rate;
  if (up_delay) up->delay_seconds = *up_delay;
  if (down_delay) down->delay_seconds = *down_delay;
  if (up_jitter) up->jitter_seconds = *up_jitter;
  if (down_jitter) down->jitter_seconds = *down_jitter;
}

StatusOr<LinkChange> ParseChange(const std::vector<std::string>& words) {
  LinkChange c;
  for (const auto& w : words) {
    if (w == "drop") {
      c.drop = true;
      continue;
    }
    const size_t eq = w.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError("expected KEY=VALUE or 'drop', got '" + w + "'");
    }
    const std::string key = w.substr(0, eq), value = w.substr(eq + 1);
    std::string base = key;
    bool up = true, down = true;
    if (key.rfind("up_", 0) == 0) {
      base = key.substr(3);
      down = false;
    } else if (key.rfind("down_", 0) == 0) {
      base = key.substr(5);
      up = false;
    }
    double v;
    if (base == "rate") {
      v = ParseRate(value);
      if (v < 0) return absl::InvalidArgumentError("bad rate '" + value + "' (e.g. 200mbit)");
      if (up) c.up_rate = v;
      if (down) c.down_rate = v;
    } else if (base == "delay" || base == "jitter") {
      v = ParseDuration(value);
      if (v < 0) {
        return absl::InvalidArgumentError("bad " + base + " '" + value + "' (e.g. 20ms)");
      }
      auto& u = base == "delay" ? c.up_delay : c.up_jitter;
      auto& d = base == "delay" ? c.down_delay : c.down_jitter;
      if (up) u = v;
      if (down) d = v;
    } else {
      return absl::InvalidArgumentError("unknown key '" + key +
                                        "' (rate, delay, jitter, with optional up_/down_)");
    }
  }
  return c;
}

StatusOr<std::vector<LinkChange>> ParseSchedule(const std::string& text,
                                                const std::string& source) {
  std::vector<LinkChange> out;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string s; words >> s;) w.push_back(s);
    if (w.empty()) continue;
    const std::string where = source + ":" + std::to_string(lineno) + ": ";
    char* end = nullptr;
    const double at = std::strtod(w[0].c_str(), &end);
    if (end == w[0].c_str() || *end != '\0' || at < 0) {
      return absl::InvalidArgumentError(where + "expected a time in seconds, got '" + w[0] + "'");
    }
    if (w.size() == 1) return absl::InvalidArgumentError(where + "no change given");
    auto change = ParseChange({w.begin() + 1, w.end()});
    if (!change.ok())
      return absl::InvalidArgumentError(where + std::string(change.status().message()));
    change->at_seconds = at;
    out.push_back(*change);
  }
  std::stable_sort(out.begin(), out.end(), [](const LinkChange& a, const LinkChange& b) {
    return a.at_seconds < b.at_seconds;
  });
  return out;
}

StatusOr<std::vector<LinkChange>> LoadSchedule(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read schedule file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseSchedule(ss.str(), path);
}

}  // namespace longhaul::linkem
