// StageRunner's set-up (Create, Init): the grid and shapes of its stage, the fragment on the
// site's backends, the exchange with its neighbours, the data loaders, the state it starts
// from (a checkpoint, a layer move or a rejoin fetched later by Run, init_from, or the seed),
// and the replica sync.
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/layer_range.h"
#include "daemon/job/site/site_backend.h"
#include "daemon/job/spec/input_errors.h"
#include "daemon/job/stage/stage_runner.h"
#include "daemon/job/stage/stage_sharding.h"
#include "daemon/job/state/stage_checkpoint.h"
#include "daemon/job/sync/replica_membership.h"
#include "model/init_from.h"
#include "model/job_windows.h"
#include "model/layout.h"
#include "model/trainer.h"
#include "scheduler/in_flight.h"
#include "scheduler/pipeline_order.h"

namespace longhaul::daemon {

StatusOr<std::unique_ptr<StageRunner>> StageRunner::Create(StageRunnerContext context,
                                                           int64_t memory_limit_bytes) {
  if (context.env.files == nullptr || context.env.device_codecs == nullptr) {
    return absl::InvalidArgumentError("stage of job " + context.assignment.job_id() +
                                      ": no runtime env (file env or device codec source)");
  }
  std::unique_ptr<StageRunner> r(new StageRunner(std::move(context)));
  RETURN_IF_ERROR(r->Init(memory_limit_bytes));
  return r;
}

StageRunner::~StageRunner() { Stop(); }

Status StageRunner::Init(int64_t memory_limit_bytes) {
  const auto& a = ctx_.assignment;
  const model::Job& job = ctx_.spec.job;
  grid_ = StageGrid::OfPlan(ctx_.spec.replicas, a.stages());
  grid_.tied_head = model::TiedHead(job.model);
  stage_ = static_cast<int>(a.stage());
  num_stages_ = grid_.stages(grid_.replica(stage_));
  pos_ = grid_.position(stage_);
  B_ = job.microbatch_size;
  T_ = job.seq_len;
  C_ = job.model.channels;
  microbatches_ = AttemptMicrobatches(ctx_.spec, grid_.replicas, a.stages(), a.dropped_replicas());
  M_ = microbatches_[static_cast<size_t>(grid_.replica(stage_))];
  const auto& me = a.stages(stage_);
  model::FragmentOptions fo;
  fo.begin = static_cast<int>(me.layer_begin());
  fo.end = static_cast<int>(me.layer_end());
  in_width_ = model::StreamWidth(job.model, fo.begin);
  out_width_ = model::StreamWidth(job.model, fo.end);
  window_ = model::Subspace(job.model);
  fo.batch_size = B_;
  fo.seq_len = T_;
  std::vector<std::string> backends = ctx_.backends;
  if (backends.empty()) backends = {job.backend};
  // Every replica holds its own parameters, gradients, optimizer state and its rows'
  // activations: CPU replicas share the machine's memory, so theirs add up; each GPU replica
  // has a device of its own, so the largest one counts.
  const bool gpu = OnGpu(backends[0]);
  const int R = static_cast<int>(backends.size());
  auto memory_with = [&](int slots) {
    model::FragmentOptions o = fo;
    o.slots = slots;
    int64_t total = 0;
    for (const model::MemoryReport& r :
         model::ReplicatedFragment::EstimateMemory(job.model, o, R)) {
      total = gpu ? std::max(total, r.total()) : total + r.total();
    }
    return total;
  };
  // CPU replicas share the machine's memory: the stage's layers are sharded between them
  // (model/shard_mode.h), zero1 unless the job says otherwise or the site's memory asks for
  // more. GPU replicas (the NCCL reducer's collectives) take the job's sharding for every
  // layer; with auto they stay replicated (the choice by memory counts the CPU devices' shared
  // memory, ChooseStageSharding).
  // Activation slots: one per microbatch in flight, warm-ups + 1 (scheduler/in_flight.h).
  warmup_ = scheduler::StandardWarmup(pos_, num_stages_, M_);
  if (ctx_.spec.extra_in_flight > 0) {
    warmup_ = scheduler::ExtraWarmups(num_stages_, M_, ctx_.spec.extra_in_flight)[pos_];
  }
  std::string sharding_why;
  if (R > 1 && (!gpu || ctx_.spec.sharding.has_value())) {
    fo.slots = std::min(M_, warmup_ + 1);
    ASSIGN_OR_RETURN(StageSharding sharding, ChooseStageSharding(ctx_.spec.sharding, job.model, fo,
                                                                 R, M_, memory_limit_bytes));
    fo.layer_modes = std::move(sharding.layer_modes);
    sharding_why = std::move(sharding.why);
  }
  // Auto in flight: extra slots as memory allows, with the layers held as chosen above.
  max_warmup_ = warmup_;
  if (ctx_.spec.extra_in_flight == JobSpec::kAutoInFlight && pos_ + 1 < num_stages_) {
    // Up to one slot per microbatch, the coordinator choosing each step how many it uses;
    // the extra slots may take as much again as the plain schedule's stage, or 1 GiB if that
    // is more, within what the site leaves (in_flight_memory_bytes; 0 on GPUs without a
    // memory_limit_mb, whose device memory the site does not know).
    const int64_t plain = memory_with(std::min(M_, warmup_ + 1));
    const int64_t budget =
        std::min(ctx_.in_flight_memory_bytes, plain + std::max<int64_t>(plain, int64_t{1} << 30));
    // Memory grows with the slots: the most warm-ups within the budget (warmup_ if none
    // fits), by bisection over [warmup_, M].
    int lo = warmup_, hi = M_;
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (memory_with(std::min(M_, mid + 1)) <= budget) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    max_warmup_ = lo;
  }
  fo.slots = std::min(M_, max_warmup_ + 1);
  memory_bytes_ = memory_with(fo.slots);
  if (memory_limit_bytes > 0 && memory_bytes_ > memory_limit_bytes) {
    return absl::ResourceExhaustedError(
        "job too large for site '" + ctx_.site + "': stage " + std::to_string(stage_) +
        " (layers " + LayerRange(fo.begin, fo.end) + ") needs " +
        std::to_string(memory_bytes_ >> 20) + " MiB, the site allows " +
        std::to_string(memory_limit_bytes >> 20) + " MiB" +
        (fo.layer_modes.empty()
             ? (gpu && R > 1 ? " (" + std::to_string(R) +
                                   " GPUs, each holding the whole stage: sharding auto keeps GPU "
                                   "replicas replicated; sharding: zero1, zero2 or zero3 splits "
                                   "the stage's state across them)"
                             : std::string())
             : " (" + std::to_string(R) + " devices, layers " +
                   model::ModesSummary(fo.layer_modes) + ": " + sharding_why + ")"));
  }
  // One replica of the fragment per backend (a site's GPUs split each microbatch).
  const int replica_threads = ReplicaThreads(job.threads, static_cast<int>(backends.size()));
  std::vector<kernels::Ops*> replicas;
  for (const auto& b : backends) {
    ASSIGN_OR_RETURN(auto ops, kernels::MakeOps(b, replica_threads));
    replicas.push_back(ops.get());
    ops_.push_back(std::move(ops));
  }
  ASSIGN_OR_RETURN(fragment_, model::ReplicatedFragment::Create(job.model, fo, replicas));
  for (const auto& o : ops_) devices_ += (devices_.empty() ? "" : ", ") + o->name();
  if (ops_.size() > 1) {
    devices_ +=
        " (data parallel, " + fragment_->reducer_name() + " all-reduce" +
        (fragment_->sharded() ? ", layers " + model::ModesSummary(fragment_->layer_modes()) + ": " +
                                    sharding_why + ")"
                              : ")");
  }
  if (ctx_.log) {
    ctx_.log->info("job {}: stage {} runs layers {} on {}", ctx_.assignment.job_id(), stage_,
                   LayerRange(fo.begin, fo.end), devices_);
  }
  tokens_.resize(static_cast<size_t>(B_) * T_);
  targets_.resize(tokens_.size());
  slot_targets_.assign(fo.slots, std::vector<int32_t>(tokens_.size()));
  if (window_) slot_tokens_.assign(fo.slots, std::vector<int32_t>(tokens_.size()));

  RETURN_IF_ERROR(InitExchange(replicas[0]));

  if (fragment_->is_first()) {
    auto data = model::JobTrainWindows(job, T_);
    if (!data.ok()) return InputDataError(data.status());
    model::DataLoaderOptions lo;
    lo.batch_size = B_;
    lo.seq_len = T_;
    lo.seed = job.seed;
    // Replica r reads shard r: blocks of one step's windows (data_loader.h).
    SetReplicaShard(ctx_.spec, microbatches_, grid_.replica(stage_), &lo);
    ASSIGN_OR_RETURN(loader_, model::DataLoader::Create(std::move(data).value(), lo));
  }

  RETURN_IF_ERROR(InitValidation());
  start_step_ = a.resume_step();
  const ReplicaList rejoining(a.rejoining_replicas().begin(), a.rejoining_replicas().end());
  if (start_step_ > 0 &&
      (a.migrate_from_size() > 0 || Contains(rejoining, grid_.replica(stage_)))) {
    // The layers come from other sites: fetched on the stage's thread (Run), so no lock of
    // the JobHost is held across those calls.
    migrate_ = a.migrate_from_size() > 0;
    rejoin_ = !migrate_;
  } else if (start_step_ > 0) {
    ASSIGN_OR_RETURN(StageState s, ReadStageState(*ctx_.env.files,
                                                  StageCheckpointPath(ctx_.job_dir, start_step_,
                                                                      fo.begin, fo.end),
                                                  fo.begin, fo.end));
    if (static_cast<int64_t>(s.params.size()) != fragment_->layout().total()) {
      return absl::DataLossError("stage checkpoint size does not match the fragment");
    }
    fragment_->SetParameters(s.params.data());
    fragment_->SetOptimizerState(s.m.data(), s.v.data());
    // Sync mode step cuts the data for other microbatches after a drop or a rejoin.
    if (loader_) RETURN_IF_ERROR(RestoreLoaderAt(start_step_, s.loader_state, "stage checkpoint"));
  } else if (!job.init_from.empty()) {
    // Only this stage's layers (from a Hugging Face directory, only their tensors).
    std::vector<float> params(fragment_->layout().total());
    RETURN_IF_ERROR(model::ReadInitFragment(job.init_from, fragment_->layout(), params.data()));
    fragment_->SetParameters(params.data());
  } else {
    fragment_->InitParameters(job.seed);
  }
  RETURN_IF_ERROR(InitSync(start_step_));
  {
    MutexLock lock(mu_);
    status_.step = start_step_;
    status_.checkpoint_step = start_step_;
  }
  last_committed_ = start_step_;
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
