// Asking the coordinators of the jobs a site volunteers for (volunteer.h).
#include "daemon/job/host/volunteer.h"

#include <algorithm>
#include <chrono>

namespace longhaul::daemon {

namespace {

// A planned join profiles the site first, which may take longer: the coordinator goes on with
// it, and the next ask learns how it ended (a change under way meanwhile).
constexpr double kAskTimeoutSeconds = 10;

}  // namespace

VolunteerLoop::VolunteerLoop(VolunteerOptions options,
                             std::function<transport::Link*(const std::string&)> channel,
                             std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), channel_(std::move(channel)), log_(std::move(log)) {
  MutexLock lock(mu_);
  for (const VolunteerConfig& v : options_.jobs) {
    v1::VolunteerStatus& s = status_.emplace_back();
    s.set_job(v.job);
    s.set_coordinator(v.coordinator);
    s.set_state("asking");
  }
}

VolunteerLoop::~VolunteerLoop() { Stop(); }

void VolunteerLoop::Start() {
  if (options_.jobs.empty() || thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void VolunteerLoop::Stop() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<v1::VolunteerStatus> VolunteerLoop::Snapshot() const {
  MutexLock lock(mu_);
  return status_;
}

bool VolunteerLoop::Settled(const Status& answer) {
  switch (answer.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
      return true;
    default:
      return false;
  }
}

void VolunteerLoop::Ask(size_t i) {
  const VolunteerConfig& v = options_.jobs[i];
  v1::JobCommand command;
  command.set_job_id(v.job);
  command.set_kind(v1::JobCommand::KIND_VOLUNTEER);
  transport::Link* link = channel_(v.coordinator);
  StatusOr<v1::JobCommandResponse> r =
      link == nullptr ? StatusOr<v1::JobCommandResponse>(absl::NotFoundError(
                            "site '" + v.coordinator + "' is not a peer of this site"))
                      : link->ControlJob(command, kAskTimeoutSeconds);
  MutexLock lock(mu_);
  v1::VolunteerStatus& s = status_[i];
  s.set_asked(s.asked() + 1);
  const std::string detail = r.ok() ? r->detail() : std::string(r.status().message());
  const bool changed = detail != s.detail();
  s.set_detail(detail);
  if (r.ok() && r->detail().empty()) {
    // A coordinator that does not know KIND_VOLUNTEER answers as to a command for a stage it
    // does not run: an empty answer.
    s.set_state("refused");
    s.set_detail("site '" + v.coordinator +
                 "' did not take the request (a daemon of a version without volunteers?)");
    log_->error("volunteering for job {} at site '{}' refused: {}", v.job, v.coordinator,
                s.detail());
  } else if (r.ok()) {
    s.set_state("joined");
    log_->info("volunteered for job {} at site '{}': {}", v.job, v.coordinator, detail);
  } else if (Settled(r.status())) {
    s.set_state("refused");
    log_->error("volunteering for job {} at site '{}' refused: {}", v.job, v.coordinator, detail);
  } else if (changed) {
    log_->warn("volunteering for job {} at site '{}': {}; asking again", v.job, v.coordinator,
               detail);
  }
}

void VolunteerLoop::Run() {
  double wait = options_.first_retry_seconds;
  while (true) {
    std::vector<size_t> pending;
    {
      MutexLock lock(mu_);
      if (stop_) return;
      for (size_t i = 0; i < status_.size(); ++i) {
        if (status_[i].state() == "asking") pending.push_back(i);
      }
    }
    if (pending.empty()) return;
    for (size_t i : pending) {
      {
        MutexLock lock(mu_);
        if (stop_) return;
      }
      Ask(i);
    }
    MutexLock lock(mu_);
    cv_.wait_for(mu_, std::chrono::duration<double>(wait),
                 [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; });
    wait = std::min(options_.max_retry_seconds, wait * 2);
  }
}

}  // namespace longhaul::daemon
