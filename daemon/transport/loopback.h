// The loopback transport: sites in one process reach each other by direct calls into the
// other site's PeerHandler, with no sockets, serialization or chunking; the caller is the
// dialling site (nothing in one process can pose as another). Daemons started with a
// LoopbackNetwork (DaemonOptions::loopback) serve no Peer gRPC port; they attach their
// handler here and dial their peers here. A site also reaches itself this way.
//
// Fault injection, per directed pair of sites: the pair can be cut (every call fails
// UNAVAILABLE, as a dropped connection would), and SendTensor can be made to fail with a
// given status (a peer that refuses tensors). Probes report a configured rate.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "daemon/transport/link.h"
#include "daemon/transport/peer_handler.h"

namespace longhaul::daemon::transport {

class LoopbackNetwork {
 public:
  LoopbackNetwork() = default;
  LoopbackNetwork(const LoopbackNetwork&) = delete;
  LoopbackNetwork& operator=(const LoopbackNetwork&) = delete;

  // Makes `handler` reachable as handler->site(). AlreadyExists when that site is attached.
  Status Attach(PeerHandler* handler);
  // Unreachable from now on (calls fail UNAVAILABLE); returns once no call into it is still
  // running. The handler must first release calls that wait (its JobHost shut down).
  void Detach(const std::string& site);

  // A link from `from` to `to`; `to` need not be attached yet (calls fail UNAVAILABLE until
  // it is, as with a peer that is down).
  std::unique_ptr<Link> Dial(const std::string& from, const std::string& to);

  // ---- fault injection, for calls from `from` to `to` ----
  void SetCut(const std::string& from, const std::string& to, bool cut);
  // The next `count` SendTensor calls (count < 0: all of them) fail with `status`.
  void FailSends(const std::string& from, const std::string& to, Status status, int count = -1);
  // What probes from `from` to `to` measure (default 1 GB/s).
  void SetRate(const std::string& from, const std::string& to, double bytes_per_second);

  // Tensors and payload bytes SendTensor delivered from `from` to `to`.
  std::pair<uint64_t, uint64_t> Delivered(const std::string& from, const std::string& to) const;

 private:
  friend class LoopbackLink;
  struct Site {
    PeerHandler* handler = nullptr;
    int in_flight = 0;
  };
  struct Pair {
    bool cut = false;
    Status send_failure;
    int send_failures_left = 0;  // < 0: every send
    double rate = 1e9;
    uint64_t tensors = 0, bytes = 0;
  };
  // The handler of `to` with a call counted in flight, or UNAVAILABLE. Release() ends the call.
  StatusOr<PeerHandler*> Enter(const std::string& from, const std::string& to);
  void Release(const std::string& to);
  // An injected failure of the next send from `from` to `to`, or OK.
  Status NextSendFailure(const std::string& from, const std::string& to);
  void CountDelivered(const std::string& from, const std::string& to, uint64_t bytes);
  double Rate(const std::string& from, const std::string& to) const;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Site> sites_;
  std::map<std::pair<std::string, std::string>, Pair> pairs_;
};

}  // namespace longhaul::daemon::transport
