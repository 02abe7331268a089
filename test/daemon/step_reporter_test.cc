// StepReporter (daemon/job/stage/step_reporter.h): a gossip stage's reports reach the
// coordinator in step order behind the steps, are sent again while it does not answer, are
// bounded while it is away, and its answer's committed step and stop come back.
#include "daemon/job/stage/step_reporter.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "test/daemon/fake_link.h"
#include "test/daemon/test_util.h"

namespace longhaul::daemon {
namespace {

using namespace std::chrono_literals;

// A coordinator that is down (every call fails) until Up(), then files each report and
// answers with its step as the committed step, and stop from step `stop_at` on.
class FakeCoordinator : public testing::FakeLink {
 public:
  FakeCoordinator() : FakeLink("alpha") {}
  void Up() { up_ = true; }
  void Down() { up_ = false; }
  std::atomic<uint64_t> stop_at{UINT64_MAX};
  std::vector<uint64_t> steps() const {
    std::lock_guard<std::mutex> lock(mu_);
    return steps_;
  }
  int calls() const { return calls_; }
  StatusOr<v1::StepDecision> ReportStep(const v1::StepReport& r, double) override {
    ++calls_;
    if (!up_) return absl::UnavailableError("coordinator down");
    std::lock_guard<std::mutex> lock(mu_);
    steps_.push_back(r.step());
    v1::StepDecision d;
    d.set_committed_step(r.step());
    if (r.step() >= stop_at) {
      d.set_stop(true);
      d.set_detail("attempt superseded");
    }
    return d;
  }

 private:
  std::atomic<bool> up_{false};
  std::atomic<int> calls_{0};
  mutable std::mutex mu_;
  std::vector<uint64_t> steps_;
};

v1::StepReport Report(uint64_t step) {
  v1::StepReport r;
  r.set_job_id("j-000001");
  r.set_step(step);
  return r;
}

TEST_CASE("step reporter: in order behind the steps, again while the coordinator is down") {
  FakeCoordinator c;
  std::atomic<bool> stop{false};
  StepReporter reporter(&c, &stop);
  for (uint64_t s = 0; s < 5; ++s) reporter.Add(Report(s));        // returns at once: it is down
  REQUIRE(testing::WaitFor([&] { return c.calls() >= 3; }, 10s));  // knocking again
  CHECK(reporter.answered() == 0);
  CHECK(reporter.committed_step() == 0);
  c.Up();
  reporter.Add(Report(5));
  reporter.Drain();
  CHECK(c.steps() == std::vector<uint64_t>{0, 1, 2, 3, 4, 5});
  CHECK(reporter.answered() == 6);
  CHECK(reporter.dropped() == 0);
  CHECK(reporter.committed_step() == 5);
  CHECK(reporter.stopped().empty());
}

TEST_CASE("step reporter: after an outage the recent reports go again, before the rest") {
  // A coordinator that restarted lost what it had filed but not decided: once a call fails,
  // the reports it answered go back in front, to be filed again in step order.
  FakeCoordinator c;
  c.Up();
  std::atomic<bool> stop{false};
  StepReporter reporter(&c, &stop);
  for (uint64_t s = 0; s < 4; ++s) reporter.Add(Report(s));
  reporter.Drain();
  c.Down();
  reporter.Add(Report(4));
  REQUIRE(testing::WaitFor([&] { return reporter.resends() == 1; }, 10s));
  c.Up();
  reporter.Drain();
  CHECK(c.steps() == std::vector<uint64_t>{0, 1, 2, 3, 0, 1, 2, 3, 4});
  CHECK(reporter.resends() == 1);
  CHECK(reporter.committed_step() == 4);
}

TEST_CASE("step reporter: a long outage keeps the newest reports, bounded") {
  FakeCoordinator c;
  std::atomic<bool> stop{false};
  StepReporter reporter(&c, &stop, /*max_queued=*/4);
  for (uint64_t s = 0; s < 10; ++s) reporter.Add(Report(s));
  CHECK(reporter.dropped() == 6);  // 10 into 4
  c.Up();
  reporter.Drain();
  // In order, the newest three last; the first the newest of the others, or one that was in
  // a failing call when the queue overflowed (a call in flight keeps its report).
  const std::vector<uint64_t> got = c.steps();
  REQUIRE(got.size() == 4);
  CHECK(got[0] <= 6);
  CHECK(std::vector<uint64_t>(got.begin() + 1, got.end()) == std::vector<uint64_t>{7, 8, 9});
}

TEST_CASE("step reporter: the coordinator's stop comes back; the stop flag ends a drain") {
  FakeCoordinator c;
  c.Up();
  c.stop_at = 2;
  std::atomic<bool> stop{false};
  {
    StepReporter reporter(&c, &stop);
    for (uint64_t s = 0; s < 3; ++s) reporter.Add(Report(s));
    reporter.Drain();
    CHECK(reporter.stopped() == "attempt superseded");
  }
  FakeCoordinator down;  // never answers
  StepReporter reporter(&down, &stop);
  reporter.Add(Report(0));
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    stop = true;
  });
  reporter.Drain();  // returns once the stage stops, the report unsent
  stopper.join();
  CHECK(reporter.answered() == 0);
}

}  // namespace
}  // namespace longhaul::daemon
