// The Peer gRPC service (grpc_service.h).
#include "daemon/transport/grpc_service.h"

#include <chrono>
#include <utility>
#include <vector>

#include "daemon/peer_security.h"
#include "daemon/transport/frame_assembler.h"
#include "daemon/transport/grpc_link.h"

namespace longhaul::daemon::transport {
namespace {

// A probe's length: more than a link config may ask for (probe_bytes <= 1 GiB).
constexpr uint64_t kMaxProbeBytes = uint64_t{2} << 30;
constexpr size_t kMaxProbeChunks = 1 << 20;

}  // namespace

GrpcPeerService::GrpcPeerService(GrpcPeerServiceOptions options, PeerHandler* handler,
                                 std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), handler_(handler), log_(std::move(log)) {}

StatusOr<std::string> GrpcPeerService::Caller(const grpc::ServerContext& context,
                                              const std::string& claimed) {
  return PeerCaller(context, options_.tls, options_.peers, claimed);
}

grpc::Status GrpcPeerService::Hello(grpc::ServerContext* context, const v1::HelloRequest* request,
                                    v1::HelloResponse* response) {
  auto caller = Caller(*context, request->from_site());
  if (!caller.ok()) {
    log_->warn("rejected hello from {}: {}", context->peer(),
               std::string(caller.status().message()));
    return ToGrpc(caller.status());
  }
  auto r = handler_->Hello(*request, *caller);
  if (!r.ok()) {
    log_->warn("rejected hello from site '{}' ({}): {}", *caller, context->peer(),
               std::string(r.status().message()));
  }
  if (r.ok()) *response = *r;
  return ToGrpc(r.status());
}

grpc::Status GrpcPeerService::Heartbeat(grpc::ServerContext* context,
                                        const v1::HeartbeatRequest* request,
                                        v1::HeartbeatResponse* response) {
  auto caller = Caller(*context, request->from_site());
  if (!caller.ok()) return ToGrpc(caller.status());
  auto r = handler_->Heartbeat(*request, *caller);
  if (r.ok()) *response = *r;
  return ToGrpc(r.status());
}

grpc::Status GrpcPeerService::Probe(grpc::ServerContext* context,
                                    grpc::ServerReader<v1::ProbeChunk>* reader,
                                    v1::ProbeResult* response) {
  using Clock = std::chrono::steady_clock;
  v1::ProbeChunk chunk;
  // Arrival time of each chunk and the bytes received up to and including it.
  std::vector<std::pair<Clock::time_point, uint64_t>> arrivals;
  uint64_t bytes = 0;
  std::string caller;
  struct Done {  // ends the inbound probe however the call ends
    PeerHandler* handler;
    const std::string* caller;
    ~Done() {
      if (!caller->empty()) handler->EndInboundProbe(*caller);
    }
  } done{handler_, &caller};
  while (reader->Read(&chunk)) {
    const auto now = Clock::now();
    if (arrivals.empty()) {
      auto who = Caller(*context, chunk.from_site());
      if (!who.ok()) return ToGrpc(who.status());
      if (!handler_->BeginInboundProbe(*who)) {
        return grpc::Status(grpc::StatusCode::ABORTED, "busy: probing the other way");
      }
      caller = *who;
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

grpc::Status GrpcPeerService::SendFrames(grpc::ServerContext* context,
                                         grpc::ServerReader<v1::TensorFrame>* reader,
                                         v1::FrameAck* response) {
  // Who sends each tensor, and may it send it here? Checked on its first chunk, before a
  // byte of payload is buffered; one stream carries one sending site.
  std::string caller;
  FrameAssembler assembler(
      [&](const v1::TensorFrame& first) -> Status {
        auto who = Caller(*context, first.from_site());
        if (!who.ok()) return who.status();
        if (!caller.empty() && *who != caller) {
          return absl::PermissionDeniedError("one stream, two sending sites");
        }
        caller = *who;
        const std::string& head = first.payload();
        Status s = handler_->CheckIncoming(
            first, {reinterpret_cast<const uint8_t*>(head.data()), head.size()}, caller);
        if (!s.ok()) log_->warn("refused a tensor from {}: {}", caller, std::string(s.message()));
        return s;
      },
      [&](const v1::TensorFrame& first, std::vector<uint8_t> payload) -> Status {
        Status s = handler_->Deliver(WireTensor{first, std::move(payload)}, caller);
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

grpc::Status GrpcPeerService::AssignStage(grpc::ServerContext* context,
                                          const v1::StageAssignment* request,
                                          v1::AssignResponse* response) {
  auto caller = Caller(*context, request->coordinator());
  if (!caller.ok()) return ToGrpc(caller.status());
  auto r = handler_->AssignStage(*request, *caller);
  if (!r.ok()) return Refused("AssignStage", *caller, r.status());
  *response = *r;
  return grpc::Status::OK;
}

grpc::Status GrpcPeerService::ReportStep(grpc::ServerContext* context,
                                         const v1::StepReport* request,
                                         v1::StepDecision* response) {
  auto caller = Caller(*context, request->from_site());
  if (!caller.ok()) return ToGrpc(caller.status());
  auto r = handler_->ReportStep(*request, *caller);
  if (!r.ok()) return Refused("ReportStep", *caller, r.status());
  *response = *r;
  return grpc::Status::OK;
}

grpc::Status GrpcPeerService::ControlJob(grpc::ServerContext* context,
                                         const v1::JobCommand* request,
                                         v1::JobCommandResponse* response) {
  auto caller = Caller(*context, request->from_site());
  if (!caller.ok()) return ToGrpc(caller.status());
  auto r = handler_->ControlJob(*request, *caller);
  if (!r.ok()) return Refused("ControlJob", *caller, r.status());
  *response = *r;
  return grpc::Status::OK;
}

grpc::Status GrpcPeerService::ProfileSite(grpc::ServerContext* context,
                                          const v1::ProfileSiteRequest* request,
                                          v1::SiteProfileReply* response) {
  auto caller = Caller(*context, request->from_site());
  if (!caller.ok()) return ToGrpc(caller.status());
  auto r = handler_->ProfileSite(*request, *caller);
  if (!r.ok()) return Refused("ProfileSite", *caller, r.status());
  *response = *r;
  return grpc::Status::OK;
}

grpc::Status GrpcPeerService::FetchFragment(grpc::ServerContext* context,
                                            const v1::FetchFragmentRequest* request,
                                            grpc::ServerWriter<v1::TensorFrame>* writer) {
  auto caller = Caller(*context, request->from_site());
  if (!caller.ok()) return ToGrpc(caller.status());
  const Status s = handler_->FetchFragment(*request, *caller, [&](WireTensor t) -> Status {
    if (!WriteChunks(t, kChunkBytes, [&](const v1::TensorFrame& f) { return writer->Write(f); })) {
      return absl::CancelledError("the caller went away");
    }
    return absl::OkStatus();
  });
  if (!s.ok()) return Refused("FetchFragment", *caller, s);
  return grpc::Status::OK;
}

grpc::Status GrpcPeerService::Refused(const char* call, const std::string& caller,
                                      const Status& s) {
  if (s.code() == absl::StatusCode::kPermissionDenied ||
      s.code() == absl::StatusCode::kInvalidArgument) {
    log_->warn("refused {} from site '{}': {}", call, caller, std::string(s.message()));
  }
  return ToGrpc(s);
}

}  // namespace longhaul::daemon::transport
