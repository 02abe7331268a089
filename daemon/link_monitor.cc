// LinkMonitor (link_monitor.h): per-peer link state and the RTT and bandwidth estimates
// that heartbeats, probes and senders feed.
#include "daemon/link_monitor.h"

#include <algorithm>

#include "common/file_env.h"

namespace longhaul::daemon {

LinkMonitor::LinkMonitor(std::string site, LinkMonitorOptions options)
    : site_(std::move(site)), options_(options) {}

void LinkMonitor::AddPeer(const std::string& peer, const std::string& address) {
  std::lock_guard<std::mutex> lock(mu_);
  links_[peer].address = address;
}

void LinkMonitor::SetState(const std::string& peer, v1::LinkState state,
                           const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end()) return;
  Link& link = it->second;
  if (state == v1::LINK_STATE_UP && link.state != v1::LINK_STATE_UP) {
    if (link.ever_up) ++link.reconnects;
    link.ever_up = true;
    link.up_since = Clock::now();
  }
  link.state = state;
  link.detail = state == v1::LINK_STATE_UP ? "" : detail;
}

void LinkMonitor::TakeSampleLocked(Link& link, double sample, double weight) {
  link.bandwidth =
      link.bandwidth_samples == 0 ? sample : weight * sample + (1 - weight) * link.bandwidth;
  ++link.bandwidth_samples;
  link.last_bandwidth_sample = Clock::now();
}

void LinkMonitor::AddBandwidthSample(const std::string& peer, uint64_t bytes, double seconds,
                                     bool lower_bound, bool backlogged) {
  if (!(seconds > 0) || bytes == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end()) return;
  Link& link = it->second;
  const double sample = static_cast<double>(bytes) / seconds;
  if (backlogged) {
    // Against what such transfers usually move, not against the probed capacity: over a
    // long round trip they never fill the link, and that alone is no fall.
    if (link.backlogged_rate > 0 && sample < 0.5 * link.backlogged_rate) {
      link.probe_requested = true;
    }
    link.backlogged_rate =
        link.backlogged_rate > 0 ? 0.7 * link.backlogged_rate + 0.3 * sample : sample;
  }
  if (lower_bound && link.bandwidth_samples > 0 && sample <= link.bandwidth) return;
  TakeSampleLocked(link, sample, options_.bandwidth_alpha);
}

void LinkMonitor::AddProbeSample(const std::string& peer, uint64_t bytes, double seconds,
                                 bool asked) {
  if (!(seconds > 0) || bytes == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end()) return;
  Link& link = it->second;
  const double sample = static_cast<double>(bytes) / seconds;
  const bool fell = link.bandwidth_samples > 0 && sample * options_.level_change < link.bandwidth;
  if (fell && !asked) link.probe_requested = true;  // a second probe soon confirms or clears it
  TakeSampleLocked(link, sample, fell && asked ? 1.0 : options_.bandwidth_alpha);
}

double LinkMonitor::SteadySeconds() { return FileEnv::Default()->NowSeconds(); }

void LinkMonitor::AddTransfer(const std::string& peer, double start, double end, uint64_t bytes) {
  if (!(end >= start) || bytes == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end()) return;
  auto& transfers = it->second.transfers;
  transfers.push_back({start, end, bytes});
  while (transfers.size() > kTransfersKept) transfers.pop_front();
}

double LinkMonitor::TransferBytesDuring(const std::string& peer, double from, double to) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end() || !(to > from)) return 0;
  double bytes = 0;
  for (const auto& t : it->second.transfers) {
    if (t.end == t.start) {  // too quick for the clock: all or nothing
      if (t.start >= from && t.start <= to) bytes += static_cast<double>(t.bytes);
      continue;
    }
    const double overlap = std::min(to, t.end) - std::max(from, t.start);
    if (overlap > 0) bytes += static_cast<double>(t.bytes) * overlap / (t.end - t.start);
  }
  return bytes;
}

bool LinkMonitor::TakeProbeRequest(const std::string& peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end() || !it->second.probe_requested) return false;
  it->second.probe_requested = false;
  return true;
}

void LinkMonitor::CountProbe(const std::string& peer, uint64_t bytes, bool early) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end()) return;
  ++it->second.probes;
  if (early) ++it->second.early_probes;
  it->second.probe_bytes += bytes;
}

void LinkMonitor::AddRttSample(const std::string& peer, double seconds) {
  if (seconds < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end()) return;
  Link& link = it->second;
  link.rtt = link.rtt_samples == 0
                 ? seconds
                 : options_.rtt_alpha * seconds + (1 - options_.rtt_alpha) * link.rtt;
  ++link.rtt_samples;
  link.recent_rtts.push_back(seconds);
  while (link.recent_rtts.size() > kRttWindow) link.recent_rtts.pop_front();
}

double LinkMonitor::BaseRttSeconds(const std::string& peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end() || it->second.recent_rtts.empty()) return 0;
  const auto& rtts = it->second.recent_rtts;
  return *std::min_element(rtts.begin(), rtts.end());
}

void LinkMonitor::SetInbound(const std::string& peer, const v1::LinkEstimate& estimate) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end()) return;
  it->second.inbound = estimate;
  // The estimate describes peer -> us, whatever the peer wrote in the names.
  it->second.inbound.set_from_site(peer);
  it->second.inbound.set_to_site(site_);
}

void LinkMonitor::SetProbing(const std::string& peer, bool outbound, bool active) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end()) return;
  (outbound ? it->second.probing_out : it->second.probing_in) = active;
}

bool LinkMonitor::Probing(const std::string& peer, bool outbound) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end()) return false;
  return outbound ? it->second.probing_out : it->second.probing_in;
}

v1::LinkEstimate LinkMonitor::OutboundLocked(const std::string& peer, const Link& link) const {
  v1::LinkEstimate e;
  e.set_from_site(site_);
  e.set_to_site(peer);
  e.set_bandwidth_bytes_per_second(link.bandwidth);
  e.set_rtt_seconds(link.rtt);
  e.set_bandwidth_samples(link.bandwidth_samples);
  e.set_rtt_samples(link.rtt_samples);
  if (link.bandwidth_samples > 0) {
    e.set_last_sample_age_seconds(
        std::chrono::duration<double>(Clock::now() - link.last_bandwidth_sample).count());
  }
  return e;
}

v1::LinkEstimate LinkMonitor::Outbound(const std::string& peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = links_.find(peer);
  if (it == links_.end()) return {};
  return OutboundLocked(peer, it->second);
}

std::vector<LinkSnapshot> LinkMonitor::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LinkSnapshot> out;
  for (const auto& [peer, link] : links_) {
    LinkSnapshot s;
    s.peer = peer;
    s.address = link.address;
    s.state = link.state;
    s.detail = link.detail;
    s.outbound = OutboundLocked(peer, link);
    s.inbound = link.inbound;
    s.reconnects = link.reconnects;
    s.probes = link.probes;
    s.early_probes = link.early_probes;
    s.probe_bytes = link.probe_bytes;
    if (link.state == v1::LINK_STATE_UP) {
      s.up_seconds = std::chrono::duration<double>(Clock::now() - link.up_since).count();
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace longhaul::daemon
