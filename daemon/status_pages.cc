// The status endpoint's pages (status_pages.h): /status as JSON and /metrics in the
// Prometheus text format, from the node, link and job views.
#include "daemon/status_pages.h"

#include <algorithm>
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

std::string JobStateName(v1::JobState state) {
  std::string n = v1::JobState_Name(state);
  const std::string prefix = "JOB_STATE_";
  if (n.rfind(prefix, 0) == 0) n = n.substr(prefix.size());
  for (auto& c : n) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return n;
}

namespace {

using Labels = std::vector<std::pair<std::string, std::string>>;

// Job progress (jobs coordinated here), per-stage timings, and what each of this site's
// outbound links carries for each job.
void JobMetrics(const v1::ListLinksResponse& links, const v1::ListJobsResponse& jobs,
                http::MetricsText* m) {
  m->Family("longhaul_job_info", "gauge", "Jobs coordinated by this daemon; the value is 1.");
  m->Family("longhaul_job_steps_completed", "gauge", "Optimizer steps the job has completed.");
  m->Family("longhaul_job_steps", "gauge", "Optimizer steps the job runs in all.");
  m->Family("longhaul_job_committed_step", "gauge",
            "Last step checkpointed by every stage (a restart resumes from it).");
  m->Family("longhaul_job_loss", "gauge", "Training loss of the job's last completed step.");
  m->Family("longhaul_job_validation_loss", "gauge",
            "Latest validation loss of the job (data.val).");
  m->Family("longhaul_job_tokens_per_second", "gauge", "Training throughput of the job.");
  m->Family("longhaul_job_step_seconds", "gauge", "Wall time of the job's last step.");
  m->Family("longhaul_job_attempt", "gauge", "Attempt number; it grows at each rollback.");
  m->Family("longhaul_job_replicas_dropped", "gauge",
            "Pipeline replicas sitting out after losing a site (sync.on_site_loss: drop).");
  m->Family("longhaul_job_replica_drops_total", "counter",
            "Times a pipeline replica was dropped after losing a site.");
  m->Family("longhaul_job_replica_rejoins_total", "counter",
            "Times a dropped pipeline replica rejoined from a live replica's state.");
  m->Family("longhaul_job_replicas_added_total", "counter",
            "Pipeline replicas that sites joining the running job formed, or removed ones their "
            "sites brought back (longhaul job add-site).");
  m->Family("longhaul_job_gossip_links_epoch", "gauge",
            "Gossip jobs: the epoch of the link matrix the attempt's rounds draw from (0: the "
            "assignment's; each time the links' rates moved mid-attempt, one more).");
  m->Family("longhaul_job_replicas_removed_total", "counter",
            "Pipeline replicas taken out of the running job (longhaul job remove-site).");
  m->Family("longhaul_stage_syncs", "gauge",
            "Pipeline replicas: syncs the stage's sync group completed in this attempt.");
  m->Family("longhaul_stage_compute_seconds", "gauge", "Compute time of the stage's last step.");
  m->Family("longhaul_stage_network_wait_seconds", "gauge",
            "Time the stage's last step spent waiting on the network.");
  m->Family("longhaul_stage_step_seconds", "gauge", "Wall time of the stage's last step.");
  m->Family("longhaul_sync_group_raw_bytes_total", "counter",
            "Pipeline replicas: bytes the sync group's members sent each other, before "
            "compression.");
  m->Family("longhaul_sync_group_wire_bytes_total", "counter",
            "Pipeline replicas: bytes the sync group's members sent each other, on the wire.");
  m->Family("longhaul_sync_group_syncs_total", "counter", "Syncs the sync group completed.");
  m->Family("longhaul_sync_group_exposed_seconds_total", "counter",
            "Longest total time a member of the sync group spent in syncs (its sync work and its "
            "wait for the other members).");
  m->Family("longhaul_sync_group_hidden_seconds_total", "counter",
            "Sync time hidden behind the next inner steps.");
  m->Family("longhaul_sync_group_key_frames_total", "counter",
            "Gossip over compressed links: key frames the sync group's members sent (a link's "
            "copy started again from the parameters in fp32).");
  m->Family("longhaul_sync_group_frames_skipped_total", "counter",
            "Gossip over compressed links: frames the sync group's members skipped because "
            "their link's copies differed (a frame lost, a restart).");
  m->Family("longhaul_sync_group_tied_mends_total", "counter",
            "Gossip: rounds after which a replica's last stage took its first stage's copy of "
            "the tied embedding because the two differed (none expected).");
  m->Family("longhaul_sync_group_consensus_distance", "gauge",
            "Gossip: how far apart the replicas' parameters of the sync group are before the "
            "latest round every member reported: the root mean square of their distances from "
            "their mean (estimated from sketches).");
  for (const auto& j : jobs.jobs()) {
    const Labels job = {{"job", j.job_id()}};
    m->Sample("longhaul_job_info",
              {{"job", j.job_id()}, {"name", j.name()}, {"state", JobStateName(j.state())}}, 1);
    m->Sample("longhaul_job_steps_completed", job, j.step());
    m->Sample("longhaul_job_steps", job, j.total_steps());
    m->Sample("longhaul_job_committed_step", job, j.committed_step());
    m->Sample("longhaul_job_loss", job, j.loss());
    if (j.val_losses_size() > 0) {
      const v1::ValLoss& v = *j.val_losses().rbegin();
      m->Sample("longhaul_job_validation_loss", job, v.loss());
    }
    m->Sample("longhaul_job_tokens_per_second", job, j.tokens_per_second());
    m->Sample("longhaul_job_step_seconds", job, j.step_seconds());
    m->Sample("longhaul_job_attempt", job, j.attempt());
    m->Sample("longhaul_job_replicas_dropped", job, j.dropped_replicas_size());
    m->Sample("longhaul_job_replica_drops_total", job, j.replica_drops());
    m->Sample("longhaul_job_replica_rejoins_total", job, j.replica_rejoins());
    m->Sample("longhaul_job_replicas_added_total", job, j.replicas_added());
    m->Sample("longhaul_job_replicas_removed_total", job, j.replicas_removed());
    if (j.gossip_links_size() > 0) {
      m->Sample("longhaul_job_gossip_links_epoch", job, j.gossip_links_epoch());
    }
    for (const auto& s : j.stages()) {
      const Labels stage = {
          {"job", j.job_id()}, {"stage", std::to_string(s.index())}, {"site", s.site()}};
      m->Sample("longhaul_stage_compute_seconds", stage, s.compute_seconds());
      m->Sample("longhaul_stage_syncs", stage, s.syncs());
      m->Sample("longhaul_stage_network_wait_seconds", stage, s.wait_seconds());
      m->Sample("longhaul_stage_step_seconds", stage, s.step_seconds());
    }
    for (const auto& g : j.sync_groups()) {
      const Labels group = {
          {"job", j.job_id()}, {"group", std::to_string(g.position())}, {"codec", g.codec()}};
      m->Sample("longhaul_sync_group_raw_bytes_total", group, g.raw_bytes());
      m->Sample("longhaul_sync_group_wire_bytes_total", group, g.wire_bytes());
      m->Sample("longhaul_sync_group_syncs_total", group, g.syncs());
      m->Sample("longhaul_sync_group_exposed_seconds_total", group, g.exposed_seconds());
      m->Sample("longhaul_sync_group_hidden_seconds_total", group, g.hidden_seconds());
      if (g.reduce() == "gossip") {
        m->Sample("longhaul_sync_group_key_frames_total", group, g.key_frames());
        m->Sample("longhaul_sync_group_frames_skipped_total", group, g.frames_skipped());
        m->Sample("longhaul_sync_group_tied_mends_total", group, g.tied_mends());
      }
      if (g.consensus_step() > 0) {
        m->Sample("longhaul_sync_group_consensus_distance", group, g.consensus_distance());
      }
    }
  }
  m->Family("longhaul_link_raw_bytes_total", "counter",
            "Bytes of the job's tensors before compression, sent on the directed link.");
  m->Family("longhaul_link_wire_bytes_total", "counter",
            "Bytes of the job's tensors after compression, sent on the directed link.");
  m->Family("longhaul_link_tensors_total", "counter", "Tensors the job sent on the link.");
  m->Family("longhaul_link_compression_ratio", "gauge", "Raw bytes / wire bytes so far.");
  m->Family("longhaul_link_achieved_bytes_per_second", "gauge",
            "Wire bytes per second of transfer time the job achieved on the link.");
  m->Family("longhaul_link_codec_info", "gauge",
            "The codec the controller chose last for the job's tensors on the link; value 1.");
  for (const auto& link : links.links()) {
    for (const auto& u : link.jobs()) {
      const Labels l = {{"job", u.job_id()}, {"from", u.from_site()}, {"to", u.to_site()}};
      m->Sample("longhaul_link_raw_bytes_total", l, u.raw_bytes());
      m->Sample("longhaul_link_wire_bytes_total", l, u.wire_bytes());
      m->Sample("longhaul_link_tensors_total", l, u.tensors());
      m->Sample("longhaul_link_compression_ratio", l,
                u.wire_bytes() ? double(u.raw_bytes()) / u.wire_bytes() : 0);
      m->Sample("longhaul_link_achieved_bytes_per_second", l, u.achieved_bytes_per_second());
      if (!u.codec().empty()) {
        Labels c = l;
        c.push_back({"codec", u.codec()});
        m->Sample("longhaul_link_codec_info", c, 1);
      }
    }
  }
}

}  // namespace

std::string RenderMetrics(const v1::NodeStatus& node, const v1::ListLinksResponse& links,
                          const v1::ListJobsResponse& jobs, double start_time_unix) {
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
  m.Family("longhaul_peer_probes_total", "counter",
           "Bandwidth probes this site sent to the peer (kind: periodic or early, asked for by "
           "a transfer or a probe far below the usual).");
  m.Family("longhaul_peer_probe_bytes_total", "counter",
           "Bytes of the bandwidth probes this site sent to the peer.");
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
    m.Sample("longhaul_peer_probes_total", {{"peer", link.peer()}, {"kind", "periodic"}},
             link.probes() - std::min(link.probes(), link.early_probes()));
    m.Sample("longhaul_peer_probes_total", {{"peer", link.peer()}, {"kind", "early"}},
             link.early_probes());
    m.Sample("longhaul_peer_probe_bytes_total", {{"peer", link.peer()}}, link.probe_bytes());
    for (const v1::LinkEstimate* e : {&link.outbound(), &link.inbound()}) {
      if (e->from_site().empty()) continue;  // the peer has not reported yet
      const std::vector<std::pair<std::string, std::string>> labels = {{"from", e->from_site()},
                                                                       {"to", e->to_site()}};
      m.Sample("longhaul_link_bandwidth_bytes_per_second", labels, e->bandwidth_bytes_per_second());
      m.Sample("longhaul_link_rtt_seconds", labels, e->rtt_seconds());
      m.Sample("longhaul_link_bandwidth_samples_total", labels, e->bandwidth_samples());
    }
  }
  JobMetrics(links, jobs, &m);
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

nlohmann::json UsageJson(const v1::LinkUsage& u) {
  return {{"job", u.job_id()},
          {"from", u.from_site()},
          {"to", u.to_site()},
          {"codec", u.codec()},
          {"reason", u.reason()},
          {"raw_bytes", u.raw_bytes()},
          {"wire_bytes", u.wire_bytes()},
          {"compression_ratio", u.wire_bytes() ? double(u.raw_bytes()) / u.wire_bytes() : 0.0},
          {"tensors", u.tensors()},
          {"device_tensors", u.device_tensors()},
          {"bandwidth_bytes_per_second", u.bandwidth_bytes_per_second()},
          {"rtt_seconds", u.rtt_seconds()},
          {"achieved_bytes_per_second", u.achieved_bytes_per_second()}};
}

std::string RenderStatusJson(const v1::NodeStatus& node, const v1::ListLinksResponse& links,
                             const v1::ListJobsResponse& jobs) {
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
  j["control_tls"] = node.control_tls();
  if (!node.warning().empty()) j["warning"] = node.warning();
  j["peers_up"] = node.peers_up();
  j["peers_total"] = node.peers_total();
  if (node.volunteers_size() > 0) {
    j["volunteers"] = nlohmann::json::array();
    for (const auto& v : node.volunteers()) {
      j["volunteers"].push_back({{"job", v.job()},
                                 {"coordinator", v.coordinator()},
                                 {"state", v.state()},
                                 {"detail", v.detail()},
                                 {"asked", v.asked()}});
    }
  }
  j["links"] = nlohmann::json::array();
  for (const auto& link : links.links()) {
    nlohmann::json l = {{"peer", link.peer()},
                        {"address", link.address()},
                        {"state", LinkStateName(link.state())},
                        {"detail", link.detail()},
                        {"reconnects", link.reconnects()},
                        {"probes", link.probes()},
                        {"early_probes", link.early_probes()},
                        {"probe_bytes", link.probe_bytes()},
                        {"up_seconds", link.up_seconds()},
                        {"outbound", EstimateJson(link.outbound())}};
    if (!link.inbound().from_site().empty()) l["inbound"] = EstimateJson(link.inbound());
    l["jobs"] = nlohmann::json::array();
    for (const auto& u : link.jobs()) l["jobs"].push_back(UsageJson(u));
    j["links"].push_back(std::move(l));
  }
  j["jobs"] = nlohmann::json::array();
  for (const auto& job : jobs.jobs()) {
    nlohmann::json stages = nlohmann::json::array();
    auto among = [](const auto& list, uint32_t r) {
      return std::find(list.begin(), list.end(), r) != list.end();
    };
    for (const auto& s : job.stages()) {
      // A replica's membership: in (training), dropped (a site lost; it rejoins), removed
      // (left the job for good, `longhaul job remove-site`).
      const char* membership = among(job.removed_replicas(), s.replica())   ? "removed"
                               : among(job.dropped_replicas(), s.replica()) ? "dropped"
                                                                            : "in";
      stages.push_back({{"stage", s.index()},
                        {"site", s.site()},
                        {"replica", s.replica()},
                        {"membership", membership},
                        {"syncs", s.syncs()},
                        {"layers", {s.layer_begin(), s.layer_end()}},
                        {"memory_bytes", s.memory_bytes()},
                        {"devices", s.devices()},
                        {"compute_seconds", s.compute_seconds()},
                        {"network_wait_seconds", s.wait_seconds()},
                        {"step_seconds", s.step_seconds()}});
    }
    nlohmann::json job_links = nlohmann::json::array();
    for (const auto& u : job.links()) job_links.push_back(UsageJson(u));
    nlohmann::json groups = nlohmann::json::array();
    for (const auto& g : job.sync_groups()) {
      groups.push_back(
          {{"group", g.position()},
           {"sites", std::vector<std::string>(g.sites().begin(), g.sites().end())},
           {"codec", g.codec()},
           {"reduce", g.reduce()},
           {"raw_bytes", g.raw_bytes()},
           {"wire_bytes", g.wire_bytes()},
           {"compression_ratio", g.wire_bytes() ? double(g.raw_bytes()) / g.wire_bytes() : 0.0},
           {"syncs", g.syncs()},
           {"exposed_seconds", g.exposed_seconds()},
           {"hidden_seconds", g.hidden_seconds()},
           {"consensus_distance", g.consensus_distance()},
           {"consensus_step", g.consensus_step()},
           {"key_frames", g.key_frames()},
           {"frames_skipped", g.frames_skipped()},
           {"tied_mends", g.tied_mends()}});
    }
    nlohmann::json sources = nlohmann::json::array();
    uint64_t source_tokens = 0;
    for (const auto& d : job.data_sources()) source_tokens += d.tokens();
    for (const auto& d : job.data_sources()) {
      sources.push_back({{"name", d.name()},
                         {"weight", d.weight()},
                         {"tokens", d.tokens()},
                         {"share", source_tokens ? double(d.tokens()) / source_tokens : 0.0}});
    }
    j["jobs"].push_back({{"job", job.job_id()},
                         {"name", job.name()},
                         {"state", JobStateName(job.state())},
                         {"detail", job.detail()},
                         {"step", job.step()},
                         {"steps", job.total_steps()},
                         {"committed_step", job.committed_step()},
                         {"loss", job.loss()},
                         {"tokens_per_second", job.tokens_per_second()},
                         {"step_seconds", job.step_seconds()},
                         {"attempt", job.attempt()},
                         {"replicas_added", job.replicas_added()},
                         {"replicas_removed", job.replicas_removed()},
                         {"stages", stages},
                         {"links", job_links},
                         {"sync_groups", groups},
                         {"data_sources", sources}});
    if (job.gossip_links_size() > 0) {
      j["jobs"].back()["gossip_links"] = {
          {"bytes_per_second",
           std::vector<double>(job.gossip_links().begin(), job.gossip_links().end())},
          {"epoch", job.gossip_links_epoch()},
          {"from_round", job.gossip_links_from_round()}};
    }
    if (job.has_outer()) {
      j["jobs"].back()["outer"] = {{"lr", job.outer().lr()},
                                   {"momentum", job.outer().momentum()},
                                   {"nesterov", job.outer().nesterov()}};
    }
  }
  // The stages this site runs of jobs coordinated elsewhere: the page says which, and whose
  // page has the job.
  j["hosted_stages"] = nlohmann::json::array();
  for (const auto& h : jobs.hosted_stages()) {
    j["hosted_stages"].push_back({{"job", h.job_id()},
                                  {"name", h.name()},
                                  {"coordinator", h.coordinator()},
                                  {"stage", h.stage()},
                                  {"stages", h.stages()},
                                  {"replica", h.replica()},
                                  {"layers", {h.layer_begin(), h.layer_end()}},
                                  {"state", h.state()},
                                  {"error", h.error()},
                                  {"step", h.step()},
                                  {"steps", h.total_steps()},
                                  {"attempt", h.attempt()}});
  }
  return j.dump(2) + "\n";
}

std::string RenderJobHistoryJson(const v1::ListJobsResponse& jobs) {
  nlohmann::json j;
  j["jobs"] = nlohmann::json::array();
  for (const auto& job : jobs.jobs()) {
    nlohmann::json events = nlohmann::json::array();
    for (const auto& e : job.events()) {
      events.push_back({{"step", e.step()},
                        {"unix_seconds", e.unix_seconds()},
                        {"kind", e.kind()},
                        {"detail", e.detail()}});
    }
    // At most kMaxHistoryPoints steps, evenly spaced and the newest always among them: a
    // page polls this every few seconds, and a chart has no more pixels than that anyway.
    const int n = job.losses_size();
    const int stride = std::max(1, (n + kMaxHistoryPoints - 1) / kMaxHistoryPoints);
    std::vector<uint64_t> steps;
    std::vector<double> losses, times;
    for (int i = (n - 1) % stride; i < n; i += stride) {
      steps.push_back(job.losses_offset() + static_cast<uint64_t>(i) + 1);
      losses.push_back(job.losses(i));
      times.push_back(i < job.step_times_size() ? job.step_times(i) : 0.0);
    }
    nlohmann::json val = nlohmann::json::array();
    for (const auto& v : job.val_losses()) val.push_back({{"step", v.step()}, {"loss", v.loss()}});
    j["jobs"].push_back({{"job", job.job_id()},
                         {"name", job.name()},
                         {"state", JobStateName(job.state())},
                         {"coordinator", job.coordinator()},
                         {"submitted_unix", job.submitted_unix()},
                         {"predicted_step_seconds", job.predicted_step_seconds()},
                         {"replans", job.replans()},
                         {"attempt", job.attempt()},
                         // losses[i] and step_times[i] are of step steps[i].
                         {"steps", steps},
                         {"losses", losses},
                         {"step_times", times},
                         {"val_losses", val},
                         {"events", events}});
  }
  return j.dump() + "\n";
}

}  // namespace longhaul::daemon
