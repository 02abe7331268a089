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
    // The table writes the JSON's range in the one notation, half-open.
    const std::string range = "[" + std::to_string(s["layer_begin"].get<int>()) + "," +
                              std::to_string(s["layer_end"].get<int>()) + ")";
    CHECK(table.str().find(range) != std::string::npos);
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

// The demo job with a llama model in place of its GPT-2: grouped-query attention, a head width
// other than C / NH, an MLP other than 4C, an untied head.
std::string LlamaJob() {
  std::ifstream in("configs/demo-job.yaml");
  std::string yaml((std::istreambuf_iterator<char>(in)), {});
  const std::string gpt2 = "model: {layers: 6, channels: 128, heads: 4, vocab: 256, context: 64}";
  REQUIRE(yaml.find(gpt2) != std::string::npos);
  yaml.replace(yaml.find(gpt2), gpt2.size(),
               "model: {family: llama, layers: 6, channels: 128, heads: 4, kv_heads: 2, "
               "head_dim: 48, intermediate: 320, vocab: 256, context: 64, tied: false}");
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/llama-job.yaml";
  std::ofstream(path) << yaml;
  return path;
}

TEST_CASE("the model's family and shape: GPT-2 and llama") {
  {
    PlanFlags f = Example();
    std::ostringstream table, out, err;
    REQUIRE(RunPlan(f, table, err) == 0);
    CHECK(table.str().find("job demo: GPT-2 L=6 C=128 NH=4") != std::string::npos);
    f.output = "json";
    REQUIRE(RunPlan(f, out, err) == 0);
    const auto model = nlohmann::json::parse(out.str())["model"];
    CHECK(model["family"] == "gpt2");
    CHECK(model["kv_heads"] == 4);
    CHECK(model["head_dim"] == 32);
    CHECK(model["intermediate"] == 512);
    CHECK(model["tied"] == true);
    CHECK(model["parameters"] == 6 * (12 * 128 * 128 + 13 * 128) + (256 + 64 + 2) * 128);
  }
  PlanFlags f = Example();
  f.job = LlamaJob();
  std::ostringstream table, out, err;
  REQUIRE(RunPlan(f, table, err) == 0);
  INFO(table.str() << err.str());
  for (const char* expected : {"job demo: llama L=6 C=128 NH=4 NKV=2 HD=48 I=320", "untied",
                               "params", "fwd+bwd/mb", "predicted step:", "bottleneck:"}) {
    CHECK(table.str().find(expected) != std::string::npos);
  }
  CHECK(table.str().find("tied-embedding") == std::string::npos);
  f.output = "json";
  REQUIRE(RunPlan(f, out, err) == 0);
  const auto j = nlohmann::json::parse(out.str());
  const auto& model = j["model"];
  CHECK(model["family"] == "llama");
  CHECK(model["layers"] == 6);
  CHECK(model["heads"] == 4);
  CHECK(model["kv_heads"] == 2);
  CHECK(model["head_dim"] == 48);
  CHECK(model["intermediate"] == 320);
  CHECK(model["tied"] == false);
  // Per layer: two RMSNorm weights, q|k|v (4 + 2 x 2) 48 x 128, o 128 x 192, gate|up 640 x 128,
  // down 128 x 320; then wte, the untied head (256 x 128 each) and the final norm.
  const int64_t per_layer = 2 * 128 + 384 * 128 + 128 * 192 + 640 * 128 + 128 * 320;
  const int64_t params = 6 * per_layer + 2 * 256 * 128 + 128;
  CHECK(model["parameters"] == params);
  int64_t held = 0;
  int next = 0;
  for (const auto& s : j["stages"]) {
    CHECK(s["layer_begin"] == next);
    next = s["layer_end"];
    held += s["parameters"].get<int64_t>();
    CHECK(s["forward_seconds"].get<double>() > 0);
    CHECK(s["memory_bytes"].get<int64_t>() > 0);
  }
  CHECK(next == 6);
  CHECK(held == params);  // untied: no stage holds a copy
  for (const auto& l : j["links"]) CHECK(l["kind"] != "tied-embedding");
  CHECK(j["step_seconds"].get<double>() > 0);
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
