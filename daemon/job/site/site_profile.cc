// SiteProfiler, ProfilesFromReplies and PlanPlacement (one pipeline or replicas); see
// site_profile.h.
#include "daemon/job/site/site_profile.h"

#include <chrono>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "daemon/job/site/site_backend.h"
#include "kernels/ops.h"
#include "model/replicated_fragment.h"
#include "scheduler/calibration.h"
#include "scheduler/replica_planner.h"
#include "scheduler/shard_plan.h"

namespace longhaul::daemon {

StatusOr<v1::SiteProfileReply> SiteProfiler::Profile(const JobSpec& spec, double throttle_seconds,
                                                     const LinkMonitor& monitor,
                                                     const std::vector<std::string>& peers,
                                                     bool busy) {
  const model::Job& job = spec.job;
  // Data-parallel replicas each run a share of the microbatch's rows: calibrate one replica on
  // its share and count the site as that many times faster (the all-reduce is not priced).
  const std::vector<std::string> backends = SiteBackends(devices_, job.backend);
  const std::string& backend = backends[0];
  const int R = static_cast<int>(backends.size());
  const std::vector<int> shares = model::ReplicatedFragment::ReplicaRows(job.microbatch_size, R);
  const int rows = std::max(1, shares.back());
  v1::SiteProfileReply r;
  r.set_site(site_);
  r.set_backend(backend + (R > 1 ? absl::StrCat(" x", R) : ""));
  // Everything the timed layer's shape depends on: a llama's layer of the same C and NH as a
  // GPT-2's is not the same layer.
  const model::ModelConfig& c = job.model;
  const auto key = std::make_tuple(backend, static_cast<int>(c.family), c.channels, c.num_heads,
                                   c.num_kv_heads, c.head_dim, c.intermediate_size, c.max_seq_len,
                                   rows, job.seq_len, job.threads);
  Measured m;
  {
    MutexLock lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      m = it->second;
    } else if (busy) {
      return absl::UnavailableError("site '" + site_ +
                                    "' is training a stage now and has not calibrated this "
                                    "job's shape (calibrating would disturb that stage)");
    } else {
      const auto start = std::chrono::steady_clock::now();
      ASSIGN_OR_RETURN(auto ops, kernels::MakeOps(backend, ReplicaThreads(job.threads, R)));
      scheduler::CalibrationOptions o;
      o.batch_size = rows;
      o.seq_len = job.seq_len;
      auto c = scheduler::CalibrateLayer(ops.get(), job.model, o);
      if (!c.ok()) return Annotate(c.status(), "site '" + site_ + "': calibration");
      m.seconds_per_layer = c->seconds_per_layer();
      m.optimizer_params_per_second = c->optimizer_params_per_second;
      cache_[key] = m;
      r.set_calibration_seconds(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  // Seconds per layer for the whole microbatch. GPU replicas run their rows side by side, the
  // largest share setting the pace; CPU replicas take turns on the machine's cores.
  const bool side_by_side = OnGpu(backend);
  const int largest = shares.front();
  const double seconds = m.seconds_per_layer * (side_by_side ? double(largest) / rows
                                                             : double(job.microbatch_size) / rows) +
                         std::max(0.0, throttle_seconds);
  r.set_seconds_per_layer(seconds);
  r.set_flops(
      scheduler::FlopsFromLayerSeconds(job.model, job.microbatch_size, job.seq_len, seconds));
  r.set_optimizer_params_per_second(side_by_side ? m.optimizer_params_per_second
                                                 : m.optimizer_params_per_second / R);
  r.set_memory_limit_bytes(static_cast<uint64_t>(std::max<int64_t>(0, memory_limit_bytes_)));
  if (R > 1 && !side_by_side) {
    // CPU devices hold a stage's layers sharded (daemon/job/stage/stage_sharding.h): the
    // planner may give this site a stage that fits only so.
    const scheduler::SiteDevices d =
        scheduler::NominalCpuDevices(R, std::max<int64_t>(0, memory_limit_bytes_) / R);
    r.set_devices(static_cast<uint32_t>(R));
    r.set_device_memory_bytes(static_cast<uint64_t>(d.memory_bytes));
    r.set_device_link_bytes_per_second(d.collective_bytes_per_second);
    r.set_device_link_latency_seconds(d.collective_latency_seconds);
  }
  for (const auto& peer : peers) *r.add_links() = monitor.Outbound(peer);
  return r;
}

StatusOr<scheduler::Profiles> ProfilesFromReplies(const std::vector<v1::SiteProfileReply>& replies,
                                                  std::vector<std::string>* notes) {
  scheduler::Profiles p;
  for (const auto& r : replies) {
    scheduler::SiteProfile site{r.site(), r.flops(), static_cast<int64_t>(r.memory_limit_bytes()),
                                r.optimizer_params_per_second()};
    // Device figures a profile would refuse (no or a bad device link) count as one device: a
    // peer's odd claim costs it its sharded capacity, not the job its placement.
    const double link = r.device_link_bytes_per_second();
    if (r.devices() > 1 && link > 0 && std::isfinite(link) &&
        r.device_link_latency_seconds() >= 0 && std::isfinite(r.device_link_latency_seconds())) {
      site.devices = static_cast<int>(std::min<uint32_t>(r.devices(), scheduler::kMaxSiteDevices));
      site.device_memory_bytes =
          static_cast<int64_t>(std::min<uint64_t>(r.device_memory_bytes(), uint64_t{1} << 62));
      site.device_link_bytes_per_second = r.device_link_bytes_per_second();
      site.device_link_latency_seconds = r.device_link_latency_seconds();
    }
    p.sites.push_back(site);
  }
  for (const auto& from : replies) {
    for (const auto& to : replies) {
      if (from.site() == to.site()) continue;
      scheduler::LinkProfile l{from.site(), to.site(), 0, 0};
      bool peers = false;
      for (const auto& e : from.links()) {
        if (e.to_site() != to.site()) continue;
        peers = true;
        l.bandwidth_bytes_per_second = e.bandwidth_bytes_per_second();
        l.rtt_seconds = std::max(0.0, e.rtt_seconds());
      }
      if (!peers) continue;  // not configured as peers: no direct link
      if (l.bandwidth_bytes_per_second <= 0) {
        l.bandwidth_bytes_per_second = kUnmeasuredLinkBandwidth;
        notes->push_back(absl::StrCat("link ", from.site(), " -> ", to.site(),
                                      " not measured yet (assumed 1 Gbit/s)"));
      }
      p.links.push_back(l);
    }
  }
  RETURN_IF_ERROR(scheduler::ValidateProfiles(p));
  return p;
}

namespace {

// Replicas placed by the planner (scheduler/replica_planner.h) as ReplicaPlanRequestFor asks.
StatusOr<PlannedPlacement> PlanReplicatedPlacement(const JobSpec& spec,
                                                   const scheduler::Planner& planner,
                                                   const scheduler::PlacementRequest& request,
                                                   const scheduler::Profiles& profiles,
                                                   const std::vector<std::string>& notes) {
  ASSIGN_OR_RETURN(const scheduler::ReplicaPlanRequest r, ReplicaPlanRequestFor(spec, request));
  auto fleet = PlanJobReplicas(spec, planner, request);
  if (!fleet.ok()) return Annotate(fleet.status(), "placing the job's replicas");
  PlannedPlacement p;
  p.replicas = static_cast<int>(fleet->replicas.size());
  p.ring = fleet->ring;
  p.microbatches = fleet->microbatches;
  std::set<std::string> used;
  std::vector<std::string> parts;
  std::vector<size_t> stage_counts;
  for (const scheduler::PlanResult& replica : fleet->replicas) {
    for (const scheduler::StagePlan& s : replica.stages) used.insert(s.site);
    p.stages.insert(p.stages.end(), replica.stages.begin(), replica.stages.end());
    p.replica_of.insert(p.replica_of.end(), replica.stages.size(),
                        static_cast<int>(stage_counts.size()));
    stage_counts.push_back(replica.stages.size());
    parts.push_back(scheduler::PlanDebugString(replica.stages));
  }
  p.predicted_step_seconds = fleet->step_seconds;
  for (const auto& site : profiles.sites) p.site_limits[site.name] = site;
  p.links = profiles.links;
  p.summary = absl::StrCat(
      "planned ", p.replicas, spec.replicas == 0 ? " replicas (auto)" : " replicas", " of ",
      absl::StrJoin(stage_counts, ", "), " stage(s): ", absl::StrJoin(parts, " | "), ": predicted ",
      absl::StrFormat("%.3f", p.predicted_step_seconds), " s/step, ",
      absl::StrFormat("%.0f", fleet->tokens_per_second), " tokens/s");
  if (!p.microbatches.empty()) {
    absl::StrAppend(&p.summary, "; paced: microbatches per replica ",
                    absl::StrJoin(p.microbatches, ", "));
  }
  if (p.replicas > 1) {
    absl::StrAppend(&p.summary, "; a sync ", absl::StrFormat("%.3f", fleet->sync_seconds),
                    " s every ", r.sync.every, " step(s) in ", spec.sync.codec,
                    fleet->ring ? " around a ring" : " gathered", " (slowest flow ",
                    fleet->sync_bottleneck, ")");
    if (fleet->gather_seconds > 0 && fleet->ring_seconds > 0) {
      absl::StrAppend(&p.summary, "; sync.reduce auto: ", fleet->ring ? "ring" : "gather",
                      absl::StrFormat(" (gather %.3f s, ring %.3f s)", fleet->gather_seconds,
                                      fleet->ring_seconds));
    }
  }
  // What one pipeline would do, for comparison.
  if (auto single = planner.Plan(request); single.ok()) {
    absl::StrAppend(&p.summary,
                    "; one pipeline: ", absl::StrFormat("%.0f", single->estimate.tokens_per_second),
                    " tokens/s");
  }
  std::vector<std::string> unused;
  for (const auto& site : request.sites) {
    if (!used.count(site)) unused.push_back(site);
  }
  if (!unused.empty()) absl::StrAppend(&p.summary, "; left out ", absl::StrJoin(unused, ", "));
  for (const auto& n : notes) absl::StrAppend(&p.summary, "; ", n);
  return p;
}

}  // namespace

std::vector<scheduler::LinkProfile> MeasuredLinks(
    const JobSpec& spec, const std::function<transport::Link*(const std::string&)>& channel) {
  constexpr double kTimeoutSeconds = 10;
  v1::ProfileSiteRequest req;
  req.set_job_yaml(spec.yaml);
  req.set_links_only(true);
  std::vector<scheduler::LinkProfile> links;
  for (const auto& site : spec.sites) {
    transport::Link* ch = channel(site);
    if (ch == nullptr) continue;
    auto r = ch->ProfileSite(req, kTimeoutSeconds);
    if (!r.ok() || r->site() != site) continue;
    for (const v1::LinkEstimate& e : r->links()) {
      const double bw = e.bandwidth_bytes_per_second();
      if (bw > 0 && std::isfinite(bw) && !e.to_site().empty() && e.to_site() != site) {
        links.push_back({site, e.to_site(), bw, std::max(0.0, e.rtt_seconds())});
      }
    }
  }
  return links;
}

StatusOr<PlannedPlacement> PlanPlacement(
    const JobSpec& spec, const std::string& coordinator,
    const std::function<transport::Link*(const std::string&)>& channel) {
  constexpr double kProfileTimeoutSeconds = 120;
  v1::ProfileSiteRequest req;
  req.set_job_yaml(spec.yaml);
  std::vector<v1::SiteProfileReply> replies;
  std::vector<std::string> sites, notes, left_out;
  for (const auto& site : spec.sites) {
    transport::Link* ch = channel(site);
    if (ch == nullptr) return absl::InvalidArgumentError("sites: unknown site '" + site + "'");
    auto r = ch->ProfileSite(req, kProfileTimeoutSeconds);
    if (!r.ok() || r->site() != site) {
      left_out.push_back(site);
      notes.push_back(absl::StrCat(
          "left out ", site, " (no profile: ",
          r.ok() ? "it answered as '" + r->site() + "'" : std::string(r.status().message()), ")"));
      continue;
    }
    replies.push_back(*std::move(r));
    sites.push_back(site);
  }
  const bool data_on_first = spec.job.data.train != model::kBuiltinData;
  if (sites.empty() || (data_on_first && sites.front() != spec.sites.front())) {
    return absl::UnavailableError(absl::StrCat(
        "placing the job: ",
        sites.empty() ? "no site could be profiled"
                      : "the first site, which holds the training data, could not be profiled",
        ": ", absl::StrJoin(notes, "; ")));
  }
  ASSIGN_OR_RETURN(const scheduler::Profiles profiles, ProfilesFromReplies(replies, &notes));
  scheduler::PlacementRequest request = PlacementRequestFor(spec, sites);
  request.workload.coordinator = coordinator;
  scheduler::PlannerOptions options;
  // Token files live on the first listed site: keep it first, and the order with it.
  options.keep_order = data_on_first;
  const scheduler::Planner planner(profiles, options);
  if (spec.replicas != 1) return PlanReplicatedPlacement(spec, planner, request, profiles, notes);
  auto plan = planner.Plan(request);
  if (!plan.ok()) return Annotate(plan.status(), "placing the job");
  PlannedPlacement p;
  p.stages = plan->stages;
  p.predicted_step_seconds = plan->estimate.step_seconds;
  for (const auto& site : profiles.sites) p.site_limits[site.name] = site;
  p.links = profiles.links;
  p.summary = absl::StrCat("planned ", scheduler::PlanDebugString(p.stages), ": predicted ",
                           absl::StrFormat("%.3f", p.predicted_step_seconds), " s/step (",
                           plan->estimate.bottleneck_description, ")");
  if (!plan->unused_sites.empty()) {
    absl::StrAppend(&p.summary, "; left out ", absl::StrJoin(plan->unused_sites, ", "),
                    " (faster without)");
  }
  if (data_on_first) absl::StrAppend(&p.summary, "; listed order kept (data on the first site)");
  if (left_out.empty()) {
    if (auto even = scheduler::MakeEvenSplitPlacer()->Place(request); even.ok()) {
      if (auto model = planner.Model(request); model.ok()) {
        if (auto e = model->Estimate(*even); e.ok()) {
          absl::StrAppend(&p.summary, "; the even split in the listed order: ",
                          absl::StrFormat("%.3f", e->step_seconds), " s/step");
        }
      }
    }
  }
  for (const auto& n : notes) absl::StrAppend(&p.summary, "; ", n);
  return p;
}

}  // namespace longhaul::daemon
