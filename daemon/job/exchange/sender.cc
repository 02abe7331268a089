// LinkSender (sender.h): one job's queue of tensors to one peer, its worker threads, retries
// and refusals, and the passive bandwidth samples of its busy periods.
#include "daemon/job/exchange/sender.h"

#include <algorithm>
#include <chrono>

#include "compression/frame.h"
#include "daemon/job/exchange/inbox.h"

namespace longhaul::daemon {

LinkSender::LinkSender(LinkSenderOptions options, transport::Link* link, LinkMonitor* monitor,
                       std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), link_(link), monitor_(monitor), log_(std::move(log)) {
  const int first = std::max(1, options_.workers);
  max_threads_ = static_cast<size_t>(std::max(first, options_.max_workers));
  MutexLock lock(mu_);
  for (int i = 0; i < first; ++i) threads_.emplace_back([this] { Run(); });
}

LinkSender::~LinkSender() {
  Close();  // no worker starts after this (GrowLocked checks closed_ under mu_)
  for (auto& t : threads_) t.join();
}

void LinkSender::GrowLocked() {
  if (closed_ || queue_.empty() || threads_.size() >= max_threads_) return;
  if (static_cast<size_t>(in_flight_) < threads_.size()) return;  // a worker is free
  threads_.emplace_back([this] { Run(); });
}

Status LinkSender::RefusedLocked() const {
  if (!error_.ok()) return error_;
  if (closed_) return absl::CancelledError("sender to " + options_.peer + " is closed");
  return absl::OkStatus();
}

Status LinkSender::error() const {
  MutexLock lock(mu_);
  return error_;
}

Status LinkSender::Enqueue(OutgoingTensor tensor) {
  MutexLock lock(mu_);
  cv_.wait(mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !RefusedLocked().ok() || HasRoomLocked(tensor.payload.size());
  });
  RETURN_IF_ERROR(RefusedLocked());
  PushLocked(std::move(tensor));
  return absl::OkStatus();
}

StatusOr<bool> LinkSender::TryEnqueue(OutgoingTensor* tensor) {
  MutexLock lock(mu_);
  RETURN_IF_ERROR(RefusedLocked());
  if (!HasRoomLocked(tensor->payload.size())) return false;
  PushLocked(std::move(*tensor));
  return true;
}

void LinkSender::PushLocked(OutgoingTensor tensor) {
  queued_bytes_ += tensor.payload.size();
  queue_.push_back(std::make_shared<OutgoingTensor>(std::move(tensor)));
  GrowLocked();  // every worker may be in a call already
  cv_.notify_all();
}

Status LinkSender::Flush() {
  MutexLock lock(mu_);
  cv_.wait(mu_, [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return closed_ || !error_.ok() || (queue_.empty() && in_flight_ == 0);
  });
  RETURN_IF_ERROR(error_);
  if (closed_ && (!queue_.empty() || in_flight_ > 0)) {
    return absl::CancelledError("sender to " + options_.peer + " closed with tensors queued");
  }
  return absl::OkStatus();
}

void LinkSender::Close() {
  MutexLock lock(mu_);
  closed_ = true;
  queue_.clear();
  queued_bytes_ = 0;
  cv_.notify_all();
}

LinkSenderStats LinkSender::stats() const {
  MutexLock lock(mu_);
  return stats_;
}

void LinkSender::StartTransferLocked() {
  if (in_flight_++ == 0) {
    busy_start_ = options_.file_env->NowSeconds();
    busy_bytes_ = 0;
    busy_overlapped_ = false;
  }
  if (in_flight_ > 1) busy_overlapped_ = true;
}

void LinkSender::FinishTransferLocked(uint64_t bytes) {
  busy_bytes_ += bytes;
  if (--in_flight_ > 0) return;
  // The link went idle: the busy period is one passive sample, less one round trip (the
  // first byte's way there, the last response's way back), when it moved enough bytes to fill
  // the pipe. The base round trip, not the moving average: heartbeats queued behind this very
  // data raise the average (at 100 Mbit/s with fp32 tensors, 21 -> 29 ms), and subtracting
  // that read the link at up to 1.6x its rate.
  const double seconds = options_.file_env->NowSeconds() - busy_start_;
  stats_.send_seconds += seconds;
  if (busy_bytes_ >= (256u << 10)) {
    const double rtt = monitor_->BaseRttSeconds(options_.peer);
    const double busy = seconds - rtt;
    // What a job's transfers achieve is a lower bound on what the link carries (TCP's window
    // reopening after idle, compute leaving gaps, flow control over long round trips): it
    // raises the estimate, never lowers it. Transfers that queued behind each other and moved
    // far less than such transfers usually do say the link may have fallen: the monitor then
    // asks for a probe.
    if (busy > 0.002) {
      monitor_->AddBandwidthSample(options_.peer, busy_bytes_, busy, /*lower_bound=*/true,
                                   /*backlogged=*/busy_overlapped_);
    }
  }
}

void LinkSender::Run() {
  double backoff = 0.1;
  while (true) {
    std::shared_ptr<OutgoingTensor> t;
    {
      MutexLock lock(mu_);
      cv_.wait(mu_,
               [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_ || !queue_.empty(); });
      if (closed_) return;
      t = queue_.front();
      queue_.pop_front();
      StartTransferLocked();
      GrowLocked();
    }
    // Generous: a whole tensor at 1 Mbit/s plus a minute.
    const double started = options_.file_env->NowSeconds();
    const Status s = link_->SendTensor(*t, 60.0 + t->payload.size() / (1e6 / 8));
    MutexLock lock(mu_);
    if (closed_) {
      --in_flight_;
      cv_.notify_all();
      return;
    }
    if (!s.ok()) {
      ++stats_.retries;
      --in_flight_;
      // A refusal (wrong shape, unknown job, another attempt) will not heal: the sender
      // fails, and the stage with it, naming the tensor and the peer.
      const bool permanent = !transport::Retryable(s);
      log_->warn("sending {} of job {} to {} failed: {}{}", KeyOf(t->header).DebugString(),
                 t->header.job_id(), options_.peer, std::string(s.message()),
                 permanent ? "" : "; retrying");
      if (permanent) {
        queued_bytes_ -= t->payload.size();
        if (error_.ok()) {
          error_ = Status(s.code(), "sending " + KeyOf(t->header).DebugString() + " to site '" +
                                        options_.peer + "' failed: " + std::string(s.message()));
        }
      } else {
        queue_.push_front(t);  // first in line again
        cv_.wait_for(mu_, std::chrono::duration<double>(backoff),
                     [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closed_; });
        backoff = std::min(backoff * 2, 2.0);
      }
      cv_.notify_all();
      continue;
    }
    backoff = 0.1;
    queued_bytes_ -= t->payload.size();
    ++stats_.tensors;
    // The raw size its frame's header names (the sender's own frame: valid by construction).
    if (auto h = compression::ParseFrameHeaderPrefix(t->payload); h.ok()) {
      stats_.raw_bytes += h->raw_size;
    }
    stats_.wire_bytes += t->payload.size();
    // What a probe of the link shares it with (PeerLink counts it into its sample).
    monitor_->AddTransfer(options_.peer, started, options_.file_env->NowSeconds(),
                          t->payload.size());
    FinishTransferLocked(t->payload.size());
    cv_.notify_all();
  }
}

}  // namespace longhaul::daemon
