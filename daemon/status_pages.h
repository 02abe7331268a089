// The status endpoint's pages, rendered from the daemon's views: /metrics in the Prometheus
// text format and /status as JSON. Pure functions, so tests can check them directly.
#pragma once

#include <string>

#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

// `start_time_unix` is the process start time in seconds since the epoch; `jobs` are the
// jobs this daemon coordinates.
std::string RenderMetrics(const v1::NodeStatus& node, const v1::ListLinksResponse& links,
                          const v1::ListJobsResponse& jobs, double start_time_unix);

// `jobs`' hosted_stages become "hosted_stages": the stages this site runs of jobs other sites
// coordinate, each with its coordinator's name.
std::string RenderStatusJson(const v1::NodeStatus& node, const v1::ListLinksResponse& links,
                             const v1::ListJobsResponse& jobs);

// /status/jobs, for the status page: each job's history (losses and step times per step,
// validation losses, the timeline's events, the planner's predicted step time). A job with
// more steps than kMaxHistoryPoints gets every k-th step, the newest included.
inline constexpr int kMaxHistoryPoints = 4000;
std::string RenderJobHistoryJson(const v1::ListJobsResponse& jobs);

// "running", "completed", ... for a job state.
std::string JobStateName(v1::JobState state);

// "up", "down", ... for a link state.
std::string LinkStateName(v1::LinkState state);

}  // namespace longhaul::daemon
