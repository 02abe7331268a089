// Pipeline replicas across daemons (issue 14): four sites in one process over the loopback
// transport run a job as 2 replicas x 2 stages. The in-process fleet (fleet/local_fleet.h)
// is the oracle: sync mode step with the exact codec trains the union batch and ends with
// replica 0's parameters equal to the fleet's bit for bit (the losses within float rounding:
// the coordinator averages the replicas' losses, the fleet all microbatches); local mode with
// q4 and error feedback the same; a replica's site restarting mid-job rolls the job back and
// it still ends with those parameters (on_site_loss: wait), or (drop) the other replica goes
// on without it and it rejoins at a later committed step, both ending with the same model. A peer
// outside the sync group cannot send sync tensors. Each sync group's bytes, codec, syncs and sync
// time show in the job's status and /metrics. With placement: planned the planner places the
// replicas (a given count, or auto): every replica split the same way, and the losses those of the
// fleet of the plan's shape.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/sha256.h"
#include "daemon/daemon.h"
#include "daemon/job/spec/job_spec.h"
#include "daemon/job/state/stage_checkpoint.h"
#include "daemon/job/sync/gossip_round.h"
#include "daemon/transport/loopback.h"
#include "fleet/gossip_node.h"
#include "fleet/local_fleet.h"
#include "kernels/ops.h"
#include "model/checkpoint.h"
#include "model/corpus.h"
#include "model/file_io.h"
#include "model/layout.h"
#include "model/token_data.h"
#include "model/token_manifest.h"
#include "model/trainer.h"
#include "test/daemon/job_test_util.h"
#include "test/daemon/test_util.h"

namespace longhaul {
namespace {

using namespace std::chrono_literals;
using daemon::Daemon;

const std::vector<std::string> kSites = {"alpha", "beta", "gamma", "delta"};

std::string JobYaml(const std::string& sync, int steps) {
  return "name: tiny\nmodel: {layers: 2, channels: 32, heads: 2, vocab: 256, context: 32}\n"
         "data: {train: builtin}\nsteps: " +
         std::to_string(steps) +
         "\nbatch_size: 4\nmicrobatch_size: 2\nseq_len: 32\n"
         "optimizer: {lr: 3e-3, warmup_steps: 2, weight_decay: 0.1, grad_clip: 1.0}\n"
         "seed: 7\ncheckpoint: {every: 2}\nbackend: cpu\nthreads: 1\n"
         "sites: [alpha, beta, gamma, delta]\nplacement: even\nreplicas: 2\n"
         "compression: {mode: off}\n" +
         sync;
}

struct Cluster {
  std::unique_ptr<daemon::transport::LoopbackNetwork> net =
      std::make_unique<daemon::transport::LoopbackNetwork>();
  std::vector<daemon::SiteConfig> configs;
  std::vector<std::unique_ptr<Daemon>> daemons;

  // `network` sets up the loopback (the rates its probes report, say) before any site starts;
  // `configure` changes each site's config (its data_roots, say).
  // `sites`: the daemons, every one a peer of the others (a site beyond the job's four may
  // join it).
  explicit Cluster(const std::function<void(daemon::transport::LoopbackNetwork&)>& network = {},
                   const std::function<void(daemon::SiteConfig&)>& configure = {},
                   const std::vector<std::string>& sites = kSites) {
    if (network) network(*net);
    std::vector<int> ports;
    for (size_t i = 0; i < sites.size(); ++i) ports.push_back(testing::FreePort());
    for (size_t i = 0; i < sites.size(); ++i) {
      testing::SiteSpec spec{sites[i], ports[i], {}};
      for (size_t j = 0; j < sites.size(); ++j) {
        if (j != i) spec.peers.push_back({sites[j], ports[j]});
      }
      configs.push_back(testing::MakeSiteConfig(spec));
      configs.back().links.probe_interval_seconds = 5;
      if (configure) configure(configs.back());
      daemons.emplace_back();
      Start(i);
    }
  }
  ~Cluster() {
    for (auto& d : daemons) d.reset();
  }
  void Start(size_t i) {
    daemon::DaemonOptions options;
    options.token = "token";
    options.loopback = net.get();
    auto d = Daemon::Start(configs[i], options);
    INFO(d.status().ToString());
    REQUIRE(d.ok());
    daemons[i] = std::move(*d);
  }
  Daemon& at(size_t i) { return *daemons[i]; }
  std::string Submit(const std::string& yaml) {
    v1::SubmitJobRequest req;
    req.set_job_yaml(yaml);
    auto r = at(0).jobs().Submit(req);
    INFO(r.status().ToString());
    REQUIRE(r.ok());
    return r->job_id();
  }
  v1::JobStatus Status(const std::string& id) {
    auto s = at(0).jobs().GetJob(id, 0);
    REQUIRE(s.ok());
    return *s;
  }
  v1::JobStatus WaitCompleted(const std::string& id) {
    const v1::JobStatus s = testing::WaitJobEnd(at(0), id, 300s);
    INFO("state " << v1::JobState_Name(s.state()) << ": " << s.detail());
    REQUIRE(s.state() == v1::JOB_STATE_COMPLETED);
    return s;
  }
  // Replica 0's model at the last committed step, as the export writes it.
  std::vector<float> Export(const std::string& id) {
    auto ckpt = testing::ExportedCheckpoint(at(0), id, "replica-export");
    INFO(ckpt.status().ToString());
    REQUIRE(ckpt.ok());
    return ckpt->params;
  }
};

// The oracle: the job's replicas trained in one process.
struct Oracle {
  std::vector<float> losses, params;
  // Gossip: by step, the replicas' consensus distance before the step's round (-1: none).
  std::vector<double> consensus;
};

// With `replicas` and `fragments` given (a planned job: the plan says them), those instead of
// the job's even placement; with `microbatches` (a paced plan's, by replica), those.
// `links`: gossip's link matrix, row-major by replica (a job status's gossip_links).
Oracle TrainFleet(const std::string& yaml, int replicas = 0, int fragments = 0,
                  const std::vector<int>& microbatches = {},
                  const std::vector<double>& links = {}) {
  auto spec = daemon::ParseJobSpec(yaml, "job", ".");
  INFO(spec.status().ToString());
  REQUIRE(spec.ok());
  if (replicas > 0) {
    spec->replicas = replicas;
    spec->sites.resize(static_cast<size_t>(replicas * fragments));
  }
  if (!microbatches.empty()) spec->replica_microbatches = microbatches;
  const model::Job& job = spec->job;
  std::vector<std::unique_ptr<kernels::Ops>> owned;
  std::vector<kernels::Ops*> ops;
  for (int r = 0; r < spec->replicas; ++r) {
    owned.push_back(std::move(*kernels::MakeOps(job.backend, 1)));
    ops.push_back(owned.back().get());
  }
  fleet::LocalFleetOptions o;
  o.replicas = spec->replicas;
  o.fragments = spec->stages();  // replica 0's; the fleet's result does not depend on it
  o.batch_size = job.microbatch_size;
  o.seq_len = job.seq_len;
  o.microbatches = job.microbatches();
  o.replica_microbatches = spec->replica_microbatches;
  o.seed = job.seed;
  o.sync = spec->sync;
  const size_t n = static_cast<size_t>(spec->replicas);
  if (links.size() == n * n) {
    o.bandwidth.assign(n, std::vector<double>(n));
    for (size_t i = 0; i < n * n; ++i) o.bandwidth[i / n][i % n] = links[i];
  }
  auto fl = fleet::LocalFleet::Create(
      job.model, [&job] { return model::JobTrainWindows(job, job.seq_len); }, o, ops);
  INFO(fl.status().ToString());
  REQUIRE(fl.ok());
  (*fl)->InitParameters(job.seed);
  Oracle out;
  for (int s = 0; s < job.steps; ++s) {
    auto r = (*fl)->TrainStep(job.optimizer, s, job.steps);
    REQUIRE(r.ok());
    out.losses.push_back(r->loss);
    out.consensus.push_back(r->consensus);
  }
  out.params.resize(static_cast<size_t>(model::NumParameters(job.model)));
  (*fl)->replica(0).StoreIntoModel(out.params.data());
  return out;
}

void CheckAgainst(const Oracle& oracle, const v1::JobStatus& s, const std::vector<float>& params) {
  REQUIRE(s.losses_size() == static_cast<int>(oracle.losses.size()));
  for (size_t i = 0; i < oracle.losses.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(s.losses(static_cast<int>(i)) == Approx(oracle.losses[i]).epsilon(1e-6));
  }
  REQUIRE(params.size() == oracle.params.size());
  size_t differ = 0;
  for (size_t i = 0; i < params.size(); ++i) differ += params[i] != oracle.params[i];
  CHECK(differ == 0);  // bit for bit
}

// A sync frame's metadata of job `id`'s attempt `attempt`: wpe (slice 1) from stage `from` to
// stage `to`, microbatch (the sender's replica, or a ring hop's tag) and step as given.
v1::TensorFrame SyncFrame(const std::string& id, uint32_t attempt, uint32_t from, uint32_t to,
                          uint32_t microbatch, uint64_t step) {
  v1::TensorFrame frame;
  frame.set_job_id(id);
  frame.set_attempt(attempt);
  frame.set_kind(v1::TENSOR_KIND_SYNC);
  frame.set_from_stage(from);
  frame.set_to_stage(to);
  frame.set_microbatch(microbatch);
  frame.set_tensor_id(1);
  frame.set_step(step);
  return frame;
}

// A gossip job's link matrix as its status shows it (empty: every link alike), for TrainFleet.
std::vector<double> GossipLinks(const v1::JobStatus& s) {
  return {s.gossip_links().begin(), s.gossip_links().end()};
}

// `yaml` trained by the daemons of `c` and checked against the in-process fleet (every loss,
// the model bit for bit): its id and final status. A gossip job's fleet draws its graphs from
// the matrix the job's status shows: the links the sites had measured when it was submitted
// (none yet: every link alike).
std::pair<std::string, v1::JobStatus> JobAgainstFleet(Cluster& c, const std::string& yaml) {
  const std::string id = c.Submit(yaml);
  const v1::JobStatus s = c.WaitCompleted(id);
  CheckAgainst(TrainFleet(yaml, 0, 0, {}, GossipLinks(s)), s, c.Export(id));
  return {id, s};
}

// Sets the links between the pairs {alpha, beta} and {gamma, delta} to `rate` bytes/s both
// ways (what their probes report).
void SetRateBetweenPairs(daemon::transport::LoopbackNetwork& net, double rate) {
  for (size_t a = 0; a < 2; ++a) {
    for (size_t b = 2; b < 4; ++b) {
      net.SetRate(kSites[a], kSites[b], rate);
      net.SetRate(kSites[b], kSites[a], rate);
    }
  }
}

// Whether every site has measured all its links, those between the pairs at most `most`
// bytes/s (SetRateBetweenPairs; probes every 5 s).
bool LinksMeasured(Cluster& c, double most) {
  for (size_t i = 0; i < kSites.size(); ++i) {
    const v1::ListLinksResponse links = c.at(i).Links();
    for (const auto& l : links.links()) {
      const double bw = l.outbound().bandwidth_bytes_per_second();
      const bool between = (i < 2) == (l.peer() == "gamma" || l.peer() == "delta");
      if (bw <= 0 || (between && bw > most)) return false;
    }
  }
  return true;
}

TEST_CASE("replicas in sync mode step train the union batch, as the in-process fleet does") {
  const std::string yaml = JobYaml("sync: {mode: step, codec: exact}\n", 6);
  const Oracle oracle = TrainFleet(yaml);
  Cluster c;
  const std::string id = c.Submit(yaml);
  const v1::JobStatus s = c.WaitCompleted(id);
  REQUIRE(s.stages_size() == 4);
  CHECK(s.stages(2).replica() == 1);
  CheckAgainst(oracle, s, c.Export(id));
  // Each sync link carried fp32 frames of gradients: as many bytes as the fragments, plus
  // frame headers.
  bool sync_link = false;
  for (const auto& l : s.links()) {
    if (l.from_site() == "alpha" && l.to_site() == "gamma") {
      sync_link = true;
      CHECK(l.codec() == "fp32");
      CHECK(l.wire_bytes() > l.raw_bytes());
    }
  }
  CHECK(sync_link);
  // Each sync group (stage 0 on alpha and gamma, stage 1 on beta and delta) took one sync per
  // step, in fp32, all of its time exposed (the syncs block); /metrics and /status show it.
  REQUIRE(s.sync_groups_size() == 2);
  for (int g = 0; g < 2; ++g) {
    const v1::SyncGroupStatus& group = s.sync_groups(g);
    INFO("sync group " << g);
    CHECK(group.position() == static_cast<uint32_t>(g));
    CHECK(std::vector<std::string>(group.sites().begin(), group.sites().end()) ==
          std::vector<std::string>{kSites[g], kSites[2 + g]});
    CHECK(group.codec() == "fp32");
    CHECK(group.syncs() == 6);
    CHECK(group.raw_bytes() > 0);
    CHECK(group.wire_bytes() > group.raw_bytes());  // fp32 frames and their headers
    CHECK(group.exposed_seconds() > 0);
    CHECK(group.hidden_seconds() == 0);
  }
  auto metrics = testing::HttpGet(c.at(0).status_port(), "/metrics");
  REQUIRE(metrics.status == 200);
  CHECK_THAT(metrics.body, Catch::Contains("longhaul_sync_group_syncs_total{job=\"" + id +
                                           "\",group=\"1\",codec=\"fp32\"} 6"));
  CHECK_THAT(metrics.body,
             Catch::Contains("longhaul_sync_group_exposed_seconds_total{job=\"" + id));
  auto status = testing::HttpGet(c.at(0).status_port(), "/status");
  REQUIRE(status.status == 200);
  CHECK_THAT(status.body, Catch::Contains("\"sync_groups\""));

  // Sync tensors come only from the stage of another replica holding the slice (split alike
  // here: the same stage), for a slice this stage holds.
  // From beta (replica 0's second stage, not in gamma's group), of the job's attempt (an
  // older one is stale, dropped first).
  v1::TensorFrame frame = SyncFrame(id, s.attempt(), 1, 2, 0, 0);
  std::vector<uint8_t> payload = testing::ZeroFrame({32 * 32});
  frame.set_encoded_size(payload.size());
  auto d = c.at(2).jobs().Deliver(frame, payload, "beta");
  CHECK(d.code() == absl::StatusCode::kPermissionDenied);
  frame.set_from_stage(0);                             // alpha: the same stage of replica 0
  d = c.at(2).jobs().Deliver(frame, payload, "beta");  // but not from alpha's site
  CHECK(d.code() == absl::StatusCode::kPermissionDenied);
  frame.set_tensor_id(9999);  // a slice gamma does not hold
  d = c.at(2).jobs().Deliver(frame, payload, "alpha");
  CHECK(d.code() == absl::StatusCode::kInvalidArgument);
  frame.set_tensor_id(1);
  payload = testing::ZeroFrame({3});  // the wrong size for wpe
  frame.set_encoded_size(payload.size());
  d = c.at(2).jobs().Deliver(frame, payload, "alpha");
  CHECK(d.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(d.message()), Catch::Contains("expects [1024]"));
}

TEST_CASE("replicas in local mode with q4: apart between syncs, the fleet's model at the end") {
  const std::string yaml =
      JobYaml("sync: {mode: local, every: 3, codec: q4, outer: {lr: 0.7, momentum: 0.9}}\n", 8);
  const Oracle oracle = TrainFleet(yaml);
  Cluster c;
  const std::string id = c.Submit(yaml);
  const v1::JobStatus s = c.WaitCompleted(id);
  CheckAgainst(oracle, s, c.Export(id));
  for (const auto& l : s.links()) {
    if (l.from_site() == "beta" && l.to_site() == "delta") {
      CHECK(l.codec() == "q4");
      CHECK(l.wire_bytes() * 3 < l.raw_bytes());
    }
  }
  // Outer steps after steps 3, 6 and 8; the last follows the last report.
  REQUIRE(s.sync_groups_size() == 2);
  for (const auto& group : s.sync_groups()) {
    CHECK(group.codec() == "q4");
    CHECK(group.syncs() == 2);
    CHECK(group.wire_bytes() * 3 < group.raw_bytes());
  }
}

// A llama (grouped-query attention, rotary embeddings, SwiGLU; its empty bias and position
// slots are slices of size 0) as two replicas of two stages: exact step-mode syncs and local
// syncs with top-k and error feedback both end at the in-process fleet's model, bit for bit.
TEST_CASE("llama replicas, 2 x 2: the fleet's model in step and local mode") {
  const std::string sync = GENERATE(
      as<std::string>{}, "sync: {mode: step, codec: exact}\n",
      "sync: {mode: local, every: 2, codec: \"topk:0.1+q8\", outer: {lr: 0.7, momentum: 0.9}}\n");
  INFO(sync);
  std::string yaml = JobYaml(sync, 6);
  const std::string gpt2 = "model: {layers: 2, channels: 32, heads: 2, vocab: 256, context: 32}";
  yaml.replace(yaml.find(gpt2), gpt2.size(),
               "model: {family: llama, layers: 2, channels: 32, heads: 4, kv_heads: 2, "
               "intermediate: 48, vocab: 256, context: 32, tied: true}");
  const Oracle oracle = TrainFleet(yaml);
  Cluster c;
  const std::string id = c.Submit(yaml);
  const v1::JobStatus s = c.WaitCompleted(id);
  REQUIRE(s.stages_size() == 4);
  CheckAgainst(oracle, s, c.Export(id));
  CHECK(oracle.losses.back() < oracle.losses.front());
}

TEST_CASE("sync.reduce ring: four replicas around a ring, the fleet's model bit for bit") {
  // Four single-stage replicas (alpha, beta, gamma, delta): each slice's chunks go alpha ->
  // beta -> gamma -> delta -> alpha, partial sums re-encoded at every hop, then the owners'
  // frames around once more. The fleet with reduce: ring is the oracle, bit for bit.
  const std::string sync =
      GENERATE(std::string("sync: {mode: step, codec: exact, reduce: ring}\n"),
               std::string("sync: {mode: local, every: 2, overlap: 1, codec: q4, reduce: ring}\n"));
  INFO(sync);
  std::string yaml = JobYaml(sync, 6);
  yaml.replace(yaml.find("replicas: 2"), 11, "replicas: 4");
  {
    // Two replicas of two stages: rings of two per position, the tied embedding's on both
    // ends (alpha-gamma and beta-delta), the fleet's model too.
    Cluster c2;
    const v1::JobStatus s2 = JobAgainstFleet(c2, JobYaml(sync, 6)).second;
    REQUIRE(s2.sync_groups_size() == 2);
    CHECK(s2.sync_groups(0).reduce() == "ring");
  }
  const Oracle oracle = TrainFleet(yaml);
  Cluster c;
  const std::string id = c.Submit(yaml);
  const v1::JobStatus s = c.WaitCompleted(id);
  REQUIRE(s.stages_size() == 4);
  CheckAgainst(oracle, s, c.Export(id));
  // Sync frames went to the next site on the ring only.
  std::set<std::pair<std::string, std::string>> sync_links;
  for (const auto& l : s.links()) {
    if (l.tensors() > 0) sync_links.insert({l.from_site(), l.to_site()});
  }
  CHECK(sync_links ==
        std::set<std::pair<std::string, std::string>>{
            {"alpha", "beta"}, {"beta", "gamma"}, {"gamma", "delta"}, {"delta", "alpha"}});
  REQUIRE(s.sync_groups_size() == 1);
  CHECK(s.sync_groups(0).syncs() > 0);
  // Each hop's frame comes from the ring's previous stage only, with that hop's chunk: wpe
  // (slice 1, 1024 values) reaches gamma (position 2) in hop 0 as chunk 1, values [256, 512).
  // From alpha (a member, but not gamma's predecessor), after step 2 (a sync step in both
  // modes), of the job's attempt (an older one is stale, dropped first).
  v1::TensorFrame frame = SyncFrame(id, s.attempt(), 0, 2, 0, 1);
  std::vector<uint8_t> payload = testing::ZeroFrame({256});
  frame.set_encoded_size(payload.size());
  CHECK(c.at(2).jobs().Deliver(frame, payload, "alpha").code() ==
        absl::StatusCode::kPermissionDenied);
  frame.set_from_stage(1);
  frame.set_microbatch(6);  // a ring of 4 has hops 0 .. 5
  CHECK(c.at(2).jobs().Deliver(frame, payload, "beta").code() ==
        absl::StatusCode::kInvalidArgument);
  frame.set_microbatch(0);
  payload = testing::ZeroFrame({1024});  // the whole slice, not the hop's chunk
  frame.set_encoded_size(payload.size());
  const Status d = c.at(2).jobs().Deliver(frame, payload, "beta");
  CHECK(d.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(d.message()), Catch::Contains("expects [256]"));
  frame.set_attempt(s.attempt() - 1);  // an older attempt's frame: stale, whatever it holds
  CHECK(c.at(2).jobs().Deliver(frame, payload, "beta").code() ==
        absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("streaming syncs: the outer step lands `overlap` steps later, the fleet's model") {
  // Syncs start after steps 4 and 8 (checkpoints there, taken before the start) and land two
  // steps later; the one started at 8 lands with the last step, whose sync blocks.
  const std::string yaml =
      JobYaml("sync: {mode: local, every: 4, overlap: 2, codec: q4, outer: {lr: 0.7}}\n", 10);
  const Oracle oracle = TrainFleet(yaml);
  // Not the blocking syncs' result: the streamed outer steps land later.
  const Oracle blocking =
      TrainFleet(JobYaml("sync: {mode: local, every: 4, codec: q4, outer: {lr: 0.7}}\n", 10));
  CHECK(oracle.params != blocking.params);
  Cluster c;
  const std::string id = c.Submit(yaml);
  const v1::JobStatus s = c.WaitCompleted(id);
  CheckAgainst(oracle, s, c.Export(id));
  REQUIRE(s.sync_groups_size() == 2);
  for (const auto& group : s.sync_groups()) {
    CHECK(group.syncs() == 1);  // the one landed at 6 (the status trails the last step's two)
    CHECK(group.hidden_seconds() > 0);  // it ran behind the steps
  }
}

TEST_CASE("a sync warm-up: every step synced at the start, then the cadence, the fleet's model") {
  // Plain averaging after steps 1 to 3, then the outer step after 4 and 8 and the last, around
  // rings or gathered: the daemons' stages against the fleet, bit for bit.
  const std::string reduce = GENERATE(std::string("gather"), std::string("ring"));
  const std::string yaml = JobYaml(
      "sync: {mode: local, every: 4, warmup: 3, codec: q4, outer: {lr: 0.7}, reduce: " + reduce +
          "}\n",
      10);
  const Oracle oracle = TrainFleet(yaml);
  const Oracle cold = TrainFleet(JobYaml(
      "sync: {mode: local, every: 4, codec: q4, outer: {lr: 0.7}, reduce: " + reduce + "}\n", 10));
  CHECK(oracle.params != cold.params);
  Cluster c;
  const std::string id = c.Submit(yaml);
  const v1::JobStatus s = c.WaitCompleted(id);
  CheckAgainst(oracle, s, c.Export(id));
  REQUIRE(s.sync_groups_size() == 2);
  // 1, 2, 3, 4, 8 and 10 (the status may trail the last); without the warm-up 3 in all.
  for (const auto& group : s.sync_groups()) CHECK(group.syncs() >= 4);
}

TEST_CASE("staggered syncs: each phase of the layers at its own steps, the fleet's model") {
  // stagger 2 on 2 layers: layer 0, wte and wpe sync after steps 4 and 8 (phase 0), layer 1
  // and the final layernorm after 2 and 6 (phase 1), everything after the last. Stage 0 holds
  // nothing of phase 1, stage 1 both phases (the tied embedding is phase 0's). Blocking and
  // gathered, or streamed a step behind around rings; the fleet is the oracle, bit for bit.
  const std::string sync =
      GENERATE(std::string("sync: {mode: local, every: 4, stagger: 2, codec: q4}\n"),
               std::string("sync: {mode: local, every: 4, stagger: 2, overlap: 1, codec: q8, "
                           "reduce: ring}\n"));
  INFO(sync);
  const std::string yaml = JobYaml(sync, 10);
  const Oracle oracle = TrainFleet(yaml);
  std::string whole = sync;
  whole.replace(whole.find("stagger: 2, "), 12, "");
  CHECK(oracle.params != TrainFleet(JobYaml(whole, 10)).params);  // not the unstaggered syncs
  Cluster c;
  const std::string id = c.Submit(yaml);
  const v1::JobStatus s = c.WaitCompleted(id);
  CheckAgainst(oracle, s, c.Export(id));
  // A frame of a phase-0 slice (wpe, slice 1: alpha to gamma) at a phase-1 step is refused at
  // the door; at a phase-0 step it passes the sync checks.
  v1::TensorFrame frame = SyncFrame(id, s.attempt(), 0, 2, 0, 1);  // after step 2: phase 1's
  const bool ring = sync.find("ring") != std::string::npos;
  std::vector<uint8_t> payload = testing::ZeroFrame({ring ? 512 : 1024});  // hop 0's chunk of 2
  frame.set_encoded_size(payload.size());
  const Status wrong = c.at(2).jobs().Deliver(frame, payload, "alpha");
  CHECK(wrong.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(wrong.message()), Catch::Contains("does not sync"));
  frame.set_step(3);  // after step 4: phase 0's
  CHECK(c.at(2).jobs().Deliver(frame, payload, "alpha").code() !=
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("streaming syncs: a site restarting mid-job resumes at a sync's start, bit for bit") {
  // Every checkpoint (every 4) is a streaming sync's start: the rollback resumes there and
  // every stage starts that sync again from the checkpointed state.
  std::string yaml =
      JobYaml("sync: {mode: local, every: 4, overlap: 3, codec: q8, on_site_loss: wait}\n", 16);
  yaml.replace(yaml.find("checkpoint: {every: 2}"), 22, "checkpoint: {every: 4}");
  const Oracle oracle = TrainFleet(yaml);
  Cluster c;
  // Stretched so that the job is still running when delta goes (12 steps after the commit).
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0.05);
  const std::string id = c.Submit(yaml);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 4; }, 120s));
  c.daemons[3].reset();  // delta: replica 1's last stage
  REQUIRE(testing::WaitFor([&] { return c.Status(id).state() == v1::JOB_STATE_RECOVERING; }, 60s));
  c.Start(3);
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  CHECK(s.attempt() >= 2);
  CheckAgainst(oracle, s, c.Export(id));
}

TEST_CASE("replicas training different microbatches: the fleet's union batch and weights") {
  // Replica 0 trains 3 microbatches a step, replica 1 one (a slower replica given less): step
  // mode sums the union batch of 4, local mode weighs the pseudo-gradients 3:1.
  const std::string sync = GENERATE(std::string("sync: {mode: step, codec: exact}\n"),
                                    std::string("sync: {mode: local, every: 2, codec: q4}\n"));
  const std::string yaml = JobYaml("replica_microbatches: [3, 1]\n" + sync, 5);
  INFO(sync);
  const Oracle oracle = TrainFleet(yaml);
  Cluster c;
  const std::string id = c.Submit(yaml);
  const v1::JobStatus s = c.WaitCompleted(id);
  CheckAgainst(oracle, s, c.Export(id));
  // Replica 0 sent 3 activations a step on its pipeline link, replica 1 one.
  uint64_t alpha_beta = 0, gamma_delta = 0;
  for (const auto& l : s.links()) {
    if (l.from_site() == "alpha" && l.to_site() == "beta") alpha_beta = l.tensors();
    if (l.from_site() == "gamma" && l.to_site() == "delta") gamma_delta = l.tensors();
  }
  CHECK(alpha_beta == 5 * 2 * 3);  // an activation and its targets per microbatch and step
  CHECK(gamma_delta == 5 * 2 * 1);
}

// A job of `replica_stages` on alpha, beta and gamma with `sync`, trained by the daemons and
// checked against the in-process fleet (every loss, the model bit for bit): its id and final
// status.
std::pair<std::string, v1::JobStatus> SplitJobAgainstFleet(Cluster& c,
                                                           const std::string& replica_stages,
                                                           const std::string& sync) {
  std::string yaml = JobYaml("replica_stages: " + replica_stages + "\n" + sync, 5);
  yaml.replace(yaml.find("sites: [alpha, beta, gamma, delta]"), 34, "sites: [alpha, beta, gamma]");
  return JobAgainstFleet(c, yaml);
}

TEST_CASE("replica 0 on one stage: the other replica's ends exchange the tied embedding") {
  // Replica 0 on alpha alone, replica 1 on beta (layer 0) and gamma (layer 1): beta and gamma
  // are flat stages 1 and 2, their tied-embedding partner each other (it was computed as if
  // every replica had replica 1's stage count, and the job never finished).
  const std::string sync = GENERATE(std::string("sync: {mode: step, codec: exact}\n"),
                                    std::string("sync: {mode: local, every: 2, codec: q4}\n"));
  INFO(sync);
  Cluster c;
  SplitJobAgainstFleet(c, "[1, 2]", sync);
}

TEST_CASE("replicas split differently: each slice syncs with its holders, the fleet's model") {
  // Replica 0 on alpha (layer 0) and beta (layer 1), replica 1 on gamma alone (both layers):
  // gamma's frames go to both of replica 0's stages, and each of those sends gamma what it
  // holds (the tied embedding from alpha, gamma being a first stage).
  const std::string sync = GENERATE(std::string("sync: {mode: step, codec: exact}\n"),
                                    std::string("sync: {mode: local, every: 2, codec: q4}\n"));
  INFO(sync);
  Cluster c;
  const auto [id, s] = SplitJobAgainstFleet(c, "[2, 1]", sync);
  REQUIRE(s.stages_size() == 3);
  CHECK(s.stages(1).layer_begin() == 1);
  CHECK(s.stages(2).replica() == 1);
  CHECK(s.stages(2).layer_begin() == 0);
  CHECK(s.stages(2).layer_end() == 2);
  // Every pair of a replica-0 stage and gamma carried sync frames, both ways.
  std::set<std::pair<std::string, std::string>> sync_links;
  for (const auto& l : s.links()) {
    if ((l.from_site() == "gamma") != (l.to_site() == "gamma")) {
      if (l.tensors() > 0) sync_links.insert({l.from_site(), l.to_site()});
    }
  }
  CHECK(sync_links ==
        std::set<std::pair<std::string, std::string>>{
            {"alpha", "gamma"}, {"beta", "gamma"}, {"gamma", "alpha"}, {"gamma", "beta"}});
  // One sync group: the three stages, joined through gamma.
  REQUIRE(s.sync_groups_size() == 1);
  CHECK(
      std::vector<std::string>(s.sync_groups(0).sites().begin(), s.sync_groups(0).sites().end()) ==
      std::vector<std::string>{"alpha", "beta", "gamma"});
  CHECK(s.sync_groups(0).syncs() > 0);
  // gamma takes wpe (slice 1) from alpha only, which holds it; beta does not.
  v1::TensorFrame frame = SyncFrame(id, s.attempt(), 1, 2, 0, 0);
  const std::vector<uint8_t> payload = testing::ZeroFrame({32 * 32});
  frame.set_encoded_size(payload.size());
  CHECK(c.at(2).jobs().Deliver(frame, payload, "beta").code() ==
        absl::StatusCode::kPermissionDenied);
}

TEST_CASE("gossip has no job-wide barrier: a slow replica does not hold the other back") {
  // Replica 1 (gamma, delta) is slowed; replica 0 (alpha, beta) steps on to the job's only
  // round after step 8 while replica 1 is still steps behind (with the job-wide barrier every
  // stage is within one step of the others), then waits there for its in-neighbour's frames.
  // The model is still the fleet's, bit for bit.
  const std::string yaml = JobYaml("sync: {mode: local, every: 8, reduce: gossip}\n", 8);
  const Oracle oracle = TrainFleet(yaml);
  Cluster c;
  c.at(2).jobs().set_throttle(0.3);
  c.at(3).jobs().set_throttle(0.3);
  const std::string id = c.Submit(yaml);
  uint64_t ahead = 0, behind = 0;
  REQUIRE(testing::WaitFor(
      [&] {
        const v1::JobStatus s = c.Status(id);
        if (s.stages_size() != 4) return false;
        ahead = std::min(s.stages(0).step(), s.stages(1).step());
        behind = std::max(s.stages(2).step(), s.stages(3).step());
        return ahead >= behind + 3;
      },
      120s));
  INFO("replica 0 at " << ahead << ", replica 1 at " << behind);
  c.at(2).jobs().set_throttle(0);
  c.at(3).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  CheckAgainst(oracle, s, c.Export(id));
  for (const auto& stage : s.stages()) CHECK(stage.step() == 8);
}

// The newest stage checkpoint (steps completed) in site `site`'s directory of job `id`.
uint64_t NewestStageCheckpoint(Cluster& c, size_t site, const std::string& id) {
  uint64_t newest = 0;
  std::error_code ec;
  const std::string dir = c.configs[site].data_dir + "/jobs/" + id;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("stage_", 0) != 0 || name.size() < 14) continue;
    newest = std::max<uint64_t>(newest, std::stoull(name.substr(6, 8)));
  }
  return newest;
}

TEST_CASE("a replica's site restarting mid-job: rolled back, the same model at the end") {
  // on_site_loss: wait: every replica rolls back and waits for the site. With gossip the
  // rounds' references and push-sum weights come back from the sync state too, and with
  // gradient tracking and an outer step the corrections, the drift's anchor and its
  // learning-rate sum, and each node's outer anchor and momentum.
  const std::string sync =
      GENERATE(std::string("sync: {mode: local, every: 2, codec: q8, on_site_loss: wait}\n"),
               std::string("sync: {mode: local, every: 2, reduce: gossip, codec: topk:0.25, "
                           "on_site_loss: wait}\n"),
               std::string("sync: {mode: local, every: 2, reduce: gossip, codec: topk:0.25, "
                           "tracking: true, outer: {lr: 1, momentum: 0.5}, "
                           "on_site_loss: wait}\n"),
               // Over compressed links: every link's copies, the weights and the tracking
               // state from the sync state, alike at both ends of each link.
               std::string("sync: {mode: local, every: 2, reduce: gossip, codec: q4, "
                           "tracking: true, on_site_loss: wait}\n"));
  INFO(sync);
  const std::string yaml = JobYaml(sync, 10);
  const Oracle oracle = TrainFleet(yaml);
  Cluster c;
  // Stretched so that the job is still running when delta goes (the throttle only sleeps).
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0.05);
  const std::string id = c.Submit(yaml);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 2; }, 120s));
  c.daemons[3].reset();  // delta: replica 1's last stage
  REQUIRE(testing::WaitFor([&] { return c.Status(id).state() == v1::JOB_STATE_RECOVERING; }, 60s));
  c.Start(3);
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  CHECK(s.attempt() >= 2);
  CheckAgainst(oracle, s, c.Export(id));
}

// A stage's parameters in its checkpoint of `step` on site `site`.
std::vector<float> CheckpointParams(Cluster& c, size_t site, const std::string& id, uint64_t step,
                                    int begin, int end) {
  const std::string dir = c.configs[site].data_dir + "/jobs/" + id;
  auto state = daemon::ReadStageState(
      *FileEnv::Default(), daemon::StageCheckpointPath(dir, step, begin, end), begin, end);
  INFO("site " << site << ": " << state.status().ToString());
  REQUIRE(state.ok());
  return state->params;
}

// The drop-and-rejoin choreography of the tests below, compute stretched with the debug
// throttle so that the job is still running while a test watches each phase (nothing depends
// on when a phase happens, only on its order). Kills delta (replica 1's last stage) once a
// step is committed and returns the committed step the live replica went on from.
constexpr double kDropThrottle = 0.04;
uint64_t KillDeltaUntilDropped(Cluster& c, const std::string& id) {
  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 2; }, 120s));
  c.daemons[3].reset();
  uint64_t dropped_at = 0;
  REQUIRE(testing::WaitFor(
      [&] {
        const v1::JobStatus s = c.Status(id);
        if (s.dropped_replicas_size() != 1 || s.state() != v1::JOB_STATE_RUNNING) return false;
        dropped_at = s.committed_step();
        return true;
      },
      120s));
  return dropped_at;
}

// While a dropped site comes back, the live replica is slowed further, so that the job is
// still running when the site has started and the coordinator has seen it (a daemon's start
// under a sanitizer on a loaded machine takes seconds): the rejoin waits for a committed step.
constexpr double kRejoinThrottle = 0.25;

// Delta back: replica 1 rejoins at the next committed step; then full speed to the end.
void RestartDeltaUntilRejoined(Cluster& c, const std::string& id) {
  for (size_t i = 0; i < 3; ++i) c.at(i).jobs().set_throttle(kRejoinThrottle);
  c.Start(3);
  c.at(3).jobs().set_throttle(kDropThrottle);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).replica_rejoins() == 1; }, 120s));
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0);
}

TEST_CASE("a replica losing a site is dropped, the other goes on, and it rejoins at a sync") {
  // on_site_loss: drop is local mode's default. Gathered, and around rings (a ring of one
  // while replica 1 is out, of two again after the rejoin's new attempt).
  const int steps = 60;
  // Staggered too: layer 0 syncs after even steps, layer 1 after odd ones; the rejoining
  // replica starts from the live one's parameters. Gossip: rounds with no live neighbour
  // while replica 1 is out, the rejoined one from the live one's parameters with weight 1
  // (with tracking, every replica's corrections from 0 at the drop's and the rejoin's
  // attempts); over compressed links the rejoined replica's copies are not its peers', and
  // the links to and from it start again from key frames.
  const std::string reduce =
      GENERATE(std::string("codec: q8, reduce: gather"), std::string("codec: q8, reduce: ring"),
               std::string("codec: q8, reduce: gather, stagger: 2"),
               std::string("codec: topk:0.25, reduce: gossip"),
               std::string("codec: topk:0.25, reduce: gossip, tracking: true"),
               std::string("codec: q4, reduce: gossip"));
  INFO("reduce " << reduce);
  const std::string yaml = JobYaml("sync: {mode: local, every: 2, " + reduce + "}\n", steps);
  Cluster c;
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(kDropThrottle);
  const std::string id = c.Submit(yaml);
  // Replica 1 is dropped; replica 0 trains on without waiting for delta.
  const uint64_t dropped_at = KillDeltaUntilDropped(c, id);
  {
    const v1::JobStatus s = c.Status(id);
    INFO(s.detail());
    CHECK(s.dropped_replicas(0) == 1);
    CHECK(s.replica_drops() == 1);
    CHECK_THAT(s.detail(), Catch::Contains("replica 1 dropped") && Catch::Contains("delta"));
  }
  REQUIRE(testing::WaitFor([&] { return c.Status(id).step() >= dropped_at + 4; }, 120s));
  {
    const v1::JobStatus s = c.Status(id);
    INFO(s.detail());
    CHECK(s.state() == v1::JOB_STATE_RUNNING);  // going on while delta is down
    CHECK(s.dropped_replicas_size() == 1);
    auto metrics = testing::HttpGet(c.at(0).status_port(), "/metrics");
    CHECK_THAT(metrics.body,
               Catch::Contains("longhaul_job_replicas_dropped{job=\"" + id + "\"} 1"));
  }
  RestartDeltaUntilRejoined(c, id);
  const v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK(s.dropped_replicas_size() == 0);
  CHECK(s.replica_drops() == 1);
  CHECK(s.replica_rejoins() == 1);
  CHECK_THAT(s.detail(), Catch::Contains("replica 1 rejoined at step"));
  // The timeline (the status page's marks) holds the drop and the rejoin, in that order.
  std::vector<std::string> kinds;
  for (const auto& e : s.events()) {
    if (e.kind() != "rollback") kinds.push_back(e.kind());
  }
  CHECK(kinds == std::vector<std::string>{"replica_drop", "replica_rejoin"});
  REQUIRE(s.losses_size() == steps);
  for (double loss : s.losses()) CHECK(std::isfinite(loss));
  // After the last outer step both replicas hold the same model, bit for bit: the rejoined
  // replica took the live one's outer state, and every member summed the same frames.
  CHECK(CheckpointParams(c, 0, id, steps, 0, 1) == CheckpointParams(c, 2, id, steps, 0, 1));
  CHECK(CheckpointParams(c, 1, id, steps, 1, 2) == CheckpointParams(c, 3, id, steps, 1, 2));
  if (reduce.find("q4, reduce: gossip") != std::string::npos) {
    // Over compressed links the rejoin's attempt started the links to and from replica 1 from
    // key frames at both ends: none of their frames was skipped.
    for (const auto& g : s.sync_groups()) {
      INFO("group " << g.position());
      CHECK(g.key_frames() > 0);
      CHECK(g.frames_skipped() == 0);
    }
  }
  auto metrics = testing::HttpGet(c.at(0).status_port(), "/metrics");
  CHECK_THAT(metrics.body,
             Catch::Contains("longhaul_job_replica_rejoins_total{job=\"" + id + "\"} 1"));
}

TEST_CASE("gossip: the coordinator's site going down stops no other replica") {
  // Alpha coordinates and runs replica 0's first stage. With alpha gone, the other replicas
  // keep stepping and checkpointing: no barrier waits for the coordinator (their reports
  // queue, and a replica of two stages passes its gradient sums along its pipeline for its
  // clipping scale), and a round goes on without replica 0's frames once its stages do not
  // answer (replica 0's second stage, its neighbour gone, stops). Alpha back, its
  // coordinator adopts the replicas that ran on (no rollback: what they trained meanwhile is
  // committed from their reports), drops replica 0 and lets it rejoin from a live replica's
  // state at a step they reached while alpha was down. All replicas end with one model.
  // Four single-stage replicas, then two of two stages.
  const bool single = GENERATE(true, false);
  INFO((single ? "4 x 1" : "2 x 2"));
  const int steps = 60;
  std::string yaml =
      JobYaml("sync: {mode: local, every: 2, reduce: gossip, codec: topk:0.25}\n", steps);
  if (single) yaml.replace(yaml.find("replicas: 2"), 11, "replicas: 4");
  const std::vector<size_t> others =
      single ? std::vector<size_t>{1, 2, 3} : std::vector<size_t>{2, 3};
  Cluster c;
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(kDropThrottle);
  const std::string id = c.Submit(yaml);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 2; }, 120s));
  const uint64_t committed = c.Status(id).committed_step();
  c.daemons[0].reset();  // alpha: the coordinator, and replica 0
  std::vector<uint64_t> at_kill;
  for (size_t i : others) at_kill.push_back(NewestStageCheckpoint(c, i, id));
  REQUIRE(testing::WaitFor(
      [&] {
        for (size_t k = 0; k < others.size(); ++k) {
          if (NewestStageCheckpoint(c, others[k], id) < at_kill[k] + 6) return false;
        }
        return true;
      },
      120s));
  // Alpha back; the others slowed so that the job is still running when replica 0 rejoins.
  for (size_t i : others) c.at(i).jobs().set_throttle(kRejoinThrottle);
  c.Start(0);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).replica_rejoins() == 1; }, 120s));
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK(s.replica_drops() == 1);
  std::string drop, rejoin;
  for (const auto& e : s.events()) {
    CHECK(e.kind() != "rollback");  // nobody went back to the step committed before
    if (e.kind() == "replica_drop") drop = e.detail();
    if (e.kind() == "replica_rejoin") rejoin = e.detail();
  }
  CHECK_THAT(drop,
             Catch::Contains("coordinator restarted") && Catch::Contains("replica 0 dropped"));
  const size_t at = rejoin.find("rejoined at step ");
  REQUIRE(at != std::string::npos);
  // The rejoin restarts everyone from a step the others checkpointed while alpha was down:
  // the outage's steps are kept.
  const uint64_t rejoined_at = std::stoull(rejoin.substr(at + 17));
  CHECK(rejoined_at > committed);
  CHECK(rejoined_at >= *std::min_element(at_kill.begin(), at_kill.end()) + 6);
  REQUIRE(s.losses_size() == steps);
  for (double loss : s.losses()) CHECK(std::isfinite(loss));
  // The final exact average: every replica holds the same model.
  if (single) {
    for (size_t i = 1; i < kSites.size(); ++i) {
      CHECK(CheckpointParams(c, i, id, steps, 0, 2) == CheckpointParams(c, 0, id, steps, 0, 2));
    }
  } else {
    CHECK(CheckpointParams(c, 0, id, steps, 0, 1) == CheckpointParams(c, 2, id, steps, 0, 1));
    CHECK(CheckpointParams(c, 1, id, steps, 1, 2) == CheckpointParams(c, 3, id, steps, 1, 2));
  }
}

// Whether the tied embedding (wte) is the same on replica `first / 2`'s first stage (site
// `first`) and its last (`first + 1`) in the checkpoint of `step` of a 2 x 2 job of JobYaml's
// model.
bool TiedCopiesEqual(Cluster& c, const std::string& id, size_t first, uint64_t step) {
  const model::ModelConfig config = model::MakeConfig(2, 32, 2, 256, 32);
  const model::FragmentLayout a(config, 0, 1), b(config, 1, 2);
  const std::vector<float> pa = CheckpointParams(c, first, id, step, 0, 1);
  const std::vector<float> pb = CheckpointParams(c, first + 1, id, step, 1, 2);
  const auto t = model::Tensor::kWte;
  REQUIRE(a.size(t) == b.size(t));
  return std::equal(pa.begin() + a.offset(t), pa.begin() + a.offset(t) + a.size(t),
                    pb.begin() + b.offset(t));
}

TEST_CASE("gossip: a replica's two holders of the tied embedding take the same rounds") {
  // A replica's first stage gossips the tied embedding with the other replicas' first stages;
  // its last stage replays those rounds from what the first sends it (tied_round.h). Here the
  // links between the replicas' first stages, or between their last stages, are cut for a
  // while mid-run: each finds the other lost and goes on alone, then finds it back. Whatever
  // each group lost, each replica's two copies of the embedding take the same rounds: they end
  // equal, and the last stage never had to take the first's copy for differing.
  const std::string codec = GENERATE("q4", "topk:0.25");
  const bool firsts = GENERATE(true, false);
  INFO("codec " << codec << ", the links between the " << (firsts ? "first" : "last")
                << " stages cut");
  const std::string a = firsts ? "alpha" : "beta", b = firsts ? "gamma" : "delta";
  const int steps = 30;
  // The job's coordinator is a fifth site, whose links stay up (one cut from it would drop a
  // replica).
  std::vector<std::string> sites = kSites;
  sites.push_back("epsilon");
  Cluster c({}, {}, sites);
  Daemon& coordinator = c.at(4);
  std::string id;
  auto status = [&] {
    auto got = coordinator.jobs().GetJob(id, 0);
    REQUIRE(got.ok());
    return *got;
  };
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(kDropThrottle);
  v1::SubmitJobRequest req;
  req.set_job_yaml(
      JobYaml("sync: {mode: local, every: 2, reduce: gossip, codec: " + codec + "}\n", steps));
  auto submitted = coordinator.jobs().Submit(req);
  REQUIRE(submitted.ok());
  id = submitted->job_id();
  REQUIRE(testing::WaitFor([&] { return status().committed_step() >= 4; }, 120s));
  c.net->SetCut(a, b, true);
  c.net->SetCut(b, a, true);
  std::vector<uint64_t> at_cut;
  for (size_t i = 0; i < kSites.size(); ++i) at_cut.push_back(NewestStageCheckpoint(c, i, id));
  // Long enough for rounds without the other replica (found gone after a few heartbeats).
  REQUIRE(testing::WaitFor(
      [&] {
        for (size_t i = 0; i < kSites.size(); ++i) {
          if (NewestStageCheckpoint(c, i, id) < at_cut[i] + 8) return false;
        }
        return true;
      },
      120s));
  c.net->SetCut(a, b, false);
  c.net->SetCut(b, a, false);
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = testing::WaitJobEnd(coordinator, id, 300s);
  INFO(s.detail());
  REQUIRE(s.state() == v1::JOB_STATE_COMPLETED);
  REQUIRE(s.losses_size() == steps);
  for (double loss : s.losses()) CHECK(std::isfinite(loss));
  CHECK(s.replica_drops() == 0);
  CHECK(TiedCopiesEqual(c, id, 0, steps));
  CHECK(TiedCopiesEqual(c, id, 2, steps));
  for (const auto& g : s.sync_groups()) CHECK(g.tied_mends() == 0);
}

// `longhaul job add-site` / `remove-site` of job `id`, asked of its coordinator (alpha).
StatusOr<v1::ChangeJobSitesResponse> ChangeSites(Cluster& c, const std::string& id,
                                                 const std::vector<std::string>& add,
                                                 const std::vector<std::string>& remove) {
  v1::ChangeJobSitesRequest req;
  req.set_job_id(id);
  *req.mutable_add() = {add.begin(), add.end()};
  *req.mutable_remove() = {remove.begin(), remove.end()};
  return c.at(0).jobs().ChangeSites(req);
}

// One replica joined and running: joined_replica cleared once every stage of it is assigned.
bool JoinMade(const v1::JobStatus& s) {
  return s.replicas_added() == 1 && s.state() == v1::JOB_STATE_RUNNING && s.joined_replica() == 0;
}

// The job's events' kinds, in order.
std::vector<std::string> EventKinds(const v1::JobStatus& s) {
  std::vector<std::string> kinds;
  for (const auto& e : s.events()) kinds.push_back(e.kind());
  return kinds;
}

// A sync frame of `step` from gamma's stage (2, replica 1, removed from job `id`) to alpha's
// (0) is refused by alpha as the removed replica's (`microbatch`: the gather sender's replica
// or the ring hop), whether or not gamma's stage has stopped yet. The coordinator's status
// names the removal when it decides it; alpha's stage applies it with that step's decision, a
// moment later: until then the frame is refused too, by another rule (a ring's hop from a stage
// that is not the ring's predecessor; a gathered frame's payload that is no frame).
void CheckRemovedFrameRefused(Cluster& c, const std::string& id, const v1::JobStatus& s,
                              uint32_t microbatch, uint64_t step) {
  REQUIRE(s.stages(2).site() == "gamma");
  v1::TensorFrame frame = SyncFrame(id, s.attempt(), 2, 0, microbatch, step);
  const std::vector<uint8_t> payload(64, 0);
  frame.set_encoded_size(payload.size());
  Status d;
  bool refused = true;
  const bool named = testing::WaitFor(
      [&] {
        d = c.at(0).jobs().Deliver(frame, payload, "gamma");
        refused = refused && !d.ok();
        return std::string(d.message()).find("replica 1 (removed from the job)") !=
               std::string::npos;
      },
      30s);
  INFO(d.ToString());
  CHECK(refused);
  CHECK(named);
  CHECK(d.code() == absl::StatusCode::kPermissionDenied);
}

TEST_CASE("sites join and leave a running job: a new replica from a live one, one out for good") {
  // A 2 x 2 job; epsilon, a peer of every site but not in the job, joins it as a third
  // replica of one stage (all layers) and takes a live replica's state at the committed step;
  // its first sync shows in the status within one outer step. Then gamma leaves, taking
  // replica 1 out for good, and the others go on without a restart (nothing is redone): a
  // gossip job's rounds at once, a gathered job's syncs from the next step's decision on. The
  // replicas left end with one model, the new one's included.
  // Gossip with and without gradient tracking (a removal mid-attempt restarts the live
  // corrections from 0), and gather.
  const std::string reduce =
      GENERATE(std::string("reduce: gossip, codec: topk:0.25"),
               std::string("reduce: gossip, codec: topk:0.25, tracking: true"),
               std::string("reduce: gather, codec: q8"));
  const bool gossip = reduce.find("gossip") != std::string::npos;
  INFO(reduce);
  const int steps = 40, every = 2;
  const std::string yaml = JobYaml("sync: {mode: local, every: 2, " + reduce + "}\n", steps);
  std::vector<std::string> sites = kSites;
  sites.push_back("epsilon");
  Cluster c({}, {}, sites);
  for (size_t i = 0; i < sites.size(); ++i) c.at(i).jobs().set_throttle(kDropThrottle);
  const std::string id = c.Submit(yaml);
  auto change = [&](const std::vector<std::string>& add, const std::vector<std::string>& remove) {
    return ChangeSites(c, id, add, remove);
  };
  // Refused, naming what stands in the way.
  CHECK_THAT(std::string(change({"beta"}, {}).status().message()),
             Catch::Contains("'beta' runs a stage of replica 0 of the job already"));
  CHECK(change({"zeta"}, {}).status().code() == absl::StatusCode::kNotFound);
  CHECK(change({}, {}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(change({"epsilon"}, {"beta"}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(change({}, {"zeta"}).status().message()),
             Catch::Contains("'zeta' runs no stage"));

  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 2; }, 120s));
  auto joined = change({"epsilon"}, {});
  INFO(joined.status().ToString());
  REQUIRE(joined.ok());
  REQUIRE(joined->replicas_size() == 1);
  CHECK(joined->replicas(0) == 2);
  CHECK(change({"epsilon"}, {}).status().code() == absl::StatusCode::kFailedPrecondition);
  uint64_t join_at = 0;
  uint32_t attempt = 0;
  REQUIRE(testing::WaitFor(
      [&] {
        const v1::JobStatus s = c.Status(id);
        for (const auto& e : s.events()) {
          if (e.kind() == "site_added") join_at = e.step();
        }
        attempt = s.attempt();
        return JoinMade(s);
      },
      120s));
  {
    const v1::JobStatus s = c.Status(id);
    INFO(s.detail());
    CHECK(s.replicas() == 3);
    REQUIRE(s.stages_size() == 5);
    CHECK(s.stages(4).site() == "epsilon");
    CHECK(s.stages(4).replica() == 2);
    CHECK(s.stages(4).layer_begin() == 0);
    CHECK(s.stages(4).layer_end() == 2);
    CHECK_THAT(s.detail(), Catch::Contains("site epsilon joined as replica 2 at step " +
                                           std::to_string(join_at) + " from replica 0's state"));
  }
  // Its first sync within one outer step: whenever its reports say it is past the first outer
  // step after the join (and the report that follows it), they count a sync.
  REQUIRE(testing::WaitFor(
      [&] {
        const v1::StageInfo st = c.Status(id).stages(4);
        if (st.step() >= join_at + every + 2) CHECK(st.syncs() >= 1);
        return st.syncs() >= 1;
      },
      120s));
  // Gamma leaves: replica 1 (gamma, delta) out for good.
  auto left = change({}, {"gamma"});
  INFO(left.status().ToString());
  REQUIRE(left.ok());
  REQUIRE(left->replicas_size() == 1);
  CHECK(left->replicas(0) == 1);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).replicas_removed() == 1; }, 120s));
  {
    const v1::JobStatus s = c.Status(id);
    INFO(s.detail());
    CHECK(s.removed_replicas_size() == 1);
    CHECK(s.dropped_replicas_size() == 1);
    // No new attempt: nobody went back.
    CHECK(s.attempt() == attempt);
    CHECK_THAT(s.detail(), Catch::Contains("the others went on"));
    auto metrics = testing::HttpGet(c.at(0).status_port(), "/metrics");
    CHECK_THAT(metrics.body,
               Catch::Contains("longhaul_job_replicas_added_total{job=\"" + id + "\"} 1") &&
                   Catch::Contains("longhaul_job_replicas_removed_total{job=\"" + id + "\"} 1") &&
                   Catch::Contains("longhaul_stage_syncs{"));
    auto page = testing::HttpGet(c.at(0).status_port(), "/status");
    CHECK_THAT(page.body, Catch::Contains("\"membership\": \"removed\""));
    if (gossip) {
      // The stages that go on were told (JobCommand.KIND_REMOVE_REPLICAS): a sync frame of
      // this attempt from gamma's stage is refused as the removed replica's, whether or not
      // gamma's stage stopped.
      CheckRemovedFrameRefused(c, id, s, 1, s.stages(0).step());
    }
  }
  for (size_t i = 0; i < sites.size(); ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK(EventKinds(s) == std::vector<std::string>{"site_added", "site_removed"});  // no rollback
  CHECK(s.replica_drops() == 0);
  // The sync groups' sites are the replicas left's: alpha, beta and epsilon.
  REQUIRE(s.sync_groups_size() > 0);
  for (const auto& g : s.sync_groups()) {
    for (const auto& site : g.sites()) CHECK((site != "gamma" && site != "delta"));
    CHECK(std::find(g.sites().begin(), g.sites().end(), "epsilon") != g.sites().end());
  }
  REQUIRE(s.losses_size() == steps);
  for (double loss : s.losses()) CHECK(std::isfinite(loss));
  // The replicas left hold one model: replica 0's stages and epsilon's whole one.
  auto spec = daemon::ParseJobSpec(yaml, "job", ".");
  REQUIRE(spec.ok());
  std::vector<float> model(static_cast<size_t>(model::NumParameters(spec->job.model)));
  for (int stage = 0; stage < 2; ++stage) {
    const model::FragmentLayout layout(spec->job.model, stage, stage + 1);
    const std::vector<float> part =
        CheckpointParams(c, static_cast<size_t>(stage), id, steps, stage, stage + 1);
    layout.InsertIntoModel(part.data(), model.data());
  }
  const model::FragmentLayout whole(spec->job.model, 0, 2);
  std::vector<float> from_model(static_cast<size_t>(whole.total()));
  whole.ExtractFromModel(model.data(), from_model.data());
  CHECK(CheckpointParams(c, 4, id, steps, 0, 2) == from_model);
}

TEST_CASE("a site whose config volunteers for a running job joins it; one not listed is refused") {
  // epsilon's and zeta's configs volunteer for the job named "tiny" at alpha, before it is
  // submitted (they ask again until it is); its file lists epsilon under volunteers, so
  // epsilon joins as a third replica, as `longhaul job add-site` would add it, and zeta is
  // refused for good, the refusal naming it, in both sites' node status.
  std::vector<std::string> sites = kSites;
  sites.push_back("epsilon");
  sites.push_back("zeta");
  Cluster c(
      {},
      [](daemon::SiteConfig& config) {
        if (config.site == "epsilon" || config.site == "zeta") {
          config.volunteer = {{"tiny", "alpha"}};
        }
      },
      sites);
  for (size_t i = 0; i < sites.size(); ++i) c.at(i).jobs().set_throttle(kDropThrottle);
  const std::string id =
      c.Submit(JobYaml("sync: {mode: local, every: 2, codec: q8}\nvolunteers: [epsilon]\n", 40));
  REQUIRE(testing::WaitFor([&] { return JoinMade(c.Status(id)); }, 120s));
  {
    const v1::JobStatus s = c.Status(id);
    INFO(s.detail());
    CHECK(s.replicas() == 3);
    REQUIRE(s.stages_size() == 5);
    CHECK(s.stages(4).site() == "epsilon");
    CHECK(s.stages(4).replica() == 2);
  }
  auto volunteer = [&](size_t site) {
    const v1::NodeStatus n = c.at(site).NodeStatus();
    REQUIRE(n.volunteers_size() == 1);
    return n.volunteers(0);
  };
  REQUIRE(testing::WaitFor([&] { return volunteer(4).state() == "joined"; }, 60s));
  CHECK(volunteer(4).job() == "tiny");
  CHECK(volunteer(4).coordinator() == "alpha");
  CHECK_THAT(volunteer(4).detail(), Catch::Contains("site epsilon joins as replica 2"));
  REQUIRE(testing::WaitFor([&] { return volunteer(5).state() == "refused"; }, 60s));
  CHECK_THAT(volunteer(5).detail(),
             Catch::Contains("site 'zeta' is not one of the volunteers of job 'tiny' at site "
                             "'alpha'"));
  // A site the job does not take learns nothing of who it does take.
  CHECK_THAT(volunteer(5).detail(), !Catch::Contains("epsilon"));
  const uint32_t asked = volunteer(5).asked();
  CHECK(c.Status(id).stages_size() == 5);  // zeta is in no stage
  auto page = testing::HttpGet(c.at(5).status_port(), "/status");
  CHECK_THAT(page.body, Catch::Contains("\"state\": \"refused\""));
  for (size_t i = 0; i < sites.size(); ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus done = c.WaitCompleted(id);
  CHECK(done.stages_size() == 5);
  CHECK(volunteer(5).asked() == asked);  // refused for good: not asked again
}

TEST_CASE("placement: planned: the planner places a joining replica over the sites given") {
  // A planned job of two replicas; epsilon and zeta are asked to join, zeta's compute ten
  // times slower (the debug throttle, which its profile counts): the planner places the new
  // replica on epsilon alone, all layers, and says it left zeta out. The job then trains
  // three replicas to its end.
  const int steps = 24;
  std::string yaml = JobYaml("sync: {mode: local, every: 2, reduce: gather, codec: q8}\n", steps);
  yaml.replace(yaml.find("placement: even"), 15, "placement: planned");
  std::vector<std::string> sites = kSites;
  sites.push_back("epsilon");
  sites.push_back("zeta");
  Cluster c({}, {}, sites);
  for (size_t i = 0; i < sites.size(); ++i) {
    c.at(i).jobs().set_throttle(sites[i] == "zeta" ? 10 * kDropThrottle : kDropThrottle);
  }
  const std::string id = c.Submit(yaml);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 2; }, 120s));
  const int before = c.Status(id).stages_size();
  auto joined = ChangeSites(c, id, {"epsilon", "zeta"}, {});
  INFO(joined.status().ToString());
  REQUIRE(joined.ok());
  CHECK_THAT(joined->detail(), Catch::Contains("site epsilon joins as replica 2") &&
                                   Catch::Contains("planned") && Catch::Contains("left out zeta"));
  REQUIRE(testing::WaitFor([&] { return JoinMade(c.Status(id)); }, 120s));
  {
    const v1::JobStatus s = c.Status(id);
    INFO(s.detail());
    CHECK(s.replicas() == 3);
    CHECK(s.joining_plan_size() == 0);  // made
    REQUIRE(s.stages_size() == before + 1);
    const v1::StageInfo& added = s.stages(before);
    CHECK(added.site() == "epsilon");
    CHECK(added.replica() == 2);
    CHECK(added.layer_begin() == 0);
    CHECK(added.layer_end() == 2);
    for (const auto& st : s.stages()) CHECK(st.site() != "zeta");
  }
  for (size_t i = 0; i < sites.size(); ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK(s.replicas_added() == 1);
  REQUIRE(s.losses_size() == steps);
  for (double loss : s.losses()) CHECK(std::isfinite(loss));
}

TEST_CASE("a replica leaves a running ring job at a step: the rings close without it") {
  // Three replicas of two stages syncing around rings; gamma leaves, taking replica 1 (gamma,
  // delta) out for good. The attempt goes on (no rollback): the next step's decision names
  // replica 1, the stages left sync around the rings of replicas 0 and 2 from that step on,
  // and a sync frame of that step from gamma's stage is refused. Replicas 0 and 2 end with
  // one model, bit for bit.
  // Blocking syncs all at once, and staggered (each layer's phase its own step: the leave
  // lands between one phase's sync and the other's).
  const std::string stagger = GENERATE(std::string(""), std::string(", stagger: 2"));
  INFO("sync" << stagger);
  const int steps = 40;
  std::string yaml =
      JobYaml("sync: {mode: local, every: 2, reduce: ring, codec: q8" + stagger + "}\n", steps);
  const std::vector<std::string> sites = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"};
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"sites: [alpha, beta, gamma, delta]",
            "sites: [alpha, beta, gamma, delta, epsilon, zeta]"},
           {"replicas: 2", "replicas: 3"}}) {
    const size_t at = yaml.find(from);
    REQUIRE(at != std::string::npos);
    yaml.replace(at, from.size(), to);
  }
  Cluster c({}, {}, sites);
  for (size_t i = 0; i < sites.size(); ++i) c.at(i).jobs().set_throttle(kDropThrottle);
  const std::string id = c.Submit(yaml);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 2; }, 120s));
  const uint32_t attempt = c.Status(id).attempt();
  auto left = ChangeSites(c, id, {}, {"gamma"});
  INFO(left.status().ToString());
  REQUIRE(left.ok());
  REQUIRE(left->replicas_size() == 1);
  CHECK(left->replicas(0) == 1);
  CHECK_THAT(left->detail(), Catch::Contains("go on without it from the next step"));
  REQUIRE(testing::WaitFor([&] { return c.Status(id).replicas_removed() == 1; }, 120s));
  {
    const v1::JobStatus s = c.Status(id);
    INFO(s.detail());
    CHECK(s.attempt() == attempt);
    CHECK(s.sync_ring());
    const std::string marker = "left at step ";
    const size_t at = s.detail().find(marker);
    REQUIRE(at != std::string::npos);
    const uint64_t leave_step = std::stoull(s.detail().substr(at + marker.size()));
    CHECK(leave_step >= 2);
    // Gamma's sync frames of the step it left at are refused by the stages left (told before
    // that step's decision), whether or not gamma's stage has stopped yet.
    CheckRemovedFrameRefused(c, id, s, 0, leave_step);
  }
  for (size_t i = 0; i < sites.size(); ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK(EventKinds(s) == std::vector<std::string>{"site_removed"});  // no rollback
  CHECK(s.attempt() == attempt);
  REQUIRE(s.losses_size() == steps);
  for (double loss : s.losses()) CHECK(std::isfinite(loss));
  CHECK(CheckpointParams(c, 0, id, steps, 0, 1) == CheckpointParams(c, 4, id, steps, 0, 1));
  CHECK(CheckpointParams(c, 1, id, steps, 1, 2) == CheckpointParams(c, 5, id, steps, 1, 2));
}

TEST_CASE("a removed replica comes back when add-site names all its sites again") {
  // A 2 x 2 job; gamma is removed, taking replica 1 (gamma, delta) out without a
  // rollback. add-site of gamma alone is refused, naming both its sites; of delta and gamma it
  // brings replica 1 back as it was (no third replica): it rejoins from replica 0's state at a
  // committed step and syncs with it to the end, the two replicas ending bit for bit alike. The
  // same in a gossip job, whose replicas mix rather than average (not alike at the end).
  const std::string reduce = GENERATE(std::string("gather, codec: q8"), std::string("gossip"));
  INFO("reduce: " << reduce);
  const int steps = 30;
  const std::string yaml =
      JobYaml("sync: {mode: local, every: 2, reduce: " + reduce + "}\n", steps);
  Cluster c;
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(kDropThrottle);
  const std::string id = c.Submit(yaml);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 2; }, 120s));
  auto left = ChangeSites(c, id, {}, {"gamma"});
  INFO(left.status().ToString());
  REQUIRE(left.ok());
  REQUIRE(testing::WaitFor([&] { return c.Status(id).replicas_removed() == 1; }, 120s));
  // One change at a time: the leave is done once its step is decided.
  StatusOr<v1::ChangeJobSitesResponse> part = absl::UnknownError("not asked");
  REQUIRE(testing::WaitFor(
      [&] {
        part = ChangeSites(c, id, {"gamma"}, {});
        return part.status().code() != absl::StatusCode::kFailedPrecondition;
      },
      120s));
  CHECK(part.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(part.status().message()), Catch::Contains("'gamma', 'delta'"));
  auto back = ChangeSites(c, id, {"delta", "gamma"}, {});
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK_THAT(back->detail(), Catch::Contains("back as replica 1"));
  REQUIRE(testing::WaitFor([&] { return c.Status(id).replica_rejoins() == 1; }, 120s));
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK(s.replicas() == 0);  // the job file's two: none added beside them
  CHECK(s.stages_size() == 4);
  CHECK(s.removed_replicas_size() == 0);
  CHECK(s.dropped_replicas_size() == 0);
  CHECK(s.returning_replica() == 0);
  CHECK(s.replicas_added() == 1);
  // Syncs every 2 steps: plain averaging, resolved at submit and kept in the record.
  REQUIRE(s.has_outer());
  CHECK(s.outer().lr() == 1);
  CHECK(s.outer().momentum() == 0);
  CHECK(EventKinds(s) == std::vector<std::string>{"site_removed", "site_added", "replica_rejoin"});
  REQUIRE(s.losses_size() == steps);
  for (double loss : s.losses()) CHECK(std::isfinite(loss));
  if (reduce == "gossip") return;
  CHECK(CheckpointParams(c, 0, id, steps, 0, 1) == CheckpointParams(c, 2, id, steps, 0, 1));
  CHECK(CheckpointParams(c, 1, id, steps, 1, 2) == CheckpointParams(c, 3, id, steps, 1, 2));
}

TEST_CASE("a leaving site killed right after remove-site: the job goes on without it") {
  // A gathered 2 x 2 job; gamma is removed and its daemon killed at once (the coordinator
  // may find it gone before it makes the change: the others restart without it), or once the
  // removal shows, maybe before its replica did its part in the syncs before the step it
  // leaves at. The replica left must not wait for it for good: the leave completes, or the
  // coordinator sees the leaver gone and restarts replica 0 from the committed step. Either way
  // the job ends, replica 1 removed.
  const bool shown = GENERATE(false, true);
  INFO((shown ? "killed once the removal shows" : "killed at once"));
  const int steps = 30;
  const std::string yaml =
      JobYaml("sync: {mode: local, every: 2, reduce: gather, codec: q8}\n", steps);
  Cluster c;
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(kDropThrottle);
  const std::string id = c.Submit(yaml);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 2; }, 120s));
  REQUIRE(ChangeSites(c, id, {}, {"gamma"}).ok());
  if (!shown) c.daemons[2].reset();  // gamma
  REQUIRE(testing::WaitFor([&] { return c.Status(id).replicas_removed() == 1; }, 120s));
  if (shown) c.daemons[2].reset();
  for (size_t i : {0, 1, 3}) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK(s.replicas_removed() == 1);
  CHECK(s.removed_replicas_size() == 1);
  REQUIRE(s.losses_size() == steps);
  for (double loss : s.losses()) CHECK(std::isfinite(loss));
}

TEST_CASE("a site that cannot join is sent away; a removal frees a job waiting for a lost site") {
  // Epsilon is a peer of the coordinator (alpha) only: the job's other sites cannot reach it,
  // so their assignments with it fail; the new replica leaves again and the job goes on.
  // Then, with on_site_loss: wait, delta (replica 1) is lost and the job waits for it until
  // delta is removed: replica 0 finishes alone.
  std::vector<std::string> sites = kSites;
  sites.push_back("epsilon");
  Cluster c(
      {},
      [](daemon::SiteConfig& config) {
        if (config.site == "alpha" || config.site == "epsilon") return;
        std::erase_if(config.peers,
                      [](const daemon::PeerConfig& p) { return p.name == "epsilon"; });
      },
      sites);
  const int steps = 30;
  const std::string yaml = JobYaml(
      "sync: {mode: local, every: 2, reduce: gather, codec: q8, on_site_loss: wait}\n", steps);
  for (size_t i = 0; i < sites.size(); ++i) c.at(i).jobs().set_throttle(kDropThrottle);
  const std::string id = c.Submit(yaml);
  auto change = [&](const std::vector<std::string>& add, const std::vector<std::string>& remove) {
    return ChangeSites(c, id, add, remove);
  };
  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 2; }, 120s));
  REQUIRE(change({"epsilon"}, {}).ok());
  REQUIRE(testing::WaitFor(
      [&] {
        const v1::JobStatus s = c.Status(id);
        return s.replicas_removed() == 1 && s.state() == v1::JOB_STATE_RUNNING;
      },
      120s));
  {
    const v1::JobStatus s = c.Status(id);
    INFO(s.detail());
    CHECK_THAT(s.detail(), Catch::Contains("replica 2 could not join"));
    CHECK(s.removed_replicas_size() == 1);
    CHECK(s.removed_replicas(0) == 2);
    CHECK(s.joined_replica() == 0);  // the join is settled (sent away)
  }
  c.daemons[3].reset();  // delta: the job waits for it (on_site_loss: wait)
  REQUIRE(testing::WaitFor(
      [&] {
        const v1::JobStatus s = c.Status(id);
        return s.state() == v1::JOB_STATE_RECOVERING &&
               s.detail().find("waiting for site 'delta'") != std::string::npos;
      },
      120s));
  REQUIRE(change({}, {"delta"}).ok());
  for (size_t i = 0; i < 3; ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK(s.replicas_removed() == 2);
  CHECK(s.removed_replicas_size() == 2);
  REQUIRE(s.losses_size() == steps);
  for (double loss : s.losses()) CHECK(std::isfinite(loss));
}

TEST_CASE("step mode: a dropped replica's microbatches go to the other, the union batch kept") {
  // sync: {mode: step, on_site_loss: drop}: while replica 1 is out, replica 0 trains both
  // replicas' microbatches of every step (the same rounds of the data), so the job trains the
  // union batch throughout: the in-process fleet's losses to float rounding (the gradients
  // are summed in another grouping while one replica trains them all), and replica 1 rejoins
  // with replica 0's parameters and AdamW state.
  const int steps = 40;
  const std::string yaml = JobYaml("sync: {mode: step, on_site_loss: drop}\n", steps);
  const Oracle oracle = TrainFleet(yaml);
  Cluster c;
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(kDropThrottle);
  const std::string id = c.Submit(yaml);
  const uint64_t dropped_at = KillDeltaUntilDropped(c, id);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).step() >= dropped_at + 3; }, 120s));
  CHECK(c.Status(id).dropped_replicas_size() == 1);  // replica 0 went on alone
  RestartDeltaUntilRejoined(c, id);
  const v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK(s.replica_drops() == 1);
  CHECK(s.replica_rejoins() == 1);
  REQUIRE(s.losses_size() == steps);
  for (int i = 0; i < steps; ++i) {
    INFO("step " << i + 1);
    CHECK(s.losses(i) == Approx(oracle.losses[static_cast<size_t>(i)]).epsilon(1e-3));
  }
  // The replicas end equal, bit for bit, and near the fleet's model.
  const std::vector<float> a0 = CheckpointParams(c, 0, id, steps, 0, 1),
                           a1 = CheckpointParams(c, 1, id, steps, 1, 2);
  CHECK(a0 == CheckpointParams(c, 2, id, steps, 0, 1));
  CHECK(a1 == CheckpointParams(c, 3, id, steps, 1, 2));
  const std::vector<float> model = c.Export(id);
  REQUIRE(model.size() == oracle.params.size());
  float worst = 0;
  for (size_t i = 0; i < model.size(); ++i) {
    // NaN sticks (std::max(worst, NaN) would be worst): a NaN fails the check below.
    const float d = std::fabs(model[i] - oracle.params[i]);
    worst = std::isnan(d) ? d : std::max(worst, d);
  }
  CHECK(worst < 1e-3f);
}

TEST_CASE("a replica split differently rejoins from the stages holding its layers") {
  // Replica 0 on alpha (layer 0) and beta (layer 1), replica 1 on gamma alone: beta is lost,
  // replica 0 sits out, and on beta's return alpha and beta each take their layers from
  // gamma's one stage.
  const int steps = 40;
  std::string yaml =
      JobYaml("replica_stages: [2, 1]\nsync: {mode: local, every: 2, codec: q8}\n", steps);
  yaml.replace(yaml.find("sites: [alpha, beta, gamma, delta]"), 34, "sites: [alpha, beta, gamma]");
  Cluster c;
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(kDropThrottle);
  const std::string id = c.Submit(yaml);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 2; }, 120s));
  c.daemons[1].reset();  // beta: replica 0's last stage
  REQUIRE(testing::WaitFor(
      [&] {
        const v1::JobStatus s = c.Status(id);
        return s.dropped_replicas_size() == 1 && s.state() == v1::JOB_STATE_RUNNING;
      },
      120s));
  CHECK(c.Status(id).dropped_replicas(0) == 0);
  for (size_t i : {size_t{0}, size_t{2}}) c.at(i).jobs().set_throttle(kRejoinThrottle);
  c.Start(1);
  c.at(1).jobs().set_throttle(kDropThrottle);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).replica_rejoins() == 1; }, 120s));
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK(s.dropped_replicas_size() == 0);
  CHECK(s.replica_rejoins() == 1);
  CHECK_THAT(s.detail(), Catch::Contains("replica 0 rejoined at step"));
  // After the last outer step both replicas hold the same model, bit for bit: alpha's and
  // beta's layers put together are gamma's.
  const model::ModelConfig config = model::MakeConfig(2, 32, 2, 256, 32);
  std::vector<float> split(static_cast<size_t>(model::NumParameters(config)));
  std::vector<float> whole = split;
  model::FragmentLayout(config, 0, 1)
      .InsertIntoModel(CheckpointParams(c, 0, id, steps, 0, 1).data(), split.data());
  model::FragmentLayout(config, 1, 2)
      .InsertIntoModel(CheckpointParams(c, 1, id, steps, 1, 2).data(), split.data());
  model::FragmentLayout(config, 0, 2)
      .InsertIntoModel(CheckpointParams(c, 2, id, steps, 0, 2).data(), whole.data());
  CHECK(split == whole);
}

TEST_CASE("replica jobs are checked when submitted") {
  Cluster c;
  v1::SubmitJobRequest req;
  std::string yaml = JobYaml("sync: {mode: local, codec: q3}\n", 4);
  req.set_job_yaml(yaml);
  auto r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("q3"));
  yaml = JobYaml("", 4);
  yaml.replace(yaml.find("replicas: 2"), 11, "replicas: 3");
  req.set_job_yaml(yaml);
  r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("3 replicas"));
  yaml = JobYaml("", 4);
  yaml.replace(yaml.find("replicas: 2"), 11, "replicas: auto");
  req.set_job_yaml(yaml);
  r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("auto needs placement: planned"));
  req.set_job_yaml(JobYaml("sync: {mode: local, reduce: tree}\n", 4));
  r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
  CHECK_THAT(std::string(r.status().message()),
             Catch::Contains("sync.reduce must be gather, ring, auto or gossip, not 'tree'"));
  // Gossip sends fp32 shares or each link's differences in a dense codec of 4 bits or more:
  // q2 is refused, saying why, and so is an outer step out of range (over compressed links
  // too) and a codec gossip cannot send.
  req.set_job_yaml(JobYaml("sync: {mode: local, reduce: gossip, codec: q2}\n", 4));
  r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("q2 diverged on real text"));
  req.set_job_yaml(
      JobYaml("sync: {mode: local, reduce: gossip, codec: q4, outer: {momentum: 1.5}}\n", 4));
  r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("momentum"));
  req.set_job_yaml(JobYaml("sync: {mode: local, reduce: gossip, codec: topk:0.1+q4}\n", 4));
  r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
  CHECK_THAT(std::string(r.status().message()),
             Catch::Contains("exact or topk:F) or every coordinate's difference"));
  // The exponential graph is gossip's, with one out-neighbour; an unknown graph is named.
  req.set_job_yaml(JobYaml("sync: {mode: local, reduce: ring, graph: exponential}\n", 4));
  r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
  CHECK_THAT(std::string(r.status().message()),
             Catch::Contains("sync.graph: exponential is gossip's one-peer graph"));
  req.set_job_yaml(
      JobYaml("sync: {mode: local, reduce: gossip, fanout: 2, graph: exponential}\n", 4));
  r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("with fanout 2"));
  req.set_job_yaml(JobYaml("sync: {mode: local, reduce: gossip, graph: star}\n", 4));
  r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
  CHECK_THAT(std::string(r.status().message()),
             Catch::Contains("sync.graph must be random or exponential, not 'star'"));
  req.set_job_yaml(JobYaml("sync: {mode: local, reduce: gossip, overlap: 1}\n", 4));
  r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("overlap 0"));
  // Gradient tracking corrects gossip's local steps: refused with a collective, by name.
  req.set_job_yaml(JobYaml("sync: {mode: local, reduce: ring, tracking: true}\n", 4));
  r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
  CHECK_THAT(std::string(r.status().message()),
             Catch::Contains("sync.tracking corrects gossip's local steps") &&
                 Catch::Contains("not ring"));
  req.set_job_yaml(JobYaml("sync: {mode: local, reduce: gossip, tracking: maybe}\n", 4));
  r = c.at(0).jobs().Submit(req);
  CHECK(!r.ok());
}

TEST_CASE("a gossip job draws its graphs from the links the sites measured") {
  // Four single-stage replicas: alpha and beta joined at 1 GB/s, gamma and delta too, 1 MB/s
  // between the pairs, placed by the planner or by hand. The first attempt's graphs come from
  // the links the sites measured (the planner's profiles, or their link estimates alone; the status
  // shows them, by replica): a slow link is drawn a tenth as often as a fast one (the floor
  // that keeps every replica's push-sum weight up). The fleet drawing from the same matrix is
  // the oracle, bit for bit.
  Cluster c([&](daemon::transport::LoopbackNetwork& net) { SetRateBetweenPairs(net, 1e6); });
  REQUIRE(testing::WaitFor([&] { return LinksMeasured(c, 1e7); }, 60s));
  std::string yaml = JobYaml("sync: {mode: local, every: 2, reduce: gossip}\n", 6);
  yaml.replace(yaml.find("replicas: 2"), 11, "replicas: 4");
  const std::string placement = GENERATE(std::string("planned"), std::string("even"));
  INFO("placement: " << placement);
  yaml.replace(yaml.find("placement: even"), 15, "placement: " + placement);
  const std::string id = c.Submit(yaml);
  const v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  REQUIRE(s.stages_size() == 4);
  REQUIRE(s.gossip_links_size() == 16);
  auto pair = [&](int r) { return s.stages(r).site() == "alpha" || s.stages(r).site() == "beta"; };
  for (int r = 0; r < 4; ++r) {
    CHECK(s.stages(r).replica() == static_cast<uint32_t>(r));
    double fastest = 0;
    for (int q = 0; q < 4; ++q) fastest = std::max(fastest, s.gossip_links(r * 4 + q));
    for (int q = 0; q < 4; ++q) {
      INFO("replica " << r << " on " << s.stages(r).site() << " -> " << q << " on "
                      << s.stages(q).site());
      const double bw = s.gossip_links(r * 4 + q);
      if (r == q) {
        CHECK(bw == 0);
      } else if (pair(r) == pair(q)) {
        CHECK(bw > 1e8);
      } else {
        CHECK(bw == Approx(fastest * daemon::kGossipLinkFloor));  // 1 MB/s, raised to a tenth
      }
    }
  }
  CheckAgainst(TrainFleet(yaml, 4, 1, {}, GossipLinks(s)), s, c.Export(id));
}

TEST_CASE("a gossip job's graphs follow its links as their rates move, the attempt going on") {
  // Four single-stage replicas, 1 MB/s between the pairs {alpha, beta} and {gamma, delta} when
  // the job starts, then 1 GB/s: within two probe intervals the coordinator sends every stage
  // the new matrix (epoch 1) for the rounds from a few past the furthest stage's, and every
  // stage draws from it there, the attempt going on (no rollback) to the job's end.
  Cluster c([&](daemon::transport::LoopbackNetwork& net) { SetRateBetweenPairs(net, 1e6); },
            [](daemon::SiteConfig& config) { config.links.probe_interval_seconds = 1; });
  REQUIRE(testing::WaitFor([&] { return LinksMeasured(c, 1e7); }, 60s));
  const int steps = 60;
  std::string yaml = JobYaml("sync: {mode: local, every: 2, reduce: gossip}\n", steps);
  yaml.replace(yaml.find("replicas: 2"), 11, "replicas: 4");
  // Steps of about half a second: the new matrix's first round is seconds ahead of any stage.
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(2.5 * kDropThrottle);
  const std::string id = c.Submit(yaml);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 2; }, 120s));
  {
    const v1::JobStatus s = c.Status(id);
    REQUIRE(s.gossip_links_size() == 16);
    CHECK(s.gossip_links_epoch() == 0);
  }
  SetRateBetweenPairs(*c.net, 1e9);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).gossip_links_epoch() >= 1; }, 120s));
  {
    const v1::JobStatus s = c.Status(id);
    INFO(s.detail());
    CHECK(s.gossip_links_from_round() > 1);
    for (int r = 0; r < 4; ++r) {
      for (int q = 0; q < 4; ++q) {
        if (r != q) CHECK(s.gossip_links(r * 4 + q) > 1e8);  // every link fast now
      }
    }
  }
  // /metrics and /status show the epoch (1, or more if the estimates moved 2x again).
  const auto metrics = testing::HttpGet(c.at(0).status_port(), "/metrics");
  CHECK_THAT(metrics.body,
             Catch::Contains("longhaul_job_gossip_links_epoch{job=\"" + id + "\"} ") &&
                 !Catch::Contains("longhaul_job_gossip_links_epoch{job=\"" + id + "\"} 0"));
  const auto page = testing::HttpGet(c.at(0).status_port(), "/status");
  CHECK_THAT(page.body, Catch::Contains("\"from_round\"") && Catch::Contains("\"epoch\""));
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK(s.attempt() == 1);
  const std::vector<std::string> kinds = EventKinds(s);
  CHECK(std::count(kinds.begin(), kinds.end(), "rollback") == 0);
  CHECK(std::count(kinds.begin(), kinds.end(), "gossip_links") >= 1);
  REQUIRE(s.losses_size() == steps);
  for (double loss : s.losses()) CHECK(std::isfinite(loss));
}

TEST_CASE("sync.reduce gossip: push-sum rounds over each round's graph, the fleet's model") {
  // Four single-stage replicas, one out-neighbour each per round drawn from the job's seed
  // and the links the sites had measured at submit (a different graph every round), a quarter of
  // each slice sent: after steps 2 and 4 a sparse round, after step 6 a round and the exact
  // average. Then two replicas of two stages (the tied embedding's copies on both ends mix alike),
  // every coordinate sent, each replica's outer step before its mix. The fleet with reduce
  // gossip is the oracle, bit for bit; with gradient tracking too (each step's correction, the
  // drifts in the rounds' frames).
  const std::string sync =
      GENERATE(std::string("sync: {mode: local, every: 2, reduce: gossip, codec: topk:0.25}\n"),
               std::string("sync: {mode: local, every: 2, reduce: gossip, fanout: 2, "
                           "outer: {lr: 0.9, momentum: 0.5}}\n"),
               std::string("sync: {mode: local, every: 2, reduce: gossip, codec: topk:0.25, "
                           "tracking: true}\n"),
               // A warm-up: rounds after steps 1, 2 and 3, then 4 and 6 (round 4).
               std::string("sync: {mode: local, every: 2, reduce: gossip, codec: topk:0.25, "
                           "warmup: 3}\n"),
               // Over compressed links: each out-neighbour its own q4 difference from the copy
               // that link holds (the drifts in q4 too, tracked).
               std::string("sync: {mode: local, every: 2, reduce: gossip, codec: q4}\n"),
               std::string("sync: {mode: local, every: 2, reduce: gossip, codec: q4, "
                           "tracking: true}\n"),
               // The one-peer exponential graph: replica i to i + 1, then i + 2, in turn; each
               // replica's outer step before its mix, over the links too.
               std::string("sync: {mode: local, every: 2, reduce: gossip, codec: q4, "
                           "graph: exponential, outer: {lr: 1, momentum: 0.5}}\n"));
  INFO(sync);
  std::string yaml = JobYaml(sync, 6);
  yaml.replace(yaml.find("replicas: 2"), 11, "replicas: 4");
  Cluster c;
  const auto [id, s] = JobAgainstFleet(c, yaml);
  REQUIRE(s.sync_groups_size() == 1);
  CHECK(s.sync_groups(0).reduce() == "gossip");
  // The consensus distance the status shows, estimated from the stages' sketches, is the
  // fleet's exact one before that round, to the sketch's precision.
  const Oracle oracle = TrainFleet(yaml, 0, 0, {}, GossipLinks(s));
  const v1::SyncGroupStatus& group = s.sync_groups(0);
  REQUIRE(group.consensus_step() > 0);
  REQUIRE(group.consensus_step() <= oracle.consensus.size());
  const double exact = oracle.consensus[group.consensus_step() - 1];
  INFO("round after step " << group.consensus_step() << ": sketched " << group.consensus_distance()
                           << ", exact " << exact);
  CHECK(exact > 0);
  CHECK(group.consensus_distance() == Approx(exact).epsilon(0.25));
  auto metrics = testing::HttpGet(c.at(0).status_port(), "/metrics");
  CHECK_THAT(metrics.body, Catch::Contains("longhaul_sync_group_consensus_distance{job=\"" + id));
  // The rounds after steps 2 and 4 at least (the last step's report may precede its round).
  CHECK(s.sync_groups(0).syncs() >= 2);
  // A round's frame from a replica that is not an in-neighbour of that round is refused.
  auto spec = daemon::ParseJobSpec(yaml, "job", ".");
  REQUIRE(spec.ok());
  const fleet::GossipGraph g = daemon::GossipRoundGraph(spec->sync, std::vector<bool>(4, true),
                                                        spec->job.seed, 1, GossipLinks(s));
  int from = -1, to = -1;
  for (int j = 0; j < 4 && from < 0; ++j) {
    for (int i = 0; i < 4; ++i) {
      const auto& out = g.out[static_cast<size_t>(j)];
      if (i != j && std::find(out.begin(), out.end(), i) == out.end()) {
        from = j;
        to = i;
        break;
      }
    }
  }
  if (from >= 0) {  // fanout 2 of 3 leaves each replica one it does not send to
    // wpe (1024 values) in the sync after the second step: round 0.
    v1::TensorFrame frame = SyncFrame(id, s.attempt(), static_cast<uint32_t>(from),
                                      static_cast<uint32_t>(to), static_cast<uint32_t>(from), 1);
    const std::vector<float> x(1024, 0.0f), w(1024, 1.0f);
    std::vector<uint32_t> all(1024);
    for (uint32_t k = 0; k < 1024; ++k) all[k] = k;
    std::vector<uint8_t> payload = fleet::EncodeGossipFrame(1, all, x, w);
    frame.set_encoded_size(payload.size());
    const Status d = c.at(static_cast<size_t>(to))
                         .jobs()
                         .Deliver(frame, payload, kSites[static_cast<size_t>(from)]);
    CHECK(d.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(d.message()), Catch::Contains("not from an in-neighbour"));
  }
  // Two replicas of two stages: each group's distance covers its stages' slices (the tied
  // embedding on the first stages only), so the groups' squares add to the whole model's.
  Cluster c2;
  const std::string yaml2 = JobYaml(sync, 6);
  const auto [id2, s2] = JobAgainstFleet(c2, yaml2);
  const Oracle oracle2 = TrainFleet(yaml2, 0, 0, {}, GossipLinks(s2));
  REQUIRE(s2.sync_groups_size() == 2);
  double squares = 0;
  for (const auto& g : s2.sync_groups()) {
    REQUIRE(g.consensus_step() == s2.sync_groups(0).consensus_step());
    squares += g.consensus_distance() * g.consensus_distance();
  }
  REQUIRE(s2.sync_groups(0).consensus_step() > 0);
  const double exact2 = oracle2.consensus[s2.sync_groups(0).consensus_step() - 1];
  INFO("2 x 2: sketched " << std::sqrt(squares) << ", exact " << exact2);
  CHECK(std::sqrt(squares) == Approx(exact2).epsilon(0.25));
}

// sync: {codec: adaptive} picks each sync's codec from the links' estimates: fp32 where the
// loopback's probes report 1 GB/s, q4 (its floor: nothing fits) where they report 10 kB/s
// between the replicas. The job completes either way.
TEST_CASE("the adaptive sync codec follows the measured links") {
  for (const bool slow : {false, true}) {
    INFO((slow ? "slow" : "fast") << " links between the replicas");
    Cluster c([&](daemon::transport::LoopbackNetwork& net) {
      if (slow) SetRateBetweenPairs(net, 1e4);
    });
    // Every site has measured its links at the rates set (probes every 5 s).
    REQUIRE(testing::WaitFor([&] { return LinksMeasured(c, slow ? 1e5 : 1e300); }, 60s));
    // Compute stretched to 400 ms a step (1 layer x 2 microbatches x 200 ms), so that the
    // budget, a tenth of the compute between syncs (80 ms), dwarfs a loopback round trip even
    // under a sanitizer on a loaded machine (the prediction adds half the measured RTT, a
    // moving average of heartbeats that one preempted heartbeat can raise by tens of ms):
    // what decides is the rate the probes report.
    for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0.2);
    const std::string id = c.Submit(JobYaml("sync: {mode: local, every: 2, codec: adaptive}\n", 6));
    const v1::JobStatus s = c.WaitCompleted(id);
    REQUIRE(s.sync_groups_size() == 2);
    for (const auto& group : s.sync_groups()) {
      CHECK(group.codec() == (slow ? "q4" : "fp32"));
      CHECK(group.syncs() == 2);
    }
    bool reasoned = false;
    for (const auto& l : s.links()) {
      if (l.reason().find("adaptive") != std::string::npos) reasoned = true;
    }
    CHECK(reasoned);
  }
}

TEST_CASE("under the adaptive sync codec the tied embedding's two copies stay equal") {
  // The first stages' group (alpha, gamma) syncs over slow links, the last stages' (beta,
  // delta) over fast ones: the two groups choose different codecs, but the embedding, held
  // by a replica's first and last stage, must take the same steps on both.
  Cluster c([&](daemon::transport::LoopbackNetwork& net) {
    net.SetRate("alpha", "gamma", 1e4);
    net.SetRate("gamma", "alpha", 1e4);
  });
  // Every site has measured all its links, alpha's and gamma's to each other at the rate set.
  REQUIRE(testing::WaitFor(
      [&] {
        for (size_t i = 0; i < kSites.size(); ++i) {
          const v1::ListLinksResponse links = c.at(i).Links();
          for (const auto& l : links.links()) {
            const double bw = l.outbound().bandwidth_bytes_per_second();
            const bool slow = (i == 0 && l.peer() == "gamma") || (i == 2 && l.peer() == "alpha");
            if (bw <= 0 || (slow && bw > 1e5)) return false;
          }
        }
        return true;
      },
      60s));
  // A budget of 80 ms (a tenth of 2 steps of 400 ms), far above a loopback round trip under a
  // sanitizer, as in the test before.
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0.2);
  const int steps = 6;
  const std::string id =
      c.Submit(JobYaml("sync: {mode: local, every: 2, codec: adaptive}\n", steps));
  const v1::JobStatus s = c.WaitCompleted(id);
  REQUIRE(s.sync_groups_size() == 2);
  CHECK(s.sync_groups(0).codec() == "q4");
  CHECK(s.sync_groups(1).codec() == "fp32");
  const model::ModelConfig config = model::MakeConfig(2, 32, 2, 256, 32);
  for (size_t first : {size_t{0}, size_t{2}}) {
    INFO("replica " << first / 2);
    const model::FragmentLayout a(config, 0, 1), b(config, 1, 2);
    const std::vector<float> pa = CheckpointParams(c, first, id, steps, 0, 1);
    const std::vector<float> pb = CheckpointParams(c, first + 1, id, steps, 1, 2);
    const auto t = model::Tensor::kWte;
    REQUIRE(a.size(t) == b.size(t));
    CHECK(std::equal(pa.begin() + a.offset(t), pa.begin() + a.offset(t) + a.size(t),
                     pb.begin() + b.offset(t)));
  }
}

// The plan's replicas: how many, and replica 0's stage count (the fleet's result does not
// depend on it), with the checks the runtime relies on: replicas in order, each covering the
// layers in order from layer 0 (the planner may split each its own way), a site in one
// replica only.
std::pair<int, int> PlanShape(const v1::JobStatus& s) {
  REQUIRE(s.stages_size() > 0);
  const int replicas = static_cast<int>(s.stages(s.stages_size() - 1).replica()) + 1;
  std::set<std::string> sites;
  int first_stages = 0, previous = -1;
  for (int i = 0; i < s.stages_size(); ++i) {
    const auto& st = s.stages(i);
    const int r = static_cast<int>(st.replica());
    if (r != previous) {
      CHECK(r == previous + 1);
      CHECK(st.layer_begin() == 0);
      previous = r;
    } else {
      CHECK(st.layer_begin() == s.stages(i - 1).layer_end());
    }
    if (r == 0) ++first_stages;
    CHECK(sites.insert(st.site()).second);
  }
  return {replicas, first_stages};
}

TEST_CASE("the planner places replicas: a given count, and auto") {
  Cluster c;
  // Two replicas in step mode: the union batch's losses, whichever sites and split it chose.
  std::string yaml = JobYaml("sync: {mode: step, codec: exact}\n", 4);
  yaml.replace(yaml.find("placement: even"), 15, "placement: planned");
  std::string id = c.Submit(yaml);
  v1::JobStatus s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK_THAT(s.detail(), Catch::Contains("planned 2 replicas of"));
  auto [replicas, stages] = PlanShape(s);
  CHECK(replicas == 2);
  CheckAgainst(TrainFleet(yaml, replicas, stages), s, c.Export(id));

  // auto: the planner's count, trained as the in-process fleet of that shape trains.
  yaml = JobYaml("sync: {mode: local, every: 2, codec: q4}\n", 4);
  yaml.replace(yaml.find("placement: even"), 15, "placement: planned");
  yaml.replace(yaml.find("replicas: 2"), 11, "replicas: auto");
  id = c.Submit(yaml);
  s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK_THAT(s.detail(), Catch::Contains("replicas (auto) of"));
  std::tie(replicas, stages) = PlanShape(s);
  CHECK(replicas >= 1);
  CheckAgainst(TrainFleet(yaml, replicas, stages), s, c.Export(id));

  // Paced: the planner gives each replica the microbatches its measured speed allows (the
  // fastest the job's 2), the plan records them, and the replicas train them: the fleet's
  // losses and weights with those counts.
  yaml = JobYaml("replica_microbatches: paced\nsync: {mode: local, every: 2, codec: q4}\n", 4);
  yaml.replace(yaml.find("placement: even"), 15, "placement: planned");
  id = c.Submit(yaml);
  s = c.WaitCompleted(id);
  INFO(s.detail());
  CHECK_THAT(s.detail(), Catch::Contains("paced: microbatches per replica"));
  std::tie(replicas, stages) = PlanShape(s);
  CHECK(replicas == 2);
  std::vector<int> counts;
  for (int r = 0; r < replicas; ++r) {
    int count = -1;  // replica r's, the same on each of its stages
    for (const auto& st : s.stages()) {
      if (static_cast<int>(st.replica()) != r) continue;
      if (count < 0) count = static_cast<int>(st.microbatches());
      CHECK(st.microbatches() == static_cast<uint32_t>(count));
    }
    counts.push_back(count);
    CHECK(counts.back() >= 1);
    CHECK(counts.back() <= 2);
  }
  CHECK(*std::max_element(counts.begin(), counts.end()) == 2);
  CheckAgainst(TrainFleet(yaml, replicas, stages, counts), s, c.Export(id));
}

// A manifest of byte tokens (vocabulary 256) in `dir`: `shards` shards of the built-in
// corpus drawn with `seed`.
void WriteByteManifest(const std::string& dir, uint64_t seed, int shards) {
  model::TokenManifest m;
  m.dir = dir;
  m.tokenizer = {"bytes", "tiktoken", std::string(64, 'c'), 256, std::nullopt, std::nullopt};
  for (int i = 0; i < shards; ++i) {
    const model::TokenData data =
        model::TokensFromText(model::BuiltinCorpus(seed * 100 + uint64_t(i), 20000), "corpus");
    const std::string file = "train-00000" + std::to_string(i) + ".bin";
    REQUIRE(model::WriteTokenFile(dir + "/" + file, data.tokens, model::TokenWidth::kU16).ok());
    m.train.push_back(
        {file, int64_t(data.tokens.size()), 1, Sha256OfFile(dir + "/" + file, "shard").value()});
  }
  REQUIRE(model::WriteFileAtomically(dir + "/manifest.json", model::TokenManifestToJson(m)).ok());
}

TEST_CASE("a 2 x 2 job on a two-manifest mixture: the weights asked, bit for bit after a restart") {
  const std::string data = testing::TempDir("mixture-data");
  WriteByteManifest(data + "/prose", 1, 3);
  WriteByteManifest(data + "/other", 2, 2);
  std::string yaml = JobYaml("sync: {mode: local, every: 2, codec: q8, on_site_loss: wait}\n", 10);
  const std::string builtin = "data: {train: builtin}";
  yaml.replace(yaml.find(builtin), builtin.size(),
               "data: {train: [{manifest: \"" + data + "/prose\", weight: 0.7}, {manifest: \"" +
                   data + "/other/manifest.json\", weight: 0.3}]}");
  // The in-process fleet reads the same mixture: each replica its share, as the sites do.
  const Oracle oracle = TrainFleet(yaml);
  Cluster c({}, [&data](daemon::SiteConfig& config) { config.data_roots.push_back(data); });
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0.05);
  const std::string id = c.Submit(yaml);
  REQUIRE(testing::WaitFor([&] { return c.Status(id).committed_step() >= 2; }, 120s));
  c.daemons[0].reset();  // alpha: the coordinator and replica 0's first stage (its data reader)
  c.Start(0);
  for (size_t i = 0; i < kSites.size(); ++i) c.at(i).jobs().set_throttle(0);
  const v1::JobStatus s = c.WaitCompleted(id);
  CHECK(s.attempt() >= 2);
  CheckAgainst(oracle, s, c.Export(id));
  // 10 steps of 2 replicas x 2 microbatches x 2 sequences: 80 windows, 56 and 24 of them.
  REQUIRE(s.data_sources_size() == 2);
  CHECK(s.data_sources(0).name() == data + "/prose");
  CHECK(s.data_sources(0).weight() == 0.7);
  CHECK(s.data_sources(0).tokens() == 56 * 32);
  CHECK(s.data_sources(1).tokens() == 24 * 32);
}

TEST_CASE(
    "a job naming a manifest it may not read, or of another vocabulary, is refused at submit") {
  const std::string data = testing::TempDir("manifest-refusals");
  WriteByteManifest(data + "/ok", 1, 1);
  Cluster c({}, [&data](daemon::SiteConfig& config) { config.data_roots.push_back(data + "/ok"); });
  auto submit = [&](const std::string& train) {
    std::string yaml = JobYaml("sync: {mode: step, codec: exact}\n", 2);
    const std::string builtin = "data: {train: builtin}";
    yaml.replace(yaml.find(builtin), builtin.size(), "data: {train: " + train + "}");
    v1::SubmitJobRequest req;
    req.set_job_yaml(yaml);
    return c.at(0).jobs().Submit(req).status();
  };
  // A manifest inside the roots whose shard is a link out of them.
  WriteByteManifest(data + "/ok/linked", 3, 1);
  WriteByteManifest(data + "/outside", 4, 1);
  std::filesystem::remove(data + "/ok/linked/train-000000.bin");
  std::filesystem::create_symlink(data + "/outside/train-000000.bin",
                                  data + "/ok/linked/train-000000.bin");
  Status s = submit("\"" + data + "/ok/linked\"");
  CHECK(s.code() == absl::StatusCode::kPermissionDenied);
  CHECK_THAT(std::string(s.message()),
             Catch::Matchers::Contains("data.train shard train-000000.bin"));
  s = submit("[{manifest: \"" + data + "/outside\"}]");
  CHECK(s.code() == absl::StatusCode::kPermissionDenied);
  CHECK_THAT(std::string(s.message()), Catch::Matchers::Contains("data.train[0].manifest"));
  // A vocabulary of 256 bytes against a model of 512.
  std::string yaml = JobYaml("sync: {mode: step, codec: exact}\n", 2);
  yaml.replace(yaml.find("vocab: 256"), 10, "vocab: 512");
  yaml.replace(yaml.find("data: {train: builtin}"), 22, "data: {train: \"" + data + "/ok\"}");
  v1::SubmitJobRequest req;
  req.set_job_yaml(yaml);
  s = c.at(0).jobs().Submit(req).status();
  CHECK_THAT(std::string(s.message()),
             Catch::Matchers::Contains("(vocabulary 256), but the model's vocabulary is 512"));
  CHECK(c.Status(c.Submit(JobYaml("sync: {mode: step, codec: exact}\n", 1))).job_id() !=
        "");  // daemon up
}

TEST_CASE("a corrupt shard fails the job at once, naming the file; the daemons stay up") {
  const std::string data = testing::TempDir("corrupt-shard");
  WriteByteManifest(data + "/prose", 1, 2);
  {  // one flipped byte: the size is right, so only the shard's SHA-256 can tell
    std::fstream f(data + "/prose/train-000001.bin",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4000);
    f.put('#');
  }
  std::string yaml = JobYaml("sync: {mode: step, codec: exact}\n", 40);
  const std::string builtin = "data: {train: builtin}";
  yaml.replace(yaml.find(builtin), builtin.size(), "data: {train: \"" + data + "/prose\"}");
  Cluster c({}, [&data](daemon::SiteConfig& config) { config.data_roots.push_back(data); });
  const std::string id = c.Submit(yaml);
  const v1::JobStatus s = testing::WaitJobEnd(c.at(0), id, 300s);
  INFO(s.detail());
  CHECK(s.state() == v1::JOB_STATE_FAILED);
  CHECK_THAT(s.detail(), Catch::Matchers::Contains("train-000001.bin' is corrupt: its SHA-256"));
  CHECK(s.attempt() == 1);  // not retried: a rollback would read the same bytes
  CHECK(c.at(0).jobs().ListJobs().jobs_size() == 1);  // the daemon answers
}

}  // namespace
}  // namespace longhaul
