// PeerLink: the dialling side of one peer link. A thread opens a Link to the peer (gRPC or
// loopback: whatever `dial` makes), handshakes (Hello), then sends heartbeats (RTT, estimate
// exchange) and periodic bandwidth probes, feeding the LinkMonitor. When the peer goes away it
// reconnects with exponential backoff; when the peer refuses the handshake the link is marked
// REJECTED and retried slowly.
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "daemon/config.h"
#include "daemon/link_monitor.h"
#include "daemon/transport/link.h"

namespace longhaul::daemon {

struct PeerLinkOptions {
  std::string site;     // this site
  std::string peer;     // the peer's configured name
  std::string address;  // host:port of its peer service (for messages)
  // A fresh link to the peer, opened on each (re)connect.
  std::function<StatusOr<std::unique_ptr<transport::Link>>()> dial;
  LinkConfig links;
  uint32_t protocol_version = 0;
  size_t probe_chunk_bytes = 64 << 10;
};

class PeerLink {
 public:
  PeerLink(PeerLinkOptions options, LinkMonitor* monitor, std::shared_ptr<spdlog::logger> log);
  ~PeerLink();  // stops the thread

  void Start();
  void Stop();

 private:
  void Run();
  // Returns OK when the handshake succeeded; sets *rejected when the peer refused it.
  Status Handshake(transport::Link& link, bool* rejected);
  Status Heartbeat(transport::Link& link);
  // Runs a bandwidth probe unless the peer is probing towards us; *done says whether a
  // sample was taken. `asked`: slow transfers or a low probe asked for it
  // (LinkMonitor::TakeProbeRequest), so a low reading is a fall (LinkMonitor::AddProbeSample).
  Status Probe(transport::Link& link, bool asked, bool* done);
  Status ProbeOnce(transport::Link& link, bool asked, bool* done);
  // Sleeps up to `seconds`; returns false if Stop() was called meanwhile.
  bool Sleep(double seconds);

  const PeerLinkOptions options_;
  LinkMonitor* const monitor_;
  std::shared_ptr<spdlog::logger> log_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
  std::string last_problem_;  // logged once per distinct problem
  uint64_t sequence_ = 0;
  uint64_t probe_id_ = 0;
};

}  // namespace longhaul::daemon
