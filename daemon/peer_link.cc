// PeerLink (peer_link.h): the dialling side of one peer link: handshake, heartbeats and
// bandwidth probes over a Link, with reconnects and backoff.
#include "daemon/peer_link.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>

namespace longhaul::daemon {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

PeerLink::PeerLink(PeerLinkOptions options, LinkMonitor* monitor,
                   std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), monitor_(monitor), log_(std::move(log)) {}

PeerLink::~PeerLink() { Stop(); }

void PeerLink::Start() {
  thread_ = std::thread([this] { Run(); });
}

void PeerLink::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool PeerLink::Sleep(double seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)),
               [this] { return stopping_; });
  return !stopping_;
}

Status PeerLink::Handshake(transport::Link& link, bool* rejected) {
  *rejected = false;
  v1::HelloRequest req;
  req.set_protocol_version(options_.protocol_version);
  req.set_from_site(options_.site);
  req.set_to_site(options_.peer);
  StatusOr<v1::HelloResponse> resp = link.Hello(req, 5.0);
  if (!resp.ok()) {
    const absl::StatusCode code = resp.status().code();
    *rejected = code == absl::StatusCode::kFailedPrecondition ||
                code == absl::StatusCode::kPermissionDenied ||
                code == absl::StatusCode::kUnauthenticated;
    return resp.status();
  }
  // Check the answer too: the peer must be who we dialled and speak our version.
  if (resp->protocol_version() != options_.protocol_version) {
    *rejected = true;
    return absl::FailedPreconditionError("peer speaks protocol version " +
                                         std::to_string(resp->protocol_version()) + ", we speak " +
                                         std::to_string(options_.protocol_version));
  }
  if (resp->site() != options_.peer) {
    *rejected = true;
    return absl::FailedPreconditionError("peer answered as site '" + resp->site() +
                                         "', expected '" + options_.peer + "'");
  }
  return absl::OkStatus();
}

Status PeerLink::Heartbeat(transport::Link& link) {
  v1::HeartbeatRequest req;
  req.set_from_site(options_.site);
  req.set_sequence(++sequence_);
  *req.mutable_caller_to_callee() = monitor_->Outbound(options_.peer);
  const auto start = Clock::now();
  StatusOr<v1::HeartbeatResponse> resp =
      link.Heartbeat(req, std::max(5.0, 3 * options_.links.heartbeat_interval_seconds));
  if (!resp.ok()) return resp.status();
  monitor_->AddRttSample(options_.peer, SecondsSince(start));
  if (resp->has_callee_to_caller()) monitor_->SetInbound(options_.peer, resp->callee_to_caller());
  return absl::OkStatus();
}

Status PeerLink::Probe(transport::Link& link, bool asked, bool* done) {
  *done = false;
  if (monitor_->Probing(options_.peer, /*outbound=*/false)) return absl::OkStatus();
  monitor_->SetProbing(options_.peer, /*outbound=*/true, true);
  Status s = ProbeOnce(link, asked, done);
  monitor_->SetProbing(options_.peer, /*outbound=*/true, false);
  // The peer was probing towards us: not a failure, just try again shortly.
  if (s.code() == absl::StatusCode::kAborted) return absl::OkStatus();
  return s;
}

Status PeerLink::ProbeOnce(transport::Link& link, bool asked, bool* done) {
  transport::ProbeRequest req;
  req.probe_id = ++probe_id_;
  req.bytes = options_.links.probe_bytes;
  req.chunk_bytes = options_.probe_chunk_bytes;
  // Generous: a 4 MiB probe on a 1 Mbit/s link takes ~34 s.
  req.timeout_seconds = 30.0 + options_.links.probe_bytes / 100e3;
  const auto start = Clock::now();
  const double from = LinkMonitor::SteadySeconds();
  ASSIGN_OR_RETURN(const v1::ProbeResult result, link.Probe(req));
  const double wall = SecondsSince(start);
  // Jobs' tensors to the peer shared the link with the probe: the link carried their bytes
  // too. Without them a probe reads what the job's traffic leaves, not the capacity.
  const double shared_rate =
      wall > 0 ? monitor_->TransferBytesDuring(options_.peer, from, from + wall) / wall : 0;
  // Prefer the receiver's arrival timing (free of connection setup and send buffering);
  // fall back to the sender's wall time when the span is too short to trust.
  if (result.arrival_span_seconds() > 0.02 && result.bytes_after_first() > 0) {
    const double span = result.arrival_span_seconds();
    monitor_->AddProbeSample(options_.peer,
                             result.bytes_after_first() + static_cast<uint64_t>(shared_rate * span),
                             span, asked);
  } else {
    monitor_->AddProbeSample(options_.peer,
                             result.bytes_received() + static_cast<uint64_t>(shared_rate * wall),
                             wall, asked);
  }
  *done = true;
  return absl::OkStatus();
}

void PeerLink::Run() {
  const LinkConfig& cfg = options_.links;
  double backoff = cfg.reconnect_initial_seconds;
  std::mt19937 rng(std::hash<std::string>()(options_.site + "->" + options_.peer));
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  auto note_problem = [&](v1::LinkState state, const std::string& problem) {
    monitor_->SetState(options_.peer, state, problem);
    if (problem != last_problem_) {
      if (state == v1::LINK_STATE_REJECTED) {
        log_->error("link to {} ({}) rejected: {}", options_.peer, options_.address, problem);
      } else {
        log_->warn("link to {} ({}) down: {}; retrying with backoff", options_.peer,
                   options_.address, problem);
      }
      last_problem_ = problem;
    }
  };
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
    }
    auto link = options_.dial();
    if (!link.ok()) {
      note_problem(v1::LINK_STATE_DOWN, std::string(link.status().message()));
      if (!Sleep(cfg.reconnect_max_seconds)) return;
      continue;
    }
    bool rejected = false;
    Status s = Handshake(**link, &rejected);
    if (!s.ok()) {
      note_problem(rejected ? v1::LINK_STATE_REJECTED : v1::LINK_STATE_DOWN,
                   std::string(s.message()));
      // A refused handshake will not heal by itself soon: retry at the slowest pace.
      if (!Sleep(rejected ? cfg.reconnect_max_seconds : backoff)) return;
      backoff = std::min(backoff * 2, cfg.reconnect_max_seconds);
      continue;
    }
    monitor_->SetState(options_.peer, v1::LINK_STATE_UP);
    log_->info("link to {} ({}) up", options_.peer, options_.address);
    last_problem_.clear();
    backoff = cfg.reconnect_initial_seconds;
    auto next_probe = Clock::now();
    auto last_probe = Clock::now();
    const auto quarter =
        std::chrono::microseconds(static_cast<int64_t>(cfg.probe_interval_seconds * 0.25e6));
    bool asked = false;  // a probe was asked for and none has been done since
    while (true) {
      s = Heartbeat(**link);
      // Early when asked (LinkMonitor::TakeProbeRequest: transfers or a probe suggest a
      // fall), but no more often than a quarter of the interval: a probe takes the link from
      // the jobs while it runs. A request waits for that, and is kept until a probe is done.
      const auto now = Clock::now();
      const bool due = now >= next_probe;
      if ((due || now - last_probe >= quarter) && monitor_->TakeProbeRequest(options_.peer)) {
        asked = true;
      }
      if (s.ok() && (due || asked)) {
        last_probe = now;
        bool done = false;
        s = Probe(**link, asked, &done);
        if (done) {
          monitor_->CountProbe(options_.peer, options_.links.probe_bytes, asked && !due);
          asked = false;
        }
        // +-20% jitter keeps the two directions' probes from falling into lockstep.
        const double wait = done ? cfg.probe_interval_seconds * jitter(rng) : 0.05 * jitter(rng);
        next_probe = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(wait * 1e6));
      }
      if (!s.ok()) {
        note_problem(v1::LINK_STATE_DOWN, std::string(s.message()));
        break;
      }
      if (!Sleep(cfg.heartbeat_interval_seconds)) return;
    }
    if (!Sleep(backoff)) return;
    backoff = std::min(backoff * 2, cfg.reconnect_max_seconds);
  }
}

}  // namespace longhaul::daemon
