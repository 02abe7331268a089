#include "tools/cli/job_commands.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "common/layer_range.h"
#include "daemon/job/sync/gossip_round.h"
#include "daemon/status_pages.h"
#include "fleet/outer_optimizer.h"
#include "model/job_file_paths.h"
#include "tools/cli/format.h"

namespace longhaul::cli {
namespace {

std::string StateName(v1::JobState s) { return daemon::JobStateName(s); }

bool Finished(v1::JobState s) {
  return s == v1::JOB_STATE_COMPLETED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// One line: [#####.....] step 40/200 loss 2.345 812 tok/s ETA 1m05s (running)
std::string ProgressLine(const v1::JobStatus& j) {
  const int width = 30;
  const double frac = j.total_steps() ? double(j.step()) / j.total_steps() : 0;
  const int filled = static_cast<int>(frac * width);
  std::string bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
  std::string line =
      bar + " step " + std::to_string(j.step()) + "/" + std::to_string(j.total_steps());
  if (j.step() > 0) {
    line += "  loss " + Fixed(j.loss(), 4);
    if (j.val_losses_size() > 0) line += "  val " + Fixed(j.val_losses().rbegin()->loss(), 4);
    line += "  " + Fixed(j.tokens_per_second(), 0) + " tok/s";
    if (!Finished(j.state())) line += "  ETA " + FormatDuration(j.eta_seconds());
  }
  line += "  (" + StateName(j.state());
  if (!j.detail().empty() && j.state() != v1::JOB_STATE_RUNNING) line += ": " + j.detail();
  line += ")";
  return line;
}

void PrintDetails(const v1::JobStatus& j) {
  std::cout << "job " << j.job_id() << " (" << j.name() << "): " << StateName(j.state());
  if (!j.detail().empty()) std::cout << " - " << j.detail();
  std::cout << "\n  step " << j.step() << "/" << j.total_steps() << ", committed "
            << j.committed_step() << ", loss " << Fixed(j.loss(), 4) << ", "
            << Fixed(j.tokens_per_second(), 0) << " tok/s, " << Fixed(j.step_seconds(), 3)
            << " s/step";
  if (j.predicted_step_seconds() > 0) {
    std::cout << " (the planner predicted " << Fixed(j.predicted_step_seconds(), 3) << ")";
  }
  std::cout << ", coordinator " << j.coordinator() << "\n";
  if (j.data_sources_size() > 1) {
    uint64_t total = 0;
    double weights = 0;
    for (const auto& d : j.data_sources()) {
      total += d.tokens();
      weights += d.weight();
    }
    std::cout << "  data";
    for (const auto& d : j.data_sources()) {
      std::cout << "  " << d.name() << ": " << d.tokens() << " tokens, "
                << Fixed(total ? 100.0 * double(d.tokens()) / double(total) : 0, 1) << "% (asked "
                << Fixed(weights > 0 ? 100.0 * d.weight() / weights : 0, 1) << "%)";
    }
    std::cout << "\n";
  }
  if (j.val_losses_size() > 0) {
    const v1::ValLoss& v = *j.val_losses().rbegin();
    std::cout << "  validation loss " << Fixed(v.loss(), 4) << " after step " << v.step() << " ("
              << j.val_losses_size() << " passes)\n";
  }
  if (j.replicas_added() > 0 || j.replicas_removed() > 0 || j.joining_sites_size() > 0 ||
      j.leaving_sites_size() > 0) {
    auto names = [](const auto& list) {
      std::string s;
      for (const auto& x : list) s += (s.empty() ? "" : ", ") + x;
      return s;
    };
    std::cout << "  sites joined as " << j.replicas_added() << " replica(s), left with "
              << j.replicas_removed();
    if (j.joining_sites_size() > 0) std::cout << "; joining now: " << names(j.joining_sites());
    if (j.leaving_sites_size() > 0) std::cout << "; leaving now: " << names(j.leaving_sites());
    std::cout << "\n";
  }
  // Dropped after losing a site (they rejoin); a removed replica is dropped too, for good,
  // and shows in the line above and as "(removed)" stages instead.
  const std::set<uint32_t> removed(j.removed_replicas().begin(), j.removed_replicas().end());
  if (j.replica_drops() > 0 || j.dropped_replicas_size() > static_cast<int>(removed.size())) {
    std::string dropped;
    for (uint32_t r : j.dropped_replicas()) {
      if (!removed.count(r)) dropped += (dropped.empty() ? "" : ", ") + std::to_string(r);
    }
    std::cout << "  replicas dropped now: " << (dropped.empty() ? "none" : dropped) << " (drops "
              << j.replica_drops() << ", rejoins " << j.replica_rejoins() << ")\n";
  }
  // With pipeline replicas a stage is REPLICA.POSITION (replica 1's second stage: 1.1).
  // Replicas may have different stage counts: the position counts within the replica.
  uint32_t replicas = 1;
  for (const auto& s : j.stages()) replicas = std::max(replicas, s.replica() + 1);
  // SYNCS: with replicas, the syncs each stage's group completed in this attempt (a site that
  // joined shows its first one there).
  Table stages(
      {"STAGE", "SITE", "LAYERS", "MEMORY", "COMPUTE/STEP", "WAIT/STEP", "SYNCS", "DEVICES"});
  uint32_t position = 0;
  for (int i = 0; i < j.stages_size(); ++i) {
    const v1::StageInfo& s = j.stages(i);
    position = i > 0 && j.stages(i - 1).replica() == s.replica() ? position + 1 : 0;
    std::string label = replicas > 1 ? std::to_string(s.replica()) + "." + std::to_string(position)
                                     : std::to_string(s.index());
    for (uint32_t r : j.dropped_replicas()) {
      if (r == s.replica()) label += removed.count(r) ? " (removed)" : " (dropped)";
    }
    stages.AddRow({label, s.site(), LayerRange(s.layer_begin(), s.layer_end()),
                   Fixed(s.memory_bytes() / 1048576.0, 1) + " MiB",
                   Fixed(s.compute_seconds(), 3) + " s", Fixed(s.wait_seconds(), 3) + " s",
                   replicas > 1 ? std::to_string(s.syncs()) : "-",
                   s.devices().empty() ? "-" : s.devices()});
  }
  std::cout << stages.str();
  if (j.links_size() > 0) {
    Table links({"LINK", "BANDWIDTH", "ACHIEVED", "CODEC", "RATIO", "TENSORS", "WHY"});
    for (const auto& l : j.links()) {
      const double ratio = l.wire_bytes() ? double(l.raw_bytes()) / l.wire_bytes() : 0;
      links.AddRow(
          {l.from_site() + " -> " + l.to_site(), FormatBitRate(l.bandwidth_bytes_per_second()),
           FormatBitRate(l.achieved_bytes_per_second()), l.codec(),
           ratio > 0 ? Fixed(ratio, 1) + "x" : "-", std::to_string(l.tensors()), l.reason()});
    }
    std::cout << links.str();
  }
  if (j.sync_groups_size() > 0 && j.has_outer()) {
    fleet::OuterOptions outer;
    outer.lr = static_cast<float>(j.outer().lr());
    outer.momentum = static_cast<float>(j.outer().momentum());
    outer.nesterov = j.outer().nesterov();
    std::cout << "  outer step: " << fleet::OuterStepText(outer) << "\n";
  }
  if (j.sync_groups_size() > 0) {
    // Pipeline replicas: what each sync group (the stages that exchange frames: the same
    // position of every replica when they are split alike) exchanged, and the time
    // their syncs took (exposed: the replicas waited; hidden: behind the next inner steps).
    // Gossip: CONSENSUS is how far apart the replicas are before the latest round all of them
    // reported (the root mean square of their distances from their mean), @ that round's step;
    // over compressed links KEYS/SKIPPED counts the key frames sent and the frames skipped
    // because a link's copies differed.
    Table groups({"SYNC GROUP", "SITES", "REDUCE", "CODEC", "RATIO", "SENT", "SYNCS", "EXPOSED",
                  "HIDDEN", "CONSENSUS", "KEYS/SKIPPED"});
    for (const auto& g : j.sync_groups()) {
      std::string sites;
      for (const auto& s : g.sites()) sites += (sites.empty() ? "" : ",") + s;
      const double ratio = g.wire_bytes() ? double(g.raw_bytes()) / g.wire_bytes() : 0;
      groups.AddRow({std::to_string(g.position()), sites, g.reduce(), g.codec(),
                     ratio > 0 ? Fixed(ratio, 1) + "x" : "-",
                     Fixed(g.wire_bytes() / 1048576.0, 1) + " MiB", std::to_string(g.syncs()),
                     Fixed(g.exposed_seconds(), 3) + " s", Fixed(g.hidden_seconds(), 3) + " s",
                     g.consensus_step() > 0 ? Fixed(g.consensus_distance(), 4) + " @" +
                                                  std::to_string(g.consensus_step())
                                            : "-",
                     g.key_frames() + g.frames_skipped() > 0
                         ? std::to_string(g.key_frames()) + "/" + std::to_string(g.frames_skipped())
                         : "-"});
    }
    std::cout << groups.str();
    // A gossip replica's last stage replays its first stage's rounds of the tied embedding: the
    // two copies stay equal, and one that did not was replaced (none expected: a bug to report).
    for (const auto& g : j.sync_groups()) {
      if (g.tied_mends() == 0) continue;
      std::cout << "warning: sync group " << g.position() << ": after " << g.tied_mends()
                << " rounds a replica's last stage found its copy of the tied embedding unlike "
                   "its first stage's and took the first's (see that stage's log)\n";
    }
  }
  if (j.gossip_links_size() > 0) {
    // The measured links this attempt's gossip graphs are drawn from (fast ones more often).
    std::vector<double> links(j.gossip_links().begin(), j.gossip_links().end());
    std::cout << "gossip links (Mbit/s, replica -> replica): "
              << daemon::GossipLinksDebugString(links);
    if (j.gossip_links_epoch() > 0) {
      std::cout << " (epoch " << j.gossip_links_epoch() << ": the rounds from "
                << j.gossip_links_from_round() << " on; the rates moved mid-attempt)";
    }
    std::cout << "\n";
  }
}

grpc::Status Get(ControlClient& c, const std::string& id, v1::JobStatus* j) {
  v1::GetJobRequest req;
  req.set_job_id(id);
  req.set_max_losses(1);
  return c.stub().GetJob(c.Context().get(), req, j);
}

int Follow(ControlClient& c, const std::string& id, const ClientOptions& options) {
  const bool tty = isatty(STDOUT_FILENO);
  std::string last;
  int misses = 0;
  while (true) {
    v1::JobStatus job;
    const grpc::Status s = Get(c, id, &job);
    const v1::JobStatus* j = &job;
    if (s.error_code() == grpc::StatusCode::NOT_FOUND ||
        s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
      return c.Fail(s, "status " + id);
    }
    if (!s.ok()) {
      // The coordinator may be restarting (systemd brings it back): keep trying a while.
      if (++misses > 120) {
        std::cerr << "\nlonghaul: lost the coordinator: " << s.error_message() << "\n";
        return kExitUnreachable;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    misses = 0;
    const std::string line = ProgressLine(*j);
    if (tty) {
      std::cout << "\r\033[K" << line << std::flush;
    } else if (line != last) {
      std::cout << line << "\n" << std::flush;
    }
    last = line;
    if (Finished(j->state())) {
      if (tty) std::cout << "\n";
      PrintDetails(*j);
      return j->state() == v1::JOB_STATE_COMPLETED ? kExitOk : kExitError;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(tty ? 250 : 1000));
  }
}

int Submit(const ClientOptions& options, const std::string& path, bool follow) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "longhaul: cannot read job file " << path << "\n";
    return kExitUsage;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  // Relative paths are relative to the job file's folder, as in train-local and plan; the
  // daemon gets them absolute (model/job_file_paths.h).
  const std::string base = std::filesystem::absolute(path).parent_path().string();
  auto yaml = model::AbsoluteJobPaths(ss.str(), path, base);
  if (!yaml.ok()) {
    std::cerr << "longhaul: " << yaml.status().message() << "\n";
    return kExitUsage;
  }
  auto client = ControlClient::Connect(options);
  if (!client) return kExitUsage;
  v1::SubmitJobRequest req;
  req.set_job_yaml(*yaml);
  req.set_source(path);
  v1::SubmitJobResponse resp;
  grpc::Status s = client->stub().SubmitJob(client->Context().get(), req, &resp);
  if (!s.ok()) return client->Fail(s, "submit " + path);
  std::cout << "submitted job " << resp.job_id() << " (coordinator " << resp.coordinator() << ")\n";
  if (!follow) return kExitOk;
  return Follow(*client, resp.job_id(), options);
}

int Jobs(const ClientOptions& options) {
  auto client = ControlClient::Connect(options);
  if (!client) return kExitUsage;
  v1::ListJobsResponse r;
  grpc::Status s = client->stub().ListJobs(client->Context().get(), {}, &r);
  if (!s.ok()) return client->Fail(s, "jobs");
  if (options.output == "json") {
    PrintJson(r);
    return kExitOk;
  }
  if (r.jobs().empty()) {
    std::cout << "no jobs coordinated here\n";
  } else {
    Table t({"JOB", "NAME", "STATE", "STEP", "LOSS", "TOK/S", "SITES"});
    for (const auto& j : r.jobs()) {
      std::string sites;
      for (const auto& s : j.stages()) sites += (sites.empty() ? "" : ",") + s.site();
      t.AddRow({j.job_id(), j.name(), StateName(j.state()),
                std::to_string(j.step()) + "/" + std::to_string(j.total_steps()),
                j.step() ? Fixed(j.loss(), 4) : "-", Fixed(j.tokens_per_second(), 0), sites});
    }
    std::cout << t.str();
  }
  // Stages of jobs other sites coordinate: `status JOB` is for their coordinators.
  if (r.hosted_stages_size() > 0) {
    Table t({"JOB", "NAME", "STAGE", "LAYERS", "STATE", "STEP", "COORDINATOR"});
    for (const auto& h : r.hosted_stages()) {
      t.AddRow({h.job_id(), h.name(), std::to_string(h.stage()),
                LayerRange(h.layer_begin(), h.layer_end()),
                h.state() + (h.error().empty() ? "" : ": " + h.error()),
                std::to_string(h.step()) + "/" + std::to_string(h.total_steps()), h.coordinator()});
    }
    std::cout << "\nstages this site runs of jobs coordinated elsewhere (longhaul status JOB on "
                 "the coordinator):\n"
              << t.str();
  }
  return kExitOk;
}

int Status(const ClientOptions& options, const std::string& id, bool follow) {
  auto client = ControlClient::Connect(options);
  if (!client) return kExitUsage;
  if (follow) return Follow(*client, id, options);
  v1::GetJobRequest req;
  req.set_job_id(id);
  v1::JobStatus j;
  grpc::Status s = client->stub().GetJob(client->Context().get(), req, &j);
  if (!s.ok()) return client->Fail(s, "status " + id);
  if (options.output == "json") {
    PrintJson(j);
  } else {
    PrintDetails(j);
  }
  return kExitOk;
}

int Cancel(const ClientOptions& options, const std::string& id) {
  auto client = ControlClient::Connect(options);
  if (!client) return kExitUsage;
  v1::CancelJobRequest req;
  req.set_job_id(id);
  v1::CancelJobResponse resp;
  grpc::Status s = client->stub().CancelJob(client->Context().get(), req, &resp);
  if (!s.ok()) return client->Fail(s, "cancel " + id);
  std::cout << "job " << id << ": " << StateName(resp.state()) << "\n";
  return kExitOk;
}

// `longhaul job add-site` / `remove-site`: asks the job's coordinator for the change and
// says what will happen; the change itself shows in `longhaul status` (its events).
int ChangeSites(const ClientOptions& options, const std::string& id,
                const std::vector<std::string>& add, const std::vector<std::string>& remove) {
  auto client = ControlClient::Connect(options);
  if (!client) return kExitUsage;
  v1::ChangeJobSitesRequest req;
  req.set_job_id(id);
  *req.mutable_add() = {add.begin(), add.end()};
  *req.mutable_remove() = {remove.begin(), remove.end()};
  v1::ChangeJobSitesResponse resp;
  grpc::Status s = client->stub().ChangeJobSites(client->Context().get(), req, &resp);
  if (!s.ok()) return client->Fail(s, (add.empty() ? "remove-site " : "add-site ") + id);
  std::cout << "job " << id << ": " << resp.detail() << "\n";
  return kExitOk;
}

// A file name the daemon sent for a Hugging Face export: a plain name, nothing that could
// leave the output directory.
bool SafeExportName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
      return false;
    }
  }
  return true;
}

// Writes the export stream: one file (`out_path`, format llmc) or the files of a Hugging
// Face directory (`out_path` a directory, format hf). Each file goes to NAME.partial first
// and is renamed once all its bytes arrived.
int Export(ClientOptions options, const std::string& id, const std::string& out_path,
           const std::string& format, const std::string& dtype) {
  const bool hf = format == "hf";
  if (!hf && format != "llmc") {
    std::cerr << "longhaul: export: --format must be llmc or hf, not '" << format << "'\n";
    return kExitUsage;
  }
  if (hf) {
    std::error_code ec;
    std::filesystem::create_directories(out_path, ec);
    if (ec) {
      std::cerr << "longhaul: cannot create directory " << out_path << ": " << ec.message() << "\n";
      return kExitError;
    }
  }
  options.timeout_seconds = std::max(options.timeout_seconds, 600.0);
  auto client = ControlClient::Connect(options);
  if (!client) return kExitUsage;
  v1::ExportJobRequest req;
  req.set_job_id(id);
  req.set_format(format);
  req.set_dtype(dtype);
  auto ctx = client->Context();
  auto reader = client->stub().ExportJob(ctx.get(), req);
  std::string name, path;  // the file being received
  std::ofstream out;
  uint64_t got = 0, total = 0, all = 0;
  std::vector<std::string> written;
  auto finish_file = [&]() -> bool {
    if (path.empty()) return true;
    out.close();
    if (got != total || !out) {
      std::cerr << "longhaul: export " << id << ": " << (name.empty() ? out_path : name)
                << ": received " << got << " of " << total << " bytes\n";
      std::remove((path + ".partial").c_str());
      return false;
    }
    std::rename((path + ".partial").c_str(), path.c_str());
    written.push_back(path);
    all += got;
    path.clear();
    return true;
  };
  v1::ExportChunk chunk;
  bool ok = true;
  while (ok && reader->Read(&chunk)) {
    if (path.empty() || chunk.file() != name) {
      ok = finish_file();
      if (!ok) break;
      name = chunk.file();
      if (hf && !SafeExportName(name)) {
        std::cerr << "longhaul: export " << id << ": the daemon sent a file named '" << name
                  << "', which is not a plain file name; stopping\n";
        ok = false;
        break;
      }
      if (!hf && !name.empty()) {
        std::cerr << "longhaul: export " << id << ": the daemon sent a directory export\n";
        ok = false;
        break;
      }
      path = hf ? out_path + "/" + name : out_path;
      out.open(path + ".partial", std::ios::binary | std::ios::trunc);
      if (!out) {
        std::cerr << "longhaul: cannot write " << path << ".partial\n";
        ok = false;
        break;
      }
      got = 0;
    }
    out.write(chunk.data().data(), chunk.data().size());
    got += chunk.data().size();
    total = chunk.total_bytes();
  }
  if (!ok) ctx->TryCancel();
  grpc::Status s = reader->Finish();
  if (ok && s.ok()) ok = finish_file();
  if (!path.empty()) {
    out.close();
    std::remove((path + ".partial").c_str());
  }
  if (!s.ok() && ok) return client->Fail(s, "export " + id);
  if (!ok) return kExitError;
  if (written.empty()) {
    std::cerr << "longhaul: export " << id << ": the daemon sent nothing\n";
    return kExitError;
  }
  if (hf) {
    std::cout << "wrote " << out_path << " (" << all << " bytes, Hugging Face model directory:";
    for (const std::string& p : written) std::cout << " " << p.substr(out_path.size() + 1);
    std::cout << ")\n";
  } else {
    std::cout << "wrote " << out_path << " (" << all << " bytes, checkpoint)\n";
  }
  return kExitOk;
}

}  // namespace

void AddJobCommands(CLI::App& app, ClientOptions& options, int* exit_code) {
  static std::string job_file, job_id, out_path, format = "llmc", dtype;
  static bool follow = false;
  auto* submit = app.add_subcommand(
      "submit", "Submit a job (YAML) to the daemon, which becomes its coordinator");
  submit->add_option("job", job_file, "Job file, e.g. configs/job.example.yaml")->required();
  submit->add_flag("-f,--follow", follow, "Show live progress until the job ends");
  submit->callback([&options, exit_code] { *exit_code = Submit(options, job_file, follow); });

  auto* jobs = app.add_subcommand("jobs", "List the jobs this daemon coordinates");
  jobs->callback([&options, exit_code] { *exit_code = Jobs(options); });

  auto* status = app.add_subcommand(
      "status", "Show one job: progress, stages, and per link the codec and compression");
  status->add_option("job", job_id, "Job id")->required();
  status->add_flag("-f,--follow", follow, "Show live progress until the job ends");
  status->callback([&options, exit_code] { *exit_code = Status(options, job_id, follow); });

  auto* cancel = app.add_subcommand("cancel", "Cancel a job (its checkpoints are kept)");
  cancel->add_option("job", job_id, "Job id")->required();
  cancel->callback([&options, exit_code] { *exit_code = Cancel(options, job_id); });

  static std::vector<std::string> sites;
  auto* job = app.add_subcommand("job", "Change a running job: sites joining and leaving it");
  job->require_subcommand(1);
  auto* add_site = job->add_subcommand(
      "add-site",
      "Add sites to a running job with pipeline replicas (sync.mode local) as one new replica: "
      "with placement: planned the planner places it over them (each site profiled: the order, "
      "the split of the layers, a site that would slow it left out, as the answer says); "
      "otherwise the model's layers split evenly among them in the order given. Every stage "
      "starts again from a committed step, the new replica from a live replica's state, and "
      "it syncs from its first outer step on. That step is the next one committed, so that "
      "the live replicas redo few steps, unless starting at once redoes no more replica-steps "
      "than the new replica would wait for it (the job's start, just past a checkpoint, no "
      "checkpoint left before the end), as the answer says. The sites must be peers "
      "of the coordinator and of "
      "the job's sites. (A site may also ask by itself: its config's volunteer: names the job "
      "and its coordinator, and the job file lists it under volunteers:) Naming all the sites "
      "of a replica removed earlier brings that replica back as it was: it rejoins from a live "
      "replica's state at the next committed step its sites answer at.");
  add_site->add_option("job", job_id, "Job id")->required();
  add_site
      ->add_option("sites", sites,
                   "Sites of the new replica, in pipeline order (or every site of a removed "
                   "replica, in any order)")
      ->required();
  add_site->callback(
      [&options, exit_code] { *exit_code = ChangeSites(options, job_id, sites, {}); });
  auto* remove_site = job->add_subcommand(
      "remove-site",
      "Take a site's replica out of a running job (for good, unless add-site names all its "
      "sites again; its site does not volunteer back); the other replicas go on without "
      "stopping (gossip jobs at once, gather and ring jobs from the next step; with streaming "
      "syncs, sync.overlap, or while the job recovers they start again from the committed "
      "step without it)");
  remove_site->add_option("job", job_id, "Job id")->required();
  remove_site->add_option("sites", sites, "Sites whose replicas leave")->required();
  remove_site->callback(
      [&options, exit_code] { *exit_code = ChangeSites(options, job_id, {}, sites); });

  auto* exp = app.add_subcommand(
      "export",
      "Export a job's model at its last committed step: one checkpoint file (llm.c's GPT-2 "
      "format, or our llama one), or with --format hf a Hugging Face directory that "
      "transformers loads (config.json, safetensors shards, index)");
  exp->add_option("job", job_id, "Job id")->required();
  exp->add_option("out", out_path, "Output file (model.bin) or, with --format hf, a directory")
      ->required();
  exp->add_option("--format", format, "llmc (default) or hf")->check(CLI::IsMember({"llmc", "hf"}));
  exp->add_option("--dtype", dtype, "hf: f32 (default) or bf16")
      ->check(CLI::IsMember({"f32", "bf16"}));
  exp->callback(
      [&options, exit_code] { *exit_code = Export(options, job_id, out_path, format, dtype); });
}

}  // namespace longhaul::cli
