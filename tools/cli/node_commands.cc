#include "tools/cli/node_commands.h"

#include <iostream>

#include "daemon/status_pages.h"
#include "tools/cli/format.h"

namespace longhaul::cli {
namespace {

int NodeStatus(const ClientOptions& options) {
  auto client = ControlClient::Connect(options);
  if (!client) return kExitUsage;
  v1::NodeStatus s;
  grpc::Status st = client->stub().GetNodeStatus(client->Context().get(), {}, &s);
  if (!st.ok()) return client->Fail(st, "node status");
  if (options.output == "json") {
    PrintJson(s);
    return kExitOk;
  }
  std::string devices;
  for (const auto& d : s.devices()) devices += (devices.empty() ? "" : ", ") + d;
  Table t({"FIELD", "VALUE"});
  t.AddRow({"site", s.site()});
  t.AddRow({"version", s.version() + " (protocol " + std::to_string(s.protocol_version()) + ")"});
  t.AddRow({"uptime", FormatDuration(s.uptime_seconds())});
  t.AddRow({"peer listen", s.peer_listen() + (s.tls() ? " (mutual TLS)" : " (plaintext)")});
  t.AddRow({"control listen", s.control_listen() + (s.control_tls() ? " (TLS)" : " (plaintext)")});
  // The page first (what a person opens), the JSON behind it second.
  t.AddRow({"status page",
            "http://" + s.status_listen() + "/ (JSON: http://" + s.status_listen() + "/status)"});
  t.AddRow({"devices", devices});
  t.AddRow({"peers up", std::to_string(s.peers_up()) + " of " + std::to_string(s.peers_total())});
  // The jobs its config volunteers for: "tiny at alpha: joined (site epsilon joins as ...)".
  for (const auto& v : s.volunteers()) {
    t.AddRow({"volunteer", v.job() + " at " + v.coordinator() + ": " + v.state() +
                               (v.detail().empty() ? "" : " (" + v.detail() + ")")});
  }
  std::cout << t.str();
  return kExitOk;
}

// "12 (3 early), 40.0 MiB": the bandwidth probes this site sent on the link.
std::string ProbesText(const v1::LinkInfo& l) {
  if (l.probes() == 0) return "0";
  std::string s = std::to_string(l.probes());
  if (l.early_probes() > 0) s += " (" + std::to_string(l.early_probes()) + " early)";
  return s + ", " + FormatBytes(l.probe_bytes());
}

int Links(const ClientOptions& options) {
  auto client = ControlClient::Connect(options);
  if (!client) return kExitUsage;
  v1::ListLinksResponse r;
  grpc::Status st = client->stub().ListLinks(client->Context().get(), {}, &r);
  if (!st.ok()) return client->Fail(st, "links");
  if (options.output == "json") {
    PrintJson(r);
    return kExitOk;
  }
  if (r.links().empty()) {
    std::cout << "site " << r.site() << " has no peers configured\n";
    return kExitOk;
  }
  Table t({"PEER", "ADDRESS", "STATE", "OUT BANDWIDTH", "IN BANDWIDTH", "RTT", "UP FOR",
           "RECONNECTS", "PROBES", "DETAIL"});
  Table jobs({"LINK", "JOB", "CODEC", "RATIO", "RAW", "WIRE", "ACHIEVED", "WHY"});
  for (const auto& l : r.links()) {
    t.AddRow({l.peer(), l.address(), daemon::LinkStateName(l.state()),
              FormatBitRate(l.outbound().bandwidth_bytes_per_second()),
              FormatBitRate(l.inbound().bandwidth_bytes_per_second()),
              FormatSeconds(l.outbound().rtt_seconds()),
              l.up_seconds() > 0 ? FormatDuration(l.up_seconds()) : "-",
              std::to_string(l.reconnects()), ProbesText(l), l.detail()});
    for (const auto& u : l.jobs()) {
      char ratio[32];
      std::snprintf(ratio, sizeof ratio, "%.1fx",
                    u.wire_bytes() ? double(u.raw_bytes()) / u.wire_bytes() : 0.0);
      jobs.AddRow({r.site() + " -> " + l.peer(), u.job_id(), u.codec().empty() ? "-" : u.codec(),
                   ratio, FormatBytes(u.raw_bytes()), FormatBytes(u.wire_bytes()),
                   FormatBitRate(u.achieved_bytes_per_second()), u.reason()});
    }
  }
  std::cout << "links of site " << r.site() << " (OUT: " << r.site()
            << " -> peer, measured here; IN: peer -> " << r.site() << ", measured by the peer)\n"
            << t.str();
  if (jobs.rows() > 0)
    std::cout << "\ncompression of this site's job traffic per link:\n" << jobs.str();
  return kExitOk;
}

int Throttle(const ClientOptions& options, double seconds) {
  auto client = ControlClient::Connect(options);
  if (!client) return kExitUsage;
  v1::DebugThrottleRequest req;
  req.set_seconds_per_microbatch(seconds);
  v1::DebugThrottleResponse resp;
  grpc::Status st = client->stub().SetDebugThrottle(client->Context().get(), req, &resp);
  if (!st.ok()) return client->Fail(st, "debug throttle");
  std::cout << "job compute on this site now takes " << seconds
            << " s longer per layer and microbatch (was " << resp.previous_seconds() << " s)\n";
  return kExitOk;
}

}  // namespace

void AddNodeCommands(CLI::App& app, ClientOptions& options, int* exit_code) {
  auto* node = app.add_subcommand("node", "Commands about the daemon itself");
  node->require_subcommand(1);
  auto* status = node->add_subcommand("status", "Show the daemon's site, listeners and peers");
  status->callback([&options, exit_code] { *exit_code = NodeStatus(options); });

  auto* links = app.add_subcommand(
      "links",
      "Show each peer link: state, measured bandwidth both ways, RTT, reconnects, "
      "bandwidth probes sent");
  links->callback([&options, exit_code] { *exit_code = Links(options); });

  static double throttle_seconds = 0;
  auto* debug = app.add_subcommand("debug", "Fault injection for tests and demos");
  debug->require_subcommand(1);
  auto* throttle = debug->add_subcommand(
      "throttle", "Slow this site's job compute down (a straggler); 0 turns it off");
  throttle->add_option("seconds", throttle_seconds, "Extra seconds per layer and microbatch")
      ->required()
      ->check(CLI::Range(0.0, 60.0));
  throttle->callback([&options, exit_code] { *exit_code = Throttle(options, throttle_seconds); });
}

}  // namespace longhaul::cli
