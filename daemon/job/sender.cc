#include "daemon/job/sender.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>

#include "daemon/peer_security.h"

namespace longhaul::daemon {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

LinkSender::LinkSender(LinkSenderOptions options, LinkMonitor* monitor,
                       std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), monitor_(monitor), log_(std::move(log)) {
  auto channel = PeerChannel(options_.tls, options_.peer, options_.address);
  if (channel.ok()) stub_ = v1::Peer::NewStub(*channel);
  for (int i = 0; i < std::max(1, options_.workers); ++i) {
    threads_.emplace_back([this] { Run(); });
  }
}

LinkSender::~LinkSender() {
  Close();
  for (auto& t : threads_) t.join();
}

Status LinkSender::Enqueue(OutgoingTensor tensor) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return closed_ || HasRoomLocked(tensor.payload.size()); });
  if (closed_) return absl::CancelledError("sender to " + options_.peer + " is closed");
  PushLocked(std::move(tensor));
  return absl::OkStatus();
}

StatusOr<bool> LinkSender::TryEnqueue(OutgoingTensor* tensor) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return absl::CancelledError("sender to " + options_.peer + " is closed");
  if (!HasRoomLocked(tensor->payload.size())) return false;
  PushLocked(std::move(*tensor));
  return true;
}

void LinkSender::PushLocked(OutgoingTensor tensor) {
  queued_bytes_ += tensor.payload.size();
  queue_.push_back(std::make_shared<OutgoingTensor>(std::move(tensor)));
  cv_.notify_all();
}

Status LinkSender::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return closed_ || (queue_.empty() && in_flight_ == 0); });
  if (closed_ && (!queue_.empty() || in_flight_ > 0)) {
    return absl::CancelledError("sender to " + options_.peer + " closed with tensors queued");
  }
  return absl::OkStatus();
}

void LinkSender::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  queue_.clear();
  queued_bytes_ = 0;
  cv_.notify_all();
}

LinkSenderStats LinkSender::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

grpc::Status LinkSender::SendOne(const OutgoingTensor& t) {
  if (!stub_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no channel to peer");
  grpc::ClientContext ctx;
  // Generous: a whole tensor at 1 Mbit/s plus a minute.
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::seconds(60 + t.payload.size() / (1000000 / 8)));
  v1::FrameAck ack;
  auto writer = stub_->SendFrames(&ctx, &ack);
  const size_t n = t.payload.size();
  const uint32_t chunks =
      std::max<size_t>(1, (n + options_.chunk_bytes - 1) / options_.chunk_bytes);
  const uint64_t checksum = XXH64(t.payload.data(), n, 0);
  for (uint32_t i = 0; i < chunks; ++i) {
    v1::TensorFrame f = t.header;
    const size_t off = static_cast<size_t>(i) * options_.chunk_bytes;
    const size_t len = std::min(options_.chunk_bytes, n - off);
    f.set_encoded_size(n);
    f.set_chunk_index(i);
    f.set_chunk_count(chunks);
    f.set_chunk_offset(off);
    f.set_checksum(checksum);
    f.set_payload(t.payload.data() + off, len);
    if (!writer->Write(f)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

namespace {
double NowSeconds() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}
}  // namespace

void LinkSender::StartTransferLocked() {
  if (in_flight_++ == 0) {
    busy_start_ = NowSeconds();
    busy_bytes_ = 0;
  }
}

void LinkSender::FinishTransferLocked(uint64_t bytes) {
  busy_bytes_ += bytes;
  if (--in_flight_ > 0) return;
  // The link went idle: the busy period is one passive sample, less one round trip (the
  // last response's way back), when it moved enough bytes to fill the pipe.
  const double seconds = NowSeconds() - busy_start_;
  stats_.send_seconds += seconds;
  if (busy_bytes_ >= (256u << 10)) {
    const double rtt = monitor_->Outbound(options_.peer).rtt_seconds();
    const double busy = seconds - rtt;
    if (busy > 0.002) monitor_->AddBandwidthSample(options_.peer, busy_bytes_, busy);
  }
}

void LinkSender::Run() {
  double backoff = 0.1;
  while (true) {
    std::shared_ptr<OutgoingTensor> t;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return closed_ || !queue_.empty(); });
      if (closed_) return;
      t = queue_.front();
      queue_.pop_front();
      StartTransferLocked();
    }
    const auto start = Clock::now();
    grpc::Status s = SendOne(*t);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    std::unique_lock<std::mutex> lock(mu_);
    if (closed_) {
      --in_flight_;
      cv_.notify_all();
      return;
    }
    if (!s.ok()) {
      ++stats_.retries;
      --in_flight_;
      // A refusal (wrong shape, unknown job) will not heal: drop the tensor, say why.
      const bool permanent = s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                             s.error_code() == grpc::StatusCode::NOT_FOUND ||
                             s.error_code() == grpc::StatusCode::FAILED_PRECONDITION;
      log_->warn("sending {} to {} failed: {}{}", t->header.job_id(), options_.peer,
                 s.error_message(), permanent ? " (dropped)" : "; retrying");
      if (permanent) {
        queued_bytes_ -= t->payload.size();
      } else {
        queue_.push_front(t);  // first in line again
        cv_.wait_for(lock, std::chrono::duration<double>(backoff), [&] { return closed_; });
        backoff = std::min(backoff * 2, 2.0);
      }
      cv_.notify_all();
      continue;
    }
    backoff = 0.1;
    queued_bytes_ -= t->payload.size();
    ++stats_.tensors;
    stats_.raw_bytes += t->header.raw_size();
    stats_.wire_bytes += t->payload.size();
    (void)seconds;
    FinishTransferLocked(t->payload.size());
    cv_.notify_all();
  }
}

}  // namespace longhaul::daemon
