// The status page's JSON (daemon/status_pages.h, /status/jobs): a job's history as the page
// plots it, thinned to at most kMaxHistoryPoints evenly spaced steps with the newest kept,
// step times beside their losses, validation losses and the timeline's events as they are;
// and /status on a stage site: the stages it runs of other sites' jobs, naming the coordinator.
#include "daemon/status_pages.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

namespace longhaul::daemon {
namespace {

v1::ListJobsResponse OneJob(int steps, uint64_t offset) {
  v1::ListJobsResponse r;
  v1::JobStatus* j = r.add_jobs();
  j->set_job_id("tiny-0a1b2c");
  j->set_name("tiny");
  j->set_state(v1::JOB_STATE_RUNNING);
  j->set_losses_offset(offset);
  for (int i = 0; i < steps; ++i) {
    j->add_losses(10.0 - i * 1e-4);
    j->add_step_times(0.5 + i);
  }
  v1::ValLoss* v = j->add_val_losses();
  v->set_step(offset + 50);
  v->set_loss(4.25);
  v1::JobEvent* e = j->add_events();
  e->set_step(offset + 40);
  e->set_kind("rollback");
  e->set_detail("attempt 2 resumes from step 40");
  return r;
}

TEST_CASE("/status/jobs: a short history whole, the steps numbered from the offset") {
  const auto j = nlohmann::json::parse(RenderJobHistoryJson(OneJob(100, 7)))["jobs"][0];
  CHECK(j["job"] == "tiny-0a1b2c");
  CHECK(j["state"] == "running");
  REQUIRE(j["steps"].size() == 100);
  CHECK(j["steps"][0] == 8);
  CHECK(j["steps"][99] == 107);
  CHECK(j["losses"][99] == 10.0 - 99 * 1e-4);
  CHECK(j["step_times"][99] == 99.5);
  CHECK(j["val_losses"][0]["step"] == 57);
  CHECK(j["val_losses"][0]["loss"] == 4.25);
  CHECK(j["events"][0]["kind"] == "rollback");
  CHECK(j["events"][0]["step"] == 47);
}

TEST_CASE("/status/jobs: a long history thinned evenly, the newest step kept") {
  static_assert(kMaxHistoryPoints == 4000);
  const int n = GENERATE(4000, 4001, 12002, 100000);
  INFO(n << " steps");
  const auto j = nlohmann::json::parse(RenderJobHistoryJson(OneJob(n, 0)))["jobs"][0];
  const auto& steps = j["steps"];
  REQUIRE(steps.size() <= static_cast<size_t>(kMaxHistoryPoints));
  REQUIRE(steps.size() >= static_cast<size_t>(kMaxHistoryPoints) / 2);
  CHECK(steps.back() == n);
  REQUIRE(j["losses"].size() == steps.size());
  REQUIRE(j["step_times"].size() == steps.size());
  const uint64_t stride = steps[1].get<uint64_t>() - steps[0].get<uint64_t>();
  for (size_t i = 1; i < steps.size(); ++i) {
    CHECK(steps[i].get<uint64_t>() - steps[i - 1].get<uint64_t>() == stride);
    const int index = steps[i].get<int>() - 1;
    CHECK(j["losses"][i] == 10.0 - index * 1e-4);  // each loss is its own step's
  }
}

TEST_CASE("/status on a stage site: the stages it runs, each naming the job's coordinator") {
  v1::NodeStatus node;
  node.set_site("beta");
  v1::ListJobsResponse jobs;  // beta coordinates nothing
  v1::HostedStage* h = jobs.add_hosted_stages();
  h->set_job_id("tiny-0a1b2c");
  h->set_name("tiny");
  h->set_coordinator("alpha");
  h->set_stage(1);
  h->set_stages(3);
  h->set_layer_begin(2);
  h->set_layer_end(4);
  h->set_state("running");
  h->set_step(17);
  h->set_total_steps(100);
  h->set_attempt(2);
  const auto j = nlohmann::json::parse(RenderStatusJson(node, {}, jobs));
  CHECK(j["site"] == "beta");
  CHECK(j["jobs"].empty());
  REQUIRE(j["hosted_stages"].size() == 1);
  const auto& s = j["hosted_stages"][0];
  CHECK(s["job"] == "tiny-0a1b2c");
  CHECK(s["name"] == "tiny");
  CHECK(s["coordinator"] == "alpha");
  CHECK(s["stage"] == 1);
  CHECK(s["stages"] == 3);
  CHECK(s["layers"] == nlohmann::json::array({2, 4}));  // [2,4): half-open, as in "jobs"
  CHECK(s["state"] == "running");
  CHECK(s["step"] == 17);
  CHECK(s["steps"] == 100);
  CHECK(s["attempt"] == 2);
  // A site that runs no stage lists none.
  CHECK(nlohmann::json::parse(RenderStatusJson(node, {}, {}))["hosted_stages"].empty());
}

}  // namespace
}  // namespace longhaul::daemon
