// SiteChannel: how one daemon asks another (or itself) to do job work: assign or control a
// stage, report a step to the coordinator, fetch a stage's parameters. The remote form is a
// Peer gRPC stub; the local form calls this daemon's JobHost directly, so the coordinator's
// own stage goes through exactly the same calls as every other.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "proto/longhaul.grpc.pb.h"

namespace longhaul::daemon {

class SiteChannel {
 public:
  virtual ~SiteChannel() = default;
  virtual const std::string& site() const = 0;
  virtual StatusOr<v1::AssignResponse> AssignStage(const v1::StageAssignment& a,
                                                   double timeout_seconds) = 0;
  virtual StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand& c,
                                                      double timeout_seconds) = 0;
  virtual StatusOr<v1::StepDecision> ReportStep(const v1::StepReport& r,
                                                double timeout_seconds) = 0;
  // Calls `sink` for each frame of the stage's parameters.
  virtual Status FetchFragment(const v1::FetchFragmentRequest& req,
                               const std::function<Status(const v1::TensorFrame&)>& sink) = 0;
  virtual StatusOr<v1::SiteProfileReply> ProfileSite(const v1::ProfileSiteRequest& req,
                                                     double timeout_seconds) = 0;
};

// A channel from site `self` to a remote site's Peer service. Every request it sends names
// `self` as the calling site (with TLS the callee checks that against our certificate).
std::unique_ptr<SiteChannel> MakeRemoteSiteChannel(std::string self, std::string site,
                                                   std::shared_ptr<grpc::Channel> channel);

// absl::Status from a grpc::Status, naming the site and call.
Status FromGrpc(const grpc::Status& s, const std::string& what);
// The other way: an absl::Status as the grpc::Status a service handler returns.
grpc::Status ToGrpc(const Status& s);

}  // namespace longhaul::daemon
