// linkem's TCP proxy: accepts connections on a listen address, connects each to the target,
// and pumps bytes both ways through one Shaper per direction (shared by all connections, as
// they share one emulated link). Bytes wait in a bounded buffer per direction, like a
// router queue, so a fast sender is slowed by TCP backpressure rather than by unbounded
// memory. Connections can be dropped on command to emulate a link failure.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"
#include "tools/linkem/shaper.h"

namespace longhaul::linkem {

struct ProxyOptions {
  std::string listen;  // host:port; port 0 picks one
  std::string target;  // host:port
  LinkParams up;       // connecting side -> target
  LinkParams down;     // target -> connecting side
};

struct ProxyStats {
  uint64_t connections = 0;  // accepted so far
  uint64_t open = 0;         // open now
  uint64_t bytes_up = 0;     // handed on to the far side, per direction
  uint64_t bytes_down = 0;
  uint64_t drops = 0;  // connections cut by DropConnections()
};

class Proxy {
 public:
  static StatusOr<std::unique_ptr<Proxy>> Start(const ProxyOptions& options);
  ~Proxy();

  int port() const { return port_; }
  // Takes effect for bytes that arrive from now on.
  void SetParams(const LinkParams& up, const LinkParams& down);
  void GetParams(LinkParams* up, LinkParams* down) const;
  // Resets every open connection; returns how many were cut.
  int DropConnections();
  ProxyStats stats() const;
  void Stop();

 private:
  struct Direction;
  struct Connection;
  explicit Proxy(ProxyOptions options);
  void AcceptLoop();
  void Pump(std::shared_ptr<Connection> c, bool up);
  void Reap();

  ProxyOptions options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  std::unique_ptr<Direction> up_, down_;
  mutable std::mutex mu_;
  std::list<std::shared_ptr<Connection>> connections_;
  ProxyStats stats_;
};

}  // namespace longhaul::linkem
