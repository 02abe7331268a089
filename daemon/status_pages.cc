#include "daemon/status_pages.h"

#include <nlohmann/json.hpp>

#include "daemon/http/prometheus.h"

namespace longhaul::daemon {

std::string LinkStateName(v1::LinkState state) {
  switch (state) {
    case v1::LINK_STATE_CONNECTING:
      return "connecting";
    case v1::LINK_STATE_UP:
      return "up";
    case v1::LINK_STATE_DOWN:
      return "down";
    case v1::LINK_STATE_REJECTED:
      return "rejected";
    default:
      return "unknown";
  }
}

std::string RenderMetrics(const v1::NodeStatus& node, const v1::ListLinksResponse& links,
                          double start_time_unix) {
  http::MetricsText m;
  m.Family("longhaul_build_info", "gauge",
           "Build and protocol version of this daemon; the value is always 1.");
  m.Sample("longhaul_build_info",
           {{"site", node.site()},
            {"version", node.version()},
            {"protocol", std::to_string(node.protocol_version())}},
           1);
  m.Family("longhaul_process_start_time_seconds", "gauge",
           "Start time of the daemon process since the Unix epoch, in seconds.");
  m.Sample("longhaul_process_start_time_seconds", {}, start_time_unix);
  m.Family("longhaul_peers", "gauge", "Number of configured peers.");
  m.Sample("longhaul_peers", {}, node.peers_total());
  m.Family("longhaul_peer_up", "gauge", "1 if the link to the peer is up (handshake accepted).");
  m.Family("longhaul_peer_state", "gauge",
           "Link state per peer: 1 for the current state, 0 for the others.");
  m.Family("longhaul_peer_reconnects_total", "counter",
           "Times the link to the peer came back up after having been up.");
  m.Family("longhaul_link_bandwidth_bytes_per_second", "gauge",
           "Estimated bandwidth of the directed link, in bytes per second (0 = no sample yet).");
  m.Family("longhaul_link_rtt_seconds", "gauge",
           "Estimated round-trip time of the directed link, in seconds (0 = no sample yet).");
  m.Family("longhaul_link_bandwidth_samples_total", "counter",
           "Bandwidth samples taken on the directed link.");
  for (const auto& link : links.links()) {
    m.Sample("longhaul_peer_up", {{"peer", link.peer()}},
             link.state() == v1::LINK_STATE_UP ? 1 : 0);
    for (auto state : {v1::LINK_STATE_CONNECTING, v1::LINK_STATE_UP, v1::LINK_STATE_DOWN,
                       v1::LINK_STATE_REJECTED}) {
      m.Sample("longhaul_peer_state", {{"peer", link.peer()}, {"state", LinkStateName(state)}},
               link.state() == state ? 1 : 0);
    }
    m.Sample("longhaul_peer_reconnects_total", {{"peer", link.peer()}}, link.reconnects());
    for (const v1::LinkEstimate* e : {&link.outbound(), &link.inbound()}) {
      if (e->from_site().empty()) continue;  // the peer has not reported yet
      const std::vector<std::pair<std::string, std::string>> labels = {{"from", e->from_site()},
                                                                       {"to", e->to_site()}};
      m.Sample("longhaul_link_bandwidth_bytes_per_second", labels, e->bandwidth_bytes_per_second());
      m.Sample("longhaul_link_rtt_seconds", labels, e->rtt_seconds());
      m.Sample("longhaul_link_bandwidth_samples_total", labels, e->bandwidth_samples());
    }
  }
  return m.str();
}

namespace {

nlohmann::json EstimateJson(const v1::LinkEstimate& e) {
  return {{"from", e.from_site()},
          {"to", e.to_site()},
          {"bandwidth_bytes_per_second", e.bandwidth_bytes_per_second()},
          {"bandwidth_mbit_per_second", e.bandwidth_bytes_per_second() * 8 / 1e6},
          {"rtt_seconds", e.rtt_seconds()},
          {"bandwidth_samples", e.bandwidth_samples()},
          {"rtt_samples", e.rtt_samples()},
          {"last_sample_age_seconds", e.last_sample_age_seconds()}};
}

}  // namespace

std::string RenderStatusJson(const v1::NodeStatus& node, const v1::ListLinksResponse& links) {
  nlohmann::json j;
  j["site"] = node.site();
  j["version"] = node.version();
  j["protocol_version"] = node.protocol_version();
  j["uptime_seconds"] = node.uptime_seconds();
  j["listen"] = {{"peer", node.peer_listen()},
                 {"control", node.control_listen()},
                 {"status", node.status_listen()}};
  j["devices"] = std::vector<std::string>(node.devices().begin(), node.devices().end());
  j["tls"] = node.tls();
  j["peers_up"] = node.peers_up();
  j["peers_total"] = node.peers_total();
  j["links"] = nlohmann::json::array();
  for (const auto& link : links.links()) {
    nlohmann::json l = {{"peer", link.peer()},
                        {"address", link.address()},
                        {"state", LinkStateName(link.state())},
                        {"detail", link.detail()},
                        {"reconnects", link.reconnects()},
                        {"up_seconds", link.up_seconds()},
                        {"outbound", EstimateJson(link.outbound())}};
    if (!link.inbound().from_site().empty()) l["inbound"] = EstimateJson(link.inbound());
    j["links"].push_back(std::move(l));
  }
  return j.dump(2) + "\n";
}

}  // namespace longhaul::daemon
