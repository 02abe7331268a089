// The Coordinator (daemon/job/coordinator/coordinator.h) against fake sites: it assigns every stage
// of the plan (last stage first), runs the step barrier (one decision for all stages, only from the
// site that runs each stage), supervises the attempt (pings; a stage that failed makes it stop the
// attempt and reassign every stage under the next attempt from the committed step), and finishes
// the job when every stage ran its last step. The record's times (submission, step times,
// events) are its file env's wall clock, a fake one in one test.
#include "daemon/job/coordinator/coordinator.h"

#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/job/coordinator/job_record.h"
#include "daemon/job/spec/job_spec.h"
#include "test/daemon/fake_link.h"
#include "test/daemon/test_util.h"

namespace longhaul::daemon {
namespace {

using namespace std::chrono_literals;

// A site as the coordinator sees it: takes assignments, answers pings with its stage's state.
class FakeSite final : public testing::FakeLink {
 public:
  explicit FakeSite(std::string site) : FakeLink(std::move(site)) {}

  StatusOr<v1::AssignResponse> AssignStage(const v1::StageAssignment& a, double) override {
    std::lock_guard<std::mutex> lock(mu_);
    assignments_.push_back(a);
    if (!refuse_assign_.empty()) return absl::ResourceExhaustedError(refuse_assign_);
    running_attempt_ = a.attempt();
    running_ = true;
    error_.clear();  // a fresh stage
    return v1::AssignResponse{};
  }
  StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand& c, double) override {
    std::lock_guard<std::mutex> lock(mu_);
    commands_.push_back(c);
    if (c.kind() == refuse_) return absl::UnavailableError(site() + " refuses the command");
    v1::JobCommandResponse r;
    if (c.kind() == v1::JobCommand::KIND_PING) {
      r.set_running(running_);
      r.set_attempt(running_attempt_);
      r.set_error(error_);
      r.set_step(step_);
    }
    if (c.kind() == v1::JobCommand::KIND_PING_FOR) {  // target_site as this site sees it
      if (!reaches_) return absl::UnavailableError(site() + " cannot reach it either");
      r.set_running(true);
      r.set_attempt(running_attempt_);
    }
    return r;
  }
  // Whether its pings through it (KIND_PING_FOR) find the target's stage running, in the
  // attempt it runs itself.
  void Reaches(bool yes) {
    std::lock_guard<std::mutex> lock(mu_);
    reaches_ = yes;
  }
  // The stage fails (its pings say why) until the next assignment.
  void Fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = why;
  }
  // Its assignments fail with `why` from now on (empty: they succeed).
  void RefuseAssign(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_assign_ = why;
  }
  // The steps its pings say the stage completed.
  void SetStep(uint64_t step) {
    std::lock_guard<std::mutex> lock(mu_);
    step_ = step;
  }
  // The stage is gone (its daemon restarted): its pings say nothing runs.
  void Lose() {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }
  std::vector<v1::StageAssignment> assignments() {
    std::lock_guard<std::mutex> lock(mu_);
    return assignments_;
  }
  // The commands of `kind` it took (or refused).
  std::vector<v1::JobCommand> commands(v1::JobCommand::Kind kind) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<v1::JobCommand> out;
    for (const auto& c : commands_) {
      if (c.kind() == kind) out.push_back(c);
    }
    return out;
  }
  // Commands of `kind` fail from now on (the fault seam of a site that cannot be told).
  void Refuse(v1::JobCommand::Kind kind) {
    std::lock_guard<std::mutex> lock(mu_);
    refuse_ = kind;
  }

 private:
  std::mutex mu_;
  std::vector<v1::StageAssignment> assignments_;
  std::vector<v1::JobCommand> commands_;
  v1::JobCommand::Kind refuse_ = v1::JobCommand::KIND_UNSPECIFIED;
  uint32_t running_attempt_ = 0;
  uint64_t step_ = 0;
  std::string refuse_assign_;
  bool running_ = true;
  bool reaches_ = false;
  std::string error_;
};

const char kJob[] =
    "name: unit\nmodel: {layers: 2, channels: 32, heads: 2, vocab: 256, context: 32}\n"
    "data: {train: builtin}\nsteps: 4\nbatch_size: 4\nmicrobatch_size: 2\nseq_len: 32\n"
    "checkpoint: {every: 2}\nsites: [alpha, beta]\nplacement: even\nreplan: off\n";

struct Fixture {
  FakeSite alpha{"alpha"}, beta{"beta"};
  FakeSite gamma{"gamma"};  // a peer in no job: one to add
  CoordinatorEnv env;
  std::unique_ptr<Coordinator> c;

  // `file_env`: the job record's disk and clock (a FakeClockEnv sets its times).
  // `configure`: the coordinator's env before the job is submitted.
  explicit Fixture(FileEnv* file_env = FileEnv::Default(), const std::string& job = kJob,
                   const std::function<void(CoordinatorEnv&)>& configure = {}) {
    env.file_env = file_env;
    env.site = "alpha";
    env.channel = [this](const std::string& s) -> transport::Link* {
      if (s == "alpha") return &alpha;
      if (s == "beta") return &beta;
      if (s == "gamma") return &gamma;
      return nullptr;
    };
    env.job_dir = testing::TempDir("coordinator");
    env.log = spdlog::default_logger();
    if (configure) configure(env);
    auto spec = ParseJobSpec(job, "job.yaml", env.job_dir);
    REQUIRE(spec.ok());
    auto submitted = Coordinator::Submit(env, *spec, "unit-000001");
    INFO(submitted.status().ToString());
    REQUIRE(submitted.ok());
    c = std::move(*submitted);
  }
  ~Fixture() {
    if (c) c->Shutdown();
  }
  // The coordinator's daemon restarts: a new coordinator from the persisted record.
  void Restart() {
    c->Shutdown();
    c.reset();
    auto restored = Coordinator::Restore(env);
    INFO(restored.status().ToString());
    REQUIRE(restored.ok());
    c = std::move(*restored);
  }

  v1::StepReport Report(uint32_t stage, uint64_t step, uint64_t checkpoint_step) {
    v1::StepReport r;
    r.set_job_id("unit-000001");
    r.set_attempt(c->GetStatus(1).attempt());
    r.set_stage(stage);
    r.set_step(step);
    r.set_checkpoint_step(checkpoint_step);
    r.add_grad_sums(stage == 0 ? 0.25 : 0.75);
    if (stage == 1) r.set_loss(5.5f - step);
    return r;
  }
  // Stage `stage` (0 on alpha, 1 on beta) reports `step`, its link to `to` at `bw` bytes/s
  // (checkpointed at step 2 from step 1 on).
  void ReportLink(uint32_t stage, uint64_t step, const std::string& to, double bw) {
    v1::StepReport r = Report(stage, step, step >= 1 ? 2 : 0);
    r.set_loss(5.0f);
    v1::LinkUsage* l = r.add_links();
    l->set_from_site(stage == 0 ? "alpha" : "beta");
    l->set_to_site(to);
    l->set_bandwidth_bytes_per_second(bw);
    REQUIRE(c->OnReport(r, stage == 0 ? "alpha" : "beta").ok());
  }
  // A gathered job's beta (replica 1) is removed after step 0: alpha is told, and the step 1
  // both report (checkpointed at `checkpoint`) is decided without it, beta's told to stop.
  void BetaLeavesAtStep1(uint64_t checkpoint) {
    REQUIRE(c->ChangeSites({}, {"beta"}).ok());
    REQUIRE(testing::WaitFor(
        [&] { return !alpha.commands(v1::JobCommand::KIND_REMOVE_REPLICAS).empty(); }, 30s));
    REQUIRE(c->OnReport(Report(0, 1, checkpoint), "alpha").ok());
    REQUIRE(c->OnReport(Report(1, 1, checkpoint), "beta")->stop());
  }
  // ...after step 0, then alpha commits step 2 alone, and the leave is done (beta's stage
  // stopped; one change at a time until then).
  void BetaRemovedAtStep2() {
    Step(0, 0);
    BetaLeavesAtStep1(2);
    REQUIRE(c->OnReport(Report(0, 2, 2), "alpha").ok());
    REQUIRE(testing::WaitFor(
        [&] { return !beta.commands(v1::JobCommand::KIND_STOP_ATTEMPT).empty(); }, 30s));
  }
  // Both stages report `step` at once (each waits at the barrier for the other).
  std::pair<v1::StepDecision, v1::StepDecision> Step(uint64_t step, uint64_t checkpoint_step) {
    StatusOr<v1::StepDecision> d0 = absl::UnknownError("not run");
    std::thread t([&] { d0 = c->OnReport(Report(0, step, checkpoint_step), "alpha"); });
    StatusOr<v1::StepDecision> d1 = c->OnReport(Report(1, step, checkpoint_step), "beta");
    t.join();
    REQUIRE(d0.ok());
    REQUIRE(d1.ok());
    return {*d0, *d1};
  }
};

TEST_CASE("coordinator: every stage assigned, last first, with the plan and attempt 1") {
  Fixture f;
  const auto a = f.alpha.assignments(), b = f.beta.assignments();
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  CHECK(a[0].stage() == 0);
  CHECK(b[0].stage() == 1);
  CHECK(a[0].attempt() == 1);
  CHECK(a[0].coordinator() == "alpha");
  CHECK(a[0].resume_step() == 0);
  REQUIRE(a[0].stages_size() == 2);
  CHECK(a[0].stages(0).layer_end() == 1);
  CHECK(a[0].stages(1).site() == "beta");
  CHECK(f.c->GetStatus(1).state() == v1::JOB_STATE_RUNNING);
}

TEST_CASE("coordinator: one barrier decision for all stages, only from the stage's own site") {
  Fixture f;
  CHECK(f.c->OnReport(f.Report(1, 0, 0), "alpha").status().code() ==
        absl::StatusCode::kPermissionDenied);
  const auto [d0, d1] = f.Step(0, 0);
  CHECK_FALSE(d0.stop());
  CHECK(d0.grad_scale() == d1.grad_scale());
  CHECK(d0.grad_scale() > 0);
  const v1::JobStatus s = f.c->GetStatus(10);
  CHECK(s.step() == 1);
  REQUIRE(s.losses_size() == 1);
  CHECK(s.losses(0) == 5.5f);
  // A sync report the status would show must be one: a bounded name, a finite time.
  v1::StepReport bad = f.Report(1, 0, 1);
  bad.mutable_sync()->set_seconds(std::nan(""));
  CHECK(f.c->OnReport(bad, "beta").status().code() == absl::StatusCode::kInvalidArgument);
  bad.mutable_sync()->set_seconds(1);
  bad.mutable_sync()->set_codec(std::string(65, 'q'));
  CHECK(f.c->OnReport(bad, "beta").status().code() == absl::StatusCode::kInvalidArgument);
  bad.mutable_sync()->set_codec("q4\x1b[2J");  // a terminal escape
  CHECK(f.c->OnReport(bad, "beta").status().code() == absl::StatusCode::kInvalidArgument);
  bad.clear_sync();
  bad.add_links()->set_reason("fits\n");
  CHECK(f.c->OnReport(bad, "beta").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("coordinator: a failed stage rolls every stage back to the committed step") {
  Fixture f;
  f.Step(0, 0);
  f.Step(1, 2);  // both stages checkpointed step 2
  REQUIRE(f.c->GetStatus(1).committed_step() == 2);
  f.beta.Fail("out of memory on beta");
  REQUIRE(testing::WaitFor([&] { return f.beta.assignments().size() >= 2; }, 30s));
  const v1::StageAssignment again = f.beta.assignments().back();
  CHECK(again.attempt() == 2);
  CHECK(again.resume_step() == 2);
  CHECK(f.alpha.assignments().back().attempt() == 2);
  const v1::JobStatus s = f.c->GetStatus(10);
  CHECK(s.attempt() == 2);
  CHECK(s.losses_size() == 2);  // the losses of the committed steps stay
  // Reports of the old attempt are told to stop.
  v1::StepReport old = f.Report(0, 2, 2);
  old.set_attempt(1);
  auto d = f.c->OnReport(old, "alpha");
  REQUIRE(d.ok());
  CHECK(d->stop());
}

TEST_CASE("coordinator: a gossip attempt draws its graphs from the links the stages measured") {
  // Two replicas of one stage each, alpha and beta, gossiping. The first attempt knows no
  // link (no planner profiled them), so its graphs count every link alike; once the stages
  // have reported their links' estimates, the next attempt carries them, by replica.
  Fixture f(FileEnv::Default(),
            std::string(kJob) +
                "replicas: 2\nsync: {mode: local, every: 2, reduce: gossip, on_site_loss: wait}\n");
  REQUIRE(f.alpha.assignments().size() == 1);
  CHECK(f.alpha.assignments()[0].gossip_links_size() == 0);
  for (uint64_t step = 0; step < 2; ++step) {
    f.ReportLink(0, step, "beta", 1.25e6);  // 10 Mbit/s
    f.ReportLink(1, step, "alpha", 125e6);  // 1 Gbit/s
  }
  REQUIRE(testing::WaitFor([&] { return f.c->GetStatus(1).committed_step() == 2; }, 30s));
  f.beta.Fail("out of memory on beta");
  // The last stage is assigned first: wait for both.
  REQUIRE(testing::WaitFor(
      [&] { return f.beta.assignments().size() >= 2 && f.alpha.assignments().size() >= 2; }, 30s));
  for (const v1::StageAssignment& a : {f.alpha.assignments().back(), f.beta.assignments().back()}) {
    CHECK(a.attempt() == 2);
    REQUIRE(a.gossip_links_size() == 4);
    CHECK(a.gossip_links(0) == 0);
    CHECK(a.gossip_links(1) == 1.25e6);  // replica 0 -> 1: alpha -> beta
    CHECK(a.gossip_links(2) == 125e6);   // replica 1 -> 0: beta -> alpha
    CHECK(a.gossip_links(3) == 0);
  }
}

TEST_CASE("coordinator: a gossip attempt's links moved: every stage draws from a new matrix") {
  // As above, but checked at every monitor pass: once the stages' reports give the links'
  // rates, every live stage is told the matrix (epoch 1) for the rounds from 3 past the
  // furthest stage's next (its pings say 3 steps: the sync after step 3 is round 1, so from
  // round 4), the attempt going on. When a link's rate moves again and beta's site refuses
  // the next epoch, the attempt restarts from the committed step with the newest matrix.
  Fixture f(FileEnv::Default(),
            std::string(kJob) +
                "replicas: 2\nsync: {mode: local, every: 2, reduce: gossip, on_site_loss: wait}\n",
            [](CoordinatorEnv& env) { env.gossip_links_check_seconds = 0; });
  f.alpha.SetStep(3);
  f.beta.SetStep(2);
  f.ReportLink(0, 0, "beta", 1.25e6);  // 10 Mbit/s
  f.ReportLink(1, 0, "alpha", 125e6);  // 1 Gbit/s
  REQUIRE(testing::WaitFor(
      [&] {
        return !f.alpha.commands(v1::JobCommand::KIND_GOSSIP_LINKS).empty() &&
               !f.beta.commands(v1::JobCommand::KIND_GOSSIP_LINKS).empty();
      },
      30s));
  for (FakeSite* site : {&f.alpha, &f.beta}) {
    const v1::JobCommand told = site->commands(v1::JobCommand::KIND_GOSSIP_LINKS)[0];
    CHECK(told.attempt() == 1);
    CHECK(told.links_epoch() == 1);
    // (More if asking the sites took a round or more, which fakes do not.)
    CHECK(told.from_round() >= 4);
    CHECK(told.from_round() == f.alpha.commands(v1::JobCommand::KIND_GOSSIP_LINKS)[0].from_round());
    REQUIRE(told.gossip_links_size() == 4);
    CHECK(told.gossip_links(1) == 1.25e6);  // replica 0 -> 1: alpha -> beta
    CHECK(told.gossip_links(2) == 125e6);   // replica 1 -> 0: beta -> alpha
  }
  REQUIRE(testing::WaitFor([&] { return f.c->GetStatus(1).gossip_links_epoch() == 1; }, 30s));
  {
    const v1::JobStatus s = f.c->GetStatus(1);
    CHECK(s.attempt() == 1);
    CHECK(s.gossip_links_from_round() >= 4);
    CHECK(s.gossip_links(1) == 1.25e6);
    CHECK(s.events(s.events_size() - 1).kind() == "gossip_links");
  }
  // Within a factor of 2: no new epoch. Ten times faster, and beta cannot take it: a restart.
  // (A step's links count once both stages reported it.)
  f.ReportLink(0, 1, "beta", 2e6);
  f.ReportLink(1, 1, "alpha", 125e6);
  std::this_thread::sleep_for(1500ms);
  CHECK(f.alpha.commands(v1::JobCommand::KIND_GOSSIP_LINKS).size() == 1);
  f.beta.Refuse(v1::JobCommand::KIND_GOSSIP_LINKS);
  f.ReportLink(0, 2, "beta", 12.5e6);
  f.ReportLink(1, 2, "alpha", 125e6);
  REQUIRE(testing::WaitFor([&] { return f.alpha.assignments().size() >= 2; }, 30s));
  const v1::StageAssignment again = f.alpha.assignments().back();
  CHECK(again.attempt() == 2);
  REQUIRE(again.gossip_links_size() == 4);
  CHECK(again.gossip_links(1) == 12.5e6);
  const v1::JobStatus s = f.c->GetStatus(1);
  CHECK(s.gossip_links_epoch() == 0);
  CHECK_THAT(s.events(s.events_size() - 1).detail(), Catch::Contains("beta refuses the command"));
}

TEST_CASE("coordinator: a gathered job's replica leaves at the next step, no one restarting") {
  // Two replicas of one stage each, alpha and beta, gathering every 2 steps; beta is removed
  // after step 0. The next step decided (1) names replica 1: alpha's decision carries it, alpha
  // was told first to refuse replica 1's frames from step 1 on, beta's own report of step 1 is
  // told to stop, and once step 1 is decided beta's stage is stopped. The attempt stays 1.
  // If alpha cannot be told (its site refuses the command), or beta fails before step 1 is
  // decided (the others' syncs before it would wait for it), the job restarts from the
  // committed step without beta instead.
  enum class Case { kTold, kRefused, kLeaverFails };
  const Case what = GENERATE(Case::kTold, Case::kRefused, Case::kLeaverFails);
  const bool told = what != Case::kRefused;
  INFO((what == Case::kTold      ? "alpha told"
        : what == Case::kRefused ? "alpha cannot be told"
                                 : "beta fails while leaving"));
  Fixture f(FileEnv::Default(),
            std::string(kJob) + "replicas: 2\nsync: {mode: local, every: 2, codec: exact}\n");
  f.Step(0, 0);
  if (!told) f.alpha.Refuse(v1::JobCommand::KIND_REMOVE_REPLICAS);
  auto change = f.c->ChangeSites({}, {"beta"});
  REQUIRE(change.ok());
  CHECK_THAT(change->detail(), Catch::Contains("go on without it from the next step"));
  REQUIRE(testing::WaitFor([&] { return f.c->GetStatus(1).replicas_removed() == 1; }, 30s));
  if (what == Case::kLeaverFails) {
    f.beta.Fail("killed while leaving");
    REQUIRE(testing::WaitFor([&] { return f.alpha.assignments().size() >= 2; }, 30s));
    CHECK(f.alpha.assignments().back().attempt() == 2);
    CHECK(f.alpha.assignments().back().dropped_replicas_size() == 1);
    CHECK(f.beta.assignments().size() == 1);  // removed: never assigned again
    return;
  }
  if (!told) {
    REQUIRE(testing::WaitFor([&] { return f.alpha.assignments().size() >= 2; }, 30s));
    const v1::StageAssignment again = f.alpha.assignments().back();
    CHECK(again.attempt() == 2);
    CHECK(again.dropped_replicas_size() == 1);
    const v1::JobStatus s = f.c->GetStatus(1);
    CHECK(s.attempt() == 2);
    CHECK_THAT(s.events(s.events_size() - 1).detail(), Catch::Contains("could not be told"));
    return;
  }
  REQUIRE(testing::WaitFor(
      [&] { return !f.alpha.commands(v1::JobCommand::KIND_REMOVE_REPLICAS).empty(); }, 30s));
  const v1::JobCommand tell = f.alpha.commands(v1::JobCommand::KIND_REMOVE_REPLICAS)[0];
  CHECK(tell.from_step() == 1);
  REQUIRE(tell.removed_replicas_size() == 1);
  CHECK(tell.removed_replicas(0) == 1);
  CHECK(f.beta.commands(v1::JobCommand::KIND_REMOVE_REPLICAS).empty());
  // Until step 1 is decided: one change at a time; and beta's report of step 0 sent again (its
  // answer lost) gets step 0's decision, its part in that sync still counting.
  auto second = f.c->ChangeSites({}, {"alpha"});
  CHECK(second.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(second.status().message()),
             Catch::Contains("replica 1 leaving at step 1"));
  auto again = f.c->OnReport(f.Report(1, 0, 0), "beta");
  REQUIRE(again.ok());
  CHECK_FALSE(again->stop());
  auto d = f.c->OnReport(f.Report(0, 1, 2), "alpha");  // alone at the barrier now
  REQUIRE(d.ok());
  CHECK_FALSE(d->stop());
  REQUIRE(d->removed_replicas_size() == 1);
  CHECK(d->removed_replicas(0) == 1);
  auto gone = f.c->OnReport(f.Report(1, 1, 2), "beta");
  REQUIRE(gone.ok());
  CHECK(gone->stop());
  CHECK_THAT(gone->detail(), Catch::Contains("replica 1 was removed from the job"));
  // Named, so that its stage stops as told rather than as failed.
  CHECK(std::vector<uint32_t>(gone->removed_replicas().begin(), gone->removed_replicas().end()) ==
        std::vector<uint32_t>{1});
  REQUIRE(testing::WaitFor(
      [&] { return !f.beta.commands(v1::JobCommand::KIND_STOP_ATTEMPT).empty(); }, 30s));
  CHECK(f.alpha.commands(v1::JobCommand::KIND_STOP_ATTEMPT).empty());
  // The next decision names no one; the job goes on in attempt 1, committing alpha's steps.
  auto next = f.c->OnReport(f.Report(0, 2, 2), "alpha");
  REQUIRE(next.ok());
  CHECK(next->removed_replicas_size() == 0);
  const v1::JobStatus s = f.c->GetStatus(1);
  CHECK(s.attempt() == 1);
  CHECK(s.committed_step() == 2);
  CHECK(f.alpha.assignments().size() == 1);
}

TEST_CASE("coordinator: a removed replica comes back when its sites are added again") {
  // beta's replica leaves at step 1 (as above); the job commits step 2 without it. Adding beta
  // again brings replica 1 back, not a new replica: no longer removed, it rejoins from
  // alpha's state at the committed step (attempt 2), counted as an added replica.
  Fixture f(FileEnv::Default(),
            std::string(kJob) + "replicas: 2\nsync: {mode: local, every: 2, codec: exact}\n");
  f.BetaRemovedAtStep2();
  REQUIRE(f.c->GetStatus(1).committed_step() == 2);
  REQUIRE(f.c->GetStatus(1).removed_replicas_size() == 1);
  // A monitor check later, the coordinator has looked for rejoins at step 2 (none then).
  std::this_thread::sleep_for(1500ms);
  // alpha's replica is in the job: naming its site is no comeback.
  auto live = f.c->ChangeSites({"alpha"}, {});
  CHECK(live.status().code() == absl::StatusCode::kAlreadyExists);
  CHECK_THAT(std::string(live.status().message()),
             Catch::Contains("'alpha' runs a stage of replica 0"));
  auto back = f.c->ChangeSites({"beta"}, {});
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK(std::vector<uint32_t>(back->replicas().begin(), back->replicas().end()) ==
        std::vector<uint32_t>{1});
  CHECK_THAT(back->detail(), Catch::Contains("back as replica 1"));
  REQUIRE(testing::WaitFor([&] { return f.beta.assignments().size() >= 2; }, 30s));
  const v1::StageAssignment a = f.beta.assignments().back();
  CHECK(a.attempt() == 2);
  CHECK(a.resume_step() == 2);
  CHECK(a.stages_size() == 2);  // the same plan: no third replica
  CHECK(std::vector<uint32_t>(a.rejoining_replicas().begin(), a.rejoining_replicas().end()) ==
        std::vector<uint32_t>{1});
  CHECK(a.dropped_replicas_size() == 0);
  // Assigned whole: no longer a comeback that a failed assignment would remove again.
  REQUIRE(testing::WaitFor([&] { return f.c->GetStatus(1).returning_replica() == 0; }, 30s));
  const v1::JobStatus s = f.c->GetStatus(1);
  CHECK(s.removed_replicas_size() == 0);
  CHECK(s.replicas_added() == 1);
  CHECK(s.replica_rejoins() == 1);
  bool noted = false;
  for (const v1::JobEvent& e : s.events()) {
    noted = noted ||
            (e.kind() == "site_added" && e.detail().find("back as replica 1") != std::string::npos);
  }
  CHECK(noted);
}

TEST_CASE(
    "coordinator: a gossip replica the coordinator cannot reach stays while another site can") {
  // Three gossip replicas (alpha, beta, gamma), on_site_loss: drop. alpha's link to beta is
  // down (beta's pings fail) but gamma reaches beta's stage: no drop, no new attempt, gamma
  // asked on beta's behalf. Once gamma cannot reach it either, replica 1 is dropped.
  std::string job = std::string(kJob) +
                    "replicas: 3\nsync: {mode: local, every: 2, reduce: gossip, "
                    "on_site_loss: drop}\n";
  job.replace(job.find("sites: [alpha, beta]"), 20, "sites: [alpha, beta, gamma]");
  Fixture f(FileEnv::Default(), job);
  REQUIRE(f.gamma.assignments().size() == 1);
  f.gamma.Reaches(true);
  f.beta.Refuse(v1::JobCommand::KIND_PING);
  REQUIRE(testing::WaitFor(
      [&] { return f.gamma.commands(v1::JobCommand::KIND_PING_FOR).size() >= 3; }, 30s));
  const v1::JobCommand asked = f.gamma.commands(v1::JobCommand::KIND_PING_FOR)[0];
  CHECK(asked.target_site() == "beta");
  CHECK(asked.attempt() == 1);
  CHECK(f.beta.commands(v1::JobCommand::KIND_PING_FOR).empty());   // never itself
  CHECK(f.alpha.commands(v1::JobCommand::KIND_PING_FOR).empty());  // nor the coordinator's
  v1::JobStatus s = f.c->GetStatus(1);
  CHECK(s.replica_drops() == 0);
  CHECK(s.attempt() == 1);
  CHECK(s.state() == v1::JOB_STATE_RUNNING);
  f.gamma.Reaches(false);
  REQUIRE(testing::WaitFor([&] { return f.c->GetStatus(1).replica_drops() == 1; }, 30s));
  s = f.c->GetStatus(1);
  REQUIRE(s.dropped_replicas_size() == 1);
  CHECK(s.dropped_replicas(0) == 1);
}

TEST_CASE("coordinator: a join is made just after the next commit unless that redoes less") {
  // Two replicas (alpha, beta), checkpoints every 2 steps of 8. gamma asked to join at step 3,
  // step 2 committed: starting again now would redo a step on each of the two replicas, more
  // than the one step gamma waits for checkpoint step 4; so the join waits, and every stage
  // then starts from step 4, nothing redone. Asked at step 2 just committed, it is made at once.
  const bool wait = GENERATE(true, false);
  INFO((wait ? "asked a step past the commit" : "asked at the commit"));
  std::string job =
      std::string(kJob) + "replicas: 2\nsync: {mode: local, every: 2, codec: exact}\n";
  job.replace(job.find("steps: 4"), 8, "steps: 8");
  Fixture f(FileEnv::Default(), job);
  f.Step(0, 0);
  f.Step(1, 2);
  if (wait) f.Step(2, 2);
  REQUIRE(f.c->GetStatus(1).committed_step() == 2);
  auto joined = f.c->ChangeSites({"gamma"}, {});
  INFO(joined.status().ToString());
  REQUIRE(joined.ok());
  CHECK_THAT(joined->detail(), Catch::Contains("site gamma joins as replica 2"));
  if (wait) {
    CHECK_THAT(joined->detail(), Catch::Contains("the next committed step (checkpoint step 4)"));
    // A few monitor checks: no new attempt, nobody assigned, gamma still joining.
    std::this_thread::sleep_for(2500ms);
    CHECK(f.gamma.assignments().empty());
    CHECK(f.c->GetStatus(1).attempt() == 1);
    CHECK(f.c->GetStatus(1).joining_sites_size() == 1);
    // Another join is refused meanwhile (one at a time); a removal is not (a site lost while
    // the join waits must be able to leave): here it names no site of the job.
    auto other = f.c->ChangeSites({"gamma"}, {});
    CHECK(other.status().code() == absl::StatusCode::kFailedPrecondition);
    CHECK_THAT(std::string(other.status().message()), Catch::Contains("site gamma joining"));
    auto leave = f.c->ChangeSites({}, {"gamma"});
    CHECK(leave.status().code() == absl::StatusCode::kNotFound);
    CHECK_THAT(std::string(leave.status().message()), Catch::Contains("'gamma' runs no stage"));
    f.Step(3, 4);  // step 4 committed
  } else {
    CHECK_THAT(joined->detail(), Catch::Contains("the committed step (2)"));
  }
  const uint64_t from = wait ? 4 : 2;
  REQUIRE(testing::WaitFor([&] { return !f.gamma.assignments().empty(); }, 30s));
  const v1::StageAssignment a = f.gamma.assignments().back();
  CHECK(a.attempt() == 2);
  CHECK(a.resume_step() == from);
  CHECK(a.stages_size() == 3);
  CHECK(f.alpha.assignments().back().resume_step() == from);
  const v1::JobStatus s = f.c->GetStatus(1);
  CHECK(s.replicas() == 3);
  CHECK(s.joining_sites_size() == 0);
  CHECK_THAT(s.detail(), Catch::Contains("joined as replica 2 at step " + std::to_string(from)));
}

TEST_CASE("coordinator: a comeback asked well past a commit waits for the next one") {
  // As above over 8 steps, but alpha's replica has made step 3 (at step 4, step 2 committed)
  // when beta is added again: rejoining now would redo 2 steps, against none to wait for
  // checkpoint step 4, so replica 1 comes back from step 4 once it is committed.
  std::string job =
      std::string(kJob) + "replicas: 2\nsync: {mode: local, every: 2, codec: exact}\n";
  job.replace(job.find("steps: 4"), 8, "steps: 8");
  Fixture f(FileEnv::Default(), job);
  f.BetaRemovedAtStep2();
  REQUIRE(f.c->OnReport(f.Report(0, 3, 2), "alpha").ok());
  auto back = f.c->ChangeSites({"beta"}, {});
  INFO(back.status().ToString());
  REQUIRE(back.ok());
  CHECK_THAT(back->detail(),
             Catch::Contains("back as replica 1") && Catch::Contains("the next committed step"));
  std::this_thread::sleep_for(2500ms);  // a few monitor checks: nothing yet
  CHECK(f.beta.assignments().size() == 1);
  CHECK(f.c->GetStatus(1).attempt() == 1);
  REQUIRE(f.c->OnReport(f.Report(0, 4, 4), "alpha").ok());  // step 4 committed
  REQUIRE(testing::WaitFor([&] { return f.beta.assignments().size() >= 2; }, 30s));
  const v1::StageAssignment a = f.beta.assignments().back();
  CHECK(a.attempt() == 2);
  CHECK(a.resume_step() == 4);
  CHECK(f.alpha.assignments().back().resume_step() == 4);
}

TEST_CASE(
    "coordinator: restarted, a gossip job's coordinator tells the replicas left who dropped") {
  // Two gossip replicas, alpha and beta. The coordinator's daemon restarts while alpha's stage
  // is gone and beta's runs on: beta's replica is adopted (no new attempt), alpha's is dropped,
  // and beta's site is told replica 0 is out of the attempt as a removal is
  // (KIND_REMOVE_REPLICAS): its frames refused, its share of the tracking corrections gone.
  Fixture f(FileEnv::Default(),
            std::string(kJob) +
                "replicas: 2\nsync: {mode: local, every: 2, reduce: gossip, tracking: true, "
                "on_site_loss: drop}\n");
  f.alpha.Lose();
  f.Restart();
  REQUIRE(testing::WaitFor([&] { return f.c->GetStatus(1).replica_drops() == 1; }, 30s));
  const v1::JobStatus s = f.c->GetStatus(1);
  CHECK(s.attempt() == 1);
  REQUIRE(s.dropped_replicas_size() == 1);
  CHECK(s.dropped_replicas(0) == 0);
  REQUIRE(testing::WaitFor(
      [&] { return !f.beta.commands(v1::JobCommand::KIND_REMOVE_REPLICAS).empty(); }, 30s));
  const v1::JobCommand told = f.beta.commands(v1::JobCommand::KIND_REMOVE_REPLICAS)[0];
  CHECK(told.attempt() == 1);
  CHECK(told.from_step() == 0);
  REQUIRE(told.removed_replicas_size() == 1);
  CHECK(told.removed_replicas(0) == 0);
  CHECK(f.alpha.commands(v1::JobCommand::KIND_REMOVE_REPLICAS).empty());
  CHECK_FALSE(f.alpha.commands(v1::JobCommand::KIND_STOP_ATTEMPT).empty());
}

TEST_CASE("coordinator: a replica brought back that cannot take its stage is removed again") {
  // As above, but beta's site refuses the assignment that brings replica 1 back: it is
  // removed again at once (no retry that would restart alpha's replica each time), the event
  // says why, and alpha's replica goes on alone.
  Fixture f(FileEnv::Default(),
            std::string(kJob) + "replicas: 2\nsync: {mode: local, every: 2, codec: exact}\n");
  f.BetaRemovedAtStep2();
  f.beta.RefuseAssign("beta has no memory for it");
  REQUIRE(f.c->ChangeSites({"beta"}, {}).ok());
  CHECK(f.c->GetStatus(1).returning_replica() == 1);
  REQUIRE(testing::WaitFor([&] { return f.c->GetStatus(1).replicas_removed() == 2; }, 30s));
  const v1::JobStatus s = f.c->GetStatus(1);
  REQUIRE(s.removed_replicas_size() == 1);
  CHECK(s.removed_replicas(0) == 1);
  CHECK(s.rejoining_replicas_size() == 0);
  CHECK(s.returning_replica() == 0);
  CHECK(s.events(s.events_size() - 1).kind() == "site_removed");
  CHECK_THAT(s.events(s.events_size() - 1).detail(),
             Catch::Contains("could not come back") && Catch::Contains("beta has no memory"));
  // alpha's replica is assigned again without it.
  REQUIRE(testing::WaitFor(
      [&] {
        const auto a = f.alpha.assignments();
        return a.size() >= 3 && a.back().dropped_replicas_size() == 1;
      },
      30s));
  CHECK(f.beta.assignments().size() == 2);  // the first, and the comeback it refused
}

TEST_CASE("coordinator: a comeback that no committed step could take is refused") {
  // Checkpoints every 4 steps of 4: after beta's replica leaves at step 1 nothing is committed
  // before the job's last step, so it could not rejoin; the add-site says so and the replica
  // stays removed.
  std::string job =
      std::string(kJob) + "replicas: 2\nsync: {mode: local, every: 2, codec: exact}\n";
  job.replace(job.find("checkpoint: {every: 2}"), 22, "checkpoint: {every: 4}");
  Fixture f(FileEnv::Default(), job);
  f.Step(0, 0);
  f.BetaLeavesAtStep1(0);
  REQUIRE(testing::WaitFor(
      [&] { return !f.beta.commands(v1::JobCommand::KIND_STOP_ATTEMPT).empty(); }, 30s));
  auto back = f.c->ChangeSites({"beta"}, {});
  CHECK(back.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(back.status().message()),
             Catch::Contains("replica 1 could come back only") &&
                 Catch::Contains("its next checkpoint is step 4"));
  CHECK(f.c->GetStatus(1).removed_replicas_size() == 1);
  CHECK(f.c->GetStatus(1).replicas_added() == 0);
}

TEST_CASE("coordinator: every assignment carries the outer step the job was submitted with") {
  // A job file without sync.outer: this version's default for syncs every 10 steps (Nesterov,
  // lr 1, momentum 0.5) goes into the record and every assignment.
  Fixture f(FileEnv::Default(),
            std::string(kJob) + "replicas: 2\nsync: {mode: local, every: 10, codec: q8}\n");
  REQUIRE(f.alpha.assignments().size() == 1);
  const v1::OuterStep first = f.alpha.assignments()[0].outer();
  CHECK(first.lr() == 1);
  CHECK(first.momentum() == 0.5);
  CHECK(first.nesterov());
  CHECK(f.c->GetStatus(1).outer().momentum() == 0.5);
  // The coordinator's daemon restarts with its record changed first (`edit`): the outer step
  // of the next assignment.
  auto restart = [&](const std::function<void(v1::JobStatus&)>& edit) {
    f.c->Shutdown();
    f.c.reset();
    const std::string path = f.env.job_dir + "/job.pb";
    auto record = ReadJobRecord(*FileEnv::Default(), path);
    REQUIRE(record.ok());
    edit(*record);
    REQUIRE(WriteJobRecord(*FileEnv::Default(), path, *record).ok());
    auto restored = Coordinator::Restore(f.env);
    if (!restored.ok()) return restored.status();
    f.c = std::move(*restored);
    const size_t before = f.alpha.assignments().size();
    REQUIRE(testing::WaitFor([&] { return f.alpha.assignments().size() > before; }, 30s));
    return absl::OkStatus();
  };
  // Submitted under a version whose default was DiLoCo's (lr 0.7, momentum 0.9): a coordinator
  // of this version keeps it, whatever its own reading of the job file.
  REQUIRE(restart([](v1::JobStatus& r) {
            r.mutable_outer()->set_lr(0.7);
            r.mutable_outer()->set_momentum(0.9);
          }).ok());
  CHECK(f.alpha.assignments().back().outer().lr() == 0.7);
  CHECK(f.alpha.assignments().back().outer().momentum() == 0.9);
  CHECK(f.beta.assignments().back().outer().momentum() == 0.9);
  // A record from before the outer step was kept: this version's reading, kept from now on.
  REQUIRE(restart([](v1::JobStatus& r) { r.clear_outer(); }).ok());
  CHECK(f.alpha.assignments().back().outer().momentum() == 0.5);
  CHECK(f.c->GetStatus(1).has_outer());
  // An outer step out of range in the record: no restore, the error naming the file.
  f.c->Shutdown();
  f.c.reset();
  const std::string path = f.env.job_dir + "/job.pb";
  auto record = ReadJobRecord(*FileEnv::Default(), path);
  REQUIRE(record.ok());
  record->mutable_outer()->set_momentum(1.5);
  REQUIRE(WriteJobRecord(*FileEnv::Default(), path, *record).ok());
  auto bad = Coordinator::Restore(f.env);
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()),
             Catch::Contains("job.pb: outer") && Catch::Contains("momentum"));
}

TEST_CASE("coordinator: the job completes once every stage ran its last step") {
  Fixture f;
  for (uint64_t step = 0; step < 4; ++step) f.Step(step, (step + 1) / 2 * 2);
  CHECK(f.c->GetStatus(1).committed_step() == 4);
  REQUIRE(f.c->OnReport(f.Report(0, 4, 4), "alpha").ok());
  REQUIRE(f.c->OnReport(f.Report(1, 4, 4), "beta").ok());
  CHECK(f.c->GetStatus(1).state() == v1::JOB_STATE_COMPLETED);
  CHECK(f.c->finished());
}

TEST_CASE("coordinator: the record's times are its file env's wall clock, not the machine's") {
  testing::FakeClockEnv clock;
  clock.wall = 1'000'000.0;
  Fixture f(&clock);
  CHECK(f.c->GetStatus(10).submitted_unix() == 1'000'000.0);
  // The first step's time is what its stages reported (nothing here); each later one is the
  // wall clock between two decisions, and the rate and ETA follow from it.
  f.Step(0, 0);
  clock.Advance(2.5);
  f.Step(1, 2);
  clock.Advance(4.0);
  f.Step(2, 2);
  v1::JobStatus s = f.c->GetStatus(10);
  REQUIRE(s.step_times_size() == 3);
  CHECK(s.step_times(0) == 0.0);
  CHECK(s.step_times(1) == 2.5);
  CHECK(s.step_times(2) == 4.0);
  CHECK(s.step_seconds() == 4.0);
  CHECK(s.eta_seconds() == 4.0);  // one step of 4 left
  // 2 microbatches of 2 sequences of 32 tokens in 4 s.
  CHECK(s.tokens_per_second() == 2 * 2 * 32 / 4.0);
  // A rollback's event is stamped with the same clock.
  clock.Advance(100.0);
  f.beta.Fail("out of memory on beta");
  REQUIRE(testing::WaitFor([&] { return f.beta.assignments().size() >= 2; }, 30s));
  s = f.c->GetStatus(10);
  REQUIRE(s.events_size() >= 1);
  for (const v1::JobEvent& e : s.events()) CHECK(e.unix_seconds() == 1'000'106.5);
}

TEST_CASE("coordinator: each decision carries the next step's warm-ups (extra_in_flight auto)") {
  Fixture f;
  // Reports without compute or links: plain 1F1B's, stage 0 one warm-up forward.
  auto [d0, d1] = f.Step(0, 0);
  CHECK(std::vector<uint32_t>(d0.warmups().begin(), d0.warmups().end()) ==
        std::vector<uint32_t>{1, 0});
  CHECK(d1.warmups_size() == 2);
}

TEST_CASE("job spec: extra_in_flight is auto, a count, or a clear error") {
  const std::string dir = testing::TempDir("in_flight_spec");
  auto parse = [&](const std::string& line) { return ParseJobSpec(kJob + line, "job.yaml", dir); };
  auto plain = ParseJobSpec(kJob, "job.yaml", dir);
  REQUIRE(plain.ok());
  CHECK(plain->extra_in_flight == JobSpec::kAutoInFlight);
  auto three = parse("extra_in_flight: 3\n");
  REQUIRE(three.ok());
  CHECK(three->extra_in_flight == 3);
  auto off = parse("extra_in_flight: 0\n");
  REQUIRE(off.ok());
  CHECK(off->extra_in_flight == 0);
  auto word = parse("extra_in_flight: lots\n");
  REQUIRE_FALSE(word.ok());
  CHECK_THAT(std::string(word.status().message()),
             Catch::Contains("job.yaml:") && Catch::Contains("expected auto or a number"));
  auto negative = parse("extra_in_flight: -1\n");
  REQUIRE_FALSE(negative.ok());
  CHECK_THAT(std::string(negative.status().message()), Catch::Contains("extra_in_flight"));
}

TEST_CASE("job spec: sharding is auto, a mode for every layer, or a clear error") {
  const std::string dir = testing::TempDir("sharding_spec");
  auto parse = [&](const std::string& line) { return ParseJobSpec(kJob + line, "job.yaml", dir); };
  auto plain = ParseJobSpec(kJob, "job.yaml", dir);
  REQUIRE(plain.ok());
  CHECK_FALSE(plain->sharding.has_value());
  auto autos = parse("sharding: auto\n");
  REQUIRE(autos.ok());
  CHECK_FALSE(autos->sharding.has_value());
  auto zero3 = parse("sharding: zero3\n");
  REQUIRE(zero3.ok());
  CHECK(zero3->sharding == model::ShardMode::kZero3);
  auto bad = parse("sharding: zero4\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()),
             Catch::Contains("job.yaml:") && Catch::Contains("expected auto, replicate, zero1") &&
                 Catch::Contains("'zero4'"));
  auto list = parse("sharding: [zero1]\n");
  REQUIRE_FALSE(list.ok());
}

}  // namespace
}  // namespace longhaul::daemon
