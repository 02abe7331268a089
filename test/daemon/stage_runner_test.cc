// StageRunner (daemon/job/stage/stage_runner.h) against fakes of its neighbours, no daemon:
// the two stages of a two-stage job, each with its inbox, wired by fake links that file what
// one sends in the other's inbox, and a fake coordinator that keeps the step barrier with the
// coordinator's own bookkeeping (StepBarrier). The stages' losses are train-local's bit for bit;
// a run resumed from the stages' checkpoints continues with the same losses; a torn stage
// checkpoint is refused at set-up, naming the file; and a link that refuses the stage's
// activations stops it with an error naming the peer and the tensor.
#include "daemon/job/stage/stage_runner.h"

#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/job/coordinator/step_barrier.h"
#include "daemon/job/stage/stage_sharding.h"
#include "daemon/job/state/stage_checkpoint.h"
#include "model/fragment.h"
#include "model/layout.h"
#include "test/daemon/fake_link.h"
#include "test/daemon/job_test_util.h"
#include "test/daemon/test_util.h"

namespace longhaul::daemon {
namespace {

constexpr int kSteps = 6;

const std::string kJob =
    "name: t\nmodel: {layers: 2, channels: 32, heads: 2, vocab: 256, context: 32}\n"
    "data: {train: builtin}\nsteps: 6\nbatch_size: 4\nmicrobatch_size: 2\nseq_len: 16\n"
    "checkpoint: {every: 2}\nsites: [a, b]\nplacement: even\ncompression: {mode: off}\n";

// The coordinator, as far as a stage sees it: ReportStep waits until both stages reported
// the step, then answers the barrier's decision (clipping scale, committed step).
class FakeCoordinator : public testing::FakeLink {
 public:
  explicit FakeCoordinator(float grad_clip) : FakeLink("co"), barrier_(grad_clip) {}

  StatusOr<v1::StepDecision> ReportStep(const v1::StepReport& r, double) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (r.step() >= kSteps) return v1::StepDecision();  // the final report
    if (r.stage() == 1) losses_[r.step()] = r.loss();
    committed_ = barrier_.NoteCheckpoint(r.stage(), r.checkpoint_step(), 2);
    barrier_.Add(r, 2, committed_);
    v1::StepDecision d;
    cv_.notify_all();
    cv_.wait(lock, [&] {
      return stop_ || barrier_.Lookup(r.attempt(), r.step(), &d) == StepBarrier::State::kDecided;
    });
    if (stop_) return absl::UnavailableError("fake coordinator stopped");
    return d;
  }
  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  std::map<uint64_t, float> losses() {
    std::lock_guard<std::mutex> lock(mu_);
    return losses_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  StepBarrier barrier_;
  uint64_t committed_ = 0;
  bool stop_ = false;
  std::map<uint64_t, float> losses_;
};

v1::StageAssignment Assignment(int stage, uint64_t resume_step) {
  v1::StageAssignment a = testing::OneLayerStages({"a", "b"}, stage, "co", resume_step > 0 ? 2 : 1);
  a.set_resume_step(resume_step);
  return a;
}

// The job's two stages on sites a and b, in directories under `dir`.
struct Pipeline {
  JobSpec spec;
  FakeCoordinator coordinator;
  LinkMonitor monitor_a{"a"}, monitor_b{"b"};
  Inbox inbox_a{64 << 20}, inbox_b{64 << 20};
  // a -> b (activations, targets, tied gradient) and b -> a (gradients, tied gradient).
  testing::FakeLink a_to_b{"b"}, a_to_b_tied{"b"}, b_to_a{"a"}, b_to_a_tied{"a"};
  std::unique_ptr<StageRunner> stage_a, stage_b;
  Status created_a, created_b;

  // Site b's kernel backends, one per data-parallel replica (empty: the job's, one).
  std::vector<std::string> backends_b;

  // Site b's memory limit in bytes (0: none).
  int64_t memory_limit_b = 0;

  // `job_extra`: lines added to the job file.
  Pipeline(const std::string& dir, uint64_t resume_step, std::vector<std::string> b_backends = {},
           int64_t b_memory_limit = 0, const std::string& job_extra = "")
      : spec(Parse(job_extra)),
        coordinator(spec.job.optimizer.grad_clip),
        backends_b(std::move(b_backends)),
        memory_limit_b(b_memory_limit) {
    auto wire = [](Inbox* inbox) { return testing::IntoInbox(inbox); };
    a_to_b.OnDeliver(wire(&inbox_b));
    a_to_b_tied.OnDeliver(wire(&inbox_b));
    b_to_a.OnDeliver(wire(&inbox_a));
    b_to_a_tied.OnDeliver(wire(&inbox_a));
    for (Inbox* inbox : {&inbox_a, &inbox_b})
      inbox->StartAttempt(resume_step > 0 ? 2 : 1, resume_step);
    created_a = Make(0, dir + "/a", resume_step, &stage_a);
    created_b = Make(1, dir + "/b", resume_step, &stage_b);
  }
  ~Pipeline() {
    coordinator.Stop();
    if (stage_a) stage_a->Stop();
    if (stage_b) stage_b->Stop();
  }
  static JobSpec Parse(const std::string& extra = "") {
    auto spec = ParseJobSpec(kJob + extra, "job.yaml", ".");
    REQUIRE(spec.ok());
    return *spec;
  }
  std::unique_ptr<LinkSender> Sender(const std::string& site, const std::string& peer,
                                     transport::Link* link, LinkMonitor* monitor) {
    LinkSenderOptions o;
    o.site = site;
    o.peer = peer;
    return std::make_unique<LinkSender>(o, link, monitor, spdlog::default_logger());
  }
  Status Make(int stage, const std::string& dir, uint64_t resume_step,
              std::unique_ptr<StageRunner>* out) {
    std::filesystem::create_directories(dir);
    StageRunnerContext ctx;
    ctx.site = stage == 0 ? "a" : "b";
    ctx.assignment = Assignment(stage, resume_step);
    ctx.spec = spec;
    ctx.job_dir = dir;
    ctx.inbox = stage == 0 ? &inbox_a : &inbox_b;
    ctx.coordinator = &coordinator;
    LinkMonitor* monitor = stage == 0 ? &monitor_a : &monitor_b;
    if (stage == 0) {
      ctx.to_next = Sender("a", "b", &a_to_b, monitor);
      ctx.to_tied = Sender("a", "b", &a_to_b_tied, monitor);
    } else {
      ctx.to_prev = Sender("b", "a", &b_to_a, monitor);
      ctx.to_tied = Sender("b", "a", &b_to_a_tied, monitor);
    }
    ctx.monitor = monitor;
    ctx.log = spdlog::default_logger();
    ctx.heartbeat_seconds = 0.05;
    if (stage == 1) ctx.backends = backends_b;
    auto runner = StageRunner::Create(std::move(ctx), stage == 1 ? memory_limit_b : 0);
    if (!runner.ok()) return runner.status();
    *out = std::move(*runner);
    return absl::OkStatus();
  }
  // Runs both stages until each finished or failed.
  void Run() {
    stage_a->Start();
    stage_b->Start();
    for (int i = 0; i < 60000; ++i) {
      const StageRunnerStatus a = stage_a->status(), b = stage_b->status();
      if ((a.finished || !a.error.empty()) && (b.finished || !b.error.empty())) return;
      if (!a.error.empty() || !b.error.empty()) break;  // one failed: stop the other
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    coordinator.Stop();
    stage_a->Stop();
    stage_b->Stop();
  }
};

TEST_CASE("two stage runners over fake links train train-local's losses bit for bit",
          "[stage_runner]") {
  auto local = testing::TrainLocalLosses(kJob);
  REQUIRE(local.ok());
  REQUIRE(local->size() == static_cast<size_t>(kSteps));
  const std::string dir = testing::TempDir("stage_runner_losses");
  {
    Pipeline p(dir, 0);
    REQUIRE(p.created_a.ok());
    REQUIRE(p.created_b.ok());
    p.Run();
    CHECK(p.stage_a->status().error.empty());
    CHECK(p.stage_b->status().error.empty());
    CHECK(p.stage_a->status().finished);
    CHECK(p.stage_b->status().finished);
    const std::map<uint64_t, float> losses = p.coordinator.losses();
    REQUIRE(losses.size() == static_cast<size_t>(kSteps));
    for (const auto& [step, loss] : losses) {
      INFO("step " << step);
      CHECK(loss == (*local)[step]);
    }
    // Checkpoints every 2 steps, each stage in its own directory.
    CHECK(std::filesystem::exists(StageCheckpointPath(dir + "/a", 4, 0, 1)));
    CHECK(std::filesystem::exists(StageCheckpointPath(dir + "/b", 6, 1, 2)));
  }

  SECTION("resumed from the step-4 checkpoints: the same last losses") {
    Pipeline p(dir, 4);
    REQUIRE(p.created_a.ok());
    REQUIRE(p.created_b.ok());
    p.Run();
    CHECK(p.stage_b->status().finished);
    const std::map<uint64_t, float> losses = p.coordinator.losses();
    REQUIRE(losses.size() == 2);
    CHECK(losses.at(4) == (*local)[4]);
    CHECK(losses.at(5) == (*local)[5]);
  }
  SECTION("a torn stage checkpoint is refused at set-up, naming the file") {
    const std::string path = StageCheckpointPath(dir + "/b", 4, 1, 2);
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 7);
    Pipeline p(dir, 4);
    REQUIRE(p.created_a.ok());
    REQUIRE_FALSE(p.created_b.ok());
    CHECK(absl::IsDataLoss(p.created_b));
    CHECK(std::string(p.created_b.message()).find(path) != std::string::npos);
  }
}

TEST_CASE("a stage on two CPU devices (zero1) resumes on one, and back", "[stage_runner]") {
  auto local = testing::TrainLocalLosses(kJob);
  REQUIRE(local.ok());
  // Only the order of the two devices' gradient sums differs from the single-process run.
  auto close = [&](uint64_t step, float loss) {
    INFO("step " << step << ": " << loss << " vs " << (*local)[step]);
    CHECK(std::fabs(loss - (*local)[step]) <= 1e-5f * std::fabs((*local)[step]));
  };
  const std::string dir = testing::TempDir("stage_runner_devices");
  {
    Pipeline p(dir, 0, {"cpu-ref", "cpu-ref"});
    REQUIRE(p.created_b.ok());
    CHECK(p.stage_b->devices().find("layers zero1 x 1") != std::string::npos);
    p.Run();
    REQUIRE(p.stage_b->status().finished);
    for (const auto& [step, loss] : p.coordinator.losses()) close(step, loss);
  }
  // The step-4 checkpoint written by the two sharded devices, read by one and by two again.
  for (std::vector<std::string> devices :
       {std::vector<std::string>{}, std::vector<std::string>{"cpu-ref", "cpu-ref"}}) {
    INFO(devices.size() << " devices on resume");
    Pipeline p(dir, 4, devices);
    REQUIRE(p.created_b.ok());
    p.Run();
    REQUIRE(p.stage_b->status().finished);
    const std::map<uint64_t, float> losses = p.coordinator.losses();
    REQUIRE(losses.size() == 2);
    for (const auto& [step, loss] : losses) close(step, loss);
  }
}

TEST_CASE("every sharding mode on two CPU devices trains train-local's losses, and resumes",
          "[stage_runner]") {
  auto local = testing::TrainLocalLosses(kJob);
  REQUIRE(local.ok());
  auto close = [&](uint64_t step, float loss) {
    INFO("step " << step << ": " << loss << " vs " << (*local)[step]);
    CHECK(std::fabs(loss - (*local)[step]) <= 1e-5f * std::fabs((*local)[step]));
  };
  for (const char* mode : {"replicate", "zero1", "zero2", "zero3"}) {
    INFO("sharding: " << mode);
    const std::string dir = testing::TempDir(std::string("stage_runner_") + mode);
    const std::string extra = std::string("sharding: ") + mode + "\n";
    {
      Pipeline p(dir, 0, {"cpu-ref", "cpu-ref"}, 0, extra);
      REQUIRE(p.created_b.ok());
      if (std::string(mode) != "replicate") {
        CHECK(p.stage_b->devices().find(std::string("layers ") + mode + " x 1") !=
              std::string::npos);
      }
      p.Run();
      REQUIRE(p.stage_b->status().finished);
      for (const auto& [step, loss] : p.coordinator.losses()) close(step, loss);
    }
    // Its step-4 checkpoint on one device, and on two in another mode.
    for (const auto& [devices, again] :
         std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{}, ""}, {{"cpu-ref", "cpu-ref"}, "sharding: zero3\n"}}) {
      INFO(devices.size() << " devices on resume, " << again);
      Pipeline p(dir, 4, devices, 0, again);
      REQUIRE(p.created_b.ok());
      p.Run();
      REQUIRE(p.stage_b->status().finished);
      const std::map<uint64_t, float> losses = p.coordinator.losses();
      REQUIRE(losses.size() == 2);
      for (const auto& [step, loss] : losses) close(step, loss);
    }
  }
}

TEST_CASE("a stage that does not fit its site replicated on two CPU devices trains sharded",
          "[stage_runner]") {
  // What stage b (layer 1 of 2, both ends' tensors) takes on two CPU devices, each one of the
  // two sequences of a microbatch, with the slots plain 1F1B gives the last stage (one).
  const JobSpec spec = Pipeline::Parse();
  model::FragmentOptions o;
  o.begin = 1;
  o.end = 2;
  o.batch_size = 2;
  o.seq_len = 16;
  o.slots = 1;
  const int64_t replicated = CpuReplicaBytes(spec.job.model, o, 2);
  o.layer_modes = {model::ShardMode::kZero1};
  const int64_t sharded = CpuReplicaBytes(spec.job.model, o, 2);
  INFO("replicated " << replicated << " bytes, sharded " << sharded);
  REQUIRE(sharded < replicated);
  // A site limit the replicated stage exceeds and the sharded one meets: it trains.
  const std::string dir = testing::TempDir("stage_runner_fits");
  {
    Pipeline p(dir, 0, {"cpu-ref", "cpu-ref"}, sharded);
    INFO(p.created_b.ToString());
    REQUIRE(p.created_b.ok());
    CHECK(p.stage_b->memory_bytes() == sharded);
    CHECK(p.stage_b->memory_bytes() < replicated);
    p.Run();
    CHECK(p.stage_b->status().finished);
    CHECK(p.coordinator.losses().size() == static_cast<size_t>(kSteps));
  }
  // A byte less and it does not, saying how much it needs (sharding one layer more saves
  // nothing here: its working buffers cost more than its parts save).
  Pipeline tight(testing::TempDir("stage_runner_tight"), 0, {"cpu-ref", "cpu-ref"}, sharded - 1);
  REQUIRE_FALSE(tight.created_b.ok());
  CHECK(absl::IsResourceExhausted(tight.created_b));
  CHECK(std::string(tight.created_b.message()).find("job too large for site 'b'") !=
        std::string::npos);
}

TEST_CASE("a stage whose activations its neighbour refuses stops, naming the peer",
          "[stage_runner]") {
  Pipeline p(testing::TempDir("stage_runner_refused"), 0);
  REQUIRE(p.created_a.ok());
  REQUIRE(p.created_b.ok());
  // The first send from a to b is refused for good (not retryable).
  p.a_to_b.Script({absl::InvalidArgumentError("refused by the test")});
  p.Run();
  const StageRunnerStatus a = p.stage_a->status();
  CHECK_FALSE(a.finished);
  REQUIRE_FALSE(a.error.empty());
  CHECK(a.error.find("'b'") != std::string::npos);
  CHECK(a.error.find("refused by the test") != std::string::npos);
  CHECK(p.coordinator.losses().empty());
}

}  // namespace
}  // namespace longhaul::daemon
