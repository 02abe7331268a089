// LinkSender: the one sender of one job's tensors over one directed link. The stage executor
// enqueues encoded tensors and goes back to computing; worker threads send them, in queue
// order, as chunked TensorFrames on Peer SendFrames calls, one call per tensor and several
// calls in flight, so a long round trip does not cap the link at one tensor per RTT. A failed
// call (peer restarting, connection dropped) is retried until it succeeds or the sender is
// closed; the receiver drops duplicates by key, so a retry never delivers a microbatch twice.
// Busy periods of the link (from the first transfer starting to the last one finishing) are
// passive bandwidth samples for the link monitor.
#pragma once

#include <grpcpp/grpcpp.h>
#include <spdlog/logger.h>

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/config.h"
#include "daemon/link_monitor.h"
#include "proto/longhaul.grpc.pb.h"

namespace longhaul::daemon {

struct OutgoingTensor {
  v1::TensorFrame header;        // every field but the chunking fields and payload
  std::vector<uint8_t> payload;  // encoded tensor
};

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
  std::string address;
  std::optional<TlsConfig> tls;
  size_t chunk_bytes = 1 << 20;
  size_t queue_capacity_bytes = 512 << 20;
  int workers = 4;  // calls in flight at once
};

class LinkSender {
 public:
  LinkSender(LinkSenderOptions options, LinkMonitor* monitor, std::shared_ptr<spdlog::logger> log);
  ~LinkSender();  // closes

  // Queues a tensor; blocks while the queue holds more than its capacity. Fails once closed.
  Status Enqueue(OutgoingTensor tensor);
  // Queues *tensor (moving from it) if that needs no wait, and says whether it did.
  StatusOr<bool> TryEnqueue(OutgoingTensor* tensor);
  // Waits until everything queued so far has been delivered (or the sender is closed).
  Status Flush();
  // Drops queued tensors and stops retrying; Enqueue fails from now on.
  void Close();
  LinkSenderStats stats() const;

 private:
  void Run();
  grpc::Status SendOne(const OutgoingTensor& t);
  bool HasRoomLocked(size_t bytes) const {
    return queued_bytes_ == 0 || queued_bytes_ + bytes <= options_.queue_capacity_bytes;
  }
  void PushLocked(OutgoingTensor tensor);
  // Busy-period accounting for passive bandwidth samples (mu_ held).
  void StartTransferLocked();
  void FinishTransferLocked(uint64_t bytes);

  const LinkSenderOptions options_;
  LinkMonitor* const monitor_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<v1::Peer::Stub> stub_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<OutgoingTensor>> queue_;  // not yet taken by a worker
  size_t queued_bytes_ = 0;                            // queued or in flight
  int in_flight_ = 0;
  bool closed_ = false;
  LinkSenderStats stats_;
  double busy_start_ = 0;
  uint64_t busy_bytes_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace longhaul::daemon
