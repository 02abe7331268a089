// JobHost: a daemon's job side. It keeps the jobs this daemon coordinates (Coordinator) and
// the stage this site runs for each job (StageRunner with its Inbox and senders), answers
// the job calls of the Control and Peer APIs, and, after a restart, picks up the jobs it
// coordinated from the data directory. Stages are never restarted on their own: after a
// restart a site waits for its coordinator to roll the job back and assign it again.
#pragma once

#include <spdlog/logger.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "common/file_env.h"
#include "common/mutex.h"
#include "daemon/config.h"
#include "daemon/job/checks/stage_admission.h"
#include "daemon/job/coordinator/coordinator.h"
#include "daemon/job/exchange/inbox.h"
#include "daemon/job/site/runtime_env.h"
#include "daemon/job/site/site_profile.h"
#include "daemon/job/spec/stage_grid.h"
#include "daemon/job/stage/stage_runner.h"
#include "daemon/job/sync/sync_routes.h"
#include "daemon/link_monitor.h"
#include "daemon/transport/link.h"
#include "fleet/sync_options.h"
#include "fleet/sync_slices.h"

namespace longhaul::daemon {

struct JobHostOptions {
  std::string site;
  std::string data_dir;
  std::vector<std::string> data_roots;       // job files must lie under these (job_paths.h)
  std::map<std::string, std::string> peers;  // name -> peer address
  // Opens the link to a configured peer (gRPC or loopback: daemon.cc); null or a null
  // result: the peer cannot be reached.
  std::function<std::unique_ptr<transport::Link>(const std::string& peer)> dial;
  // How often a stage waiting for a tensor checks its own sends for failures.
  double heartbeat_seconds = 1.0;
  // The jobs this site coordinates: how often a gossip attempt's links are compared with the
  // newest estimates (CoordinatorEnv::gossip_links_check_seconds: two probe intervals).
  double gossip_links_check_seconds = 30;
  int64_t memory_limit_bytes = 0;              // 0 = no limit
  std::vector<std::string> devices = {"cpu"};  // the site's devices (site_backend.h)
  size_t inbox_capacity_bytes = 256 << 20;
  size_t max_jobs = 64;         // stages and coordinated jobs held at once, each
  double throttle_seconds = 0;  // debug knob: slow this site's compute
  // The daemon's (DaemonOptions::env): the disk and clock of everything the host builds
  // (coordinators, stages, senders) and of the stage records and checkpoints it reads, and its
  // stages' device codecs.
  RuntimeEnv env;
};

class JobHost {
 public:
  JobHost(JobHostOptions options, LinkMonitor* monitor, std::shared_ptr<spdlog::logger> log);
  ~JobHost();

  // Resumes the jobs this daemon coordinated before a restart.
  void RestoreJobs() ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  // ---- Control API ----
  StatusOr<v1::SubmitJobResponse> Submit(const v1::SubmitJobRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<v1::JobStatus> GetJob(const std::string& job_id, uint32_t max_losses)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Every job coordinated here; each with the newest `max_losses` losses and step times. Its
  // hosted_stages are HostedStages().
  v1::ListJobsResponse ListJobs(uint32_t max_losses = 1) ABSL_LOCKS_EXCLUDED(mu_);
  // The stages this site runs (or ran) of jobs other sites coordinate, each naming its
  // coordinator: what the status page and `longhaul jobs` show on a stage site.
  std::vector<v1::HostedStage> HostedStages() ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<v1::CancelJobResponse> Cancel(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Sites joining or leaving a job this daemon coordinates (Coordinator::ChangeSites).
  StatusOr<v1::ChangeJobSitesResponse> ChangeSites(const v1::ChangeJobSitesRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  Status Export(const std::string& job_id, const std::string& format, const std::string& dtype,
                const Coordinator::ExportSink& sink) ABSL_LOCKS_EXCLUDED(mu_);

  // ---- Peer API (job_host_peer.cc) ----
  // `caller` is the site that made the call, as the Peer service established it (with TLS:
  // its certificate's name; this site's own name for local calls). Each call is authorized
  // for the job it names (docs/SECURITY.md): only the job's coordinator assigns, stops,
  // cancels and pings its stages; only the job's stage sites (and its coordinator, for
  // export) fetch its fragments and report steps; tensors come only from a neighbouring
  // stage's site. Refusals are PERMISSION_DENIED naming the caller, the job and the role.
  StatusOr<v1::AssignResponse> AssignStage(const v1::StageAssignment& a, const std::string& caller)
      ABSL_LOCKS_EXCLUDED(mu_, assign_mu_);
  StatusOr<v1::StepDecision> ReportStep(const v1::StepReport& r, const std::string& caller)
      ABSL_LOCKS_EXCLUDED(mu_);
  StatusOr<v1::JobCommandResponse> ControlJob(const v1::JobCommand& c, const std::string& caller)
      ABSL_LOCKS_EXCLUDED(mu_, assign_mu_);
  // The tensors of a stage checkpoint: the parameters and (with include_state) the AdamW
  // moments as fp32 compression frames of at most kFragmentSliceFloats values each, in order
  // (element_offset says where each starts in its array), then the data loader's position.
  Status FetchFragment(const v1::FetchFragmentRequest& req, const std::string& caller,
                       const transport::TensorSink& sink);
  static constexpr uint64_t kFragmentSliceFloats = uint64_t{16} << 20;
  // This site's compute, memory and outbound links for a job's shapes (site_profile.h).
  StatusOr<v1::SiteProfileReply> ProfileSite(const v1::ProfileSiteRequest& req,
                                             const std::string& caller) ABSL_LOCKS_EXCLUDED(mu_);
  // Checks a tensor about to arrive from `caller`: the job runs a stage here, the sender is a
  // neighbouring stage's site, the attempt and step are current, and the compression frame's
  // header at the start of `head` (chunk 0's payload) names the shape and raw size the stage
  // expects, with an encoded size that fits. Called before the rest of the payload is
  // buffered, so a wrong peer cannot make this site allocate.
  Status CheckIncoming(const v1::TensorFrame& first, std::span<const uint8_t> head,
                       const std::string& caller) ABSL_LOCKS_EXCLUDED(mu_);
  // A whole tensor received on SendFrames (`first` carries its metadata): checked again as a
  // whole, its frame's checksum included, and filed in the stage's inbox.
  Status Deliver(const v1::TensorFrame& first, std::vector<uint8_t> payload,
                 const std::string& caller) ABSL_LOCKS_EXCLUDED(mu_);

  // What this site's running stages send over each outbound link (one entry per job and
  // link), for the status pages and `longhaul links`.
  std::vector<v1::LinkUsage> LocalLinkUsage() ABSL_LOCKS_EXCLUDED(mu_);

  // KIND_VOLUNTEER from `caller` for `job` (an id, or the name of one running job here):
  // Coordinator::Volunteer; NotFound when no running job here has that id or name (the
  // volunteer asks again: the job may not be submitted yet).
  StatusOr<v1::JobCommandResponse> Volunteer(const std::string& job, const std::string& caller)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The link to `site` (this daemon or a configured peer); null when unknown.
  transport::Link* Channel(const std::string& site) ABSL_LOCKS_EXCLUDED(mu_);
  // Fault injection: extra compute seconds per layer and microbatch of this site's stages,
  // from the next microbatch on (a slower device). Returns the previous setting.
  double set_throttle(double seconds);

 private:
  // Its members but inbox are guarded by its host's mu_ (&JobHost::mu_: the analysis cannot
  // name the host from here, and takes any JobHost's mu_ for it).
  struct Stage {
    v1::StageAssignment assignment ABSL_GUARDED_BY(&JobHost::mu_);
    std::string name ABSL_GUARDED_BY(&JobHost::mu_);  // the job's name
    // Set when the stage is first assigned (under mu_) and never replaced: used without mu_.
    std::unique_ptr<Inbox> inbox;
    // Copy it out, then use it.
    std::shared_ptr<StageRunner> runner ABSL_GUARDED_BY(&JobHost::mu_);
    bool cancelled ABSL_GUARDED_BY(&JobHost::mu_) = false;
    // What the stage of the current attempt accepts from its peers; null until assigned. Copy
    // it out.
    std::shared_ptr<const StageAdmission> admission ABSL_GUARDED_BY(&JobHost::mu_);
    int64_t steps ABSL_GUARDED_BY(&JobHost::mu_) = 0;  // the job's
    // The attempt whose runner a stop or cancel took away (a ping then says that attempt,
    // not running: a gossip peer knows the stage is gone, not yet to start); 0: none.
    uint32_t stopped_attempt ABSL_GUARDED_BY(&JobHost::mu_) = 0;
  };
  std::string JobDir(const std::string& job_id) const;
  // The coordinator of `job_id` here, or null; the caller's copy keeps it alive through a call
  // whatever Shutdown does meanwhile.
  std::shared_ptr<Coordinator> FindCoordinator(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The stage of `job_id` here, or null.
  std::shared_ptr<Stage> FindStage(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // The coordinator `job_id`'s stage here (or its stage record on disk) names, "" if none; the
  // record's error when it cannot be read (torn or corrupt).
  StatusOr<std::string> KnownCoordinator(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // NotFound for a control call on a job not coordinated here: naming its coordinator where
  // this site knows it (it runs, or ran, a stage of the job), so the operator asks that site.
  Status NotCoordinatedHere(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Parses a job from a peer or client and confines its files to the data roots.
  StatusOr<JobSpec> ParseJob(const std::string& yaml, const std::string& source);
  // Stops and forgets the runner of `stage` (outside mu_; the runner's thread is joined).
  void StopRunner(Stage* stage) ABSL_LOCKS_EXCLUDED(mu_);
  std::unique_ptr<LinkSender> MakeSender(const std::string& peer) ABSL_LOCKS_EXCLUDED(mu_);

  const JobHostOptions options_;
  LinkMonitor* const monitor_;
  std::shared_ptr<spdlog::logger> log_;
  Mutex mu_;  // guards the maps; never held across a call to another site
  std::map<std::string, std::shared_ptr<Coordinator>> coordinators_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Stage>> stages_ ABSL_GUARDED_BY(mu_);
  // Records that failed to load.
  std::map<std::string, v1::JobStatus> unrestorable_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<transport::Link>> channels_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // One assignment (or stop, or cancel) at a time; taken before mu_. Guards no member.
  Mutex assign_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // Set by the constructor, then used without mu_: the throttle is atomic, the profiler has
  // its own lock.
  std::shared_ptr<std::atomic<double>> throttle_ = std::make_shared<std::atomic<double>>(0);
  std::unique_ptr<SiteProfiler> profiler_;  // calibrations, cached by job shape
};

}  // namespace longhaul::daemon
