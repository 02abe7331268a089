// The profiles file (see profiles_yaml.h), parsed with the job file's located errors.
#include "scheduler/profiles_yaml.h"

#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/yaml_walker.h"

namespace longhaul::scheduler {
namespace {

const std::map<std::string, std::map<std::string, double>>& Units() {
  static const auto* units = new std::map<std::string, std::map<std::string, double>>{
      {"rate",
       {{"", 1},
        {"B/s", 1},
        {"KB/s", 1e3},
        {"MB/s", 1e6},
        {"GB/s", 1e9},
        {"bit/s", 1 / 8.0},
        {"kbit/s", 1e3 / 8},
        {"Mbit/s", 1e6 / 8},
        {"Gbit/s", 1e9 / 8},
        {"Tbit/s", 1e12 / 8}}},
      {"time", {{"", 1}, {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}}},
      {"bytes",
       {{"", 1},
        {"B", 1},
        {"KB", 1e3},
        {"MB", 1e6},
        {"GB", 1e9},
        {"TB", 1e12},
        {"KiB", 1024.0},
        {"MiB", 1048576.0},
        {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0}}},
      {"flops",
       {{"", 1},
        {"FLOP/s", 1},
        {"kFLOP/s", 1e3},
        {"MFLOP/s", 1e6},
        {"GFLOP/s", 1e9},
        {"TFLOP/s", 1e12},
        {"PFLOP/s", 1e15}}},
  };
  return *units;
}

}  // namespace

StatusOr<double> ParseQuantity(const std::string& text, const std::string& kind) {
  const auto& units = Units().at(kind);
  size_t split = text.size();
  while (split > 0 && !std::isdigit(static_cast<unsigned char>(text[split - 1])) &&
         text[split - 1] != '.') {
    --split;
  }
  std::string number = text.substr(0, split), unit = text.substr(split);
  while (!number.empty() && number.back() == ' ') number.pop_back();
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double v = 0;
  auto it = units.find(unit);
  if (!absl::SimpleAtod(number, &v) || !std::isfinite(v) || it == units.end()) {
    std::string known;
    for (const auto& [name, factor] : units) {
      if (!name.empty()) absl::StrAppend(&known, known.empty() ? "" : ", ", name);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("expected a number or a number with a unit (", known, "), got '", text, "'"));
  }
  return v * it->second;
}

StatusOr<Profiles> ParseProfiles(const std::string& text, const std::string& source) {
  const YamlWalker w(source);
  ASSIGN_OR_RETURN(const YamlWalker::Entry root, w.Root(text));
  ASSIGN_OR_RETURN(auto top, w.Map(root, {"sites", "links", "default_link"}));
  auto quantity = [&](const YamlWalker::Entry& e, const char* kind,
                      double min) -> StatusOr<double> {
    if (!e.value.IsScalar()) return w.Error(e, "expected a number");
    auto v = ParseQuantity(e.value.Scalar(), kind);
    if (!v.ok()) return w.Error(e, v.status().message());
    if (!(*v >= min)) return w.Error(e, absl::StrCat("must be at least ", min));
    return *v;
  };
  auto list = [&](const char* key, std::vector<YamlWalker::Entry>* out) -> Status {
    auto it = top.find(key);
    if (it == top.end()) return absl::OkStatus();
    if (!it->second.value.IsSequence()) return w.Error(it->second, "expected a list");
    for (size_t i = 0; i < it->second.value.size(); ++i) {
      out->push_back({it->second.key, it->second.value[i], absl::StrCat(key, "[", i, "]")});
    }
    return absl::OkStatus();
  };

  Profiles p;
  std::vector<YamlWalker::Entry> sites, links;
  RETURN_IF_ERROR(list("sites", &sites));
  RETURN_IF_ERROR(list("links", &links));
  if (sites.empty()) return w.Error(root, "sites: expected a non-empty list of sites");
  std::set<std::string> names;
  for (const auto& e : sites) {
    ASSIGN_OR_RETURN(auto f, w.Map(e, {"name", "flops", "memory", "optimizer", "devices",
                                       "device_memory", "device_link", "device_latency"}));
    SiteProfile s;
    if (!f.count("name")) return w.Missing(e, "name");
    if (!f.count("flops")) return w.Missing(e, "flops");
    ASSIGN_OR_RETURN(s.name, w.String(f.at("name")));
    if (!names.insert(s.name).second) return w.Error(f.at("name"), "site listed twice");
    ASSIGN_OR_RETURN(s.flops, quantity(f.at("flops"), "flops", 1));
    if (f.count("memory")) {
      ASSIGN_OR_RETURN(double bytes, quantity(f.at("memory"), "bytes", 0));
      s.memory_bytes = static_cast<int64_t>(bytes);
    }
    if (f.count("optimizer")) {
      ASSIGN_OR_RETURN(s.optimizer_params_per_second, w.Double(f.at("optimizer"), 0, 1e30));
    }
    if (f.count("devices")) {
      ASSIGN_OR_RETURN(const int64_t devices, w.Int(f.at("devices"), 1, kMaxSiteDevices));
      s.devices = static_cast<int>(devices);
    }
    if (f.count("device_memory")) {
      ASSIGN_OR_RETURN(double bytes, quantity(f.at("device_memory"), "bytes", 0));
      s.device_memory_bytes = static_cast<int64_t>(bytes);
    }
    if (f.count("device_link")) {
      ASSIGN_OR_RETURN(s.device_link_bytes_per_second, quantity(f.at("device_link"), "rate", 1));
    }
    if (f.count("device_latency")) {
      ASSIGN_OR_RETURN(s.device_link_latency_seconds, quantity(f.at("device_latency"), "time", 0));
    }
    if (s.devices > 1 && !f.count("device_link")) {
      return w.Error(e, absl::StrCat(s.devices,
                                     " devices: device_link (their collective bandwidth, for "
                                     "example 360 GB/s) is needed to price sharding"));
    }
    p.sites.push_back(s);
  }
  std::map<std::pair<std::string, std::string>, LinkProfile> given, mirrored;
  for (const auto& e : links) {
    ASSIGN_OR_RETURN(auto f, w.Map(e, {"from", "to", "bandwidth", "rtt", "symmetric"}));
    for (const char* key : {"from", "to", "bandwidth", "rtt"}) {
      if (!f.count(key)) return w.Missing(e, key);
    }
    LinkProfile l;
    ASSIGN_OR_RETURN(l.from, w.String(f.at("from")));
    ASSIGN_OR_RETURN(l.to, w.String(f.at("to")));
    for (const char* end : {"from", "to"}) {
      const std::string& n = std::string(end) == "from" ? l.from : l.to;
      if (!names.count(n)) return w.Error(f.at(end), absl::StrCat("unknown site '", n, "'"));
    }
    if (l.from == l.to) return w.Error(e, "a link joins two different sites");
    ASSIGN_OR_RETURN(l.bandwidth_bytes_per_second, quantity(f.at("bandwidth"), "rate", 1e-9));
    ASSIGN_OR_RETURN(l.rtt_seconds, quantity(f.at("rtt"), "time", 0));
    bool symmetric = true;
    if (f.count("symmetric")) {
      ASSIGN_OR_RETURN(std::string v, w.String(f.at("symmetric")));
      if (v != "true" && v != "false") return w.Error(f.at("symmetric"), "expected true or false");
      symmetric = v == "true";
    }
    if (!given.emplace(std::pair{l.from, l.to}, l).second) {
      return w.Error(e, absl::StrCat("link ", l.from, " -> ", l.to, " is listed twice"));
    }
    if (symmetric)
      mirrored[{l.to, l.from}] = {l.to, l.from, l.bandwidth_bytes_per_second, l.rtt_seconds};
  }
  for (const auto& [key, l] : mirrored) given.emplace(key, l);
  if (auto it = top.find("default_link"); it != top.end()) {
    ASSIGN_OR_RETURN(auto f, w.Map(it->second, {"bandwidth", "rtt"}));
    for (const char* key : {"bandwidth", "rtt"}) {
      if (!f.count(key)) return w.Missing(it->second, key);
    }
    ASSIGN_OR_RETURN(double bw, quantity(f.at("bandwidth"), "rate", 1e-9));
    ASSIGN_OR_RETURN(double rtt, quantity(f.at("rtt"), "time", 0));
    for (const auto& a : p.sites) {
      for (const auto& b : p.sites) {
        if (a.name != b.name)
          given.emplace(std::pair{a.name, b.name}, LinkProfile{a.name, b.name, bw, rtt});
      }
    }
  }
  for (const auto& [key, l] : given) p.links.push_back(l);
  RETURN_IF_ERROR(Annotate(ValidateProfiles(p), source));
  return p;
}

StatusOr<Profiles> LoadProfiles(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read the profiles file"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseProfiles(ss.str(), path);
}

}  // namespace longhaul::scheduler
