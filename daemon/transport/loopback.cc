// The loopback transport (loopback.h).
#include "daemon/transport/loopback.h"

#include <algorithm>
#include <thread>
#include <type_traits>

namespace longhaul::daemon::transport {

Status LoopbackNetwork::Attach(PeerHandler* handler) {
  std::lock_guard<std::mutex> lock(mu_);
  Site& s = sites_[handler->site()];
  if (s.handler != nullptr) {
    return absl::AlreadyExistsError("loopback: site '" + handler->site() + "' is already attached");
  }
  s.handler = handler;
  return absl::OkStatus();
}

void LoopbackNetwork::Detach(const std::string& site) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = sites_.find(site);
  if (it == sites_.end()) return;
  it->second.handler = nullptr;
  cv_.wait(lock, [&] { return it->second.in_flight == 0; });
}

StatusOr<PeerHandler*> LoopbackNetwork::Enter(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  auto p = pairs_.find({from, to});
  if (p != pairs_.end() && p->second.cut) {
    return absl::UnavailableError("loopback: the link from '" + from + "' to '" + to + "' is cut");
  }
  auto it = sites_.find(to);
  if (it == sites_.end() || it->second.handler == nullptr) {
    return absl::UnavailableError("loopback: site '" + to + "' is not running");
  }
  ++it->second.in_flight;
  return it->second.handler;
}

void LoopbackNetwork::Release(const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  if (--sites_[to].in_flight == 0) cv_.notify_all();
}

void LoopbackNetwork::SetCut(const std::string& from, const std::string& to, bool cut) {
  std::lock_guard<std::mutex> lock(mu_);
  pairs_[{from, to}].cut = cut;
}

void LoopbackNetwork::FailSends(const std::string& from, const std::string& to, Status status,
                                int count) {
  std::lock_guard<std::mutex> lock(mu_);
  Pair& p = pairs_[{from, to}];
  p.send_failure = std::move(status);
  p.send_failures_left = count;
}

void LoopbackNetwork::SetRate(const std::string& from, const std::string& to,
                              double bytes_per_second, bool shape_sends) {
  std::lock_guard<std::mutex> lock(mu_);
  Pair& p = pairs_[{from, to}];
  p.rate = bytes_per_second;
  p.shaped = shape_sends;
}

void LoopbackNetwork::WaitForLink(const std::string& from, const std::string& to, uint64_t bytes) {
  using Clock = std::chrono::steady_clock;
  Clock::time_point through;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pairs_.find({from, to});
    if (it == pairs_.end() || !it->second.shaped || !(it->second.rate > 0)) return;
    Pair& p = it->second;
    p.link_free = std::max(p.link_free, Clock::now()) +
                  std::chrono::duration_cast<Clock::duration>(
                      std::chrono::duration<double>(static_cast<double>(bytes) / p.rate));
    through = p.link_free;
  }
  std::this_thread::sleep_until(through);
}

Status LoopbackNetwork::NextSendFailure(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pairs_.find({from, to});
  if (it == pairs_.end() || it->second.send_failures_left == 0) return absl::OkStatus();
  if (it->second.send_failures_left > 0) --it->second.send_failures_left;
  return it->second.send_failure;
}

void LoopbackNetwork::CountDelivered(const std::string& from, const std::string& to,
                                     uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Pair& p = pairs_[{from, to}];
  ++p.tensors;
  p.bytes += bytes;
}

double LoopbackNetwork::Rate(const std::string& from, const std::string& to) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pairs_.find({from, to});
  return it == pairs_.end() ? Pair{}.rate : it->second.rate;
}

std::pair<uint64_t, uint64_t> LoopbackNetwork::Delivered(const std::string& from,
                                                         const std::string& to) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pairs_.find({from, to});
  if (it == pairs_.end()) return {0, 0};
  return {it->second.tensors, it->second.bytes};
}

class LoopbackLink final : public Link {
 public:
  LoopbackLink(LoopbackNetwork* net, std::string from, std::string to)
      : net_(net), from_(std::move(from)), to_(std::move(to)) {}

  const std::string& site() const override { return to_; }

  StatusOr<v1::HelloResponse> Hello(const v1::HelloRequest& request, double) override {
    v1::HelloRequest r = request;
    r.set_from_site(from_);
    return Call("Hello", [&](PeerHandler* h) { return h->Hello(r, from_); });
  }
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request, double) override {
    v1::HeartbeatRequest r = request;
    r.set_from_site(from_);
    return Call("Heartbeat", [&](PeerHandler* h) { return h->Heartbeat(r, from_); });
  }
  StatusOr<v1::ProbeResult> Probe(const ProbeRequest& request) override {
    // Nothing to time in one process: the configured rate, as the receiver would report it
    // (the last three quarters of the bytes over their arrival span).
    return Call("Probe", [&](PeerHandler*) -> StatusOr<v1::ProbeResult> {
      v1::ProbeResult r;
      r.set_probe_id(request.probe_id);
      r.set_bytes_received(request.bytes);
      const uint64_t chunk = std::max<uint64_t>(1, request.chunk_bytes);
      r.set_chunks_received((request.bytes + chunk - 1) / chunk);
      r.set_bytes_after_first(request.bytes - request.bytes / 4);
      r.set_arrival_span_seconds(r.bytes_after_first() / net_->Rate(from_, to_));
      return r;
    });
  }
  StatusOr<v1::AssignResponse> AssignStage(const v1::StageAssignment& a, double) override {
    return Call("AssignStage", [&](PeerHandler* h) { return h->AssignStage(a, from_); });
  }
  StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand& command, double) override {
    v1::JobCommand c = command;
    c.set_from_site(from_);
    return Call("ControlJob", [&](PeerHandler* h) { return h->ControlJob(c, from_); });
  }
  StatusOr<v1::StepDecision> ReportStep(const v1::StepReport& report, double) override {
    v1::StepReport r = report;
    r.set_from_site(from_);
    return Call("ReportStep", [&](PeerHandler* h) { return h->ReportStep(r, from_); });
  }
  StatusOr<v1::SiteProfileReply> ProfileSite(const v1::ProfileSiteRequest& request,
                                             double) override {
    v1::ProfileSiteRequest r = request;
    r.set_from_site(from_);
    return Call("ProfileSite", [&](PeerHandler* h) { return h->ProfileSite(r, from_); });
  }
  Status FetchFragment(const v1::FetchFragmentRequest& request, const TensorSink& sink) override {
    v1::FetchFragmentRequest r = request;
    r.set_from_site(from_);
    // The sink's own refusal comes back as it said it; the other site's errors name it.
    Status sink_error;
    Status s = Call("FetchFragment", [&](PeerHandler* h) {
      return h->FetchFragment(r, from_, [&](WireTensor t) {
        sink_error = sink(std::move(t));
        return sink_error;
      });
    });
    return sink_error.ok() ? s : sink_error;
  }
  Status SendTensor(const WireTensor& tensor, double) override {
    if (Status injected = net_->NextSendFailure(from_, to_); !injected.ok()) {
      return Annotate(injected, Who("SendFrames"));
    }
    // A shaped pair (SetRate): the payload's time on the link first.
    net_->WaitForLink(from_, to_, tensor.payload.size());
    // One whole tensor: the header as a single chunk would carry it.
    WireTensor whole{tensor.header, tensor.payload};
    whole.header.set_encoded_size(tensor.payload.size());
    whole.header.set_chunk_count(1);
    Status s = Call("SendFrames", [&](PeerHandler* h) -> Status {
      RETURN_IF_ERROR(h->CheckIncoming(whole.header, whole.payload, from_));
      return h->Deliver(std::move(whole), from_);
    });
    if (s.ok()) net_->CountDelivered(from_, to_, tensor.payload.size());
    return s;
  }

 private:
  std::string Who(const char* call) const { return "site '" + to_ + "' (" + call + ")"; }

  // Runs `f` on the other site's handler while it is attached; errors name the site.
  template <typename F>
  auto Call(const char* call, F&& f) -> decltype(f(nullptr)) {
    StatusOr<PeerHandler*> h = net_->Enter(from_, to_);
    if (!h.ok()) return Annotate(h.status(), Who(call));
    auto result = f(*h);
    net_->Release(to_);
    if constexpr (std::is_same_v<decltype(result), Status>) {
      return Annotate(result, Who(call));
    } else {
      if (!result.ok()) return Annotate(result.status(), Who(call));
      return result;
    }
  }

  LoopbackNetwork* const net_;
  const std::string from_, to_;
};

std::unique_ptr<Link> LoopbackNetwork::Dial(const std::string& from, const std::string& to) {
  return std::make_unique<LoopbackLink>(this, from, to);
}

}  // namespace longhaul::daemon::transport
