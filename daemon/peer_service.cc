#include "daemon/peer_service.h"

#include <chrono>
#include <utility>
#include <vector>

#include "common/version.h"
#include "daemon/job/frame_assembler.h"
#include "daemon/job/site_channel.h"
#include "daemon/peer_security.h"

namespace longhaul::daemon {

PeerServiceImpl::PeerServiceImpl(PeerServiceOptions options, LinkMonitor* monitor, JobHost* jobs,
                                 std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), monitor_(monitor), jobs_(jobs), log_(std::move(log)) {}

namespace {

// A probe's length: more than a link config may ask for (probe_bytes <= 1 GiB).
constexpr uint64_t kMaxProbeBytes = uint64_t{2} << 30;
constexpr size_t kMaxProbeChunks = 1 << 20;

}  // namespace

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
    if (bytes > kMaxProbeBytes || arrivals.size() >= kMaxProbeChunks) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "probe longer than " + std::to_string(kMaxProbeBytes) + " bytes or " +
                              std::to_string(kMaxProbeChunks) + " chunks");
    }
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

grpc::Status PeerServiceImpl::SendFrames(grpc::ServerContext* context,
                                         grpc::ServerReader<v1::TensorFrame>* reader,
                                         v1::FrameAck* response) {
  // Who sends each tensor, and may it send it here? Checked on its first chunk, before a
  // byte of payload is buffered; one stream carries one sending site.
  std::string caller;
  FrameAssembler assembler(
      [&](const v1::TensorFrame& first) -> Status {
        auto who = PeerCaller(*context, options_.tls, options_.peers, first.from_site());
        if (!who.ok()) return who.status();
        if (!caller.empty() && *who != caller) {
          return absl::PermissionDeniedError("one stream, two sending sites");
        }
        caller = *who;
        Status s = jobs_->CheckIncoming(first, caller);
        if (!s.ok()) log_->warn("refused a tensor from {}: {}", caller, std::string(s.message()));
        return s;
      },
      [&](const v1::TensorFrame& first, std::vector<uint8_t> payload) -> Status {
        Status s = jobs_->Deliver(first, std::move(payload), caller);
        if (!s.ok()) log_->warn("refused a tensor from {}: {}", caller, std::string(s.message()));
        return s;
      });
  v1::TensorFrame frame;
  while (reader->Read(&frame)) {
    const Status s = assembler.Add(frame);
    if (!s.ok()) return ToGrpc(s);
  }
  if (Status s = assembler.Finish(); !s.ok()) return ToGrpc(s);
  response->set_frames_received(assembler.frames());
  response->set_bytes_received(assembler.bytes());
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::AssignStage(grpc::ServerContext* context,
                                          const v1::StageAssignment* request,
                                          v1::AssignResponse* response) {
  auto caller = PeerCaller(*context, options_.tls, options_.peers, request->coordinator());
  if (!caller.ok()) return ToGrpc(caller.status());
  auto r = jobs_->AssignStage(*request, *caller);
  if (!r.ok()) return Refused("AssignStage", *caller, r.status());
  *response = *r;
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::ReportStep(grpc::ServerContext* context,
                                         const v1::StepReport* request,
                                         v1::StepDecision* response) {
  auto caller = PeerCaller(*context, options_.tls, options_.peers, request->from_site());
  if (!caller.ok()) return ToGrpc(caller.status());
  auto r = jobs_->ReportStep(*request, *caller);
  if (!r.ok()) return Refused("ReportStep", *caller, r.status());
  *response = *r;
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::ControlJob(grpc::ServerContext* context,
                                         const v1::JobCommand* request,
                                         v1::JobCommandResponse* response) {
  auto caller = PeerCaller(*context, options_.tls, options_.peers, request->from_site());
  if (!caller.ok()) return ToGrpc(caller.status());
  auto r = jobs_->ControlJob(*request, *caller);
  if (!r.ok()) return Refused("ControlJob", *caller, r.status());
  *response = *r;
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::ProfileSite(grpc::ServerContext* context,
                                          const v1::ProfileSiteRequest* request,
                                          v1::SiteProfileReply* response) {
  auto caller = PeerCaller(*context, options_.tls, options_.peers, request->from_site());
  if (!caller.ok()) return ToGrpc(caller.status());
  auto r = jobs_->ProfileSite(*request, *caller);
  if (!r.ok()) return Refused("ProfileSite", *caller, r.status());
  *response = *r;
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::FetchFragment(grpc::ServerContext* context,
                                            const v1::FetchFragmentRequest* request,
                                            grpc::ServerWriter<v1::TensorFrame>* writer) {
  auto caller = PeerCaller(*context, options_.tls, options_.peers, request->from_site());
  if (!caller.ok()) return ToGrpc(caller.status());
  const absl::Status s =
      jobs_->FetchFragment(*request, *caller, [&](const v1::TensorFrame& f) -> absl::Status {
        if (!writer->Write(f)) return absl::CancelledError("the caller went away");
        return absl::OkStatus();
      });
  if (!s.ok()) return Refused("FetchFragment", *caller, s);
  return grpc::Status::OK;
}

grpc::Status PeerServiceImpl::Refused(const char* call, const std::string& caller,
                                      const absl::Status& s) {
  if (s.code() == absl::StatusCode::kPermissionDenied ||
      s.code() == absl::StatusCode::kInvalidArgument) {
    log_->warn("refused {} from site '{}': {}", call, caller, std::string(s.message()));
  }
  return ToGrpc(s);
}

}  // namespace longhaul::daemon
