// VolunteerLoop (daemon/job/host/volunteer.h) against a scripted coordinator: it asks again
// while the answer may change (the job not submitted yet, another change under way, the link
// down), stops at the first answer that settles it (joined, or refused for good), takes an
// empty answer for a refusal, and its state is what the node status shows.
#include "daemon/job/host/volunteer.h"

#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>
#include <deque>
#include <mutex>
#include <thread>

#include "test/daemon/fake_link.h"
#include "test/daemon/test_util.h"

namespace longhaul::daemon {
namespace {

using namespace std::chrono_literals;

// A coordinator's site that answers KIND_VOLUNTEER from a script (then the last answer again)
// and records what it was asked.
class Coordinator final : public testing::FakeLink {
 public:
  explicit Coordinator(std::deque<StatusOr<v1::JobCommandResponse>> answers)
      : FakeLink("alpha"), answers_(std::move(answers)) {}
  StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand& c, double) override {
    std::lock_guard<std::mutex> lock(mu_);
    asked_.push_back(c);
    StatusOr<v1::JobCommandResponse> a = answers_.front();
    if (answers_.size() > 1) answers_.pop_front();
    return a;
  }
  std::vector<v1::JobCommand> asked() {
    std::lock_guard<std::mutex> lock(mu_);
    return asked_;
  }

 private:
  std::mutex mu_;
  std::deque<StatusOr<v1::JobCommandResponse>> answers_;
  std::vector<v1::JobCommand> asked_;
};

v1::JobCommandResponse Joined(const std::string& detail) {
  v1::JobCommandResponse r;
  r.set_detail(detail);
  return r;
}

VolunteerOptions Options() {
  VolunteerOptions o;
  o.jobs = {{"tiny", "alpha"}};
  o.first_retry_seconds = 0.01;
  o.max_retry_seconds = 0.02;
  return o;
}

TEST_CASE("a volunteer asks again until it joins, then stops asking") {
  Coordinator alpha({absl::NotFoundError("site 'alpha' coordinates no running job 'tiny'"),
                     absl::UnavailableError("job tiny-1: a change is under way already"),
                     absl::DeadlineExceededError("site 'alpha' (ControlJob): deadline"),
                     Joined("site epsilon joins as replica 2")});
  VolunteerLoop loop(
      Options(), [&](const std::string& s) { return s == "alpha" ? &alpha : nullptr; },
      spdlog::default_logger());
  CHECK(loop.Snapshot().at(0).state() == "asking");
  loop.Start();
  REQUIRE(testing::WaitFor([&] { return loop.Snapshot().at(0).state() == "joined"; }, 10s));
  const v1::VolunteerStatus s = loop.Snapshot().at(0);
  CHECK(s.job() == "tiny");
  CHECK(s.coordinator() == "alpha");
  CHECK(s.detail() == "site epsilon joins as replica 2");
  CHECK(s.asked() == 4);
  std::this_thread::sleep_for(100ms);  // ten retry periods: no fifth ask
  loop.Stop();
  const std::vector<v1::JobCommand> asked = alpha.asked();
  REQUIRE(asked.size() == 4);
  for (const auto& c : asked) {
    CHECK(c.kind() == v1::JobCommand::KIND_VOLUNTEER);
    CHECK(c.job_id() == "tiny");
  }
}

TEST_CASE("a volunteer refused for good, or answered empty, stops asking") {
  const std::string why =
      GENERATE(std::string("permission"), std::string("precondition"), std::string("empty"));
  INFO(why);
  StatusOr<v1::JobCommandResponse> answer =
      why == "permission"     ? StatusOr<v1::JobCommandResponse>(absl::PermissionDeniedError(
                                    "site 'zeta' is not one of the volunteers of job 'tiny'"))
      : why == "precondition" ? StatusOr<v1::JobCommandResponse>(absl::FailedPreconditionError(
                                    "job tiny-1 is JOB_STATE_COMPLETED: no site joins"))
                              : StatusOr<v1::JobCommandResponse>(v1::JobCommandResponse());
  Coordinator alpha({answer});
  VolunteerLoop loop(
      Options(), [&](const std::string&) { return &alpha; }, spdlog::default_logger());
  loop.Start();
  REQUIRE(testing::WaitFor([&] { return loop.Snapshot().at(0).state() == "refused"; }, 10s));
  std::this_thread::sleep_for(100ms);
  CHECK(alpha.asked().size() == 1);
  const std::string detail = loop.Snapshot().at(0).detail();
  if (why == "empty") {
    CHECK_THAT(detail, Catch::Contains("did not take the request"));
  } else {
    CHECK_THAT(detail, Catch::Contains(why == "permission" ? "not one of the volunteers"
                                                           : "no site joins"));
  }
}

TEST_CASE("a volunteer whose coordinator is no peer keeps asking, and Stop ends it") {
  VolunteerLoop loop(
      Options(), [](const std::string&) { return nullptr; }, spdlog::default_logger());
  loop.Start();
  REQUIRE(testing::WaitFor([&] { return loop.Snapshot().at(0).asked() >= 3; }, 10s));
  CHECK(loop.Snapshot().at(0).state() == "asking");
  CHECK_THAT(loop.Snapshot().at(0).detail(), Catch::Contains("'alpha' is not a peer"));
  loop.Stop();
  const uint32_t asked = loop.Snapshot().at(0).asked();
  std::this_thread::sleep_for(50ms);
  CHECK(loop.Snapshot().at(0).asked() == asked);
}

}  // namespace
}  // namespace longhaul::daemon
