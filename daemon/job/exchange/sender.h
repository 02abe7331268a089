// LinkSender: the one sender of one job's tensors over one directed link. The stage executor
// enqueues encoded tensors and goes back to computing; worker threads send them, in queue
// order, each with one Link::SendTensor call, several in flight, so a long round trip does
// not cap the link at one tensor per RTT. Each call lasts at least a round trip (it ends
// with the receiver's answer), so a link carries at most `workers` tensors per round trip:
// while tensors wait with every worker busy, another worker starts, up to max_workers. A call that
// may heal (peer restarting, connection dropped) is retried until it succeeds or the sender is
// closed; the receiver drops duplicates by key, so a retry never delivers a microbatch twice. A
// refusal that will not heal (the peer says the tensor is wrong or unexpected) fails the sender:
// error() says which tensor, to which site and why, and every later call returns it, so the stage
// stops with it. Busy periods of the link (from the first transfer starting to the last one
// finishing) are passive bandwidth samples for the link monitor.
#pragma once

#include <spdlog/logger.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/file_env.h"
#include "common/mutex.h"
#include "common/status.h"
#include "daemon/link_monitor.h"
#include "daemon/transport/link.h"

namespace longhaul::daemon {

using OutgoingTensor = transport::WireTensor;

struct LinkSenderStats {
  uint64_t tensors = 0;
  uint64_t raw_bytes = 0;
  uint64_t wire_bytes = 0;
  double send_seconds = 0;  // time the link was busy with this sender's transfers
  uint64_t retries = 0;
};

struct LinkSenderOptions {
  std::string site;
  std::string peer;
  size_t queue_capacity_bytes = 512 << 20;
  int workers = 4;       // calls in flight at once, at first
  int max_workers = 32;  // and at most, when tensors wait with every worker busy
  // The clock of the busy periods and of the transfers the monitor keeps (NowSeconds: the
  // steady clock PeerLink's probes read, LinkMonitor::SteadySeconds, unless a test fakes it).
  // REQUIRES: not null.
  FileEnv* file_env = FileEnv::Default();
};

class LinkSender {
 public:
  // `link` (to options.peer) must outlive the sender.
  LinkSender(LinkSenderOptions options, transport::Link* link, LinkMonitor* monitor,
             std::shared_ptr<spdlog::logger> log);
  ~LinkSender();  // closes

  // Queues a tensor; blocks while the queue holds more than its capacity. Fails once closed
  // or failed.
  Status Enqueue(OutgoingTensor tensor) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues *tensor (moving from it) if that needs no wait, and says whether it did.
  StatusOr<bool> TryEnqueue(OutgoingTensor* tensor) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until everything queued so far has been delivered (or the sender is closed or
  // failed).
  Status Flush() ABSL_LOCKS_EXCLUDED(mu_);
  // Drops queued tensors and stops retrying; Enqueue fails from now on.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);
  // OK, or the refusal that failed the sender (naming the tensor and the peer).
  Status error() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::string& peer() const { return options_.peer; }
  LinkSenderStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Starts another worker when tensors wait with every worker busy (mu_ held): on queueing
  // (every worker may be in a call) and when a worker takes a tensor with more behind it.
  void GrowLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Why nothing can be queued: closed or failed; OK otherwise (mu_ held).
  Status RefusedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasRoomLocked(size_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queued_bytes_ == 0 || queued_bytes_ + bytes <= options_.queue_capacity_bytes;
  }
  void PushLocked(OutgoingTensor tensor) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Busy-period accounting for passive bandwidth samples (mu_ held).
  void StartTransferLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishTransferLocked(uint64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LinkSenderOptions options_;
  transport::Link* const link_;
  LinkMonitor* const monitor_;
  std::shared_ptr<spdlog::logger> log_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;  // waits on mu_
  // Not yet taken by a worker.
  std::deque<std::shared_ptr<OutgoingTensor>> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // queued or in flight
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  Status error_ ABSL_GUARDED_BY(mu_);  // set once, by the first refusal that will not heal
  LinkSenderStats stats_ ABSL_GUARDED_BY(mu_);
  double busy_start_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t busy_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // More than one transfer in flight in this busy period.
  bool busy_overlapped_ ABSL_GUARDED_BY(mu_) = false;
  // Grows under mu_ until closed_, then joined (by the destructor, after Close).
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
  size_t max_threads_ = 1;  // set by the constructor before the first worker starts
};

}  // namespace longhaul::daemon
