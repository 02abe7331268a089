// Edge checks for the job messages a daemon takes from peers and clients: job ids (which
// name directories), stage assignments (plan shape, layer ranges, sites), step reports and
// fragment requests. Everything here runs before anything is allocated or written; the code
// behind the checks trusts what they checked. Errors are INVALID_ARGUMENT naming the field,
// the value and the allowed range.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"
#include "daemon/job/spec/job_spec.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

// Most stages a plan may have, and most grad-norm slices a step report may carry.
inline constexpr int kMaxStages = 1024;
inline constexpr int kMaxGradSums = 1 << 16;

// A job id: 1-128 characters of [A-Za-z0-9._-], starting with a letter or digit. Ids name
// directories under the data_dir, so this is what keeps a peer's id inside it.
Status CheckJobId(std::string_view id);

// A site name as configs allow it (daemon/config.h): [a-z0-9-], 1-63, not starting with '-'.
Status CheckSiteNameField(std::string_view name, std::string_view field);

// A plan (assignment.stages or migrate_from) for `spec`'s model: 1..kMaxStages stages, valid
// site names, layer ranges non-empty, contiguous, from 0 to the model's layer count.
Status CheckPlan(const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
                 const JobSpec& spec, std::string_view field);

// A whole assignment for site `self`: the id, the plan, the stage index (its site must be
// `self`), a valid coordinator name, resume_step within the job's steps, and migrate_from
// (if set) a valid plan too.
Status CheckAssignment(const v1::StageAssignment& a, const JobSpec& spec, std::string_view self);
// The assignment's dropped and rejoining replicas (replica_membership.h): only in sync mode
// local (sites join and leave those jobs) or with sync.on_site_loss: drop; ascending indices
// of the job's replicas, disjoint, a live rejoin source, some replica live, and the assigned
// stage's replica not dropped.
Status CheckReplicaMembership(const v1::StageAssignment& a, const JobSpec& spec,
                              const std::string& job);

// A step report against the coordinator's job: the stage index within the plan, the step and
// the checkpoint step within the job's steps (a stage cannot have checkpointed a step it has
// not run), grad sums bounded in count and not negative.
Status CheckStepReport(const v1::StepReport& r, int num_stages, uint64_t total_steps);

// A fragment request: begin < end <= num_layers (or both 0: the current assignment), a step
// within the job.
Status CheckFragmentRequest(const v1::FetchFragmentRequest& r, int num_layers,
                            uint64_t total_steps);

// PermissionDenied: "site 'CALLER' may not WHAT of job JOB".
Status RoleDenied(const std::string& caller, const std::string& job, const std::string& what);

// Whether `site` runs a stage in the assignment's plan or in the plan it migrates from.
bool InPlan(const v1::StageAssignment& a, const std::string& site);

// The job's outer step as its coordinator keeps and sends it (JobStatus.outer,
// StageAssignment.outer).
v1::OuterStep OuterStepProto(const fleet::OuterOptions& outer);
// `sync.outer` from `outer` (a record's or a peer's: in a job file's ranges, then with the rest
// of `sync`, ValidateSyncOptions); on error `sync` is unchanged.
Status ApplyOuterStep(const v1::OuterStep& outer, fleet::SyncOptions& sync);

}  // namespace longhaul::daemon
