// StepReporter: step reports sent in order on a thread of their own (step_reporter.h).
#include "daemon/job/stage/step_reporter.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace longhaul::daemon {

StepReporter::StepReporter(transport::Link* coordinator, const std::atomic<bool>* stop,
                           size_t max_queued)
    : coordinator_(coordinator), stop_(stop), max_queued_(std::max<size_t>(max_queued, 1)) {
  thread_ = std::thread([this] { Run(); });
}

StepReporter::~StepReporter() {
  Close();
  if (thread_.joinable()) thread_.join();
}

void StepReporter::Add(v1::StepReport report) {
  MutexLock lock(mu_);
  if (closed_) return;
  queue_.push_back(std::move(report));
  // The front may be in a call: drop the one behind it.
  while (queue_.size() > max_queued_) {
    queue_.erase(queue_.begin() + (sending_ ? 1 : 0));
    ++dropped_;
  }
  cv_.notify_all();
}

void StepReporter::Drain() {
  MutexLock lock(mu_);
  // The stop flag is not under mu_: look at it every 100 ms.
  while (!queue_.empty() && !Done() && stopped_.empty()) {
    cv_.wait_for(mu_, std::chrono::milliseconds(100));
  }
}

void StepReporter::Close() {
  MutexLock lock(mu_);
  closed_ = true;
  queue_.clear();
  cv_.notify_all();
}

uint64_t StepReporter::committed_step() const {
  MutexLock lock(mu_);
  return committed_;
}

std::string StepReporter::stopped() const {
  MutexLock lock(mu_);
  return stopped_;
}

uint64_t StepReporter::answered() const {
  MutexLock lock(mu_);
  return answered_;
}

uint64_t StepReporter::resends() const {
  MutexLock lock(mu_);
  return resends_;
}

uint64_t StepReporter::dropped() const {
  MutexLock lock(mu_);
  return dropped_;
}

void StepReporter::Run() {
  while (true) {
    v1::StepReport report;
    {
      MutexLock lock(mu_);
      while (queue_.empty() && !Done()) cv_.wait_for(mu_, std::chrono::milliseconds(100));
      if (Done()) return;
      if (missed_ && !resent_) {
        // The coordinator is away: it may be restarting, and then it has lost what it had
        // filed of the last steps but not decided yet. Those reports go first once it is back,
        // oldest first (it files one of a step it decided already as nothing new).
        queue_.insert(queue_.begin(), recent_.begin(), recent_.end());
        resent_ = true;
        ++resends_;
      }
      report = queue_.front();
      sending_ = true;
    }
    // The coordinator files a gossip stage's report and answers at once: the call is short
    // unless the coordinator is away, when it fails and is tried again.
    auto d = coordinator_->ReportStep(report, 10);
    MutexLock lock(mu_);
    sending_ = false;
    if (!d.ok()) {
      missed_ = true;
      cv_.wait_for(mu_, std::chrono::milliseconds(500),
                   [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return Done(); });
      continue;
    }
    if (!queue_.empty()) queue_.pop_front();
    missed_ = resent_ = false;
    if (recent_.empty() || report.step() > recent_.back().step()) recent_.push_back(report);
    if (recent_.size() > kResent) recent_.pop_front();
    ++answered_;
    committed_ = std::max(committed_, d->committed_step());
    if (d->stop() && stopped_.empty()) {
      stopped_ = d->detail().empty() ? std::string("stopped") : d->detail();
    }
    cv_.notify_all();
  }
}

}  // namespace longhaul::daemon
