// Coordinator::Submit and Restore: a job's record made from a submitted spec (checked against
// the sites, placed, persisted, first assignment synchronous), or read back, checked, from
// the data directory after a restart.
#include <filesystem>
#include <thread>

#include "absl/strings/str_join.h"
#include "common/yaml_load.h"
#include "compression/controller.h"
#include "daemon/job/checks/job_checks.h"
#include "daemon/job/coordinator/coordinator.h"
#include "daemon/job/coordinator/job_record.h"
#include "daemon/job/site/site_profile.h"
#include "daemon/job/sync/sync_routes.h"
#include "model/file_io.h"
#include "scheduler/placement.h"

namespace longhaul::daemon {

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Submit(CoordinatorEnv env, JobSpec spec,
                                                           const std::string& job_id) {
  if (env.file_env == nullptr) return absl::InvalidArgumentError("job " + job_id + ": no file env");
  for (const auto& site : spec.sites) {
    if (!env.channel(site)) {
      return absl::InvalidArgumentError(spec.job.source + ": sites: unknown site '" + site +
                                        "' (neither this site nor one of its peers)");
    }
  }
  {
    // Each direction's codec and floor on its ladder (the shared ones where a direction
    // does not override them).
    RETURN_IF_ERROR(Annotate(CheckDirectionCodecs(spec), spec.job.source));
  }
  std::vector<scheduler::StagePlan> plan;
  std::string placement;
  double predicted = 0;
  std::map<std::string, scheduler::SiteProfile> site_limits;
  std::vector<scheduler::LinkProfile> submit_links;  // the planner's measured links
  int replicas = spec.replicas;
  std::vector<int> microbatches;  // by replica: the planner's pacing, else the job's
  std::vector<int> replica_of;    // by stage
  bool ring = spec.sync.reduce == fleet::SyncReduce::kRing;  // auto: the planner's pick
  if (spec.planned) {
    auto planned = PlanPlacement(spec, env.site, env.channel);
    if (!planned.ok()) return Annotate(planned.status(), spec.job.source);
    plan = planned->stages;
    placement = planned->summary;
    predicted = planned->predicted_step_seconds;
    site_limits = planned->site_limits;
    submit_links = planned->links;
    replicas = planned->replicas;
    ring = planned->ring;
    microbatches = planned->microbatches;
    replica_of = planned->replica_of;
    replica_of.resize(plan.size(), replica_of.empty() ? 0 : replica_of.back());
    env.log->info("job {}: {}", job_id, placement);
  } else {
    // A gossip job draws its first graphs from the links as the sites measure them now.
    if (spec.sync.reduce == fleet::SyncReduce::kGossip && spec.replicas > 1) {
      submit_links = MeasuredLinks(spec, env.channel);
    }
    // Replica r on its stages' count of the listed sites, after the replicas before it,
    // its layers split evenly over them.
    for (int r = 0; r < spec.replicas; ++r) {
      const auto first = spec.sites.begin() + spec.first_site(r);
      const std::vector<std::string> sites(first, first + spec.stages(r));
      ASSIGN_OR_RETURN(auto part,
                       scheduler::MakeEvenSplitPlacer()->Place(PlacementRequestFor(spec, sites)));
      plan.insert(plan.end(), part.begin(), part.end());
      replica_of.insert(replica_of.end(), part.size(), r);
    }
  }

  std::unique_ptr<Coordinator> c(new Coordinator(std::move(env), std::move(spec), job_id));
  v1::JobStatus r;  // the record, moved into c->record_ below
  r.set_job_id(job_id);
  r.set_name(c->spec_.job.name);
  r.set_state(v1::JOB_STATE_PENDING);
  r.set_total_steps(c->spec_.job.steps);
  r.set_coordinator(c->env_.site);
  r.set_submitted_unix(c->env_.file_env->WallSeconds());
  r.set_attempt(1);
  r.set_detail(placement);
  r.set_predicted_step_seconds(predicted);
  for (size_t i = 0; i < plan.size(); ++i) {
    v1::StageInfo* s = r.add_stages();
    s->set_index(i);
    s->set_site(plan[i].site);
    s->set_layer_begin(plan[i].layer_begin);
    s->set_layer_end(plan[i].layer_end);
    const int replica = replica_of[i];
    s->set_replica(static_cast<uint32_t>(replica));
    s->set_microbatches(static_cast<uint32_t>(static_cast<size_t>(replica) < microbatches.size()
                                                  ? microbatches[static_cast<size_t>(replica)]
                                                  : c->spec_.microbatches(replica)));
  }
  // What every site will check of its assignment (a planner's plan included: the replica
  // count and the stages within bounds), refused here rather than by each site.
  RETURN_IF_ERROR(CheckPlan(r.stages(), c->spec_, c->spec_.job.source + ": the plan"));
  // Rings only where every holder of a slice agrees on one (sync_routes.h): a ring asked for
  // with replica_stages that do not is refused; a planner's plan that does not gathers.
  const StageGrid grid = StageGrid::OfPlan(c->spec_.replicas, r.stages());
  const bool agree = RingsAgree(grid, c->spec_.job.model);
  if (ring && !agree && !c->spec_.planned && grid.replicas > 1) {
    return absl::InvalidArgumentError(
        c->spec_.job.source +
        ": sync.reduce: ring needs every replica to hold the tied embedding as the others do "
        "(one stage each, or two or more each); these replica_stages mix them: use gather");
  }
  r.set_sync_ring(ring && agree);
  // Local mode's outer step (sites may join a job of one replica too), as resolved now.
  if (c->spec_.sync.mode == fleet::SyncMode::kLocal) {
    *r.mutable_outer() = OuterStepProto(c->spec_.sync.outer);
  }
  RETURN_IF_ERROR(c->env_.file_env->CreateDirectories(c->env_.job_dir));
  RETURN_IF_ERROR(
      model::WriteFileAtomically(*c->env_.file_env, c->env_.job_dir + "/job.yaml", c->spec_.yaml));
  {
    MutexLock lock(c->mu_);  // uncontended: no other thread knows c yet
    c->record_ = std::move(r);
    c->placement_ = placement;
    c->replanner_.set_site_limits(site_limits);
    for (const scheduler::LinkProfile& l : submit_links) {
      c->known_links_[{l.from, l.to}] = l.bandwidth_bytes_per_second;
    }
    c->PersistLocked();
  }
  // The first assignment is synchronous, so that a job no site can run (too large for a
  // site's memory, a backend a site lacks) is refused to the submitter right away.
  if (!c->AssignAll()) {
    MutexLock lock(c->mu_);
    if (c->record_.state() == v1::JOB_STATE_FAILED) {
      return absl::FailedPreconditionError(c->record_.detail());
    }
  }
  c->thread_ = std::thread([raw = c.get()] { raw->Run(); });
  c->env_.log->info("job {} ({}): {} stage(s) on {}, {} steps{}", job_id, c->spec_.job.name,
                    plan.size(), absl::StrJoin(c->spec_.sites, ","), c->spec_.job.steps,
                    replicas > 1 ? ", " + std::to_string(replicas) + " replicas in sync mode " +
                                       fleet::SyncModeName(c->spec_.sync.mode) + " (" +
                                       c->spec_.sync.codec + ")"
                                 : std::string());
  return c;
}

StatusOr<std::unique_ptr<Coordinator>> Coordinator::Restore(CoordinatorEnv env) {
  if (env.file_env == nullptr) return absl::InvalidArgumentError(env.job_dir + ": no file env");
  ASSIGN_OR_RETURN(v1::JobStatus record, ReadJobRecord(*env.file_env, env.job_dir + "/job.pb"));
  if (record.stages_size() < 1 || record.stages_size() > kMaxStages) {
    return absl::DataLossError(env.job_dir + "/job.pb: " + std::to_string(record.stages_size()) +
                               " stages");
  }
  // Read once, through the env; nothing larger than a job file may be (ParseJobSpec's limit).
  ASSIGN_OR_RETURN(
      const std::string yaml,
      env.file_env->ReadFile(env.job_dir + "/job.yaml", static_cast<int64_t>(kMaxYamlBytes)));
  const std::string base = std::filesystem::path(env.job_dir).parent_path().parent_path();
  ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(yaml, env.job_dir + "/job.yaml", base));
  // Sites joined or left the job since it was submitted: the plan has this many replicas.
  spec.replicas = RecordReplicas(record, spec);
  RETURN_IF_ERROR(CheckPlan(record.stages(), spec, env.job_dir + "/job.pb: stages"));
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(env), std::move(spec), record.job_id()));
  {
    MutexLock lock(c->mu_);  // uncontended: no other thread knows c yet
    c->record_ = record;
    c->join_asked_at_ = record.committed_step();  // a join asked before: its wait starts again
    // The outer step the job was submitted with; a record from before it was kept takes this
    // daemon's reading of the job file from now on.
    if (record.has_outer()) {
      RETURN_IF_ERROR(Annotate(ApplyOuterStep(record.outer(), c->spec_.sync),
                               c->env_.job_dir + "/job.pb: outer"));
    } else if (c->spec_.sync.mode == fleet::SyncMode::kLocal) {
      *c->record_.mutable_outer() = OuterStepProto(c->spec_.sync.outer);
      c->PersistLocked();
    }
    if (!TerminalState(record.state())) {
      c->record_.set_state(v1::JOB_STATE_RECOVERING);
      c->record_.set_detail("coordinator restarted; resuming from step " +
                            std::to_string(record.committed_step()));
      c->need_assign_ = true;
      // Gossip replicas step without the coordinator: those still running are adopted.
      c->adopt_ = c->spec_.sync.reduce == fleet::SyncReduce::kGossip &&
                  StageGrid::OfPlan(RecordReplicas(record, c->spec_), record.stages()).replicas > 1;
      c->env_.log->info("job {}: {}", record.job_id(), c->record_.detail());
    }
  }
  c->thread_ = std::thread([raw = c.get()] { raw->Run(); });
  return c;
}

}  // namespace longhaul::daemon
