// The single-process trainer (see trainer.h).
#include "model/trainer.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "model/corpus.h"
#include "model/init_from.h"
#include "model/train_state.h"

namespace longhaul::model {

StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const Job& job, const TrainerOptions& options) {
  std::unique_ptr<Trainer> t(new Trainer(job, options));
  RETURN_IF_ERROR(t->Init());
  return t;
}

Status Trainer::Init() {
  if (options_.resume && options_.tied_codec != "exact") {
    // A model checkpoint does not hold the tied exchange's residual (model/tied_exchange.h).
    return absl::InvalidArgumentError(absl::StrCat(
        job_.source, ": resuming with a lossy tied-embedding codec (", options_.tied_codec,
        ") is not supported: its error-feedback residual is not checkpointed"));
  }
  if (!options_.backend.empty()) job_.backend = options_.backend;
  if (options_.threads >= 0) job_.threads = options_.threads;
  checkpoint_dir_ = options_.checkpoint_dir.empty() ? job_.checkpoint.dir : options_.checkpoint_dir;
  const ModelConfig& c = job_.model;
  ASSIGN_OR_RETURN(auto train, JobTrainWindows(job_, job_.seq_len));
  DataLoaderOptions lo;
  lo.batch_size = job_.microbatch_size;
  lo.seq_len = job_.seq_len;
  lo.seed = job_.seed;
  ASSIGN_OR_RETURN(train_, DataLoader::Create(std::move(train), lo));
  if (!job_.data.val.empty()) {
    ASSIGN_OR_RETURN(auto val, JobValWindows(job_, job_.seq_len));
    lo.shuffle = false;
    ASSIGN_OR_RETURN(val_, DataLoader::Create(std::move(val), lo));
  }
  ASSIGN_OR_RETURN(ops_, kernels::MakeOps(job_.backend, job_.threads));
  ChainOptions co;
  co.fragments = options_.fragments;
  co.tied_codec = options_.tied_codec;
  co.batch_size = job_.microbatch_size;
  co.seq_len = job_.seq_len;
  ASSIGN_OR_RETURN(chain_, FragmentChain::Create(c, co, ops_.get()));
  if (options_.resume) {
    const int step = LatestCheckpointStep(checkpoint_dir_);
    if (step > 0) return Resume(step);
  }
  if (job_.init_from.empty()) {
    chain_->InitParameters(job_.seed);
  } else {
    ASSIGN_OR_RETURN(const auto source, InitSource::Open(job_.init_from));
    RETURN_IF_ERROR(source->LoadInto(*chain_));
  }
  return absl::OkStatus();
}

Status Trainer::Resume(int step) {
  const std::string model_path = ModelCheckpointPath(checkpoint_dir_, step);
  ASSIGN_OR_RETURN(Checkpoint ckpt, ReadCheckpoint(model_path));
  RETURN_IF_ERROR(CheckConfigMatches(job_.model, ckpt.config, model_path));
  ASSIGN_OR_RETURN(TrainState state,
                   ReadTrainState(TrainStatePath(checkpoint_dir_, step), job_.model));
  ASSIGN_OR_RETURN(DataLoaderState loader, DataLoaderState::Parse(state.loader_state));
  RETURN_IF_ERROR(Annotate(train_->Restore(loader), "resuming"));
  chain_->LoadFromModel(ckpt.params.data());
  chain_->LoadOptimizerState(state.m.data(), state.v.data());
  start_step_ = state.step;
  return absl::OkStatus();
}

Status Trainer::WriteCheckpoint(int step, std::string* path) {
  const int64_t n = NumParameters(job_.model);
  std::vector<float> params(n);
  chain_->StoreIntoModel(params.data());
  *path = ModelCheckpointPath(checkpoint_dir_, step);
  RETURN_IF_ERROR(model::WriteCheckpoint(*path, job_.model, params.data()));
  TrainState state;
  state.step = step;
  state.m.resize(n);
  state.v.resize(n);
  chain_->StoreOptimizerState(state.m.data(), state.v.data());
  state.loader_state = train_->state().Serialize();
  return WriteTrainState(TrainStatePath(checkpoint_dir_, step), job_.model, state);
}

StatusOr<float> Trainer::Validate() {
  DataLoaderState start = val_->state();
  start.position = 0;
  RETURN_IF_ERROR(val_->Restore(start));
  const int batches = int(
      std::min<int64_t>(job_.data.val_batches, std::max<int64_t>(val_->batches_per_epoch(), 1)));
  return chain_->MeanLoss(*val_, batches);
}

Status Trainer::Run(const std::function<void(const StepReport&)>& on_step) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const double tokens_per_step = double(job_.batch_size) * job_.seq_len;
  for (int step = start_step_; step < job_.steps; ++step) {
    const auto t0 = Clock::now();
    ASSIGN_OR_RETURN(const StepResult r, chain_->TrainStep(*train_, job_.microbatches(),
                                                           job_.optimizer, step, job_.steps));
    if (!std::isfinite(r.loss)) {
      return absl::InternalError(
          absl::StrCat("loss is ", r.loss, " at step ", step + 1, " (learning rate too high?)"));
    }
    const auto t1 = Clock::now();
    StepReport report;
    report.step = step + 1;
    report.steps = job_.steps;
    report.loss = r.loss;
    report.lr = r.lr;
    report.grad_norm = r.grad_norm;
    report.step_seconds = std::chrono::duration<double>(t1 - t0).count();
    report.tokens_per_second = tokens_per_step / std::max(report.step_seconds, 1e-9);
    const bool last = report.step == job_.steps;
    if (val_ != nullptr &&
        (last || (job_.data.val_every > 0 && report.step % job_.data.val_every == 0))) {
      ASSIGN_OR_RETURN(report.val_loss, Validate());
    }
    if (last || (job_.checkpoint.every > 0 && report.step % job_.checkpoint.every == 0)) {
      RETURN_IF_ERROR(WriteCheckpoint(report.step, &report.checkpoint));
    }
    report.elapsed_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (on_step) on_step(report);
  }
  return absl::OkStatus();
}

}  // namespace longhaul::model
