// SitePeerHandler: a daemon's answers to other sites (transport::PeerHandler), whatever the
// transport: the link upkeep against its LinkMonitor (handshake checks, heartbeats that swap
// link estimates, one probe direction at a time) and the job calls against its JobHost, which
// authorizes each for the job it names. Callers other than this site and its configured peers
// are refused before anything else.
#pragma once

#include <spdlog/logger.h>

#include <memory>
#include <set>
#include <string>

#include "daemon/job/host/job_host.h"
#include "daemon/link_monitor.h"
#include "daemon/transport/peer_handler.h"

namespace longhaul::daemon {

struct SitePeerHandlerOptions {
  std::string site;
  std::set<std::string> peers;    // configured peer names
  uint32_t protocol_version = 0;  // what this side speaks (tests use another one)
};

class SitePeerHandler final : public transport::PeerHandler {
 public:
  SitePeerHandler(SitePeerHandlerOptions options, LinkMonitor* monitor, JobHost* jobs,
                  std::shared_ptr<spdlog::logger> log);

  const std::string& site() const override { return options_.site; }
  StatusOr<v1::HelloResponse> Hello(const v1::HelloRequest& request,
                                    const std::string& caller) override;
  StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request,
                                            const std::string& caller) override;
  bool BeginInboundProbe(const std::string& caller) override;
  void EndInboundProbe(const std::string& caller) override;
  StatusOr<v1::AssignResponse> AssignStage(const v1::StageAssignment& assignment,
                                           const std::string& caller) override;
  StatusOr<v1::StepDecision> ReportStep(const v1::StepReport& report,
                                        const std::string& caller) override;
  StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand& command,
                                              const std::string& caller) override;
  StatusOr<v1::SiteProfileReply> ProfileSite(const v1::ProfileSiteRequest& request,
                                             const std::string& caller) override;
  Status FetchFragment(const v1::FetchFragmentRequest& request, const std::string& caller,
                       const transport::TensorSink& sink) override;
  Status CheckIncoming(const v1::TensorFrame& header, std::span<const uint8_t> head,
                       const std::string& caller) override;
  Status Deliver(transport::WireTensor tensor, const std::string& caller) override;

 private:
  // PermissionDenied unless `caller` is this site or a configured peer.
  Status Known(const std::string& caller) const;

  const SitePeerHandlerOptions options_;
  LinkMonitor* const monitor_;
  JobHost* const jobs_;
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace longhaul::daemon
