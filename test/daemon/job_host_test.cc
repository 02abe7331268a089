// JobHost (daemon/job/host/job_host.h) on its own: no daemon, no sockets. Site "a" hosts
// stage 0 of a two-stage job whose coordinator and second stage are site "b", reached over a
// fake link that records what the stage sends. The host starts the stage on its coordinator's
// assignment and it sends its first activations in the shape of the cut; it authorizes each
// call for the job it names (assignments and pings only from the coordinator, tensors only
// from the neighbouring stage's site, in the shapes the stage expects); a cancel stops the
// stage and refuses its late frames; and the failures it promises to survive: a peer it
// cannot reach (refused at assignment, naming it) and a torn job record after a restart
// (listed as failed with the reason, the host up).
#include "daemon/job/host/job_host.h"

#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "compression/codec.h"
#include "compression/frame.h"
#include "daemon/job/coordinator/job_record.h"
#include "daemon/job/state/stage_checkpoint.h"
#include "test/daemon/fake_link.h"
#include "test/daemon/test_util.h"

namespace longhaul::daemon {
namespace {

constexpr int64_t kB = 2, kT = 16, kC = 32;

const char* kJob =
    "name: t\nmodel: {layers: 2, channels: 32, heads: 2, vocab: 256, context: 32}\n"
    "data: {train: builtin}\nsteps: 4\nbatch_size: 2\nmicrobatch_size: 2\nseq_len: 16\n"
    "sites: [a, b]\nplacement: even\n";

v1::StageAssignment Assignment(uint32_t attempt = 1) {
  v1::StageAssignment a = testing::OneLayerStages({"a", "b"}, 0, "b", attempt);
  a.set_job_yaml(kJob);
  return a;
}

// Site "a"'s host, its peer "b" a fake link (or none, when `reach_b` is false).
struct Host {
  std::string dir;
  LinkMonitor monitor{"a"};
  testing::FakeLink* to_b = nullptr;  // owned by the host
  std::unique_ptr<JobHost> host;

  explicit Host(const std::string& name, bool reach_b = true) {
    dir = testing::TempDir(name);
    JobHostOptions o;
    o.site = "a";
    o.data_dir = dir;
    o.peers = {{"b", "b.example:7000"}};
    o.heartbeat_seconds = 0.05;
    o.dial = [this, reach_b](const std::string& peer) -> std::unique_ptr<transport::Link> {
      if (!reach_b) return nullptr;
      auto link = std::make_unique<testing::FakeLink>(peer);
      to_b = link.get();
      return link;
    };
    host = std::make_unique<JobHost>(std::move(o), &monitor, spdlog::default_logger());
  }
  ~Host() { host->Shutdown(); }
};

// The tensor of `kind` the stage sent over the link, waiting for it (the stage's own thread
// sends it); empty payload if none came in a minute.
transport::WireTensor SentTensor(testing::FakeLink* link, v1::TensorKind kind) {
  for (int i = 0; i < 6000; ++i) {
    for (const auto& t : link->delivered()) {
      if (t.header.kind() == kind) return t;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return {};
}

// A frame from stage `from` to stage 0 of kind `kind`, values of `shape`.
struct Incoming {
  v1::TensorFrame first;
  std::vector<uint8_t> payload;
};
Incoming Frame(v1::TensorKind kind, std::vector<int64_t> shape, uint32_t from = 1,
               uint32_t attempt = 1) {
  Incoming in;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  auto codec = compression::MakeCodec("fp32");
  REQUIRE(codec.ok());
  const std::vector<float> values(static_cast<size_t>(n), 0.25f);
  REQUIRE(compression::EncodeFrame(**codec, values, shape, {}, &in.payload).ok());
  in.first.set_job_id("j-000001");
  in.first.set_attempt(attempt);
  in.first.set_kind(kind);
  in.first.set_from_stage(from);
  in.first.set_to_stage(0);
  in.first.set_encoded_size(in.payload.size());
  return in;
}

v1::JobCommand Command(v1::JobCommand::Kind kind) {
  v1::JobCommand c;
  c.set_job_id("j-000001");
  c.set_kind(kind);
  c.set_attempt(1);
  return c;
}

TEST_CASE("the job host runs its coordinator's stage and authorizes every call", "[job_host]") {
  Host h("job_host_runs");
  REQUIRE(h.to_b != nullptr);

  // Only the job's coordinator assigns, and only on its own behalf.
  Status denied = h.host->AssignStage(Assignment(), "c").status();
  CHECK(absl::IsPermissionDenied(denied));
  CHECK(std::string(denied.message()).find("'c'") != std::string::npos);
  // A stage that is not this site's.
  v1::StageAssignment other = Assignment();
  other.set_stage(1);
  CHECK(absl::IsInvalidArgument(h.host->AssignStage(other, "b").status()));

  REQUIRE(h.host->AssignStage(Assignment(), "b").ok());
  // The stage's first activations go to stage 1's site in the cut's shape, its targets too.
  const transport::WireTensor act = SentTensor(h.to_b, v1::TENSOR_KIND_ACTIVATION);
  REQUIRE_FALSE(act.payload.empty());
  auto header = compression::ParseFrameHeader(act.payload);
  REQUIRE(header.ok());
  CHECK(header->shape == std::vector<int64_t>{kB, kT, kC});
  CHECK(act.header.job_id() == "j-000001");
  CHECK(act.header.from_stage() == 0);
  CHECK(act.header.to_stage() == 1);
  CHECK(act.header.attempt() == 1);
  CHECK_FALSE(SentTensor(h.to_b, v1::TENSOR_KIND_TARGETS).payload.empty());

  // Pings only from the coordinator; it answers with the running attempt.
  CHECK(absl::IsPermissionDenied(
      h.host->ControlJob(Command(v1::JobCommand::KIND_PING), "c").status()));
  auto ping = h.host->ControlJob(Command(v1::JobCommand::KIND_PING), "b");
  REQUIRE(ping.ok());
  CHECK(ping->running());
  CHECK(ping->attempt() == 1);
  CHECK_FALSE(ping->gossip_skipped());
  // A gossip peer's question, whether this stage left its replica out of a round: no (this
  // stage syncs with no replica), whatever the step or replica named.
  for (const uint64_t step : {uint64_t{1}, uint64_t{8}, UINT64_MAX}) {
    v1::JobCommand asked = Command(v1::JobCommand::KIND_PING);
    asked.set_gossip_step(step);
    asked.set_gossip_replica(7);
    auto answer = h.host->ControlJob(asked, "b");
    REQUIRE(answer.ok());
    CHECK_FALSE(answer->gossip_skipped());
  }
  // A ping through this site (the coordinator cannot reach a site itself): the coordinator's
  // only, of another stage's site of the job; answered as the ping over this site's link
  // (unreachable here: the fake link answers nothing).
  v1::JobCommand through = Command(v1::JobCommand::KIND_PING_FOR);
  through.set_target_site("b");
  CHECK(absl::IsPermissionDenied(h.host->ControlJob(through, "c").status()));
  const Status unreachable = h.host->ControlJob(through, "b").status();
  CHECK(absl::IsUnavailable(unreachable));
  CHECK_THAT(std::string(unreachable.message()), Catch::Contains("cannot reach site 'b' either"));
  for (const char* target : {"a", "c", "Bad Name", ""}) {
    through.set_target_site(target);
    INFO(target);
    CHECK(absl::IsInvalidArgument(h.host->ControlJob(through, "b").status()));
  }
  // An older attempt's assignment does not replace the running one.
  CHECK(absl::IsFailedPrecondition(h.host->AssignStage(Assignment(0), "b").status()));

  // Tensors: only from the next stage's site, in the shape the stage expects.
  Incoming grad = Frame(v1::TENSOR_KIND_ACTIVATION_GRAD, {kB, kT, kC});
  CHECK(h.host->Deliver(grad.first, grad.payload, "b").ok());
  CHECK(absl::IsPermissionDenied(h.host->Deliver(grad.first, grad.payload, "c")));
  Incoming wrong = Frame(v1::TENSOR_KIND_ACTIVATION_GRAD, {kB, kT, kC + 1});
  wrong.first.set_step(1);
  const Status shape = h.host->Deliver(wrong.first, wrong.payload, "b");
  CHECK(absl::IsInvalidArgument(shape));
  CHECK(std::string(shape.message()).find("[2,16,32]") != std::string::npos);
  // A checksum that fails once the tensor is whole: data loss, nothing filed.
  Incoming torn = Frame(v1::TENSOR_KIND_ACTIVATION_GRAD, {kB, kT, kC});
  torn.first.set_step(1);
  torn.payload.back() ^= 0x40;
  CHECK(absl::IsDataLoss(h.host->Deliver(torn.first, torn.payload, "b")));
  // One microbatch a step (batch 2 of 2): microbatch 1 is outside the job.
  Incoming outside = Frame(v1::TENSOR_KIND_ACTIVATION_GRAD, {kB, kT, kC});
  outside.first.set_microbatch(1);
  CHECK(absl::IsInvalidArgument(h.host->Deliver(outside.first, outside.payload, "b")));
  // Activations come from the stage before, which the first stage has none of.
  Incoming act_in = Frame(v1::TENSOR_KIND_ACTIVATION, {kB, kT, kC});
  CHECK(absl::IsPermissionDenied(h.host->Deliver(act_in.first, act_in.payload, "b")));
  // A job that does not run here: unavailable (the sender retries until it is assigned).
  Incoming unknown = grad;
  unknown.first.set_job_id("j-000002");
  CHECK(absl::IsUnavailable(h.host->Deliver(unknown.first, unknown.payload, "b")));

  // Cancel: only the coordinator; the stage stops and its late frames are refused.
  CHECK(absl::IsPermissionDenied(
      h.host->ControlJob(Command(v1::JobCommand::KIND_CANCEL), "c").status()));
  REQUIRE(h.host->ControlJob(Command(v1::JobCommand::KIND_CANCEL), "b").ok());
  ping = h.host->ControlJob(Command(v1::JobCommand::KIND_PING), "b");
  REQUIRE(ping.ok());
  CHECK_FALSE(ping->running());
  Incoming late = Frame(v1::TENSOR_KIND_ACTIVATION_GRAD, {kB, kT, kC});
  late.first.set_step(2);
  CHECK(absl::IsFailedPrecondition(h.host->Deliver(late.first, late.payload, "b")));
}

TEST_CASE("a job host takes its coordinator's outer step only in range", "[job_host]") {
  // The coordinator's outer step replaces the site's reading of the job file; one out of
  // range is refused, naming the coordinator and the value.
  Host h("job_host_outer");
  v1::StageAssignment a = Assignment();
  a.mutable_outer()->set_lr(1);
  a.mutable_outer()->set_momentum(1.5);
  const Status s = h.host->AssignStage(a, "b").status();
  CHECK(absl::IsInvalidArgument(s));
  CHECK_THAT(std::string(s.message()), Catch::Contains("outer step from coordinator 'b'") &&
                                           Catch::Contains("momentum must be in [0, 0.999999]"));
  a.mutable_outer()->set_momentum(0.5);
  a.mutable_outer()->set_lr(1e300);  // no float holds it: refused before it narrows
  CHECK(absl::IsInvalidArgument(h.host->AssignStage(a, "b").status()));
  a.mutable_outer()->set_lr(1);
  a.mutable_outer()->set_momentum(0.5);
  CHECK(h.host->AssignStage(a, "b").ok());
}

TEST_CASE("a job host refuses a stage whose neighbours it cannot reach", "[job_host]") {
  Host h("job_host_unreachable", /*reach_b=*/false);
  const Status s = h.host->AssignStage(Assignment(), "b").status();
  REQUIRE_FALSE(s.ok());
  CHECK(std::string(s.message()).find("'b'") != std::string::npos);
  // Nothing runs: a ping answers not running.
  auto ping = h.host->ControlJob(Command(v1::JobCommand::KIND_PING), "b");
  REQUIRE(ping.ok());
  CHECK_FALSE(ping->running());
}

TEST_CASE("a stage record this site cannot read refuses every assignment of its job",
          "[job_host]") {
  // After a restart with a corrupt stage.pb, the site does not know the job's coordinator:
  // no peer may claim the job (and its checkpoints here) by assigning it.
  Host h("job_host_corrupt_record");
  const std::string path = h.dir + "/jobs/j-000001/stage.pb";
  std::filesystem::create_directories(h.dir + "/jobs/j-000001");
  REQUIRE(WriteStageAssignment(*FileEnv::Default(), path, Assignment()).ok());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] ^= 0x20;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  for (const std::string caller : {"b", "c"}) {
    v1::StageAssignment a = Assignment();
    a.set_coordinator(caller);
    const Status s = h.host->AssignStage(a, caller).status();
    INFO(caller << ": " << s.ToString());
    CHECK(absl::IsFailedPrecondition(s));
    CHECK(std::string(s.message()).find("cannot read its record") != std::string::npos);
  }
}

TEST_CASE("a torn job record is listed as failed with its reason after a restart", "[job_host]") {
  Host h("job_host_torn");
  const std::string job_dir = h.dir + "/jobs/j-000003";
  std::filesystem::create_directories(job_dir);
  v1::JobStatus record;
  record.set_job_id("j-000003");
  record.set_state(v1::JOB_STATE_RUNNING);
  record.set_coordinator("a");
  REQUIRE(WriteJobRecord(*FileEnv::Default(), job_dir + "/job.pb", record).ok());
  // Torn: the last bytes of the record never reached the disk.
  const auto size = std::filesystem::file_size(job_dir + "/job.pb");
  std::filesystem::resize_file(job_dir + "/job.pb", size - 3);

  h.host->RestoreJobs();
  auto status = h.host->GetJob("j-000003", 1);
  REQUIRE(status.ok());
  CHECK(status->state() == v1::JOB_STATE_FAILED);
  CHECK(status->detail().find("cannot restore") != std::string::npos);
  CHECK(status->detail().find("truncated") != std::string::npos);
  const v1::ListJobsResponse all = h.host->ListJobs();
  REQUIRE(all.jobs_size() == 1);
  CHECK(all.jobs(0).job_id() == "j-000003");
}

}  // namespace
}  // namespace longhaul::daemon
