// A daemon's answers to other sites (site_peer_handler.h).
#include "daemon/site_peer_handler.h"

#include "common/version.h"

namespace longhaul::daemon {

SitePeerHandler::SitePeerHandler(SitePeerHandlerOptions options, LinkMonitor* monitor,
                                 JobHost* jobs, std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), monitor_(monitor), jobs_(jobs), log_(std::move(log)) {}

Status SitePeerHandler::Known(const std::string& caller) const {
  if (caller == options_.site || options_.peers.count(caller)) return absl::OkStatus();
  return absl::PermissionDeniedError("site '" + caller + "' is not a configured peer of site '" +
                                     options_.site + "'");
}

StatusOr<v1::HelloResponse> SitePeerHandler::Hello(const v1::HelloRequest& request,
                                                   const std::string& caller) {
  RETURN_IF_ERROR(Known(caller));
  if (request.protocol_version() != options_.protocol_version) {
    return absl::FailedPreconditionError(
        "protocol version " + std::to_string(request.protocol_version()) + " from site '" + caller +
        "' does not match ours, " + std::to_string(options_.protocol_version));
  }
  if (request.to_site() != options_.site) {
    return absl::FailedPreconditionError("site '" + caller + "' expected to reach site '" +
                                         request.to_site() + "', but this is site '" +
                                         options_.site + "'");
  }
  log_->debug("hello from site '{}'", caller);
  v1::HelloResponse response;
  response.set_protocol_version(options_.protocol_version);
  response.set_site(options_.site);
  response.set_build_version(kBuildVersion);
  return response;
}

StatusOr<v1::HeartbeatResponse> SitePeerHandler::Heartbeat(const v1::HeartbeatRequest& request,
                                                           const std::string& caller) {
  RETURN_IF_ERROR(Known(caller));
  if (request.has_caller_to_callee()) monitor_->SetInbound(caller, request.caller_to_callee());
  v1::HeartbeatResponse response;
  response.set_site(options_.site);
  response.set_sequence(request.sequence());
  *response.mutable_callee_to_caller() = monitor_->Outbound(caller);
  return response;
}

bool SitePeerHandler::BeginInboundProbe(const std::string& caller) {
  if (!Known(caller).ok()) return false;
  // Both sides probing at once would measure each other's interference; the site with the
  // smaller name goes first and the other retries shortly.
  if (monitor_->Probing(caller, /*outbound=*/true) && options_.site > caller) return false;
  monitor_->SetProbing(caller, /*outbound=*/false, true);
  return true;
}

void SitePeerHandler::EndInboundProbe(const std::string& caller) {
  monitor_->SetProbing(caller, /*outbound=*/false, false);
}

StatusOr<v1::AssignResponse> SitePeerHandler::AssignStage(const v1::StageAssignment& assignment,
                                                          const std::string& caller) {
  RETURN_IF_ERROR(Known(caller));
  return jobs_->AssignStage(assignment, caller);
}

StatusOr<v1::StepDecision> SitePeerHandler::ReportStep(const v1::StepReport& report,
                                                       const std::string& caller) {
  RETURN_IF_ERROR(Known(caller));
  return jobs_->ReportStep(report, caller);
}

StatusOr<v1::JobCommandResponse> SitePeerHandler::ControlJob(const v1::JobCommand& command,
                                                             const std::string& caller) {
  RETURN_IF_ERROR(Known(caller));
  return jobs_->ControlJob(command, caller);
}

StatusOr<v1::SiteProfileReply> SitePeerHandler::ProfileSite(const v1::ProfileSiteRequest& request,
                                                            const std::string& caller) {
  RETURN_IF_ERROR(Known(caller));
  return jobs_->ProfileSite(request, caller);
}

Status SitePeerHandler::FetchFragment(const v1::FetchFragmentRequest& request,
                                      const std::string& caller,
                                      const transport::TensorSink& sink) {
  RETURN_IF_ERROR(Known(caller));
  return jobs_->FetchFragment(request, caller, sink);
}

Status SitePeerHandler::CheckIncoming(const v1::TensorFrame& header, std::span<const uint8_t> head,
                                      const std::string& caller) {
  RETURN_IF_ERROR(Known(caller));
  return jobs_->CheckIncoming(header, head, caller);
}

Status SitePeerHandler::Deliver(transport::WireTensor tensor, const std::string& caller) {
  RETURN_IF_ERROR(Known(caller));
  return jobs_->Deliver(tensor.header, std::move(tensor.payload), caller);
}

}  // namespace longhaul::daemon
