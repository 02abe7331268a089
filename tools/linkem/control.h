// linkem's control port: a line protocol on TCP for tests and demos.
//   drop                 -> "ok dropped N"
//   set KEY=VALUE ...    -> "ok" (keys as in schedule files: rate, up_delay, ...)
//   stats                -> one JSON object: connections, open, bytes_up, bytes_down, drops
//   help                 -> the command list
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/status.h"
#include "tools/linkem/proxy.h"

namespace longhaul::linkem {

class ControlServer {
 public:
  // `say` reports changes (for linkem's log).
  static StatusOr<std::unique_ptr<ControlServer>> Start(
      const std::string& address, Proxy* proxy, std::function<void(const std::string&)> say);
  ~ControlServer();
  int port() const { return port_; }
  void Stop();

  // Executes one command line and returns the reply (without the newline).
  static std::string Execute(const std::string& line, Proxy* proxy,
                             const std::function<void(const std::string&)>& say);

 private:
  void Loop();
  Proxy* proxy_ = nullptr;
  std::function<void(const std::string&)> say_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace longhaul::linkem
