// Rendering of the Prometheus text format: name repair, escaping and number formatting.
#include "daemon/http/prometheus.h"

#include <charconv>
#include <cmath>

namespace longhaul::http {
namespace {

bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Replaces characters outside [a-zA-Z_(:)][a-zA-Z0-9_(:)]* with '_'; colons are allowed in
// metric names, not in label names. An empty name becomes "_".
std::string RepairName(const std::string& name, bool allow_colon) {
  if (name.empty()) return "_";
  std::string out = name;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const char c = out[i];
    const bool ok = IsAlpha(c) || c == '_' || (allow_colon && c == ':') || (i > 0 && IsDigit(c));
    if (!ok) out[i] = '_';
  }
  return out;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// HELP text escapes backslash and newline; label values also escape the double quote.
std::string Escape(const std::string& s, bool quote) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

// The shortest text that parses back to the same double; NaN, +Inf, -Inf as Prometheus
// spells them.
std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, result.ptr);
}

}  // namespace

void MetricsText::Family(const std::string& name, const std::string& type,
                         const std::string& help) {
  if (index_.count(name) != 0) return;
  std::string exposed_type = type;
  if (type != "gauge" && type != "counter" && type != "untyped") exposed_type = "untyped";
  std::string exposed_name = RepairName(name, /*allow_colon=*/true);
  if (exposed_type == "counter" && !EndsWith(exposed_name, "_total")) exposed_name += "_total";

  FamilyText family;
  family.exposed_name = exposed_name;
  family.text = "# HELP " + exposed_name + " " + Escape(help, /*quote=*/false) + "\n" + "# TYPE " +
                exposed_name + " " + exposed_type + "\n";
  index_.emplace(name, families_.size());
  families_.push_back(std::move(family));
}

void MetricsText::Sample(const std::string& name,
                         const std::vector<std::pair<std::string, std::string>>& labels,
                         double value) {
  auto it = index_.find(name);
  if (it == index_.end()) {
    Family(name, "untyped", "Undeclared metric family.");
    it = index_.find(name);
  }
  FamilyText& family = families_[it->second];
  std::string& text = family.text;
  text += family.exposed_name;
  if (!labels.empty()) {
    text += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) text += ',';
      text += RepairName(labels[i].first, /*allow_colon=*/false);
      text += "=\"";
      text += Escape(labels[i].second, /*quote=*/true);
      text += '"';
    }
    text += '}';
  }
  text += ' ';
  text += FormatValue(value);
  text += '\n';
}

std::string MetricsText::str() const {
  std::size_t size = 0;
  for (const FamilyText& family : families_) size += family.text.size();
  std::string out;
  out.reserve(size);
  for (const FamilyText& family : families_) out += family.text;
  return out;
}

}  // namespace longhaul::http
