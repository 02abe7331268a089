// `longhaul plan` on the shipped example job and profiles: a readable table with the stages,
// links, predicted step and bottleneck; JSON with the same plan; a job with replicas (a count
// or auto) gets the replicated plan too; errors for bad input.
#include "tools/cli/plan_command.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

namespace longhaul::cli {
namespace {

PlanFlags Example() {
  PlanFlags f;
  f.job = "configs/demo-job.yaml";
  f.profiles = "configs/profiles.example.yaml";
  return f;
}

TEST_CASE("the example plan as a table") {
  std::ostringstream out, err;
  REQUIRE(RunPlan(Example(), out, err) == 0);
  const std::string text = out.str();
  INFO(text << err.str());
  for (const char* expected : {"job demo:", "stage", "alpha", "fwd+bwd/mb", "activations",
                               "gradients", "tied-embedding", "predicted step:", "tokens/s",
                               "steady state:", "bottleneck:", "critical path:", "even split:"}) {
    CHECK(text.find(expected) != std::string::npos);
  }
}

TEST_CASE("the example plan as JSON matches the table's plan") {
  std::ostringstream table, out, err;
  REQUIRE(RunPlan(Example(), table, err) == 0);
  PlanFlags f = Example();
  f.output = "json";
  REQUIRE(RunPlan(f, out, err) == 0);
  const auto j = nlohmann::json::parse(out.str());
  CHECK(j["job"] == "demo");
  CHECK(j["method"] == "exact");
  REQUIRE(j["stages"].size() >= 1);
  int next = 0;
  for (const auto& s : j["stages"]) {
    CHECK(s["layer_begin"] == next);
    next = s["layer_end"];
    CHECK(table.str().find(s["site"].get<std::string>()) != std::string::npos);
  }
  CHECK(next == 6);
  CHECK(j["step_seconds"].get<double>() > 0);
  CHECK(j["tokens_per_second"].get<double>() ==
        Approx(j["tokens_per_step"].get<double>() / j["step_seconds"].get<double>()));
  CHECK(j["bottleneck"]["description"].get<std::string>().size() > 10);
  CHECK(j["even_split"]["stages"].size() == 3);
  CHECK(j["candidates"].size() == 3);
}

TEST_CASE("every profiled site as a candidate") {
  PlanFlags f = Example();
  f.sites = {"all"};
  f.output = "json";
  std::ostringstream out, err;
  REQUIRE(RunPlan(f, out, err) == 0);
  CHECK(nlohmann::json::parse(out.str())["candidates"].size() == 4);
}

// The replicas job of configs/ with the planner placing the replicas among the four
// profiled sites: `replicas` as given (a count or auto).
std::string ReplicasJob(const std::string& replicas) {
  std::ifstream in("configs/replicas-job.yaml");
  std::string yaml((std::istreambuf_iterator<char>(in)), {});
  REQUIRE(!yaml.empty());
  yaml.replace(yaml.find("placement: even"), 15, "placement: planned");
  yaml.replace(yaml.find("replicas: 2"), 11, "replicas: " + replicas);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/replicas-" + replicas + ".yaml";
  std::ofstream(path) << yaml;
  return path;
}

TEST_CASE("a job with replicas: the replicated plan beside the single pipeline's") {
  for (const std::string replicas : {"auto", "2"}) {
    INFO("replicas: " << replicas);
    PlanFlags f = Example();
    f.job = ReplicasJob(replicas);
    std::ostringstream table, out, err;
    REQUIRE(RunPlan(f, table, err) == 0);
    INFO(table.str() << err.str());
    for (const char* expected : {"predicted step:", "replicas:", "one split for all",
                                 "all replicas:", "the single pipeline's"}) {
      CHECK(table.str().find(expected) != std::string::npos);
    }
    CHECK((table.str().find("(auto)") != std::string::npos) == (replicas == "auto"));
    f.output = "json";
    REQUIRE(RunPlan(f, out, err) == 0);
    const auto j = nlohmann::json::parse(out.str())["replicas"];
    const size_t count = j["count"];
    if (replicas == "2") CHECK(count == 2);
    CHECK(count >= 1);
    REQUIRE(j["pipelines"].size() == count);
    // One split for all, no site twice.
    std::set<std::string> sites;
    for (const auto& p : j["pipelines"]) {
      REQUIRE(p["stages"].size() == j["pipelines"][0]["stages"].size());
      for (size_t i = 0; i < p["stages"].size(); ++i) {
        CHECK(p["stages"][i]["layer_begin"] == j["pipelines"][0]["stages"][i]["layer_begin"]);
        CHECK(p["stages"][i]["layer_end"] == j["pipelines"][0]["stages"][i]["layer_end"]);
        CHECK(sites.insert(p["stages"][i]["site"].get<std::string>()).second);
      }
    }
    CHECK(j["sync"]["codec"] == "q4");
    CHECK(j["sync"]["every"] == 10);
    CHECK(j["tokens_per_second"].get<double>() > 0);
    CHECK(j["vs_single_pipeline"].get<double>() > 0);
  }
  // Four single-stage replicas with sync.reduce auto: the planner prices both reductions and
  // keeps the faster (a site's flows sharing its uplink).
  {
    PlanFlags f = Example();
    std::string path = ReplicasJob("4");
    std::ifstream in(path);
    std::string yaml((std::istreambuf_iterator<char>(in)), {});
    yaml.replace(yaml.find("reduce: gather"), 14, "reduce: auto");
    std::ofstream(path) << yaml;
    f.job = path;
    f.output = "json";
    std::ostringstream out, err;
    REQUIRE(RunPlan(f, out, err) == 0);
    const auto sync = nlohmann::json::parse(out.str())["replicas"]["sync"];
    INFO(sync.dump());
    const double gather = sync["gather_seconds"], ring = sync["ring_seconds"];
    CHECK(gather > 0);
    CHECK(ring > 0);
    CHECK(sync["reduce"] == (ring < gather ? "ring" : "gather"));
    CHECK(sync["reduce_asked"] == "auto");
    CHECK(sync["seconds"].get<double>() == Approx(std::min(ring, gather)));
  }
  // More replicas than the candidates can form.
  PlanFlags f = Example();
  f.job = ReplicasJob("5");
  std::ostringstream out, err;
  CHECK(RunPlan(f, out, err) != 0);
  CHECK(err.str().find("no 5 replicas fit on the 4 candidate sites") != std::string::npos);
}

TEST_CASE("bad input: exit code 2 and a message naming the file") {
  std::ostringstream out, err;
  PlanFlags f = Example();
  f.profiles = "no/such/profiles.yaml";
  CHECK(RunPlan(f, out, err) == 2);
  CHECK(err.str().find("no/such/profiles.yaml") != std::string::npos);
  f = Example();
  f.sites = {"alpha", "omega"};
  err.str("");
  CHECK(RunPlan(f, out, err) == 2);
  CHECK(err.str().find("omega") != std::string::npos);
  f = Example();
  f.job = "configs/profiles.example.yaml";  // not a job
  err.str("");
  CHECK(RunPlan(f, out, err) == 2);
  CHECK(err.str().find("configs/profiles.example.yaml:") != std::string::npos);
}

}  // namespace
}  // namespace longhaul::cli
