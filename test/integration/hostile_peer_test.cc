// A wrong peer cannot break a daemon: alpha and beta run a job over mutual TLS; gamma holds a
// valid certificate from the same CA and is a configured peer of both, but is not in the job.
// Playing gamma with raw Peer calls, the test tries every attack docs/SECURITY.md lists:
// fetching the job's parameters, reporting steps, assigning stages (a path-escaping job id, a
// hijack of the running job), stopping and cancelling stages, sending tensors (as itself, in
// another site's name, with a 2 GiB announced size), and profiling a model too large for the
// site. Each must be refused with a fitting status code, both daemons keep serving, and the
// job completes with losses identical, bit for bit, to the same job trained in one process.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <string>

#include "daemon/daemon.h"
#include "daemon/peer_security.h"
#include "test/daemon/job_test_util.h"
#include "test/daemon/test_util.h"

namespace longhaul {
namespace {

using namespace std::chrono_literals;
using daemon::Daemon;

std::string JobYaml(int steps) {
  return "name: honest\n"
         "model: {layers: 2, channels: 32, heads: 2, vocab: 256, context: 32}\n"
         "data: {train: builtin}\n"
         "steps: " +
         std::to_string(steps) +
         "\n"
         "batch_size: 4\n"
         "microbatch_size: 2\n"
         "seq_len: 32\n"
         "optimizer: {lr: 3e-3, warmup_steps: 2, weight_decay: 0.1, grad_clip: 1.0}\n"
         "seed: 11\n"
         "checkpoint: {every: 2}\n"
         "backend: cpu\n"
         "threads: 1\n"
         "sites: [alpha, beta]\n"
         "placement: even\n"
         "replan: off\n"
         "compression: {mode: off}\n";
}

std::string MakeCerts() {
  const std::string dir = testing::TempDir("hostile-certs");
  std::string out;
  const int rc = testing::RunCommand("tools/make-certs.sh " + dir + " alpha beta gamma", &out);
  INFO(out);
  REQUIRE(rc == 0);
  return dir;
}

daemon::TlsConfig Tls(const std::string& dir, const std::string& site) {
  return {dir + "/ca.pem", dir + "/" + site + ".pem", dir + "/" + site + ".key"};
}

// gamma's view of another site's Peer service: a channel with gamma's certificate.
std::unique_ptr<v1::Peer::Stub> StubAs(const std::string& certs, const std::string& as,
                                       const std::string& to, int port) {
  auto ch = daemon::PeerChannel(Tls(certs, as), to, "127.0.0.1:" + std::to_string(port));
  REQUIRE(ch.ok());
  return v1::Peer::NewStub(*ch);
}

void Deadline(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
}

grpc::Status Fetch(v1::Peer::Stub* stub, const v1::FetchFragmentRequest& req, int* frames) {
  grpc::ClientContext ctx;
  Deadline(&ctx);
  auto reader = stub->FetchFragment(&ctx, req);
  v1::TensorFrame f;
  *frames = 0;
  while (reader->Read(&f)) ++*frames;
  return reader->Finish();
}

grpc::Status Send(v1::Peer::Stub* stub, const std::vector<v1::TensorFrame>& frames) {
  grpc::ClientContext ctx;
  Deadline(&ctx);
  v1::FrameAck ack;
  auto writer = stub->SendFrames(&ctx, &ack);
  for (const auto& f : frames) {
    if (!writer->Write(f)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

TEST_CASE("a peer outside the job is refused everything, and the job completes unharmed") {
  const std::string certs = MakeCerts();
  const int pa = testing::FreePort(), pb = testing::FreePort(), pc = testing::FreePort();
  auto ca = testing::MakeSiteConfig({"alpha", pa, {{"beta", pb}, {"gamma", pc}}});
  auto cb = testing::MakeSiteConfig({"beta", pb, {{"alpha", pa}, {"gamma", pc}}});
  ca.tls = Tls(certs, "alpha");
  cb.tls = Tls(certs, "beta");
  ca.links.probe_interval_seconds = cb.links.probe_interval_seconds = 5;
  cb.memory_limit_bytes = int64_t{256} << 20;
  daemon::DaemonOptions options;
  options.token = "hostile-test-token-0123";
  auto a = Daemon::Start(ca, options);
  REQUIRE(a.ok());
  auto b = Daemon::Start(cb, options);
  REQUIRE(b.ok());

  const std::string yaml = JobYaml(80);  // long enough that the attacks land mid-run
  v1::SubmitJobRequest submit;
  submit.set_job_yaml(yaml);
  auto job = (*a)->jobs().Submit(submit);
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  const std::string id = job->job_id();
  REQUIRE(testing::WaitFor(
      [&] {
        auto s = (*a)->jobs().GetJob(id, 1);
        return s.ok() && s->step() >= 2 && s->committed_step() >= 2;
      },
      60s));

  auto to_a = StubAs(certs, "gamma", "alpha", pa);
  auto to_b = StubAs(certs, "gamma", "beta", pb);

  {
    // 1. The job's parameters and optimizer state, from a stage site.
    v1::FetchFragmentRequest fetch;
    fetch.set_job_id(id);
    fetch.set_step(2);
    fetch.set_include_state(true);
    fetch.set_from_site("gamma");
    int frames = 0;
    grpc::Status s = Fetch(to_b.get(), fetch, &frames);
    CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK(frames == 0);
    // ...claiming to be the coordinator: the certificate says gamma.
    fetch.set_from_site("alpha");
    s = Fetch(to_b.get(), fetch, &frames);
    CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(s.error_message(), Catch::Contains("certificate names"));
    CHECK(frames == 0);
  }
  {
    // 2. Step reports to the coordinator: a stage out of the plan with an absurd checkpoint,
    // and beta's own stage.
    v1::StepReport report;
    report.set_job_id(id);
    report.set_stage(99);
    report.set_checkpoint_step(UINT64_MAX);
    report.set_from_site("gamma");
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::StepDecision d;
    grpc::Status s = to_a->ReportStep(&ctx, report, &d);
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    report.set_stage(1);
    report.set_checkpoint_step(0);
    grpc::ClientContext ctx2;
    Deadline(&ctx2);
    s = to_a->ReportStep(&ctx2, report, &d);
    CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(s.error_message(), Catch::Contains("site 'beta' runs it"));
  }
  {
    // 3. Assignments: a job id that escapes the data directory, and a hijack of the job.
    v1::StageAssignment assign;
    assign.set_job_id("../../escape");
    assign.set_coordinator("gamma");
    assign.set_job_yaml(yaml);
    auto* st = assign.add_stages();
    st->set_site("beta");
    st->set_layer_end(2);
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::AssignResponse r;
    grpc::Status s = to_b->AssignStage(&ctx, assign, &r);
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_FALSE(std::filesystem::exists(cb.data_dir + "/../escape"));
    CHECK_FALSE(std::filesystem::exists(cb.data_dir + "/jobs/../../escape"));

    assign.set_job_id(id);  // the running job, with gamma as its coordinator
    grpc::ClientContext ctx2;
    Deadline(&ctx2);
    s = to_b->AssignStage(&ctx2, assign, &r);
    CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(s.error_message(), Catch::Contains("its coordinator is 'alpha'"));

    assign.set_coordinator("alpha");  // in alpha's name: the certificate says gamma
    grpc::ClientContext ctx3;
    Deadline(&ctx3);
    s = to_b->AssignStage(&ctx3, assign, &r);
    CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);

    // A new job of gamma's own, reading a file outside beta's data roots.
    std::string outside = yaml;
    outside.replace(outside.find("data: {train: builtin}"), 22,
                    "data: {train: /etc/passwd, format: text}");
    assign.set_job_id("gammas-own-000001");
    assign.set_coordinator("gamma");
    assign.set_job_yaml(outside);
    grpc::ClientContext ctx4;
    Deadline(&ctx4);
    s = to_b->AssignStage(&ctx4, assign, &r);
    CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    CHECK_THAT(s.error_message(), Catch::Contains("outside site 'beta''s data_roots"));
  }
  {
    // 4. Stop and cancel the running stage.
    for (auto kind : {v1::JobCommand::KIND_CANCEL, v1::JobCommand::KIND_STOP_ATTEMPT,
                      v1::JobCommand::KIND_PING}) {
      v1::JobCommand cmd;
      cmd.set_job_id(id);
      cmd.set_kind(kind);
      cmd.set_attempt(1000);
      cmd.set_from_site("gamma");
      grpc::ClientContext ctx;
      Deadline(&ctx);
      v1::JobCommandResponse r;
      grpc::Status s = to_b->ControlJob(&ctx, cmd, &r);
      CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    }
  }
  {
    // 5. Tensors: as gamma, in alpha's name, and with a 2 GiB announced size.
    v1::TensorFrame f;
    f.set_job_id(id);
    f.set_kind(v1::TENSOR_KIND_ACTIVATION);
    f.set_from_stage(0);
    f.set_to_stage(1);
    f.set_encoded_size(uint64_t{2} << 30);
    f.set_chunk_count(1);
    f.set_step(1000);
    f.set_from_site("gamma");
    grpc::Status s = Send(to_b.get(), {f});
    CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    f.set_from_site("alpha");
    s = Send(to_b.get(), {f});
    CHECK(s.error_code() == grpc::StatusCode::PERMISSION_DENIED);
    // A job id no stage runs, and one that is no id.
    f.set_from_site("gamma");
    f.set_job_id("../../../etc");
    s = Send(to_b.get(), {f});
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    // 6. A calibration that would not fit the site's memory.
    v1::ProfileSiteRequest profile;
    std::string huge = yaml;
    huge.replace(huge.find("channels: 32"), 12, "channels: 65536");
    huge.replace(huge.find("context: 32"), 11, "context: 8192");
    huge.replace(huge.find("seq_len: 32"), 11, "seq_len: 8192");
    profile.set_job_yaml(huge);
    profile.set_from_site("gamma");
    grpc::ClientContext ctx;
    Deadline(&ctx);
    v1::SiteProfileReply r;
    grpc::Status s = to_b->ProfileSite(&ctx, profile, &r);
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  }

  // Both daemons still serve, and the honest job ends as if nothing happened.
  CHECK((*b)->NodeStatus().site() == "beta");
  const v1::JobStatus done = testing::WaitJobEnd(**a, id, 120s);
  INFO(done.detail());
  REQUIRE(done.state() == v1::JOB_STATE_COMPLETED);
  CHECK(done.attempt() == 1);  // no attack cost a rollback
  const auto losses = testing::TrainLocalLosses(yaml);
  REQUIRE(losses.ok());
  const std::vector<float>& local = *losses;
  REQUIRE(done.losses_size() == static_cast<int>(local.size()));
  for (size_t i = 0; i < local.size(); ++i) {
    INFO("step " << i + 1);
    CHECK(done.losses(i) == local[i]);
  }
}

TEST_CASE("a job naming files outside the data roots is refused at submit") {
  auto config = testing::MakeSiteConfig({"alpha", testing::FreePort(), {}});
  daemon::DaemonOptions options;
  options.token = "hostile-test-token-0123";
  auto a = Daemon::Start(config, options);
  REQUIRE(a.ok());
  std::string yaml = JobYaml(2);
  yaml.replace(yaml.find("sites: [alpha, beta]"), 20, "sites: [alpha]");
  std::string up;  // from the data dir up to the root, to leave it through ".."
  for (int i = 0; i < 40; ++i) up += "/..";
  for (const std::string& bad :
       {std::string("data: {train: /etc/passwd, format: text}"),
        "data: {train: " + config.data_dir + up + "/etc/passwd, format: text}"}) {
    std::string y = yaml;
    y.replace(y.find("data: {train: builtin}"), 22, bad);
    v1::SubmitJobRequest req;
    req.set_job_yaml(y);
    auto r = (*a)->jobs().Submit(req);
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kPermissionDenied);
    CHECK_THAT(std::string(r.status().message()), Catch::Contains("data_roots"));
  }
  // A symlink inside the data dir that points out of it is no way around the roots.
  std::filesystem::create_directories(config.data_dir);
  std::filesystem::create_symlink("/etc/passwd", config.data_dir + "/innocent.txt");
  std::string y = yaml;
  y.replace(y.find("data: {train: builtin}"), 22,
            "data: {train: " + config.data_dir + "/innocent.txt, format: text}");
  v1::SubmitJobRequest req;
  req.set_job_yaml(y);
  auto r = (*a)->jobs().Submit(req);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kPermissionDenied);
  // A relative path reaches a daemon only from a client other than the CLI (which makes them
  // absolute against the job file's folder): refused as a bad request, saying the rule.
  y = yaml;
  y.replace(y.find("data: {train: builtin}"), 22, "data: {train: innocent.txt, format: text}");
  req.set_job_yaml(y);
  r = (*a)->jobs().Submit(req);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("job file's folder"));
}

}  // namespace
}  // namespace longhaul
