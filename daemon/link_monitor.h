// LinkMonitor: what this daemon knows about each of its peer links: connection state, and
// bandwidth and RTT estimates of both directions. Probes and heartbeats (and, from the
// pipeline issue on, real transfers) feed it samples; status pages, the Control API and the
// compression controller read snapshots. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

struct LinkMonitorOptions {
  // Weight of a new sample in the exponentially weighted moving averages.
  double bandwidth_alpha = 0.5;
  // AddProbeSample: a probe reading under the estimate divided by this asks for a second one;
  // an asked-for probe reading that low replaces the estimate.
  double level_change = 2.0;
  double rtt_alpha = 0.3;
};

// One link as seen at one instant.
struct LinkSnapshot {
  std::string peer;
  std::string address;
  v1::LinkState state = v1::LINK_STATE_CONNECTING;
  std::string detail;
  v1::LinkEstimate outbound;  // this site -> peer
  v1::LinkEstimate inbound;   // peer -> this site (as reported by the peer)
  uint64_t reconnects = 0;
  double up_seconds = 0;
  // Bandwidth probes this site sent to the peer: how many, how many of them early (asked for
  // by a transfer or a probe far below the usual, TakeProbeRequest), and their bytes: each
  // one takes the link from the jobs while it runs.
  uint64_t probes = 0, early_probes = 0, probe_bytes = 0;
};

class LinkMonitor {
 public:
  LinkMonitor(std::string site, LinkMonitorOptions options = {});

  // Registers a peer; links of unknown peers are ignored by the other calls.
  void AddPeer(const std::string& peer, const std::string& address);

  // Records a state change; `detail` says why (shown when the link is not up). Entering UP
  // after having been up before counts a reconnect.
  void SetState(const std::string& peer, v1::LinkState state, const std::string& detail = "");

  // `bytes` crossed this site -> peer in `seconds`. A `lower_bound` sample (a job's transfers:
  // TCP's window reopening after idle, compute leaving gaps, flow control on long round
  // trips all keep them from filling the link) only says the link carries at least that
  // much: it raises the estimate, never lowers it. Probes set the level.
  // A `backlogged` lower bound (transfers queued behind each other) also tracks what such
  // transfers usually achieve; one far below that asks for an early probe (TakeProbeRequest):
  // the link may have fallen.
  void AddBandwidthSample(const std::string& peer, uint64_t bytes, double seconds,
                          bool lower_bound = false, bool backlogged = false);
  // A probe's sample. A reading under 1 / level_change of the estimate asks for another probe
  // soon (TakeProbeRequest) and is averaged in; one that was asked for (by such a reading or
  // by slow transfers: `asked`) and reads that low is the link's new level, taken as it is:
  // two signals agree that the link fell, and the moving average would take several probes
  // to follow (from 200 to 20 Mbit/s: six). Otherwise as AddBandwidthSample.
  void AddProbeSample(const std::string& peer, uint64_t bytes, double seconds, bool asked);
  // A job's transfer of `bytes` to the peer ran from `start` to `end` (seconds of the steady
  // clock, SteadySeconds: the real FileEnv's NowSeconds, which the daemon's senders read):
  // kept for a while so that a probe can count the traffic it shared the link with.
  void AddTransfer(const std::string& peer, double start, double end, uint64_t bytes);
  // Bytes of the transfers to `peer` that fell within [from, to], each prorated by the share
  // of its time inside the window.
  double TransferBytesDuring(const std::string& peer, double from, double to) const;
  static double SteadySeconds();
  // Whether backlogged transfers suggested a fall since the last call (AddBandwidthSample),
  // clearing it: the link's prober then probes early (PeerLink), so that the estimate follows
  // a fall without waiting for the next periodic probe.
  bool TakeProbeRequest(const std::string& peer);
  // A probe of `bytes` to the peer ended; `early`: one TakeProbeRequest asked for.
  void CountProbe(const std::string& peer, uint64_t bytes, bool early);
  void AddRttSample(const std::string& peer, double seconds);
  // The link's round trip without queueing: the least of the last kRttWindow samples (a
  // heartbeat queues behind a busy link's data, so the moving average rtt_seconds carries the
  // queue too); 0 before any sample. What a transfer's time holds besides its serialisation.
  double BaseRttSeconds(const std::string& peer) const;
  // The peer's own estimate of peer -> this site.
  void SetInbound(const std::string& peer, const v1::LinkEstimate& estimate);

  // Whether a bandwidth probe is running on the link, outbound (we send) or inbound (the
  // peer sends). Probes in both directions at once disturb each other (each one's ACKs
  // queue behind the other's data), so each side checks before probing.
  void SetProbing(const std::string& peer, bool outbound, bool active);
  bool Probing(const std::string& peer, bool outbound) const;

  std::vector<LinkSnapshot> Snapshot() const;
  // The estimate of this site -> peer, as it would be sent to the peer.
  v1::LinkEstimate Outbound(const std::string& peer) const;
  const std::string& site() const { return site_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Link {
    std::string address;
    v1::LinkState state = v1::LINK_STATE_CONNECTING;
    std::string detail;
    double bandwidth = 0;
    double rtt = 0;
    uint64_t bandwidth_samples = 0;
    uint64_t rtt_samples = 0;
    std::deque<double> recent_rtts;  // the newest kRttWindow samples, for BaseRttSeconds
    Clock::time_point last_bandwidth_sample;
    struct Transfer {
      double start, end;
      uint64_t bytes;
    };
    std::deque<Transfer> transfers;  // the newest kTransfersKept
    v1::LinkEstimate inbound;
    bool probing_out = false;
    bool probe_requested = false;
    double backlogged_rate = 0;  // EWMA of backlogged transfers' rates; 0: none yet
    bool probing_in = false;
    bool ever_up = false;
    uint64_t reconnects = 0;
    uint64_t probes = 0, early_probes = 0, probe_bytes = 0;
    Clock::time_point up_since;
  };
  v1::LinkEstimate OutboundLocked(const std::string& peer, const Link& link) const;
  // A bandwidth sample with this weight in the moving average (the first one is taken).
  void TakeSampleLocked(Link& link, double sample, double weight);
  static constexpr size_t kTransfersKept = 512;
  // Heartbeats are a second apart by default: the base round trip follows a route change
  // within half a minute.
  static constexpr size_t kRttWindow = 30;

  const std::string site_;
  const LinkMonitorOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, Link> links_;
};

}  // namespace longhaul::daemon
