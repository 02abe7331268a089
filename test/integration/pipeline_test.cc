// Real daemons in one process on loopback run a 3-site pipeline job end to end: with
// compression off its losses equal train-local's bit for bit; the job exports an llm.c
// checkpoint; with adaptive compression over shaped in-process links each link's codec is
// the one its rate calls for, and moves when the rate falls; bad jobs are refused with clear
// errors while the daemons keep serving.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "compression/device_encoder.h"
#include "daemon/daemon.h"
#include "daemon/transport/loopback.h"
#include "model/checkpoint.h"
#include "model/hf_checkpoint.h"
#include "model/init_from.h"
#include "model/job.h"
#include "model/safetensors.h"
#include "model/trainer.h"
#include "test/daemon/job_test_util.h"
#include "test/daemon/test_util.h"

namespace longhaul {
namespace {

using namespace std::chrono_literals;
using daemon::Daemon;

std::string JobYaml(const std::string& extra, int steps = 6) {
  return "name: tiny\n"
         "model: {layers: 3, channels: 32, heads: 2, vocab: 256, context: 32}\n"
         "data: {train: builtin}\n"
         "steps: " +
         std::to_string(steps) +
         "\n"
         "batch_size: 8\n"
         "microbatch_size: 2\n"
         "seq_len: 32\n"
         "optimizer: {lr: 3e-3, warmup_steps: 2, weight_decay: 0.1, grad_clip: 1.0}\n"
         "seed: 7\n"
         "checkpoint: {every: 2}\n"
         "backend: cpu\n"
         "threads: 1\n"
         "sites: [alpha, beta, gamma]\n"
         "placement: even\n"
         "replan: off\n" +
         extra;
}

struct Cluster {
  std::vector<std::unique_ptr<Daemon>> daemons;
  Daemon& at(int i) { return *daemons[i]; }
};

Cluster StartCluster(int64_t gamma_memory_limit = 0, std::vector<std::string> beta_devices = {},
                     bool host_device_codecs = false) {
  const std::vector<std::string> names = {"alpha", "beta", "gamma"};
  std::vector<int> ports;
  for (size_t i = 0; i < names.size(); ++i) ports.push_back(testing::FreePort());
  Cluster c;
  for (size_t i = 0; i < names.size(); ++i) {
    testing::SiteSpec spec{names[i], ports[i], {}};
    for (size_t j = 0; j < names.size(); ++j) {
      if (j != i) spec.peers.push_back({names[j], ports[j]});
    }
    auto config = testing::MakeSiteConfig(spec);
    config.links.probe_interval_seconds = 5;
    if (names[i] == "gamma") config.memory_limit_bytes = gamma_memory_limit;
    if (names[i] == "beta" && !beta_devices.empty()) config.devices = beta_devices;
    daemon::DaemonOptions options;
    options.token = "token";
    if (host_device_codecs) options.env.device_codecs = compression::HostStandInDeviceCodecs;
    auto d = Daemon::Start(config, options);
    INFO(d.status().ToString());
    REQUIRE(d.ok());
    c.daemons.push_back(std::move(*d));
  }
  return c;
}

v1::JobStatus WaitDone(Daemon& d, const std::string& id, std::chrono::seconds timeout) {
  return testing::WaitJobEnd(d, id, timeout);
}

// Submits `yaml` to `d`, waits for the job to end, and requires that it completed.
v1::JobStatus RunToCompletion(Daemon& d, const std::string& yaml) {
  v1::SubmitJobRequest req;
  req.set_job_yaml(yaml);
  auto r = d.jobs().Submit(req);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  const v1::JobStatus s = WaitDone(d, r->job_id(), 120s);
  INFO("state " << v1::JobState_Name(s.state()) << ": " << s.detail());
  REQUIRE(s.state() == v1::JOB_STATE_COMPLETED);
  return s;
}

std::vector<float> TrainLocalLosses(const std::string& yaml) {
  auto losses = testing::TrainLocalLosses(yaml);
  INFO(losses.status().ToString());
  REQUIRE(losses.ok());
  return *losses;
}

TEST_CASE("a 3-site pipeline with compression off matches train-local bit for bit") {
  Cluster c = StartCluster();
  const std::string yaml = JobYaml("compression: {mode: off}\n");
  v1::SubmitJobRequest req;
  req.set_job_yaml(yaml);
  req.set_source("job.yaml");
  auto submitted = c.at(0).jobs().Submit(req);
  INFO(submitted.status().ToString());
  REQUIRE(submitted.ok());
  const v1::JobStatus s = WaitDone(c.at(0), submitted->job_id(), 120s);
  INFO("state " << v1::JobState_Name(s.state()) << ": " << s.detail());
  REQUIRE(s.state() == v1::JOB_STATE_COMPLETED);
  REQUIRE(s.stages_size() == 3);
  CHECK(s.stages(0).layer_end() == 1);
  CHECK(s.stages(2).site() == "gamma");
  CHECK(s.committed_step() == 6);

  const std::vector<float> local = TrainLocalLosses(yaml);
  REQUIRE(s.losses_size() == static_cast<int>(local.size()));
  for (size_t i = 0; i < local.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(s.losses(i) == local[i]);  // bit-identical, not approximately
  }
  CHECK(local.back() < local.front());

  // Export gathers the fragments into one llm.c checkpoint.
  auto ckpt = testing::ExportedCheckpoint(c.at(0), submitted->job_id(), "export");
  REQUIRE(ckpt.ok());
  CHECK(ckpt->config.num_layers == 3);

  // beta ran stage 1 of the job, coordinated by alpha: it lists the stage naming alpha (its
  // jobs, its /status), and a status or cancel there names alpha rather than saying no such
  // job. alpha lists the job itself, no hosted stage.
  const std::string id = submitted->job_id();
  CHECK(c.at(0).jobs().ListJobs().hosted_stages().empty());
  const v1::ListJobsResponse beta = c.at(1).jobs().ListJobs();
  CHECK(beta.jobs().empty());
  REQUIRE(beta.hosted_stages_size() == 1);
  const v1::HostedStage& h = beta.hosted_stages(0);
  CHECK(h.job_id() == id);
  CHECK(h.name() == "tiny");
  CHECK(h.coordinator() == "alpha");
  CHECK(h.stage() == 1);
  CHECK(h.stages() == 3);
  CHECK(h.layer_begin() == 1);
  CHECK(h.layer_end() == 2);
  CHECK(h.state() == "finished");
  CHECK(h.step() == 6);
  CHECK(h.total_steps() == 6);
  auto page = testing::HttpGet(c.at(1).status_port(), "/status");
  REQUIRE(page.status == 200);
  CHECK_THAT(page.body, Catch::Contains("\"hosted_stages\": [\n    {"));
  CHECK_THAT(page.body, Catch::Contains("\"coordinator\": \"alpha\""));
  CHECK_THAT(page.body, Catch::Contains("\"job\": \"" + id + "\""));
  const std::string named = "job " + id + " is coordinated by site 'alpha', not by site 'beta'";
  auto elsewhere = c.at(1).jobs().GetJob(id, 1);
  REQUIRE_FALSE(elsewhere.ok());
  CHECK(elsewhere.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(elsewhere.status().message()), Catch::Contains(named));
  CHECK_THAT(std::string(elsewhere.status().message()), Catch::Contains("its stage 1"));
  CHECK_THAT(std::string(elsewhere.status().message()), Catch::Contains("ask its daemon"));
  auto cancel = c.at(2).jobs().Cancel(id);
  CHECK(cancel.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(cancel.status().message()),
             Catch::Contains("is coordinated by site 'alpha', not by site 'gamma'"));
  // A job no site here knows: the plain answer.
  auto unknown = c.at(1).jobs().GetJob("ghost-000000", 1);
  CHECK(unknown.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(unknown.status().message()),
             Catch::Contains("no job 'ghost-000000' is coordinated by site 'beta'"));
}

// More microbatches in flight than plain 1F1B (extra_in_flight, scheduler/in_flight.h): the
// stages run their forwards earlier, not differently, so the losses are train-local's bit for
// bit; and the default (auto, the coordinator choosing from the measured links) as well.
TEST_CASE("a pipeline keeping more microbatches in flight trains the same, bit for bit") {
  Cluster c = StartCluster();
  for (const std::string extra : {"2", "4", "auto"}) {
    INFO("extra_in_flight: " << extra);
    const std::string yaml = JobYaml("compression: {mode: off}\nextra_in_flight: " + extra + "\n");
    const v1::JobStatus s = RunToCompletion(c.at(0), yaml);
    const std::vector<float> local = TrainLocalLosses(yaml);
    REQUIRE(s.losses_size() == static_cast<int>(local.size()));
    for (size_t i = 0; i < local.size(); ++i) {
      INFO("step " << i + 1);
      CHECK(s.losses(i) == local[i]);
    }
  }
}

// The subspace-cut variant (model/subspace.h): the cuts carry K = 8 coordinates per position
// instead of C = 32 floats, the later stages get each sequence's T + 1 tokens to rebuild the
// stream from, the head is untied (no tied exchange), and the last layer is unconstrained
// (its stage rebuilds the stream once). Still bit for bit what train-local computes.
TEST_CASE("a 3-site pipeline of the subspace-cut variant matches train-local bit for bit") {
  Cluster c = StartCluster();
  std::string yaml = JobYaml("compression: {mode: off}\n");
  yaml.replace(yaml.find("context: 32}"), 12,
               "context: 32, residual_subspace: 8, unconstrained_layers: 1}");
  v1::SubmitJobRequest req;
  req.set_job_yaml(yaml);
  auto submitted = c.at(0).jobs().Submit(req);
  INFO(submitted.status().ToString());
  REQUIRE(submitted.ok());
  const std::string id = submitted->job_id();
  // A frame of the standard model's width is refused at the door while the job runs.
  REQUIRE(testing::WaitFor(
      [&] {
        auto s = c.at(0).jobs().GetJob(id, 1);
        return s.ok() && s->step() >= 1;
      },
      60s));
  v1::TensorFrame frame;
  frame.set_job_id(id);
  frame.set_from_site("alpha");
  frame.set_to_stage(1);
  frame.set_kind(v1::TENSOR_KIND_ACTIVATION);
  std::vector<uint8_t> payload = testing::ZeroFrame({2, 32, 32});
  frame.set_encoded_size(payload.size());
  auto d = c.at(1).jobs().Deliver(frame, payload, "alpha");
  CHECK(d.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(d.message()), Catch::Contains("expects [2,32,8]"));
  frame.set_kind(v1::TENSOR_KIND_TARGETS);
  payload = testing::ZeroFrame({2, 32});
  frame.set_encoded_size(payload.size());
  d = c.at(1).jobs().Deliver(frame, payload, "alpha");
  CHECK(d.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(d.message()), Catch::Contains("expects [2,33]"));
  // No stage has a tied-embedding partner: gamma takes no weight gradient from alpha.
  frame.set_kind(v1::TENSOR_KIND_WEIGHT_GRAD);
  frame.set_to_stage(2);
  payload = testing::ZeroFrame({256, 32});
  frame.set_encoded_size(payload.size());
  d = c.at(2).jobs().Deliver(frame, payload, "alpha");
  CHECK(d.code() == absl::StatusCode::kPermissionDenied);

  const v1::JobStatus s = WaitDone(c.at(0), id, 120s);
  INFO("state " << v1::JobState_Name(s.state()) << ": " << s.detail());
  REQUIRE(s.state() == v1::JOB_STATE_COMPLETED);
  const std::vector<float> local = TrainLocalLosses(yaml);
  REQUIRE(s.losses_size() == static_cast<int>(local.size()));
  for (size_t i = 0; i < local.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(s.losses(i) == local[i]);
  }
  CHECK(local.back() < local.front());
  auto ckpt = testing::ExportedCheckpoint(c.at(0), id, "export_subspace");
  INFO(ckpt.status().ToString());
  REQUIRE(ckpt.ok());
  CHECK(ckpt->config.residual_subspace == 8);
  CHECK(ckpt->config.unconstrained_layers == 1);
}

// A llama (grouped-query attention, rotary embeddings with llama3 scaling, SwiGLU, RMSNorm;
// a vocabulary above 16 bits) across three daemons, its head tied (the tied exchange between
// the first and last stage) and untied: train-local's losses bit for bit, and the exported
// checkpoint is the llama's.
TEST_CASE("a 3-site pipeline of a llama matches train-local bit for bit") {
  Cluster c = StartCluster();
  for (const std::string tied : {"true", "false"}) {
    INFO("tied: " << tied);
    std::string yaml = JobYaml("compression: {mode: off}\n");
    yaml.replace(yaml.find("model: {"),
                 yaml.find('\n', yaml.find("model: {")) - yaml.find("model: {"),
                 "model: {family: llama, layers: 3, channels: 32, heads: 4, kv_heads: 2, "
                 "intermediate: 48, vocab: 70000, context: 32, rope_theta: 500000, "
                 "rope_scaling: {factor: 8, original_context: 16}, tied: " +
                     tied + "}");
    const v1::JobStatus s = RunToCompletion(c.at(0), yaml);
    REQUIRE(s.stages_size() == 3);
    const std::vector<float> local = TrainLocalLosses(yaml);
    REQUIRE(s.losses_size() == static_cast<int>(local.size()));
    for (size_t i = 0; i < local.size(); ++i) {
      INFO("step " << i + 1);
      CHECK(s.losses(i) == local[i]);
    }
    CHECK(local.back() < local.front());
    auto ckpt = testing::ExportedCheckpoint(c.at(0), s.job_id(), "export_llama_" + tied);
    INFO(ckpt.status().ToString());
    REQUIRE(ckpt.ok());
    CHECK(ckpt->config.family == model::Family::kLlama);
    CHECK(ckpt->config.num_kv_heads == 2);
    CHECK(ckpt->config.tied_embeddings == (tied == "true"));
    // The Hugging Face export: one shard per stage (each written from that stage's fragment
    // alone), the index naming every tensor once, config.json; it reads back as the same
    // model, bit for bit.
    auto hf = testing::ExportedHfDir(c.at(0), s.job_id(), "export_hf_" + tied);
    INFO(hf.status().ToString());
    REQUIRE(hf.ok());
    for (const char* f :
         {"config.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors",
          "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}) {
      INFO(f);
      CHECK(std::filesystem::exists(*hf + "/" + f));
    }
    auto index = model::ReadSafetensorsIndex(*hf + "/model.safetensors.index.json");
    REQUIRE(index.ok());
    const size_t per_layer = 9;  // 2 norms, q, k, v, o, gate, up, down
    CHECK(index->size() == 3 * per_layer + 2 + (tied == "true" ? 0 : 1));
    CHECK(index->at("model.embed_tokens.weight") == "model-00001-of-00003.safetensors");
    CHECK(index->at("model.norm.weight") == "model-00003-of-00003.safetensors");
    auto config = model::ReadHfConfig(*hf);
    INFO(config.status().ToString());
    REQUIRE(config.ok());
    CHECK(*config == ckpt->config);
    const model::FragmentLayout whole(*config, 0, config->num_layers);
    std::vector<float> params(whole.total());
    auto read = model::ReadInitFragment(*hf, whole, params.data());
    INFO(read.ToString());
    REQUIRE(read.ok());
    CHECK(params == ckpt->params);
  }
}

TEST_CASE("a 3-site pipeline with fixed q8 compression completes and learns") {
  Cluster c = StartCluster();
  const std::string yaml = JobYaml("compression: {mode: fixed, codec: q8}\n");
  const v1::JobStatus s = RunToCompletion(c.at(1), yaml);
  CHECK(s.losses(s.losses_size() - 1) < s.losses(0));
  // Within the convergence study's bound for the ladder's codecs: 2% of the exact loss.
  const std::vector<float> exact = TrainLocalLosses(yaml);
  CHECK(std::abs(s.losses(s.losses_size() - 1) - exact.back()) < 0.02 * exact.back());
  bool compressed = false;
  for (const auto& l : s.links()) {
    if (l.codec() == "q8" && l.wire_bytes() * 3 < l.raw_bytes()) compressed = true;
  }
  CHECK(compressed);

  // The stage on beta reports what it sent on its links, and /metrics carries the job.
  bool beta_reports = false;
  const v1::ListLinksResponse beta_links = c.at(1).Links();
  for (const auto& link : beta_links.links()) {
    for (const auto& u : link.jobs()) {
      if (u.job_id() == s.job_id() && u.codec() == "q8") beta_reports = true;
    }
  }
  CHECK(beta_reports);
  auto metrics = testing::HttpGet(c.at(1).status_port(), "/metrics");
  REQUIRE(metrics.status == 200);
  CHECK_THAT(metrics.body, Catch::Contains("longhaul_job_loss{job=\"" + s.job_id()));
  CHECK_THAT(metrics.body, Catch::Contains("longhaul_link_codec_info{job=\"" + s.job_id() +
                                           "\",from=\"beta\",to=\"gamma\","
                                           "codec=\"q8\"} 1"));
  CHECK_THAT(metrics.body, Catch::Contains("longhaul_stage_network_wait_seconds{"));
  const std::string file = testing::TempDir("metrics") + "/m.txt";
  FILE* f = fopen(file.c_str(), "w");
  fwrite(metrics.body.data(), 1, metrics.body.size(), f);
  fclose(f);
  std::string out;
  INFO(out);
  CHECK(testing::RunCommand("promtool check metrics < " + file, &out) == 0);
  auto status = testing::HttpGet(c.at(1).status_port(), "/status");
  CHECK_THAT(status.body, Catch::Contains("\"compression_ratio\""));
  CHECK_THAT(status.body, Catch::Contains("\"state\": \"completed\""));
}

// Three sites over the in-process loopback transport, each directed pair's rate set before any
// site starts (what its probes report, and with `shaped` what its sends take: loopback.h).
struct LoopbackCluster {
  std::unique_ptr<daemon::transport::LoopbackNetwork> net =
      std::make_unique<daemon::transport::LoopbackNetwork>();
  std::vector<std::unique_ptr<Daemon>> daemons;

  explicit LoopbackCluster(const std::function<void(daemon::transport::LoopbackNetwork&)>& network,
                           double probe_interval_seconds) {
    network(*net);
    const std::vector<std::string> names = {"alpha", "beta", "gamma"};
    std::vector<int> ports;
    for (size_t i = 0; i < names.size(); ++i) ports.push_back(testing::FreePort());
    for (size_t i = 0; i < names.size(); ++i) {
      testing::SiteSpec spec{names[i], ports[i], {}};
      for (size_t j = 0; j < names.size(); ++j) {
        if (j != i) spec.peers.push_back({names[j], ports[j]});
      }
      auto config = testing::MakeSiteConfig(spec);
      config.links.probe_interval_seconds = probe_interval_seconds;
      daemon::DaemonOptions options;
      options.token = "token";
      options.loopback = net.get();
      auto d = Daemon::Start(config, options);
      INFO(d.status().ToString());
      REQUIRE(d.ok());
      daemons.push_back(std::move(*d));
    }
  }
  ~LoopbackCluster() {
    for (auto& d : daemons) d.reset();  // before the network they are attached to
  }
  Daemon& at(size_t i) { return *daemons[i]; }
};

// The job's latest choice on each directed link (the status's link usage), by "from>to".
std::map<std::string, v1::LinkUsage> LinkCodecs(const v1::JobStatus& s) {
  std::map<std::string, v1::LinkUsage> out;
  for (const auto& l : s.links()) out[l.from_site() + ">" + l.to_site()] = l;
  return out;
}

bool Exact(const std::string& codec) { return codec == "fp32" || codec == "bf16"; }
bool Quantized(const std::string& codec) { return codec == "q8" || codec == "q4"; }

// Adaptive compression (the default mode), the controller deciding each link's codec from the
// link monitor's estimate, on a pipeline alpha -> beta -> gamma whose link beta <-> gamma is
// slow one way and fast the other.
//
// Why the expectations hold with a wide margin, whatever the machine's load: an activation or
// its gradient is B x T x C = 2 x 32 x 32 floats, 8 KiB raw.
// - Fast links (kFast = 1e11 B/s): bf16's 4 KiB take 41 ns on the wire, far below the codecs'
//   own predicted time (ControllerOptions: 2 us to cast 8 KiB, 2.7 us to quantize them), so
//   fp32 or bf16 is both the least lossy codec that fits any budget and the fastest one
//   (chosen when nothing fits): never q8 or q4, whatever the budget.
// - The slow link (kSlow = 10 kB/s, its sends shaped to it): bf16's 4 KiB take 0.41 s at that
//   estimate (1/4 of it if the estimate read 4x high, as a probe counting the transfers in
//   flight beside it may), so bf16 and fp32 never fit and the controller picks q8 or q4. Its
//   budget is 50 ms before the stage has timed a backward, then 2 x a microbatch's backward,
//   then the coordinator's: at most the step played with the link instant divided by the
//   link's 4 transfers a step (they queue on it), a few ms here and tens of ms under a
//   sanitizer on a loaded machine, not 100.
// Then the rates swap: alpha -> beta falls to kSlow and its codec moves to q8 or q4 (a
// downgrade is never delayed, controller.h), while beta -> gamma, now fast, keeps the link
// off the budgets (an upgrade waits for a hysteresis window: not asserted). Its sends shaped,
// the test takes a few seconds of slow transfers (q4 with its targets: ~0.15 s a microbatch).
TEST_CASE("adaptive compression: each link's codec follows its rate, and a fall moves it") {
  constexpr double kFast = 1e11, kSlow = 1e4;
  const std::vector<std::string> names = {"alpha", "beta", "gamma"};
  LoopbackCluster c(
      [&](daemon::transport::LoopbackNetwork& net) {
        for (const auto& a : names) {
          for (const auto& b : names) {
            if (a != b) net.SetRate(a, b, kFast, /*shape_sends=*/true);
          }
        }
        net.SetRate("beta", "gamma", kSlow, /*shape_sends=*/true);
      },
      /*probe_interval_seconds=*/1);
  // Every site has measured its links at the rates set (the first probe runs when a link
  // comes up), so that no codec is chosen without an estimate.
  auto measured = [&](const std::string& slow_from, const std::string& slow_to) {
    for (size_t i = 0; i < names.size(); ++i) {
      const v1::ListLinksResponse links = c.at(i).Links();
      for (const auto& l : links.links()) {
        const double bw = l.outbound().bandwidth_bytes_per_second();
        const bool slow = names[i] == slow_from && l.peer() == slow_to;
        if (slow ? !(bw > 0 && bw < 10 * kSlow) : !(bw > kFast / 10)) return false;
      }
    }
    return true;
  };
  REQUIRE(testing::WaitFor([&] { return measured("beta", "gamma"); }, 60s));

  v1::SubmitJobRequest req;
  req.set_job_yaml(JobYaml("compression: {mode: adaptive}\n", /*steps=*/100000));
  auto submitted = c.at(0).jobs().Submit(req);
  INFO(submitted.status().ToString());
  REQUIRE(submitted.ok());
  const std::string id = submitted->job_id();
  auto status = [&] {
    auto s = c.at(0).jobs().GetJob(id, 1);
    REQUIRE(s.ok());
    return *s;
  };
  auto describe = [](const std::map<std::string, v1::LinkUsage>& links) {
    std::string out;
    for (const auto& [name, l] : links) {
      out += name + ": " + l.codec() + " (" + l.reason() + ")\n";
    }
    return out;
  };

  // Settled: a few steps in, with the coordinator's budgets.
  REQUIRE(testing::WaitFor([&] { return status().step() >= 3; }, 120s));
  std::map<std::string, v1::LinkUsage> links = LinkCodecs(status());
  INFO("the links a few steps in:\n" << describe(links));
  for (const char* name : {"alpha>beta", "beta>alpha", "beta>gamma", "gamma>beta"}) {
    INFO(name);
    REQUIRE(links.count(name));
    // The controller's choice, against the budget (not a fixed or exact codec).
    CHECK_THAT(links[name].reason(), Catch::Contains("vs budget"));
  }
  CHECK(Exact(links["alpha>beta"].codec()));
  CHECK(Exact(links["beta>alpha"].codec()));
  CHECK(Exact(links["gamma>beta"].codec()));
  CHECK(Quantized(links["beta>gamma"].codec()));

  // alpha -> beta falls (and beta -> gamma recovers): its codec moves down the ladder.
  c.net->SetRate("alpha", "beta", kSlow, /*shape_sends=*/true);
  c.net->SetRate("beta", "gamma", kFast, /*shape_sends=*/true);
  REQUIRE(testing::WaitFor(
      [&] {
        links = LinkCodecs(status());
        return Quantized(links["alpha>beta"].codec());
      },
      120s));
  INFO("after alpha -> beta fell:\n" << describe(links));
  CHECK(Exact(links["beta>alpha"].codec()));
  CHECK(Exact(links["gamma>beta"].codec()));
  const v1::JobStatus running = status();
  CHECK(running.state() == v1::JOB_STATE_RUNNING);
  CHECK(std::isfinite(running.loss()));
  auto cancelled = c.at(0).jobs().Cancel(id);
  REQUIRE(cancelled.ok());
  CHECK(cancelled->state() == v1::JOB_STATE_CANCELLED);
}

// A GPU stage decodes what it receives into its fragment's input buffer, and leaves each send
// pending while it computes the next pass. With the device codec interfaces on the host (the
// test seam), CPU stages take those paths; the frames are the host codec's, so the losses and the
// bytes on the wire must be exactly those of plain CPU stages.
TEST_CASE("stages through the device codec interfaces train exactly as with the host codec") {
  const std::string yaml = JobYaml("compression: {mode: fixed, codec: q8}\n");
  auto run = [&](bool host_device_codecs) {
    Cluster c = StartCluster(0, {}, host_device_codecs);
    return RunToCompletion(c.at(0), yaml);
  };
  const v1::JobStatus plain = run(false), seam = run(true);
  REQUIRE(seam.losses_size() == plain.losses_size());
  for (int i = 0; i < plain.losses_size(); ++i) {
    INFO("step " << i + 1);
    CHECK(seam.losses(i) == plain.losses(i));
  }
  auto wire = [](const v1::JobStatus& s) {
    std::map<std::string, uint64_t> bytes;
    for (const auto& l : s.links()) bytes[l.from_site() + ">" + l.to_site()] += l.wire_bytes();
    return bytes;
  };
  CHECK(wire(seam) == wire(plain));
  CHECK(wire(plain).size() >= 2);
  // The seam's stages encoded their activations and gradients "on the device"; plain ones not.
  auto device_tensors = [](const v1::JobStatus& s) {
    uint64_t n = 0;
    for (const auto& l : s.links()) n += l.device_tensors();
    return n;
  };
  CHECK(device_tensors(seam) > 0);
  CHECK(device_tensors(plain) == 0);
}

TEST_CASE("bad jobs are refused with clear errors and the daemons keep serving") {
  Cluster c = StartCluster();
  v1::SubmitJobRequest req;
  req.set_source("bad.yaml");
  req.set_job_yaml(JobYaml("").replace(JobYaml("").find("gamma"), 5, "omega"));
  auto r = c.at(0).jobs().Submit(req);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("unknown site 'omega'"));

  req.set_job_yaml("name: x\nsteps: [\n");
  r = c.at(0).jobs().Submit(req);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::StartsWith("bad.yaml:"));

  req.set_job_yaml(JobYaml("compression: {mode: fixed, codec: q3}\n"));
  r = c.at(0).jobs().Submit(req);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("compression.codec"));

  // A frame for a job nobody runs: not taken, and UNAVAILABLE (a sender retries: the stage may
  // not be assigned yet; the coordinator's pings stop a sender whose peer lost it).
  v1::TensorFrame frame;
  frame.set_job_id("ghost-000000");
  frame.set_kind(v1::TENSOR_KIND_ACTIVATION);
  auto d = c.at(1).jobs().Deliver(frame, {}, "alpha");
  CHECK(d.code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(d.message()), Catch::Contains("no job 'ghost-000000'"));

  // A hostile Hugging Face checkpoint (init_from, relative: each site's data_dir): its
  // config.json is valid, its safetensors header claims more bytes than the file holds. The
  // stage sites refuse it at the first assignment, naming the file; the submit fails.
  {
    model::ModelConfig llama = model::MakeConfig(3, 32, 4, 256, 32);
    llama.family = model::Family::kLlama;
    llama.num_kv_heads = 2;
    llama.head_dim = 8;
    llama.intermediate_size = 48;
    std::vector<float> params(model::NumParameters(llama), 0.01f);
    for (int i = 0; i < 3; ++i) {
      const std::string dir = c.at(i).config().data_dir + "/hostile-hf";
      REQUIRE(model::WriteHfCheckpoint(dir, llama, params.data()).ok());
      std::string bytes(8, '\0');
      bytes[7] = 0x7f;  // a header length near 2^63
      bytes += "{}";
      std::ofstream(dir + "/model.safetensors", std::ios::binary | std::ios::trunc) << bytes;
    }
    std::string yaml = JobYaml("compression: {mode: off}\n", 2);
    yaml.replace(yaml.find("model: {"),
                 yaml.find('\n', yaml.find("model: {")) - yaml.find("model: {"),
                 "init_from: " + c.at(0).config().data_dir + "/hostile-hf");
    // One absolute path for every site (the rule for submitted jobs), in alpha's data_roots:
    // a one-stage job on alpha, which reads the file at its first assignment.
    yaml.replace(yaml.find("sites: [alpha, beta, gamma]"), 27, "sites: [alpha]");
    req.set_job_yaml(yaml);
    r = c.at(0).jobs().Submit(req);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("model.safetensors"));
  }

  // Still serving: a good job runs.
  req.set_job_yaml(JobYaml("compression: {mode: off}\n", 2));
  r = c.at(0).jobs().Submit(req);
  REQUIRE(r.ok());
  CHECK(WaitDone(c.at(0), r->job_id(), 60s).state() == v1::JOB_STATE_COMPLETED);
}

TEST_CASE("a job too large for a site's memory is refused, naming the site") {
  Cluster c = StartCluster(/*gamma_memory_limit=*/64 << 10);
  v1::SubmitJobRequest req;
  req.set_job_yaml(JobYaml("compression: {mode: off}\n"));
  auto r = c.at(0).jobs().Submit(req);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("job too large for site 'gamma'"));
  // The other sites stopped their stages; a job that fits still runs.
  req.set_job_yaml(JobYaml("compression: {mode: off}\n")
                       .replace(JobYaml("").find("[alpha, beta, gamma]"), 20, "[alpha, beta]"));
  r = c.at(0).jobs().Submit(req);
  REQUIRE(r.ok());
  CHECK(WaitDone(c.at(0), r->job_id(), 60s).state() == v1::JOB_STATE_COMPLETED);
}

TEST_CASE("frames with the wrong shape, and a cancelled job's late frames, are refused") {
  Cluster c = StartCluster();
  v1::SubmitJobRequest req;
  req.set_job_yaml(JobYaml("compression: {mode: off}\n", /*steps=*/100000));
  auto r = c.at(0).jobs().Submit(req);
  REQUIRE(r.ok());
  REQUIRE(testing::WaitFor(
      [&] {
        auto s = c.at(0).jobs().GetJob(r->job_id(), 1);
        return s.ok() && s->step() >= 2;
      },
      60s));
  v1::TensorFrame frame;
  frame.set_job_id(r->job_id());
  frame.set_from_site("alpha");
  frame.set_to_stage(1);
  frame.set_kind(v1::TENSOR_KIND_ACTIVATION);
  // The shape is the frame's own (its header, at the start of the payload): (B, T, C) is
  // (2, 32, 32).
  std::vector<uint8_t> payload = testing::ZeroFrame({2, 32, 31});
  frame.set_encoded_size(payload.size());
  auto d = c.at(1).jobs().Deliver(frame, payload, "alpha");
  CHECK(d.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(d.message()), Catch::Contains("has shape [2,32,31]"));
  CHECK_THAT(std::string(d.message()), Catch::Contains("expects [2,32,32]"));
  // The right shape, but the transport announced another size than the frame's.
  payload = testing::ZeroFrame({2, 32, 32});
  d = c.at(1).jobs().Deliver(frame, payload, "alpha");
  CHECK(d.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(d.message()), Catch::Contains("announced as"));
  // A flipped byte in a frame the stage would take (for the next attempt, which the inbox
  // accepts ahead of time): data loss, caught by the frame's checksum before it is filed.
  auto now = c.at(0).jobs().GetJob(r->job_id(), 1);
  REQUIRE(now.ok());
  frame.set_attempt(now->attempt() + 1);
  frame.set_encoded_size(payload.size());
  payload[payload.size() / 2] ^= 0x10;
  d = c.at(1).jobs().Deliver(frame, payload, "alpha");
  CHECK(d.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(d.message()), Catch::Contains("checksum mismatch"));
  // Bytes that are no frame header at all: data loss too (the sender may retry), refused
  // on the first chunk.
  const std::vector<uint8_t> junk(64, 'x');
  frame.set_encoded_size(junk.size());
  d = c.at(1).jobs().Deliver(frame, junk, "alpha");
  CHECK(d.code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(d.message()), Catch::Contains("bad magic"));

  auto cancelled = c.at(0).jobs().Cancel(r->job_id());
  REQUIRE(cancelled.ok());
  CHECK(cancelled->state() == v1::JOB_STATE_CANCELLED);
  d = c.at(1).jobs().Deliver(frame, payload, "alpha");
  CHECK(d.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(d.message()), Catch::Contains("was cancelled"));
  auto s = c.at(0).jobs().GetJob(r->job_id(), 1);
  REQUIRE(s.ok());
  CHECK(s->state() == v1::JOB_STATE_CANCELLED);
  // The daemons keep serving (beta's link to gamma, started after it, may still be retrying).
  CHECK(testing::WaitFor([&] { return c.at(1).NodeStatus().peers_up() == 2; }, 60s));
}

TEST_CASE("a site with four CPU devices trains its stage in every sharding mode, same losses") {
  // beta: four CPU devices, each taking one of the microbatch's four sequences, its layer held
  // replicated, or sharded between them (model/shard_mode.h): zero1 by default.
  Cluster c = StartCluster(0, {"cpu:0", "cpu:1", "cpu:2", "cpu:3"});
  std::string base = JobYaml("compression: {mode: off}\n");
  base.replace(base.find("microbatch_size: 2"), 18, "microbatch_size: 4");
  const std::vector<float> local = TrainLocalLosses(base);
  for (const std::string mode : {"auto", "replicate", "zero2", "zero3"}) {
    INFO("sharding: " << mode);
    const v1::JobStatus s = RunToCompletion(c.at(0), base + "sharding: " + mode + "\n");
    CHECK(s.stages(0).devices() == "cpu");
    const std::string held = mode == "auto" ? "zero1" : mode;
    CHECK(s.stages(1).devices() == "cpu, cpu, cpu, cpu (data parallel, host all-reduce" +
                                       (mode == "replicate"
                                            ? std::string(")")
                                            : ", layers " + held + " x 1: " +
                                                  (mode == "auto" ? std::string("zero1 (auto)")
                                                                  : "the job's sharding: " + mode) +
                                                  ")"));
    REQUIRE(s.losses_size() == static_cast<int>(local.size()));
    for (size_t i = 0; i < local.size(); ++i) {
      INFO("step " << i + 1 << ": " << s.losses(i) << " vs " << local[i]);
      // Only the order of beta's gradient sums differs from the single-process run.
      CHECK(std::fabs(s.losses(i) - local[i]) <= 1e-5 * std::fabs(local[i]));
    }
  }
}

TEST_CASE("the planner places a job from the sites' calibrations and links") {
  Cluster c = StartCluster();
  // gamma is a slow site before the job starts: 50 ms more per layer and microbatch.
  c.at(2).jobs().set_throttle(0.05);
  std::string yaml = JobYaml("compression: {mode: off}\n", /*steps=*/6);
  yaml.replace(yaml.find("layers: 3"), 9, "layers: 6");
  yaml.replace(yaml.find("placement: even"), 15, "placement: planned");
  const v1::JobStatus done = RunToCompletion(c.at(0), yaml);
  INFO(done.detail());
  CHECK(done.predicted_step_seconds() > 0);
  int gamma_layers = 0, layers = 0;
  for (const auto& s : done.stages()) {
    layers += static_cast<int>(s.layer_end() - s.layer_begin());
    if (s.site() == "gamma") gamma_layers = static_cast<int>(s.layer_end() - s.layer_begin());
  }
  CHECK(layers == 6);
  CHECK(gamma_layers <= 1);  // the slow site gets at most one layer, or is left out
  // Wherever the layers went, the losses are the single-process run's.
  const std::vector<float> local = TrainLocalLosses(yaml);
  REQUIRE(done.losses_size() == static_cast<int>(local.size()));
  for (size_t i = 0; i < local.size(); ++i) CHECK(done.losses(i) == local[i]);
}

TEST_CASE("a site that cannot be profiled is left out of a planned job, which still runs") {
  Cluster c = StartCluster();
  c.daemons[2].reset();  // gamma is down
  std::string yaml = JobYaml("compression: {mode: off}\n", /*steps=*/4);
  yaml.replace(yaml.find("placement: even"), 15, "placement: planned");
  const v1::JobStatus done = RunToCompletion(c.at(0), yaml);
  INFO(done.detail());
  for (const auto& s : done.stages()) CHECK(s.site() != "gamma");
  CHECK_THAT(done.detail(), Catch::Contains("left out gamma (no profile"));
  const std::vector<float> local = TrainLocalLosses(yaml);
  REQUIRE(done.losses_size() == static_cast<int>(local.size()));
  for (size_t i = 0; i < local.size(); ++i) CHECK(done.losses(i) == local[i]);
}

}  // namespace
}  // namespace longhaul
