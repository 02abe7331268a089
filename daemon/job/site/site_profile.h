// Placing a job from measurements. Each site answers ProfileSite for the job's shapes: a short
// calibration run of one layer on the backend it would train on (scheduler/calibration.h),
// its memory limit, and its link monitor's view of its outbound links. The coordinator
// gathers every candidate site's answer into scheduler::Profiles and runs the planner, which
// chooses the order of the sites, the split of the layers and which sites to leave out.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "daemon/job/spec/job_spec.h"
#include "daemon/link_monitor.h"
#include "daemon/transport/link.h"
#include "proto/longhaul.pb.h"
#include "scheduler/planner.h"

namespace longhaul::daemon {

// What the planner assumes of a link no probe or transfer has measured yet: 1 Gbit/s.
inline constexpr double kUnmeasuredLinkBandwidth = 125e6;

// One site's side: calibrations cached by (backend, model shape, microbatch, sequence length).
class SiteProfiler {
 public:
  SiteProfiler(std::string site, std::vector<std::string> devices, int64_t memory_limit_bytes)
      : site_(std::move(site)),
        devices_(std::move(devices)),
        memory_limit_bytes_(memory_limit_bytes) {}

  // `throttle_seconds`: the debug throttle (extra seconds per layer and microbatch), counted
  // as compute like the stage runner counts it. `monitor` gives the outbound links. With
  // `busy` (a stage trains here now) a shape not calibrated yet is refused (Unavailable): a
  // calibration would slow the running job down, read slow itself, and could exhaust the
  // memory of the GPU the stage uses.
  StatusOr<v1::SiteProfileReply> Profile(const JobSpec& spec, double throttle_seconds,
                                         const LinkMonitor& monitor,
                                         const std::vector<std::string>& peers, bool busy)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Measured {
    double seconds_per_layer = 0, optimizer_params_per_second = 0;
  };
  const std::string site_;
  const std::vector<std::string> devices_;
  const int64_t memory_limit_bytes_;
  Mutex mu_;  // one calibration at a time; guards the cache
  // Per (backend, the layer's shape: family, C, NH, NKV, HD, I, context; rows, T, threads).
  std::map<std::tuple<std::string, int, int, int, int, int, int, int, int, int, int>, Measured>
      cache_ ABSL_GUARDED_BY(mu_);
};

// The coordinator's side: profiles of the candidate sites. A link exists between two sites
// when one reports the other among its peers; one not measured yet is assumed at 1 Gbit/s and
// named in `notes`; sites that are not peers get no link (the planner never puts them side by
// side, nor first and last).
StatusOr<scheduler::Profiles> ProfilesFromReplies(const std::vector<v1::SiteProfileReply>& replies,
                                                  std::vector<std::string>* notes);

// A job's placement by the planner.
struct PlannedPlacement {
  std::vector<scheduler::StagePlan> stages;  // replica-major
  std::vector<int> replica_of;               // by stage; empty: one pipeline
  int replicas = 1;
  bool ring = false;  // the planner priced the syncs as rings (sync.reduce ring, or auto's pick)
  std::vector<int> microbatches;  // by replica, when paced (replica_microbatches: paced)
  double predicted_step_seconds = 0;
  std::string summary;  // one line for the job's detail and the log
  // Per profiled site as it answered: its memory limit (0: none) and devices, which a re-plan
  // must respect (its compute and links it measures again).
  std::map<std::string, scheduler::SiteProfile> site_limits;
  // The links between the profiled sites as measured (an unmeasured one assumed at 1 Gbit/s):
  // a gossip job's first graphs are drawn from them (daemon/job/sync/gossip_round.h).
  std::vector<scheduler::LinkProfile> links;
};

// Each site of spec.sites's estimates of its outbound links (ProfileSite, links only: no
// calibration), measured ones only; a site that does not answer, or answers as another, adds
// none. For a gossip job placed by hand, whose first graphs are drawn from them.
std::vector<scheduler::LinkProfile> MeasuredLinks(
    const JobSpec& spec, const std::function<transport::Link*(const std::string&)>& channel);

// Asks every site of spec.sites for its profile (ProfileSite) and plans the job over them,
// coordinated by `coordinator`. A site that cannot be profiled (unreachable, busy, an older
// daemon) is left out and named in the summary. Training data other than `builtin` lives on
// the first listed site, which then stays first with the listed order kept (only the split is
// planned). With replicas (a count or auto) the planner places them too: every replica split
// the same way, or each its own, whichever the cost model prices faster. Fails when no site can be
// profiled or no plan fits.
StatusOr<PlannedPlacement> PlanPlacement(
    const JobSpec& spec, const std::string& coordinator,
    const std::function<transport::Link*(const std::string&)>& channel);

}  // namespace longhaul::daemon
