#include "daemon/peer_service.h"

#include <chrono>
#include <utility>
#include <vector>

#include "common/version.h"
#include "daemon/peer_security.h"

namespace longhaul::daemon {

PeerServiceImpl::PeerServiceImpl(PeerServiceOptions options, LinkMonitor* monitor,
                                 std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), monitor_(monitor), log_(std::move(log)) {}

grpc::Status PeerServiceImpl::Hello(grpc::ServerContext* context, const v1::HelloRequest* request,
                                    v1::HelloResponse* response) {
  response->set_protocol_version(options_.protocol_version);
  response->set_site(options_.site);
  response->set_build_version(kBuildVersion);
  const std::string caller = request->from_site();
  if (request->protocol_version() != options_.protocol_version) {
    const std::string msg = "protocol version " + std::to_string(request->protocol_version()) +
                            " from site '" + caller + "' (" + context->peer() +
                            ") does not match ours, " + std::to_string(options_.protocol_version);
    log_->warn("rejected hello: {}", msg);
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, msg);
  }
  if (request->to_site() != options_.site) {
    const std::string msg = "site '" + caller + "' (" + context->peer() +
                            ") expected to reach site '" + request->to_site() +
                            "', but this is site '" + options_.site + "'";
    log_->warn("rejected hello: {}", msg);
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, msg);
  }
  grpc::Status auth = AuthorizePeerCall(*context, options_.tls, options_.peers, caller);
  if (!auth.ok()) {
    log_->warn("rejected hello from {}: {}", context->peer(), auth.error_message());
    return auth;
  }
  log_->debug("hello from site '{}' ({})", caller, context->peer());
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::Heartbeat(grpc::ServerContext* context,
                                        const v1::HeartbeatRequest* request,
                                        v1::HeartbeatResponse* response) {
  grpc::Status auth =
      AuthorizePeerCall(*context, options_.tls, options_.peers, request->from_site());
  if (!auth.ok()) return auth;
  if (request->has_caller_to_callee()) {
    monitor_->SetInbound(request->from_site(), request->caller_to_callee());
  }
  response->set_site(options_.site);
  response->set_sequence(request->sequence());
  *response->mutable_callee_to_caller() = monitor_->Outbound(request->from_site());
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::Probe(grpc::ServerContext* context,
                                    grpc::ServerReader<v1::ProbeChunk>* reader,
                                    v1::ProbeResult* response) {
  using Clock = std::chrono::steady_clock;
  v1::ProbeChunk chunk;
  // Arrival time of each chunk and the bytes received up to and including it.
  std::vector<std::pair<Clock::time_point, uint64_t>> arrivals;
  uint64_t bytes = 0;
  std::string caller;
  struct Done {  // clears the inbound-probe mark however the call ends
    LinkMonitor* monitor;
    const std::string* caller;
    ~Done() {
      if (!caller->empty()) monitor->SetProbing(*caller, /*outbound=*/false, false);
    }
  } done{monitor_, &caller};
  while (reader->Read(&chunk)) {
    const auto now = Clock::now();
    if (arrivals.empty()) {
      grpc::Status auth =
          AuthorizePeerCall(*context, options_.tls, options_.peers, chunk.from_site());
      if (!auth.ok()) return auth;
      caller = chunk.from_site();
      // Both sides probing at once would measure each other's interference; the site with
      // the smaller name goes first and the other retries shortly.
      if (monitor_->Probing(caller, /*outbound=*/true) && options_.site > caller) {
        return grpc::Status(grpc::StatusCode::ABORTED, "busy: probing the other way");
      }
      monitor_->SetProbing(caller, /*outbound=*/false, true);
      response->set_probe_id(chunk.probe_id());
    }
    bytes += chunk.filler().size();
    arrivals.emplace_back(now, bytes);
  }
  response->set_bytes_received(bytes);
  response->set_chunks_received(arrivals.size());
  if (arrivals.size() < 2) return grpc::Status::OK;
  // Time the last three quarters of the bytes: the first quarter carries connection and
  // flow-control ramp-up (TCP slow start, HTTP/2 window growth), not the link's rate.
  size_t i = 0;
  while (i + 2 < arrivals.size() && arrivals[i].second < bytes / 4) ++i;
  response->set_bytes_after_first(bytes - arrivals[i].second);
  response->set_arrival_span_seconds(
      std::chrono::duration<double>(arrivals.back().first - arrivals[i].first).count());
  return grpc::Status::OK;
}

}  // namespace longhaul::daemon
