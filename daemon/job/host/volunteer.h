// VolunteerLoop: a site whose config volunteers for running jobs (SiteConfig.volunteer) asks
// each job's coordinator to take it in (JobCommand.KIND_VOLUNTEER over the peer link), on
// its own thread, until the coordinator answers that the site joined or is in the job
// already ("joined"), or refuses for good ("refused": the job does not list the site under
// `volunteers`, has ended, or removed the site's replica). Anything else (the job not
// submitted yet, another change under way, the link down) is asked again, 1 s after the first
// try and twice as long each time after that, up to 30 s. Each job's state shows in the node
// status (VolunteerStatus) and in the log.
#pragma once

#include <spdlog/logger.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "daemon/config.h"
#include "daemon/transport/link.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

struct VolunteerOptions {
  std::vector<VolunteerConfig> jobs;
  double first_retry_seconds = 1.0;
  double max_retry_seconds = 30.0;
};

class VolunteerLoop {
 public:
  // `channel`: the link to a site (null when it is not a peer).
  VolunteerLoop(VolunteerOptions options,
                std::function<transport::Link*(const std::string&)> channel,
                std::shared_ptr<spdlog::logger> log);
  ~VolunteerLoop();
  // Starts the thread (nothing to do without jobs).
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends it; no request is sent after this returns.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<v1::VolunteerStatus> Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);

  // Whether an answer (or an error reaching the coordinator) settles a job for good: OK
  // (joined) and the refusals no retry changes (PermissionDenied, InvalidArgument,
  // FailedPrecondition).
  static bool Settled(const Status& answer);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Asks for job i once and files the answer.
  void Ask(size_t i) ABSL_LOCKS_EXCLUDED(mu_);

  const VolunteerOptions options_;
  const std::function<transport::Link*(const std::string&)> channel_;
  std::shared_ptr<spdlog::logger> log_;
  mutable Mutex mu_;
  std::condition_variable_any cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<v1::VolunteerStatus> status_ ABSL_GUARDED_BY(mu_);  // by job, as configured
  std::thread thread_;
};

}  // namespace longhaul::daemon
