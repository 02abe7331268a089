// A Link for unit tests of what sits above the transport (LinkSender, the stage exchange; the
// coordinator's test overrides the job calls it needs): it records the tensors sent through
// it, answers each send with the next scripted status (OK once the script runs out), can hold
// sends until released, and answers every other call UNIMPLEMENTED. Beside it, FakeClockEnv:
// a FileEnv whose clocks the test sets, for the job runtime's times.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/file_env.h"
#include "daemon/job/exchange/inbox.h"
#include "daemon/transport/link.h"

namespace longhaul::testing {

// The real disk with clocks that move only when the test moves them: NowSeconds (monotonic)
// reads `now`, WallSeconds reads `wall`. Pass it as the file_env of what a test builds, and
// the times that object reports follow the test's steps, not the machine's.
class FakeClockEnv : public FileEnv {
 public:
  std::atomic<double> now{100.0};
  std::atomic<double> wall{1.7e9};

  double NowSeconds() override { return now.load(); }
  double WallSeconds() override { return wall.load(); }
  // Moves both clocks `seconds` on.
  void Advance(double seconds) {
    now.store(now.load() + seconds);
    wall.store(wall.load() + seconds);
  }
};

class FakeLink : public daemon::transport::Link {
 public:
  explicit FakeLink(std::string site) : site_(std::move(site)) {}
  ~FakeLink() override { Release(); }

  // The statuses the next sends return, in order.
  void Script(std::vector<Status> statuses) {
    std::lock_guard<std::mutex> lock(mu_);
    script_.assign(statuses.begin(), statuses.end());
  }
  // Every successful send also goes to `deliver` (a test wires it to a receiver's inbox); its
  // error is the send's.
  void OnDeliver(std::function<Status(const daemon::transport::WireTensor&)> deliver) {
    std::lock_guard<std::mutex> lock(mu_);
    deliver_ = std::move(deliver);
  }
  // Sends wait until Release().
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    cv_.notify_all();
  }
  // Tensors sent successfully, and every send attempted.
  std::vector<daemon::transport::WireTensor> delivered() const {
    std::lock_guard<std::mutex> lock(mu_);
    return delivered_;
  }
  int attempts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return attempts_;
  }
  // Sends waiting in Hold().
  int waiting() const {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_;
  }

  const std::string& site() const override { return site_; }
  StatusOr<v1::HelloResponse> Hello(const v1::HelloRequest&, double) override { return No(); }
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest&, double) override {
    return No();
  }
  StatusOr<v1::ProbeResult> Probe(const daemon::transport::ProbeRequest&) override { return No(); }
  StatusOr<v1::AssignResponse> AssignStage(const v1::StageAssignment&, double) override {
    return No();
  }
  StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand&, double) override {
    return No();
  }
  StatusOr<v1::StepDecision> ReportStep(const v1::StepReport&, double) override { return No(); }
  StatusOr<v1::SiteProfileReply> ProfileSite(const v1::ProfileSiteRequest&, double) override {
    return No();
  }
  Status FetchFragment(const v1::FetchFragmentRequest&,
                       const daemon::transport::TensorSink&) override {
    return No();
  }
  Status SendTensor(const daemon::transport::WireTensor& t, double) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    cv_.wait(lock, [&] { return !held_; });
    --waiting_;
    ++attempts_;
    Status s;
    if (!script_.empty()) {
      s = script_.front();
      script_.pop_front();
    }
    if (s.ok() && deliver_) s = deliver_(t);
    if (s.ok()) delivered_.push_back(t);
    return s;
  }

 private:
  static Status No() { return absl::UnimplementedError("fake link"); }
  const std::string site_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Status> script_;
  bool held_ = false;
  std::function<Status(const daemon::transport::WireTensor&)> deliver_;
  int attempts_ = 0;
  int waiting_ = 0;
  std::vector<daemon::transport::WireTensor> delivered_;
};

// What FakeLink::OnDeliver takes to file every tensor sent in a receiving stage's inbox, as the
// job host does with a tensor that arrived whole.
inline std::function<Status(const daemon::transport::WireTensor&)> IntoInbox(daemon::Inbox* inbox) {
  return [inbox](const daemon::transport::WireTensor& t) {
    daemon::ReceivedTensor r;
    r.from_site = t.header.from_site();
    r.payload = t.payload;
    return inbox->Put(daemon::KeyOf(t.header), std::move(r));
  };
}

// Job j-000001's assignment of `stage` in a plan of one layer per stage on `sites` (stage i on
// sites[i], layers [i, i + 1)), coordinated by `coordinator`, attempt `attempt`.
inline v1::StageAssignment OneLayerStages(const std::vector<std::string>& sites, int stage,
                                          const std::string& coordinator, uint32_t attempt) {
  v1::StageAssignment a;
  a.set_job_id("j-000001");
  a.set_attempt(attempt);
  a.set_coordinator(coordinator);
  a.set_stage(static_cast<uint32_t>(stage));
  for (size_t i = 0; i < sites.size(); ++i) {
    v1::StageInfo* s = a.add_stages();
    s->set_index(static_cast<uint32_t>(i));
    s->set_site(sites[i]);
    s->set_layer_begin(static_cast<uint32_t>(i));
    s->set_layer_end(static_cast<uint32_t>(i + 1));
  }
  return a;
}

}  // namespace longhaul::testing
