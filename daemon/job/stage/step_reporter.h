// StepReporter: a gossip job's stage reports its steps to the coordinator without waiting for
// the answer (issue 36: no job-wide barrier, and a coordinator that is down stops no replica).
// Such a stage decides its own clipping scale (its replica's gradient norm, computed where the
// replica's stages are), so a report only tells the coordinator what happened: progress,
// losses, checkpoints, links. Reports queue in step order and one thread of the reporter's own
// sends them, knocking again every half second while the coordinator does not answer (it may
// be restarting, or its site down); the newest answer's committed step, or its order to stop,
// is kept for the stage to read. At most `max_queued` reports wait: past that the oldest are
// dropped (the coordinator keeps a gap in the loss history, never a wrong value), so a long
// outage holds bounded memory. Once a call fails, the last kResent answered reports go
// before what waits, oldest first, to be sent again when the coordinator answers: one that
// restarted lost what it had filed but not yet decided (a gossip step is decided when every
// replica's report of it is in), and files again what it decided already as nothing new.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "daemon/transport/link.h"

namespace longhaul::daemon {

class StepReporter {
 public:
  // `coordinator` must outlive the reporter; `stop` (the stage's) ends every wait.
  StepReporter(transport::Link* coordinator, const std::atomic<bool>* stop,
               size_t max_queued = 10000);
  ~StepReporter();  // stops the thread; reports still queued are dropped

  // Queues a report (returns at once).
  void Add(v1::StepReport report) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until every queued report has been answered, or until the stop or Close.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the thread (within a knock) and drops what is queued.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  // The newest answer's committed step (0 before any).
  uint64_t committed_step() const ABSL_LOCKS_EXCLUDED(mu_);
  // Empty, or why the coordinator told the stage to stop (its attempt superseded, its
  // replica dropped, the job ended).
  std::string stopped() const ABSL_LOCKS_EXCLUDED(mu_);
  // Reports sent and answered; reports dropped because the queue was full.
  uint64_t answered() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t dropped() const ABSL_LOCKS_EXCLUDED(mu_);
  // Times the recent reports went back into the queue after a call failed.
  uint64_t resends() const ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr size_t kResent = 256;

 private:
  void Run();
  bool Done() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || (stop_ != nullptr && stop_->load());
  }

  transport::Link* const coordinator_;
  const std::atomic<bool>* const stop_;
  const size_t max_queued_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;  // waits on mu_
  std::deque<v1::StepReport> queue_ ABSL_GUARDED_BY(mu_);
  bool sending_ ABSL_GUARDED_BY(mu_) = false;  // the front is in a call
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t committed_ ABSL_GUARDED_BY(mu_) = 0;
  std::string stopped_ ABSL_GUARDED_BY(mu_);
  uint64_t answered_ ABSL_GUARDED_BY(mu_) = 0, dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<v1::StepReport> recent_ ABSL_GUARDED_BY(mu_);  // the last answered, by step
  bool missed_ ABSL_GUARDED_BY(mu_) = false;                // a call failed since the last answer
  bool resent_ ABSL_GUARDED_BY(mu_) = false;  // ...and recent_ went back into the queue
  uint64_t resends_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace longhaul::daemon
