// Daemon: one longhauld. Owns the peer and control gRPC servers, the status HTTP endpoint,
// one PeerLink per configured peer and the LinkMonitor they feed. Start() brings everything
// up or fails with an error naming what could not start; Shutdown() stops dialling, lets
// in-flight RPCs and HTTP requests finish (bounded by a grace period) and releases the data
// directory. Several daemons can run in one process (tests).
#pragma once

#include <grpcpp/grpcpp.h>
#include <spdlog/logger.h>

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/file_env.h"
#include "common/status.h"
#include "daemon/config.h"
#include "daemon/control_service.h"
#include "daemon/http/status_server.h"
#include "daemon/job/host/job_host.h"
#include "daemon/job/host/volunteer.h"
#include "daemon/job/site/runtime_env.h"
#include "daemon/link_monitor.h"
#include "daemon/peer_link.h"
#include "daemon/site_peer_handler.h"
#include "daemon/transport/grpc_service.h"
#include "daemon/transport/loopback.h"

namespace longhaul::daemon {

struct DaemonOptions {
  // Fault-injection seam: the protocol version this daemon speaks (tests use another one).
  uint32_t protocol_version = 0;  // 0 = kProtocolVersion
  // The site's bearer token; empty = read config.token_file.
  std::string token;
  // Test seam: reach peers through this in-process network instead of gRPC (no peer port is
  // served; peers must be daemons of the same network). Must outlive the daemon.
  transport::LoopbackNetwork* loopback = nullptr;
  // Test seam: start even when the TLS material fails CheckTlsMaterial (tls_checks.h), so
  // that a test can play a misconfigured or rogue peer and check what the others refuse.
  bool skip_tls_checks = false;
  // Test seam: what the daemon hands its job objects (the disk and clock of its jobs, which also
  // time its uptime; where stages get device codecs): job/site/runtime_env.h.
  RuntimeEnv env;
};

class Daemon {
 public:
  static StatusOr<std::unique_ptr<Daemon>> Start(const SiteConfig& config,
                                                 DaemonOptions options = {});
  ~Daemon();

  // Idempotent. In-flight RPCs get up to `grace_seconds` to complete.
  void Shutdown(double grace_seconds = 5.0);

  int peer_port() const { return peer_port_; }
  int control_port() const { return control_port_; }
  int status_port() const { return status_port_; }
  const SiteConfig& config() const { return config_; }
  LinkMonitor& monitor() { return *monitor_; }
  JobHost& jobs() { return *jobs_; }

  v1::NodeStatus NodeStatus() const;
  v1::ListLinksResponse Links() const;

 private:
  Daemon(SiteConfig config, DaemonOptions options);
  Status StartAll();
  Status LockDataDir();
  // A fresh link to configured peer `peer` over this daemon's transport.
  StatusOr<std::unique_ptr<transport::Link>> Dial(const std::string& peer) const;
  Status StartPeerServer(const std::set<std::string>& peer_names);
  // Where peers reach this site: the peer listener's address, or "loopback".
  std::string PeerListen() const;

  SiteConfig config_;
  DaemonOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  double start_unix_ = 0;
  double start_mono_ = 0;
  int lock_fd_ = -1;
  std::unique_ptr<LinkMonitor> monitor_;
  std::unique_ptr<JobHost> jobs_;
  std::unique_ptr<SitePeerHandler> peer_handler_;
  std::unique_ptr<transport::GrpcPeerService> peer_service_;
  std::unique_ptr<ControlServiceImpl> control_service_;
  std::unique_ptr<grpc::Server> peer_server_;
  std::unique_ptr<grpc::Server> control_server_;
  std::unique_ptr<http::StatusServer> status_server_;
  std::vector<std::unique_ptr<PeerLink>> links_;
  std::unique_ptr<VolunteerLoop> volunteer_;  // with config.volunteer
  // gRPC sets these two before either server serves a request.
  int peer_port_ = 0, control_port_ = 0;
  // Known only once the status server runs, which (and the control server) may already be
  // answering NodeStatus with it.
  std::atomic<int> status_port_{0};
  bool shut_down_ = false;
};

}  // namespace longhaul::daemon
