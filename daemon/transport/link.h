// Link: how this site reaches one other site (or itself), the one seam between the job
// runtime and the network. Everything a daemon asks of another goes through a Link: the
// link's upkeep (handshake, heartbeats, bandwidth probes), the job calls (assign, control,
// report, profile, fetch a fragment) and whole tensors (SendTensor). Every call completes
// with a Status that names the site at the other end. Each request names this site as its
// caller; the other side takes that claim only where the transport proves it (gRPC with TLS:
// the certificate) or where nothing can lie (loopback: one process).
//
// Implementations: gRPC over the Peer service (grpc_link.h: tensors cut into chunks,
// reassembled by FrameAssembler) and in-process loopback (loopback.h: direct calls into the
// other site's PeerHandler, for tests and for a site's calls to itself).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon::transport {

// One whole tensor as it crosses a link: what it is and where it goes (a TensorFrame without
// the chunking fields and payload), and its bytes: a compression frame, which names its
// shape, codec and sizes and carries its checksum, or for a loader state its text and the
// text's checksum (daemon/job/state/fragment_slices.h).
struct WireTensor {
  v1::TensorFrame header;
  std::vector<uint8_t> payload;
};

// Receives whole tensors (a fragment fetch); an error ends the stream and is the call's.
using TensorSink = std::function<Status(WireTensor tensor)>;

// A bandwidth probe: `bytes` of filler in chunks of `chunk_bytes`.
struct ProbeRequest {
  uint64_t probe_id = 0;
  uint64_t bytes = 0;
  size_t chunk_bytes = 64 << 10;
  double timeout_seconds = 30;
};

class Link {
 public:
  virtual ~Link() = default;
  // The site at the other end.
  virtual const std::string& site() const = 0;

  // ---- link upkeep (PeerLink) ----
  virtual StatusOr<v1::HelloResponse> Hello(const v1::HelloRequest& request,
                                            double timeout_seconds) = 0;
  virtual StatusOr<v1::HeartbeatResponse> Heartbeat(const v1::HeartbeatRequest& request,
                                                    double timeout_seconds) = 0;
  virtual StatusOr<v1::ProbeResult> Probe(const ProbeRequest& request) = 0;

  // ---- job calls ----
  virtual StatusOr<v1::AssignResponse> AssignStage(const v1::StageAssignment& assignment,
                                                   double timeout_seconds) = 0;
  virtual StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand& command,
                                                      double timeout_seconds) = 0;
  virtual StatusOr<v1::StepDecision> ReportStep(const v1::StepReport& report,
                                                double timeout_seconds) = 0;
  virtual StatusOr<v1::SiteProfileReply> ProfileSite(const v1::ProfileSiteRequest& request,
                                                     double timeout_seconds) = 0;
  // The tensors of a stage's checkpoint (parameters, AdamW moments, the data position), each
  // whole and checked, into `sink`.
  virtual Status FetchFragment(const v1::FetchFragmentRequest& request, const TensorSink& sink) = 0;

  // ---- data ----
  // Delivers one whole tensor: OK once the other site has filed it (or dropped it as a
  // duplicate); its refusal otherwise. Blocks while the other site's inbox is full.
  virtual Status SendTensor(const WireTensor& tensor, double timeout_seconds) = 0;
};

// Whether a failed call may succeed if tried again (the other site restarting, a dropped
// connection, a deadline) rather than being a refusal that will not heal.
bool Retryable(const Status& status);

}  // namespace longhaul::daemon::transport
