// The Peer gRPC service: what a daemon answers to other daemons. Hello checks protocol
// version and both site names; Heartbeat measures RTT (on the caller's side) and swaps link
// estimates; Probe times the arrival of filler bytes so the caller learns its link's rate.
// The job calls establish the calling site (PeerCaller: with TLS its certificate's name) and
// hand it to the JobHost, which authorizes the call for the job it names (docs/SECURITY.md).
#pragma once

#include <spdlog/logger.h>

#include <memory>
#include <set>
#include <string>

#include "daemon/job/job_host.h"
#include "daemon/link_monitor.h"
#include "proto/longhaul.grpc.pb.h"

namespace longhaul::daemon {

struct PeerServiceOptions {
  std::string site;
  std::set<std::string> peers;  // configured peer names
  bool tls = false;
  // The version this side speaks; tests override it to check rejection.
  uint32_t protocol_version = 0;
};

class PeerServiceImpl final : public v1::Peer::Service {
 public:
  PeerServiceImpl(PeerServiceOptions options, LinkMonitor* monitor, JobHost* jobs,
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
  // The gRPC status of a refused call; refusals that point at a wrong or hostile peer
  // (permission, invalid input) are logged with the caller.
  grpc::Status Refused(const char* call, const std::string& caller, const absl::Status& s);

  const PeerServiceOptions options_;
  LinkMonitor* const monitor_;
  JobHost* const jobs_;
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace longhaul::daemon
