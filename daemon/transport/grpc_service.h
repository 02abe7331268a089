// The Peer gRPC service: the server side of the gRPC transport. Each call first establishes
// the calling site (PeerCaller: with TLS the configured peer its verified certificate names,
// never a field it sends), then hands the call to the site's PeerHandler, which authorizes it
// for the job it names. Tensors arrive in chunks and are reassembled and checked
// (FrameAssembler) after their header passed the handler's CheckIncoming; a fragment fetch
// goes out as chunked tensors. What only a socket can do stays here: Probe times the arrival
// of filler bytes so the caller learns its link's rate.
#pragma once

#include <spdlog/logger.h>

#include <memory>
#include <set>
#include <string>

#include "daemon/transport/peer_handler.h"
#include "proto/longhaul.grpc.pb.h"

namespace longhaul::daemon::transport {

struct GrpcPeerServiceOptions {
  std::set<std::string> peers;  // configured peer names
  bool tls = false;
};

class GrpcPeerService final : public v1::Peer::Service {
 public:
  GrpcPeerService(GrpcPeerServiceOptions options, PeerHandler* handler,
                  std::shared_ptr<spdlog::logger> log);

  grpc::Status Hello(grpc::ServerContext* context, const v1::HelloRequest* request,
                     v1::HelloResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status Probe(grpc::ServerContext* context, grpc::ServerReader<v1::ProbeChunk>* reader,
                     v1::ProbeResult* response) override;
  grpc::Status SendFrames(grpc::ServerContext* context, grpc::ServerReader<v1::TensorFrame>* reader,
                          v1::FrameAck* response) override;
  grpc::Status AssignStage(grpc::ServerContext* context, const v1::StageAssignment* request,
                           v1::AssignResponse* response) override;
  grpc::Status ReportStep(grpc::ServerContext* context, const v1::StepReport* request,
                          v1::StepDecision* response) override;
  grpc::Status ControlJob(grpc::ServerContext* context, const v1::JobCommand* request,
                          v1::JobCommandResponse* response) override;
  grpc::Status FetchFragment(grpc::ServerContext* context, const v1::FetchFragmentRequest* request,
                             grpc::ServerWriter<v1::TensorFrame>* writer) override;
  grpc::Status ProfileSite(grpc::ServerContext* context, const v1::ProfileSiteRequest* request,
                           v1::SiteProfileReply* response) override;

 private:
  // The calling site, established from the context (see PeerCaller).
  StatusOr<std::string> Caller(const grpc::ServerContext& context, const std::string& claimed);
  // The gRPC status of a refused call; refusals that point at a wrong or hostile peer
  // (permission, invalid input) are logged with the caller.
  grpc::Status Refused(const char* call, const std::string& caller, const Status& s);

  const GrpcPeerServiceOptions options_;
  PeerHandler* const handler_;
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace longhaul::daemon::transport
