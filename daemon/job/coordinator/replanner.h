// Live re-planning of a running job, the coordinator's re-planner. It watches each stage's
// compute per step for a lasting slowdown (scheduler::ChangeDetector); once one is seen it
// asks for a re-plan at the next committed step, and then plans on what was measured (each
// site's compute, each link's bandwidth and RTT) under what a running job can do at a step
// boundary: the same sites in the same order, layers moved between them. It proposes; the
// coordinator stops the attempt, applies the move and restarts from the committed step.
//
// Not locked: the coordinator calls Observe, Due, Take, Declined and Applied under its own
// lock, and Plan (which reads only the snapshot and constant members) without it.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "daemon/job/spec/job_spec.h"
#include "proto/longhaul.pb.h"
#include "scheduler/placement.h"
#include "scheduler/profiles.h"
#include "scheduler/replan.h"
#include "scheduler/straggler.h"

namespace longhaul::daemon {

class Replanner {
 public:
  // `enabled`: the job's `replan:` setting; when false Observe never asks for a re-plan.
  Replanner(bool enabled, std::shared_ptr<spdlog::logger> log)
      : enabled_(enabled), log_(std::move(log)) {}

  // The sites' memory limits and devices as profiled at submit (a plan must fit them).
  void set_site_limits(std::map<std::string, scheduler::SiteProfile> limits) {
    limits_ = std::move(limits);
  }

  // One step's reports (stage -> report) of the job `record` describes.
  void Observe(const std::map<uint32_t, v1::StepReport>& reports, const v1::JobStatus& record);

  // Whether a re-plan is due now: asked for, and a checkpoint after the slowdown committed.
  bool Due(uint64_t committed_step, uint64_t total_steps) const {
    return pending_ && committed_step > detected_step_ && committed_step < total_steps;
  }
  // Why the re-plan was asked for ("stage 1 on beta computes 3.0x slower ...").
  const std::string& reason() const { return reason_; }

  // What planning needs, copied from the job; the request is no longer pending.
  struct Snapshot {
    std::string job_id;
    std::vector<scheduler::StagePlan> current;
    std::vector<scheduler::StageMeasurement> recent;
    scheduler::PlacementRequest request;
    std::map<std::pair<std::string, std::string>, v1::LinkUsage> links;
    std::map<std::string, scheduler::SiteProfile> limits;
  };
  Snapshot Take(const v1::JobStatus& record, const JobSpec& spec, const std::string& coordinator);

  // A move worth making: at least 10% faster by the cost model on what was measured.
  struct Move {
    std::vector<scheduler::StagePlan> next;
    double predicted_step_seconds = 0;
    std::string moved;  // "; layers move off stage 1 on beta", or ""
  };
  // Plans on the snapshot; nullopt (and a log line saying why) when planning failed or the
  // move would not help.
  std::optional<Move> Plan(const Snapshot& snapshot) const;

  // After Plan: the plan was kept (the detectors start over) or changed (and what was
  // measured under the old plan is forgotten).
  void Declined();
  void Applied();

 private:
  const bool enabled_;
  const std::shared_ptr<spdlog::logger> log_;
  std::map<std::string, scheduler::SiteProfile> limits_;
  std::vector<scheduler::ChangeDetector> detectors_;
  std::vector<std::vector<double>> recent_compute_;  // per stage, the last few steps
  std::map<std::pair<std::string, std::string>, v1::LinkUsage> links_;  // latest reports
  bool pending_ = false;
  uint64_t detected_step_ = 0;
  int stage_ = 0;  // the stage the pending re-plan names
  std::string reason_;
};

}  // namespace longhaul::daemon
