// Checks the Grafana dashboard (configs/grafana/longhaul.json) against what longhauld really
// exports, so that a renamed metric or label cannot silently blank a panel: four daemons in
// one process (loopback transport) run a tiny 2 replicas x 2 stages job, and their /metrics
// say which families exist, of which type, with which labels. No metric name is listed here.
// Every `longhaul_*` name in a panel's or a variable's query must be an exported family (the
// _bucket/_sum/_count suffixes only on a histogram or summary); every label in a selector,
// a `by`/`without`/`on`/`ignoring`/`group_*` clause or label_values() one that the family's
// samples carry (`instance`, which Prometheus adds, aside); every panel other than a row has
// queries and the ${datasource} variable; panel ids are unique. A broken copy must fail.
#include <catch2/catch.hpp>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/daemon.h"
#include "daemon/transport/loopback.h"
#include "test/daemon/job_test_util.h"
#include "test/daemon/test_util.h"

namespace longhaul {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr const char* kDashboard = "configs/grafana/longhaul.json";
constexpr const char* kPrefix = "longhaul_";
// Labels Prometheus adds at scrape time, which no daemon emits.
const std::set<std::string> kScrapeLabels = {"instance", "__name__"};

// What the daemons' /metrics expose: each family's TYPE and the label names its samples carry.
struct Exposition {
  std::map<std::string, std::string> types;
  std::map<std::string, std::set<std::string>> labels;  // only families with samples

  // The family a name in a query refers to ("" if none): itself, or a histogram's or
  // summary's family for its suffixed series.
  std::string FamilyOf(const std::string& name) const {
    if (types.count(name)) return name;
    for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
      if (name.size() <= suffix.size() ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      const std::string base = name.substr(0, name.size() - suffix.size());
      auto it = types.find(base);
      if (it == types.end()) continue;
      if (it->second == "histogram" || (it->second == "summary" && suffix != "_bucket")) {
        return base;
      }
    }
    return "";
  }
};

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Adds one scrape (the Prometheus text format) to `out`.
void ParseExposition(const std::string& text, Exposition* out) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      out->types[name] = type;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    size_t i = 0;
    while (i < line.size() && (IsNameChar(line[i]) || line[i] == ':')) ++i;
    const std::string family = out->FamilyOf(line.substr(0, i));
    std::set<std::string>& labels = out->labels[family.empty() ? line.substr(0, i) : family];
    if (i >= line.size() || line[i] != '{') continue;
    ++i;
    while (i < line.size() && line[i] != '}') {  // name="value" pairs; values are escaped
      const size_t eq = line.find('=', i);
      if (eq == std::string::npos) break;
      labels.insert(line.substr(i, eq - i));
      i = eq + 2;  // past ="
      while (i < line.size() && line[i] != '"') i += line[i] == '\\' ? 2 : 1;
      i += 1;                                      // past the closing quote
      if (i < line.size() && line[i] == ',') ++i;  // next pair
    }
  }
}

// The names and labels one PromQL expression uses, by a small scanner rather than a parser:
// enough for the dashboard's queries, and strict where it cannot tell (see CheckExpr).
struct ExprUse {
  std::vector<std::string> metrics;                           // longhaul_* names, in order
  std::vector<std::pair<std::string, std::string>> selector;  // (metric, label name)
  std::vector<std::string> grouping;                          // by/on/... and label_values
};

ExprUse ScanExpr(const std::string& e) {
  static const std::set<std::string> kGrouping = {"by",       "without",    "on",
                                                  "ignoring", "group_left", "group_right"};
  ExprUse use;
  auto skip_space = [&](size_t i) {
    while (i < e.size() && std::isspace(static_cast<unsigned char>(e[i]))) ++i;
    return i;
  };
  // Reads "(a, b, c)" from e[i] == '(' into `into`; returns the index past ')'.
  auto read_list = [&](size_t i, std::vector<std::string>* into) {
    for (++i; i < e.size() && e[i] != ')'; ++i) {
      if (!IsNameStart(e[i])) continue;
      const size_t start = i;
      while (i < e.size() && IsNameChar(e[i])) ++i;
      into->push_back(e.substr(start, i - start));
      --i;
    }
    return i + 1;
  };
  // label_values(<expr>, label): the label must be on the expression's series.
  static const std::regex kLabelValues(R"(label_values\s*\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\))");
  std::smatch m;
  if (std::regex_search(e, m, kLabelValues)) use.grouping.push_back(m[2]);

  for (size_t i = 0; i < e.size();) {
    const char c = e[i];
    if (c == '"' || c == '\'' || c == '`') {  // a string: skip it
      for (++i; i < e.size() && e[i] != c; ++i) i += e[i] == '\\' && c != '`';
      ++i;
    } else if (c == '$') {  // a Grafana variable: $name or ${name}
      ++i;
      if (i < e.size() && e[i] == '{') i = e.find('}', i);
      while (i < e.size() && IsNameChar(e[i])) ++i;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {  // 60, 1.5, 5m, 1h30m
      while (i < e.size() && (IsNameChar(e[i]) || e[i] == '.')) ++i;
    } else if (IsNameStart(c) || c == ':') {
      const size_t start = i;
      while (i < e.size() && (IsNameChar(e[i]) || e[i] == ':')) ++i;
      const std::string word = e.substr(start, i - start);
      const size_t next = skip_space(i);
      if (word.rfind(kPrefix, 0) == 0) {
        use.metrics.push_back(word);
        if (next < e.size() && e[next] == '{') {  // its selector: label op "value", ...
          i = next + 1;
          while (i < e.size() && e[i] != '}') {
            i = skip_space(i);
            const size_t label = i;
            while (i < e.size() && IsNameChar(e[i])) ++i;
            if (i > label) use.selector.push_back({word, e.substr(label, i - label)});
            while (i < e.size() && e[i] != '"' && e[i] != '}') ++i;  // the operator
            if (i < e.size() && e[i] == '"') {
              for (++i; i < e.size() && e[i] != '"'; ++i) i += e[i] == '\\';
              ++i;
            }
            i = skip_space(i);
            if (i < e.size() && e[i] == ',') ++i;
          }
          ++i;
        }
      } else if (kGrouping.count(word) && next < e.size() && e[next] == '(') {
        i = read_list(next, &use.grouping);
      }
    } else {
      ++i;
    }
  }
  return use;
}

std::string Join(const std::set<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Checks one query of panel `where` against `exposed`; appends what is wrong to `problems`.
// A label in a selector must be one the family's samples carry; a grouping label one that
// every longhaul family in the expression carries (strict: this scanner does not know which
// operand a clause belongs to).
void CheckExpr(const std::string& where, const std::string& expr, const Exposition& exposed,
               std::vector<std::string>* problems) {
  const ExprUse use = ScanExpr(expr);
  auto has_label = [&](const std::string& family, const std::string& label,
                       const std::string& how) {
    if (kScrapeLabels.count(label)) return;
    auto it = exposed.labels.find(family);
    if (it == exposed.labels.end()) {
      problems->push_back(where + ": cannot check label \"" + label + "\" " + how +
                          ": no samples of " + family + " in /metrics");
    } else if (!it->second.count(label)) {
      problems->push_back(where + ": label \"" + label + "\" " + how + " is not a label of " +
                          family + " (it has: " + Join(it->second) + ") in \"" + expr + "\"");
    }
  };
  std::set<std::string> families;
  for (const std::string& name : use.metrics) {
    const std::string family = exposed.FamilyOf(name);
    if (family.empty()) {
      problems->push_back(where + ": " + name + " is not a metric family longhauld exports, in \"" +
                          expr + "\"");
    } else {
      families.insert(family);
    }
  }
  for (const auto& [name, label] : use.selector) {
    const std::string family = exposed.FamilyOf(name);
    if (!family.empty()) has_label(family, label, "in the selector of " + name);
  }
  for (const std::string& label : use.grouping) {
    for (const std::string& family : families) has_label(family, label, "in a grouping clause");
  }
  if (use.metrics.empty()) {
    problems->push_back(where + ": the query names no longhaul metric: \"" + expr + "\"");
  }
}

std::string Title(const json& panel) {
  return panel.contains("title") && panel["title"].is_string()
             ? panel["title"].get<std::string>()
             : "(untitled, id " + panel.value("id", json(0)).dump() + ")";
}

// Walks `panels` (and the panels of rows, collapsed or not); `ids` collects panel ids, which
// Grafana needs unique.
void CheckPanels(const json& panels, const std::string& parent, const Exposition& exposed,
                 std::set<int64_t>* ids, std::vector<std::string>* problems) {
  for (const json& panel : panels) {
    const std::string where = "panel \"" + parent + Title(panel) + "\"";
    const json id = panel.value("id", json());
    if (!id.is_number_integer()) {
      problems->push_back(where + ": has no integer id");
    } else if (!ids->insert(id.get<int64_t>()).second) {
      problems->push_back(where + ": its id " + id.dump() + " is another panel's too");
    }
    if (panel.value("type", "") == "row") {
      if (panel.contains("panels")) {
        CheckPanels(panel["panels"], parent + Title(panel) + " / ", exposed, ids, problems);
      }
      continue;
    }
    const json targets = panel.value("targets", json::array());
    if (!targets.is_array() || targets.empty()) {
      problems->push_back(where + ": has no targets (no query)");
      continue;
    }
    const json datasource = panel.value("datasource", json::object());
    if (!datasource.is_object() || datasource.value("uid", "") != "${datasource}") {
      problems->push_back(where + ": its datasource is not the ${datasource} variable");
    }
    for (const json& target : targets) {
      const std::string expr = target.value("expr", "");
      const std::string ref = where + " query " + target.value("refId", "?");
      if (expr.empty()) {
        problems->push_back(ref + ": has no expr");
      } else {
        CheckExpr(ref, expr, exposed, problems);
      }
    }
  }
}

// Everything wrong with `dashboard` against `exposed`, one message per problem; empty: good.
std::vector<std::string> CheckDashboard(const json& dashboard, const Exposition& exposed) {
  std::vector<std::string> problems;
  std::set<int64_t> ids;
  CheckPanels(dashboard.value("panels", json::array()), "", exposed, &ids, &problems);
  const json variables = dashboard.value("templating", json::object()).value("list", json::array());
  for (const json& var : variables) {
    if (var.value("type", "") != "query") continue;
    const json q = var.value("query", json(""));
    const std::string query = q.is_string() ? q.get<std::string>() : q.value("query", "");
    CheckExpr("variable \"" + var.value("name", "?") + "\"", query, exposed, &problems);
  }
  return problems;
}

// The longhaul families the dashboard's queries name (to wait for their samples).
std::set<std::string> FamiliesUsed(const json& dashboard, const Exposition& exposed) {
  std::set<std::string> out;
  std::function<void(const json&)> walk = [&](const json& j) {
    if (j.is_object()) {
      for (const auto& [key, value] : j.items()) {
        if ((key == "expr" || key == "query") && value.is_string()) {
          for (const auto& name : ScanExpr(value.get<std::string>()).metrics) {
            if (!exposed.FamilyOf(name).empty()) out.insert(exposed.FamilyOf(name));
          }
        } else {
          walk(value);
        }
      }
    } else if (j.is_array()) {
      for (const json& v : j) walk(v);
    }
  };
  walk(dashboard);
  return out;
}

json LoadDashboard() {
  std::ifstream in(kDashboard);
  INFO(kDashboard << " (from the test's runfiles)");
  REQUIRE(in.good());
  const json dashboard = json::parse(in, nullptr, /*allow_exceptions=*/false);
  REQUIRE(!dashboard.is_discarded());
  return dashboard;
}

// Four sites on the loopback transport, as in test/integration/replica_test.cc.
struct Cluster {
  std::unique_ptr<daemon::transport::LoopbackNetwork> net =
      std::make_unique<daemon::transport::LoopbackNetwork>();
  std::vector<std::unique_ptr<daemon::Daemon>> daemons;

  explicit Cluster(const std::vector<std::string>& sites) {
    std::vector<int> ports;
    for (size_t i = 0; i < sites.size(); ++i) ports.push_back(testing::FreePort());
    for (size_t i = 0; i < sites.size(); ++i) {
      testing::SiteSpec spec{sites[i], ports[i], {}};
      for (size_t j = 0; j < sites.size(); ++j) {
        if (j != i) spec.peers.push_back({sites[j], ports[j]});
      }
      daemon::DaemonOptions options;
      options.token = "token";
      options.loopback = net.get();
      auto d = daemon::Daemon::Start(testing::MakeSiteConfig(spec), options);
      INFO(d.status().ToString());
      REQUIRE(d.ok());
      daemons.push_back(std::move(*d));
    }
  }
  ~Cluster() {
    for (auto& d : daemons) d.reset();  // before the network they are attached to
  }

  // Every daemon's /metrics, merged.
  Exposition Scrape() {
    Exposition e;
    for (auto& d : daemons) {
      const testing::HttpResult r = testing::HttpGet(d->status_port(), "/metrics");
      REQUIRE(r.status == 200);
      ParseExposition(r.body, &e);
    }
    return e;
  }
};

const char* kJob =
    "name: grafana\nmodel: {layers: 2, channels: 32, heads: 2, vocab: 256, context: 32}\n"
    "data: {train: builtin, val: builtin, val_batches: 1}\nsteps: 2\nbatch_size: "
    "4\nmicrobatch_size: 2\nseq_len: 32\n"
    "optimizer: {lr: 3e-3, warmup_steps: 1, weight_decay: 0.1, grad_clip: 1.0}\n"
    "seed: 7\ncheckpoint: {every: 2}\nbackend: cpu\nthreads: 1\n"
    "sites: [alpha, beta, gamma, delta]\nplacement: even\nreplicas: 2\n"
    "compression: {mode: off}\nsync: {mode: step, codec: exact}\n";

bool Reports(const std::vector<std::string>& problems, const std::string& a, const std::string& b) {
  for (const std::string& p : problems) {
    if (p.find(a) != std::string::npos && p.find(b) != std::string::npos) return true;
  }
  return false;
}

// Runs the job on a fresh cluster and returns the daemons' merged /metrics, once every family
// the dashboard names has samples (link estimates come from probes) or 30 s have passed.
Exposition ExposedAfterJob(const json& dashboard) {
  Cluster c({"alpha", "beta", "gamma", "delta"});
  v1::SubmitJobRequest req;
  req.set_job_yaml(kJob);
  auto submitted = c.daemons[0]->jobs().Submit(req);
  INFO(submitted.status().ToString());
  REQUIRE(submitted.ok());
  const v1::JobStatus s = testing::WaitJobEnd(*c.daemons[0], submitted->job_id(), 120s);
  INFO("job: " << v1::JobState_Name(s.state()) << ": " << s.detail());
  REQUIRE(s.state() == v1::JOB_STATE_COMPLETED);
  Exposition exposed;
  testing::WaitFor(
      [&] {
        exposed = c.Scrape();
        for (const std::string& f : FamiliesUsed(dashboard, exposed)) {
          if (!exposed.labels.count(f)) return false;
        }
        return true;
      },
      30s);
  return exposed;
}

TEST_CASE("every query of the Grafana dashboard names metrics and labels longhauld exports") {
  const json dashboard = LoadDashboard();
  static const Exposition exposed = ExposedAfterJob(dashboard);  // once for both sections

  SECTION("the dashboard as shipped") {
    const std::vector<std::string> problems = CheckDashboard(dashboard, exposed);
    for (const std::string& p : problems) UNSCOPED_INFO(p);
    CHECK(problems.empty());
    CHECK(FamiliesUsed(dashboard, exposed).size() >= 20);  // the checker saw the queries
  }

  SECTION("a broken copy fails") {
    json broken = dashboard;
    json& row = broken["panels"][0];
    REQUIRE(row.value("type", "") == "row");
    json panel = {{"id", 1001},
                  {"type", "timeseries"},
                  {"title", "Broken"},
                  {"datasource", {{"type", "prometheus"}, {"uid", "${datasource}"}}},
                  {"targets",
                   {{{"refId", "A"}, {"expr", "rate(longhaul_no_such_metric{job=~\"$job\"}[5m])"}},
                    {{"refId", "B"}, {"expr", "max by (peer) (longhaul_job_loss{site=\"a\"})"}}}}};
    row["panels"] = json::array({panel, {{"id", 1002}, {"type", "stat"}, {"title", "Empty"}}});
    const std::vector<std::string> problems = CheckDashboard(broken, exposed);
    for (const std::string& p : problems) UNSCOPED_INFO(p);
    CHECK(Reports(problems, "panel \"Jobs / Broken\" query A", "longhaul_no_such_metric"));
    CHECK(Reports(problems, "panel \"Jobs / Broken\" query B", "label \"site\""));
    CHECK(Reports(problems, "panel \"Jobs / Broken\" query B", "label \"peer\""));
    CHECK(Reports(problems, "panel \"Jobs / Empty\"", "no targets"));
    CHECK(problems.size() == CheckDashboard(dashboard, exposed).size() + 4);  // nothing else
  }
}

}  // namespace
}  // namespace longhaul
