// PeerHandler: what a site answers to another site, the far end of a Link. The transport has
// established who calls (`caller`: with gRPC and TLS the name in the caller's verified
// certificate, with loopback the dialling site) before a handler method runs; the handler
// authorizes the call for the job it names (docs/SECURITY.md) and checks every field.
// A daemon's handler (daemon/site_peer_handler.h) joins its LinkMonitor and its JobHost; the
// gRPC Peer service and the loopback both deliver into one.
#pragma once

#include <span>
#include <string>

#include "common/status.h"
#include "daemon/transport/link.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon::transport {

class PeerHandler {
 public:
  virtual ~PeerHandler() = default;
  virtual const std::string& site() const = 0;

  // ---- link upkeep ----
  // The caller's protocol version and the site it meant to reach must match this one.
  virtual StatusOr<v1::HelloResponse> Hello(const v1::HelloRequest& request,
                                            const std::string& caller) = 0;
  virtual StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request,
                                                    const std::string& caller) = 0;
  // A bandwidth probe from `caller` begins (false: refused, this site is probing towards the
  // caller and both at once would measure each other) or ends.
  virtual bool BeginInboundProbe(const std::string& caller) = 0;
  virtual void EndInboundProbe(const std::string& caller) = 0;

  // ---- job calls ----
  virtual StatusOr<v1::AssignResponse> AssignStage(const v1::StageAssignment& assignment,
                                                   const std::string& caller) = 0;
  virtual StatusOr<v1::StepDecision> ReportStep(const v1::StepReport& report,
                                                const std::string& caller) = 0;
  virtual StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand& command,
                                                      const std::string& caller) = 0;
  virtual StatusOr<v1::SiteProfileReply> ProfileSite(const v1::ProfileSiteRequest& request,
                                                     const std::string& caller) = 0;
  virtual Status FetchFragment(const v1::FetchFragmentRequest& request, const std::string& caller,
                               const TensorSink& sink) = 0;

  // ---- data ----
  // Checks a tensor about to arrive from `caller`, before the rest of its payload is buffered:
  // may the caller send it here, is it expected now, and does the frame header at the start
  // of `head` (the first chunk's payload) name the shape and sizes the job expects.
  virtual Status CheckIncoming(const v1::TensorFrame& header, std::span<const uint8_t> head,
                               const std::string& caller) = 0;
  // A whole tensor from `caller` that passed CheckIncoming; blocks while the inbox is full.
  // Its frame's checksum is checked here, before it is filed.
  virtual Status Deliver(WireTensor tensor, const std::string& caller) = 0;
};

}  // namespace longhaul::daemon::transport
