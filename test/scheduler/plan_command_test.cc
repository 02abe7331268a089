// `longhaul plan` on the shipped example job and profiles: a readable table with the stages,
// links, predicted step and bottleneck; JSON with the same plan; errors for bad input.
#include "tools/cli/plan_command.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <sstream>

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
