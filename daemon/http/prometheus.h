// Builds the Prometheus text exposition format (version 0.0.4) that longhauld serves on
// /metrics: HELP and TYPE once per family, samples grouped under their family, label values
// and help text escaped, so that the output always parses (checked with promtool in tests).
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace longhaul::http {

// The Content-Type of a /metrics response.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// Accumulates metric families and their samples; str() renders them.
//
//   MetricsText m;
//   m.Family("longhaul_link_bandwidth_bytes", "gauge", "Measured link bandwidth.");
//   m.Sample("longhaul_link_bandwidth_bytes", {{"peer", "site-b"}}, 1.25e8);
//   response.body = m.str();
//
// Not thread-safe; build one per scrape.
class MetricsText {
 public:
  // Declares a family; its HELP and TYPE lines are written once, before its first sample.
  // `type` is "gauge", "counter" or "untyped" (anything else is written as "untyped").
  // REQUIRES: `name` matches [a-zA-Z_:][a-zA-Z0-9_:]*; a counter's name ends in "_total".
  // Violations are repaired rather than written (invalid characters become '_', a missing
  // "_total" is appended) so the output stays valid; samples still use the name given here.
  // Declaring a name a second time has no effect.
  void Family(const std::string& name, const std::string& type, const std::string& help);

  // Adds a sample to family `name`, with labels in the given order. Label names are
  // repaired like family names ([a-zA-Z_][a-zA-Z0-9_]*); label values are escaped (\\, \",
  // \n). NaN and infinities are written as NaN, +Inf and -Inf. A sample of an undeclared
  // family declares it as "untyped" with a placeholder help text.
  void Sample(const std::string& name,
              const std::vector<std::pair<std::string, std::string>>& labels, double value);

  // The exposition text: families in declaration order, each family's samples together
  // (in the order they were added) even when Sample() calls for families interleaved.
  std::string str() const;

 private:
  struct FamilyText {
    std::string exposed_name;  // `name` after repair
    std::string text;          // HELP, TYPE and sample lines
  };

  std::vector<FamilyText> families_;
  std::unordered_map<std::string, std::size_t> index_;  // Family() name -> families_ index
};

}  // namespace longhaul::http
