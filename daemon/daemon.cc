// Daemon (daemon.h): one longhauld: its servers (peer over gRPC or the loopback, control,
// status), links, job host, start-up checks and graceful shutdown.
#include "daemon/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>

#include "common/log.h"
#include "common/version.h"
#include "daemon/http/prometheus.h"
#include "daemon/http/web_assets.h"
#include "daemon/job/site/site_backend.h"
#include "daemon/peer_security.h"
#include "daemon/status_pages.h"
#include "daemon/tls_checks.h"
#include "daemon/transport/grpc_link.h"
#include "kernels/cpu/blas_core.h"

namespace longhaul::daemon {
namespace {

// Replaces the port of "host:port" with `port`.
std::string WithPort(const std::string& address, int port) {
  return address.substr(0, address.rfind(':') + 1) + std::to_string(port);
}

// Why gRPC may have refused to listen. The TLS files passed CheckTlsMaterial, but gRPC reads
// them again and may refuse what OpenSSL's checks accepted (it logs why just before).
std::string ListenHint(bool tls) {
  return tls ? " (address in use or not local? or gRPC refused the TLS files: see its log line)"
             : " (address in use or not local?)";
}

}  // namespace

Daemon::Daemon(SiteConfig config, DaemonOptions options)
    : config_(std::move(config)), options_(std::move(options)) {
  if (options_.protocol_version == 0) options_.protocol_version = kProtocolVersion;
  log_ = MakeSiteLogger(config_.site, config_.log_level);
  start_unix_ = options_.env.files->WallSeconds();
  start_mono_ = options_.env.files->NowSeconds();
}

StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const SiteConfig& config, DaemonOptions options) {
  std::unique_ptr<Daemon> d(new Daemon(config, std::move(options)));
  Status s = d->StartAll();
  if (!s.ok()) {
    d->Shutdown(0);
    return Annotate(s, "site '" + config.site + "'");
  }
  return d;
}

Daemon::~Daemon() { Shutdown(); }

Status Daemon::LockDataDir() {
  std::error_code ec;
  std::filesystem::create_directories(config_.data_dir, ec);
  if (ec) {
    return absl::FailedPreconditionError("data_dir " + config_.data_dir +
                                         ": cannot create: " + ec.message());
  }
  const std::string lock_path = config_.data_dir + "/LOCK";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) {
    return absl::FailedPreconditionError(lock_path + ": cannot open: " + strerror(errno));
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(
        lock_path + ": held by another longhauld; each daemon needs its own data_dir");
  }
  return absl::OkStatus();
}

std::string Daemon::PeerListen() const {
  return options_.loopback ? "loopback" : WithPort(config_.peer_listen, peer_port_);
}

StatusOr<std::unique_ptr<transport::Link>> Daemon::Dial(const std::string& peer) const {
  if (options_.loopback) return options_.loopback->Dial(config_.site, peer);
  for (const auto& p : config_.peers) {
    if (p.name != peer) continue;
    ASSIGN_OR_RETURN(auto channel, PeerChannel(config_.tls, p.name, p.address));
    return transport::MakeGrpcLink(config_.site, p.name, std::move(channel));
  }
  return absl::NotFoundError("site '" + peer + "' is not a configured peer");
}

Status Daemon::StartPeerServer(const std::set<std::string>& peer_names) {
  transport::GrpcPeerServiceOptions pso;
  pso.peers = peer_names;
  pso.tls = config_.tls.has_value();
  peer_service_ = std::make_unique<transport::GrpcPeerService>(pso, peer_handler_.get(), log_);
  ASSIGN_OR_RETURN(auto creds, PeerServerCredentials(config_.tls));
  grpc::ServerBuilder b;
  b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // a taken port must fail, not share
  b.AddListeningPort(config_.peer_listen, creds, &peer_port_);
  b.SetMaxReceiveMessageSize(64 << 20);
  // Bounds on what peers can hold open: streams per connection and serving threads.
  b.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 64);
  grpc::ResourceQuota quota("longhauld-peer");
  quota.SetMaxThreads(1024);
  b.SetResourceQuota(quota);
  // Wide-area links have large bandwidth-delay products (1 Gbit/s x 100 ms = 12.5 MB):
  // let HTTP/2 flow control open windows that large instead of throttling the sender.
  b.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 16 << 20);
  b.RegisterService(peer_service_.get());
  peer_server_ = b.BuildAndStart();
  if (!peer_server_ || peer_port_ == 0) {
    return absl::UnavailableError("listen.peer: cannot listen on " + config_.peer_listen +
                                  ListenHint(config_.tls.has_value()));
  }
  return absl::OkStatus();
}

Status Daemon::StartAll() {
  // The TLS files before anything listens: gRPC would otherwise fail to listen with no
  // reason given, or serve a certificate that peers refuse.
  if (config_.tls && !options_.skip_tls_checks) {
    RETURN_IF_ERROR(CheckTlsMaterial(*config_.tls, config_.site));
  }
  RETURN_IF_ERROR(CheckSiteDevices(config_.devices));
  RETURN_IF_ERROR(LockDataDir());
  if (options_.token.empty()) {
    ASSIGN_OR_RETURN(options_.token, ReadTokenFile(config_.token_file));
  }
  if (config_.insecure && !config_.tls) {
    log_->warn(
        "insecure: true and no tls: peers are not authenticated; anyone who reaches {} can pose "
        "as a peer site",
        config_.peer_listen);
  }
  if (config_.insecure && !(config_.tls && config_.tls->control)) {
    log_->warn("insecure: true and no tls.control: the control token travels in the clear to {}",
               config_.control_listen);
  }
  monitor_ = std::make_unique<LinkMonitor>(config_.site);
  std::set<std::string> peer_names;
  for (const auto& p : config_.peers) {
    monitor_->AddPeer(p.name, p.address);
    peer_names.insert(p.name);
  }

  JobHostOptions jo;
  jo.site = config_.site;
  jo.data_dir = config_.data_dir;
  jo.data_roots = config_.data_roots;
  for (const auto& p : config_.peers) jo.peers[p.name] = p.address;
  jo.dial = [this](const std::string& peer) -> std::unique_ptr<transport::Link> {
    auto link = Dial(peer);
    if (!link.ok()) {
      log_->error("no link to {}: {}", peer, std::string(link.status().message()));
      return nullptr;
    }
    return std::move(*link);
  };
  jo.heartbeat_seconds = config_.links.heartbeat_interval_seconds;
  jo.gossip_links_check_seconds = config_.links.GossipRefreshSeconds();
  jo.memory_limit_bytes = config_.memory_limit_bytes;
  jo.devices = config_.devices;
  jo.env = options_.env;
  jobs_ = std::make_unique<JobHost>(jo, monitor_.get(), log_);
  if (!config_.volunteer.empty()) {  // before the servers answer NodeStatus; started last
    VolunteerOptions vo;
    vo.jobs = config_.volunteer;
    volunteer_ = std::make_unique<VolunteerLoop>(
        std::move(vo), [this](const std::string& site) { return jobs_->Channel(site); }, log_);
  }

  // Peer server: what other sites reach, over gRPC or the loopback.
  SitePeerHandlerOptions ho;
  ho.site = config_.site;
  ho.peers = peer_names;
  ho.protocol_version = options_.protocol_version;
  peer_handler_ = std::make_unique<SitePeerHandler>(ho, monitor_.get(), jobs_.get(), log_);
  if (options_.loopback) {
    RETURN_IF_ERROR(options_.loopback->Attach(peer_handler_.get()));
  } else {
    RETURN_IF_ERROR(StartPeerServer(peer_names));
  }

  // Control server.
  ControlViews views;
  views.node_status = [this] { return NodeStatus(); };
  views.links = [this] { return Links(); };
  control_service_ = std::make_unique<ControlServiceImpl>(options_.token, views, jobs_.get());
  {
    grpc::ServerBuilder b;
    b.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    ASSIGN_OR_RETURN(auto creds, ControlServerCredentials(config_.tls));
    b.AddListeningPort(config_.control_listen, creds, &control_port_);
    b.RegisterService(control_service_.get());
    control_server_ = b.BuildAndStart();
    if (!control_server_ || control_port_ == 0) {
      return absl::UnavailableError("listen.control: cannot listen on " + config_.control_listen +
                                    ListenHint(config_.tls && config_.tls->control));
    }
  }

  // Status endpoint.
  std::map<std::string, http::HttpHandler> pages;
  pages["/healthz"] = [] { return http::HttpResponse{200, "text/plain; charset=utf-8", "ok\n"}; };
  pages["/metrics"] = [this] {
    return http::HttpResponse{200, http::kPrometheusContentType,
                              RenderMetrics(NodeStatus(), Links(), jobs_->ListJobs(), start_unix_)};
  };
  pages["/status"] = [this] {
    return http::HttpResponse{200, "application/json",
                              RenderStatusJson(NodeStatus(), Links(), jobs_->ListJobs())};
  };
  pages["/status/jobs"] = [this] {
    return http::HttpResponse{200, "application/json",
                              RenderJobHistoryJson(jobs_->ListJobs(/*max_losses=*/0))};
  };
  // The live page (daemon/http/web), built into the binary. It reads /status and /status/jobs
  // and renders what peers report as text only; the policy keeps it to this listener's own
  // scripts and styles.
  for (const auto& asset : http::WebAssets()) {
    pages[std::string(asset.path)] = [&asset] {
      http::HttpResponse r{200, std::string(asset.content_type), std::string(asset.body)};
      r.headers = {{"Content-Security-Policy",
                    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'"},
                   {"X-Content-Type-Options", "nosniff"},
                   {"Cache-Control", "no-cache"}};
      return r;
    };
  }
  auto status_server = http::StatusServer::Start(config_.status_listen, std::move(pages));
  if (!status_server.ok()) return Annotate(status_server.status(), "listen.status");
  status_server_ = std::move(*status_server);
  status_port_ = status_server_->port();

  jobs_->RestoreJobs();
  for (const auto& p : config_.peers) {
    PeerLinkOptions o;
    o.site = config_.site;
    o.peer = p.name;
    o.address = p.address;
    o.dial = [this, peer = p.name] { return Dial(peer); };
    o.links = config_.links;
    o.protocol_version = options_.protocol_version;
    links_.push_back(std::make_unique<PeerLink>(o, monitor_.get(), log_));
    links_.back()->Start();
  }
  if (volunteer_) volunteer_->Start();
  log_->info(
      "serving: peer {} (tls {}), control {} (tls {}), status page http://{}/ (JSON at /status); "
      "{} peer(s)",
      PeerListen(), config_.tls ? "on" : "off", WithPort(config_.control_listen, control_port_),
      config_.tls && config_.tls->control ? "on" : "off",
      WithPort(config_.status_listen, status_port_), config_.peers.size());
  log_->info("cpu backend: {}", kernels::BlasCoreReport());
  return absl::OkStatus();
}

void Daemon::Shutdown(double grace_seconds) {
  if (shut_down_) return;
  shut_down_ = true;
  if (volunteer_) volunteer_->Stop();
  for (auto& l : links_) l->Stop();
  if (jobs_) jobs_->Shutdown();
  // No call into this site is left running once Detach returns (the job host released the
  // ones that wait).
  if (options_.loopback && peer_handler_) options_.loopback->Detach(config_.site);
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(grace_seconds * 1000));
  if (control_server_) control_server_->Shutdown(deadline);
  if (peer_server_) peer_server_->Shutdown(deadline);
  if (status_server_) status_server_->Stop();
  if (lock_fd_ >= 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
  }
  if (monitor_) log_->info("stopped");
}

v1::NodeStatus Daemon::NodeStatus() const {
  v1::NodeStatus s;
  s.set_site(config_.site);
  s.set_version(kBuildVersion);
  s.set_protocol_version(options_.protocol_version);
  s.set_uptime_seconds(options_.env.files->NowSeconds() - start_mono_);
  s.set_peer_listen(PeerListen());
  s.set_control_listen(WithPort(config_.control_listen, control_port_));
  s.set_status_listen(WithPort(config_.status_listen, status_port_));
  for (const auto& d : config_.devices) s.add_devices(d);
  s.set_tls(config_.tls.has_value());
  s.set_control_tls(config_.tls && config_.tls->control);
  if (config_.insecure && !config_.tls) {
    s.set_warning("insecure: true without tls: peers are not authenticated");
  } else if (config_.insecure && !s.control_tls()) {
    s.set_warning("insecure: true without tls.control: the control token travels in the clear");
  }
  uint32_t up = 0;
  for (const auto& l : monitor_->Snapshot()) up += l.state == v1::LINK_STATE_UP;
  s.set_peers_up(up);
  s.set_peers_total(config_.peers.size());
  if (volunteer_) {
    for (v1::VolunteerStatus& v : volunteer_->Snapshot()) *s.add_volunteers() = std::move(v);
  }
  return s;
}

v1::ListLinksResponse Daemon::Links() const {
  v1::ListLinksResponse r;
  r.set_site(config_.site);
  const std::vector<v1::LinkUsage> usage = jobs_->LocalLinkUsage();
  for (const auto& snap : monitor_->Snapshot()) {
    v1::LinkInfo* l = r.add_links();
    l->set_peer(snap.peer);
    l->set_address(snap.address);
    l->set_state(snap.state);
    l->set_detail(snap.detail);
    *l->mutable_outbound() = snap.outbound;
    *l->mutable_inbound() = snap.inbound;
    l->set_reconnects(snap.reconnects);
    l->set_up_seconds(snap.up_seconds);
    l->set_probes(snap.probes);
    l->set_early_probes(snap.early_probes);
    l->set_probe_bytes(snap.probe_bytes);
    for (const auto& u : usage) {
      if (u.to_site() == snap.peer) *l->add_jobs() = u;
    }
  }
  return r;
}

}  // namespace longhaul::daemon
