// The loopback transport: sites in one process reach each other by direct calls into the
// other site's PeerHandler, with no sockets, serialization or chunking; the caller is the
// dialling site (nothing in one process can pose as another). Daemons started with a
// LoopbackNetwork (DaemonOptions::loopback) serve no Peer gRPC port; they attach their
// handler here and dial their peers here. A site also reaches itself this way.
//
// Fault injection, per directed pair of sites: the pair can be cut (every call fails
// UNAVAILABLE, as a dropped connection would), and SendTensor can be made to fail with a
// given status (a peer that refuses tensors). Probes report a configured rate, and a pair can
// be shaped to that rate (a slow link: SetRate).
#pragma once

#include <chrono>
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
  // What probes from `from` to `to` measure (default 1 GB/s). With `shape_sends`, SendTensor
  // on that pair also carries its payloads at that rate, as one serial link would: each
  // payload occupies the link for bytes / rate after the payloads before it (concurrent sends
  // queue behind each other), and is delivered when its time is up. The delay is computed,
  // not measured, so a test sees the rate it set; passive samples (job transfers over a busy
  // period) then stay within it, as on a real link. Without it (the default, and whenever
  // SetRate is called again without it) sends are delivered at once. A send already waiting
  // keeps the time it reserved. REQUIRES: bytes_per_second > 0.
  void SetRate(const std::string& from, const std::string& to, double bytes_per_second,
               bool shape_sends = false);

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
    bool shaped = false;
    std::chrono::steady_clock::time_point link_free;  // shaped: when the last payload is through
    uint64_t tensors = 0, bytes = 0;
  };
  // The handler of `to` with a call counted in flight, or UNAVAILABLE. Release() ends the call.
  StatusOr<PeerHandler*> Enter(const std::string& from, const std::string& to);
  void Release(const std::string& to);
  // An injected failure of the next send from `from` to `to`, or OK.
  Status NextSendFailure(const std::string& from, const std::string& to);
  void CountDelivered(const std::string& from, const std::string& to, uint64_t bytes);
  double Rate(const std::string& from, const std::string& to) const;
  // Shaped pairs: waits until a payload of `bytes` sent now is through the link (SetRate).
  void WaitForLink(const std::string& from, const std::string& to, uint64_t bytes);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Site> sites_;
  std::map<std::pair<std::string, std::string>, Pair> pairs_;
};

}  // namespace longhaul::daemon::transport
