// `longhaul plan` on the shipped example job and profiles: a readable table with the stages,
// links, predicted step and bottleneck; JSON with the same plan; a job with replicas (a count
// or auto) gets the replicated plan too; a placement: even job's plan is the even split it
// runs, the planner's choice second; --sites gives a job without `sites:` its sites; errors
// for bad input.
#include "tools/cli/plan_command.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

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
  for (const char* expected :
       {"job demo:", "stage", "alpha", "fwd+bwd/mb", "activations", "gradients", "tied-embedding",
        "predicted step:", "tokens/s", "steady state:", "bottleneck:", "critical path:",
        "placement:      even", "the planner would choose"}) {
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
  CHECK(j["placement"] == "even");  // the demo job runs its sites as listed
  CHECK(j["method"] == "even");
  CHECK(j["planner"]["method"] == "exact");
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

// A copy of configs/demo-job.yaml (in the test's temporary directory, as `name`) with each
// `from` replaced by its `to`.
std::string DemoJobWith(const std::string& name,
                        const std::vector<std::pair<std::string, std::string>>& edits) {
  std::ifstream in("configs/demo-job.yaml");
  std::string yaml((std::istreambuf_iterator<char>(in)), {});
  for (const auto& [from, to] : edits) {
    REQUIRE(yaml.find(from) != std::string::npos);
    yaml.replace(yaml.find(from), from.size(), to);
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/" + name;
  std::ofstream(path) << yaml;
  return path;
}

std::vector<std::string> StageList(const nlohmann::json& estimate) {
  std::vector<std::string> out;
  for (const auto& s : estimate["stages"]) {
    out.push_back(s["site"].get<std::string>() + "[" + std::to_string(s["layer_begin"].get<int>()) +
                  "," + std::to_string(s["layer_end"].get<int>()) + ")");
  }
  return out;
}

// The demo job says placement: even: it runs alpha, beta, gamma with two layers each, whatever
// the planner prefers (it would leave gamma out). That is the plan, printed first; the
// planner's choice follows, labelled. With placement: planned the planner's plan is the plan.
TEST_CASE("placement: even: the plan is the even split the job runs, the planner's second") {
  PlanFlags f = Example();
  f.output = "json";
  std::ostringstream table, out, err;
  REQUIRE(RunPlan(f, out, err) == 0);
  const auto j = nlohmann::json::parse(out.str());
  const std::vector<std::string> even = {"alpha[0,2)", "beta[2,4)", "gamma[4,6)"};
  CHECK(StageList(j) == even);
  CHECK(StageList(j["even_split"]) == even);
  CHECK(j["step_seconds"] == j["even_split"]["step_seconds"]);
  CHECK(j["unused_sites"].empty());
  const auto& planner = j["planner"];
  CHECK(StageList(planner) != even);
  CHECK(planner["step_seconds"].get<double>() < j["step_seconds"].get<double>());
  CHECK(planner["unused_sites"] == nlohmann::json::array({"gamma"}));

  f.output = "table";
  REQUIRE(RunPlan(f, table, err) == 0);
  const std::string text = table.str();
  INFO(text);
  const size_t planner_line = text.find("the planner would choose (placement: planned): ");
  REQUIRE(planner_line != std::string::npos);
  // The even split's stages and prediction come before the planner's choice.
  CHECK(text.find("0      alpha  [0,2)") < planner_line);
  CHECK(text.find("2      gamma  [4,6)") < planner_line);
  CHECK(text.find("predicted step:") < planner_line);
  std::string planned = planner["stages"][0]["site"].get<std::string>() + "[0,";
  CHECK(text.find(planned, planner_line) != std::string::npos);
  CHECK(text.find("leaving out gamma", planner_line) != std::string::npos);
  CHECK(text.find("even split:") == std::string::npos);

  // The same job with placement: planned: the planner's plan, the even split for comparison.
  f.job = DemoJobWith("planned-demo.yaml", {{"placement: even", "placement: planned"}});
  std::ostringstream planned_table, planned_json;
  REQUIRE(RunPlan(f, planned_table, err) == 0);
  CHECK(planned_table.str().find("the planner would choose") == std::string::npos);
  CHECK(planned_table.str().find("even split:     alpha[0,2) beta[2,4) gamma[4,6)") !=
        std::string::npos);
  f.output = "json";
  REQUIRE(RunPlan(f, planned_json, err) == 0);
  const auto p = nlohmann::json::parse(planned_json.str());
  CHECK(p["placement"] == "planned");
  CHECK(p["method"] == "exact");
  CHECK(StageList(p) == StageList(planner));
  CHECK(StageList(p["even_split"]) == even);
  CHECK(!p.contains("planner"));
}

// The replicas job of configs/ (placement: even, replicas: 2 over alpha, beta, gamma, delta):
// two replicas of two stages, as the coordinator places them, not one pipeline of four.
TEST_CASE("placement: even with replicas: each replica's even split, the planner's second") {
  PlanFlags f = Example();
  f.job = "configs/replicas-job.yaml";
  f.output = "json";
  std::ostringstream table, out, err;
  REQUIRE(RunPlan(f, out, err) == 0);
  const auto j = nlohmann::json::parse(out.str());
  CHECK(j["placement"] == "even");
  CHECK(StageList(j) == std::vector<std::string>{"alpha[0,2)", "beta[2,4)"});
  const auto& r = j["replicas"];
  REQUIRE(r["count"] == 2);
  CHECK(StageList(r["pipelines"][0]) == std::vector<std::string>{"alpha[0,2)", "beta[2,4)"});
  CHECK(StageList(r["pipelines"][1]) == std::vector<std::string>{"gamma[0,2)", "delta[2,4)"});
  CHECK(r["sync"]["codec"] == "q4");
  // every 10 with q4 and no outer step in the file: the default for that cadence.
  CHECK(r["sync"]["outer"]["lr"] == 1.0);
  CHECK(r["sync"]["outer"]["momentum"] == 0.5);
  CHECK(r["sync"]["outer"]["nesterov"] == true);
  CHECK(r["tokens_per_second"].get<double>() > 0);
  CHECK(j["planner"]["replicas"]["count"] == 2);
  f.output = "table";
  REQUIRE(RunPlan(f, table, err) == 0);
  INFO(table.str());
  CHECK(table.str().find("replica 0 of 2:") != std::string::npos);
  CHECK(table.str().find("gamma[0,2) delta[2,4)") != std::string::npos);
  CHECK(table.str().find("outer step:     Nesterov lr 1, momentum 0.5\n") != std::string::npos);
  CHECK(table.str().find("the planner would choose (placement: planned): 2 replica(s): ") !=
        std::string::npos);
}

// --sites replaces the job's sites: a job file without `sites:` plans over them (all: every
// profiled site, in the profiles' order), and a job's own list, over several lines, is
// replaced with the file's other lines where they were (an error still names its line).
TEST_CASE("--sites on a job file without sites, and in place of the job's") {
  PlanFlags f = Example();
  f.job = DemoJobWith("no-sites.yaml", {{"sites: [alpha, beta, gamma]\n", ""}});
  std::ostringstream out, err;
  CHECK(RunPlan(f, out, err) == 2);
  CHECK(err.str().find("sites: missing required key (or give the sites with --sites)") !=
        std::string::npos);
  f.sites = {"all"};
  f.output = "json";
  err.str("");
  REQUIRE(RunPlan(f, out, err) == 0);
  INFO(err.str());
  auto j = nlohmann::json::parse(out.str());
  CHECK(j["candidates"] == nlohmann::json::array({"alpha", "beta", "gamma", "delta"}));
  CHECK(StageList(j) ==
        std::vector<std::string>{"alpha[0,2)", "beta[2,4)", "gamma[4,5)", "delta[5,6)"});

  f.job = DemoJobWith("multi-line-sites.yaml",
                      {{"sites: [alpha, beta, gamma]", "sites:\n  - gamma  # first\n  - alpha"}});
  f.sites = {"delta", "beta"};
  std::ostringstream replaced;
  REQUIRE(RunPlan(f, replaced, err) == 0);
  j = nlohmann::json::parse(replaced.str());
  CHECK(j["candidates"] == nlohmann::json::array({"delta", "beta"}));
  CHECK(StageList(j) == std::vector<std::string>{"delta[0,3)", "beta[3,6)"});
  // A flow-style job file: re-emitted with the sites.
  {
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string path = std::string(tmp ? tmp : "/tmp") + "/flow-job.yaml";
    std::ofstream(path) << "{name: flow, model: {layers: 2, channels: 32, heads: 2, vocab: 256, "
                           "context: 32}, data: {train: builtin}, steps: 1, batch_size: 4, "
                           "placement: even}\n";
    f.job = path;
    f.sites = {"beta", "alpha"};
    std::ostringstream flow;
    REQUIRE(RunPlan(f, flow, err) == 0);
    CHECK(StageList(nlohmann::json::parse(flow.str())) ==
          std::vector<std::string>{"beta[0,1)", "alpha[1,2)"});
  }
  // An error after the replaced sites still names the file's own line.
  f.job = DemoJobWith("multi-line-sites-bad.yaml",
                      {{"sites: [alpha, beta, gamma]", "sites:\n  - gamma  # first\n  - alpha"},
                       {"placement: even", "placement: evn"}});
  std::ifstream in(f.job);
  std::string line;
  int number = 0, want = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.rfind("placement: evn", 0) == 0) want = number;
  }
  REQUIRE(want > 0);
  err.str("");
  CHECK(RunPlan(f, out, err) == 2);
  CHECK(err.str().find("multi-line-sites-bad.yaml:" + std::to_string(want) + ":12: placement") !=
        std::string::npos);
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
  // Gossip: its rounds priced and named, and without an outer step in the file plain
  // averaging, the default for gossip.
  {
    PlanFlags f = Example();
    std::string path = ReplicasJob("4");
    std::ifstream in(path);
    std::string yaml((std::istreambuf_iterator<char>(in)), {});
    yaml.replace(yaml.find("reduce: gather"), 14, "reduce: gossip");
    REQUIRE(yaml.find("\n  outer:") == std::string::npos);  // the file gives none
    std::ofstream(path) << yaml;
    f.job = path;
    f.output = "json";
    std::ostringstream out, err, table;
    REQUIRE(RunPlan(f, out, err) == 0);
    const auto sync = nlohmann::json::parse(out.str())["replicas"]["sync"];
    INFO(sync.dump());
    CHECK(sync["reduce"] == "gossip");
    CHECK(sync["gossip_rounds"].get<int>() >= 1);
    CHECK(sync["gossip_seconds"].get<double>() > 0);
    CHECK(sync["outer"]["lr"] == 1.0);
    CHECK(sync["outer"]["momentum"] == 0.0);
    f.output = "table";
    REQUIRE(RunPlan(f, table, err) == 0);
    INFO(table.str());
    CHECK(table.str().find(", gossiped: ") != std::string::npos);
    CHECK(table.str().find("outer step:     plain averaging (lr 1, no momentum)\n") !=
          std::string::npos);
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

// A site with several devices: each of its stages is sharded across them by the search
// (scheduler/shard_plan.h), in the table and the JSON; a stage too big for them says so.
TEST_CASE("a site's devices: each stage's sharding, its peak a device and its step") {
  std::ifstream in("configs/profiles.example.yaml");
  std::string yaml((std::istreambuf_iterator<char>(in)), {});
  const std::string alpha = "{name: alpha, flops: 60 GFLOP/s, memory: 2 GiB, optimizer: 1e9}";
  REQUIRE(yaml.find(alpha) != std::string::npos);
  auto with_alpha = [&](const std::string& name, const std::string& devices) {
    std::string text = yaml;
    text.replace(
        text.find(alpha), alpha.size(),
        "{name: alpha, flops: 60 GFLOP/s, memory: 2 GiB, optimizer: 1e9, " + devices + "}");
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string path = std::string(tmp ? tmp : "/tmp") + "/" + name;
    std::ofstream(path) << text;
    return path;
  };
  PlanFlags f = Example();
  f.profiles = with_alpha("four-devices.yaml",
                          "devices: 4, device_memory: 512 MiB, device_link: 10 GB/s, "
                          "device_latency: 20 us");
  std::ostringstream table, out, err;
  REQUIRE(RunPlan(f, table, err) == 0);
  INFO(table.str() << err.str());
  CHECK(table.str().find("sharding across each site's devices") != std::string::npos);
  CHECK(table.str().find("peak/device") != std::string::npos);
  f.output = "json";
  REQUIRE(RunPlan(f, out, err) == 0);
  const auto j = nlohmann::json::parse(out.str());
  REQUIRE(j["sharding"].size() == 1);  // alpha holds the even split's first stage
  const auto& s = j["sharding"][0];
  CHECK(s["site"] == "alpha");
  CHECK(s["stage"] == 0);
  CHECK(s["devices"] == 4);
  REQUIRE(s.contains("summary"));
  CHECK(s["peak_bytes"].get<int64_t>() <= (int64_t(512) << 20));
  CHECK(s["groups"].size() >= 2);
  CHECK(s["step_seconds"].get<double>() > 0);
  CHECK(table.str().find(s["summary"].get<std::string>()) != std::string::npos);

  // Devices too small for the stage however it is sharded: said, not hidden.
  f.profiles =
      with_alpha("tiny-devices.yaml", "devices: 2, device_memory: 64 KiB, device_link: 10 GB/s");
  std::ostringstream small;
  f.output = "table";
  REQUIRE(RunPlan(f, small, err) == 0);
  CHECK(
      small.str().find("does not fit:   stage 0 (alpha): stage of layers [0, 2) needs at least") !=
      std::string::npos);

  // Several devices and no link between them: refused, naming the site.
  f.profiles = with_alpha("no-link.yaml", "devices: 2");
  err.str("");
  CHECK(RunPlan(f, out, err) == 2);
  CHECK(err.str().find("device_link") != std::string::npos);
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
