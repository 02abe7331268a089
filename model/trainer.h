// Trains a job in one process: the baseline every distributed run is compared with. Loads
// the data (built-in corpus, llm.c tokens or text), builds the model as K chained
// fragments (K = 1: whole; any K gives the same losses bit for bit), runs the job's steps
// with microbatch accumulation, evaluates validation data, and writes llm.c checkpoints
// plus training-state files atomically every checkpoint.every steps and at the end, from
// which a later run resumes exactly. Reused by the daemon for single-site jobs.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "kernels/ops.h"
#include "model/chain.h"
#include "model/data_loader.h"
#include "model/job.h"
#include "model/job_windows.h"

namespace longhaul::model {

struct TrainerOptions {
  int fragments = 1;  // chain the model as this many fragments
  // Their tied-embedding exchange (ChainOptions::tied_codec); not with `resume` unless exact.
  std::string tied_codec = "exact";
  std::string backend;         // overrides the job's backend when not empty
  int threads = -1;            // overrides the job's threads when >= 0
  std::string checkpoint_dir;  // overrides the job's checkpoint.dir when not empty
  bool resume = false;         // continue from the latest checkpoint in the directory
};

// What happened in one step; passed to the step callback.
struct StepReport {
  int step = 0;   // 1-based, steps completed
  int steps = 0;  // total in the job
  float loss = 0, lr = 0, grad_norm = 0;
  double step_seconds = 0, tokens_per_second = 0, elapsed_seconds = 0;
  std::optional<float> val_loss;
  std::string checkpoint;  // path of the model checkpoint written after this step, if any
};

class Trainer {
 public:
  // Validates the job against its data (tokens must fit the vocabulary) and allocates
  // everything. Errors name the job file.
  static StatusOr<std::unique_ptr<Trainer>> Create(const Job& job, const TrainerOptions& options);

  const Job& job() const { return job_; }
  MemoryReport memory() const { return chain_->memory(); }
  std::string backend() const { return ops_->name(); }
  const std::string& checkpoint_dir() const { return checkpoint_dir_; }
  int start_step() const { return start_step_; }  // > 0 when resumed
  // Tokens in one epoch of training windows.
  int64_t train_tokens() const { return train_->num_windows() * job_.seq_len; }

  // Runs the remaining steps, calling `on_step` after each.
  Status Run(const std::function<void(const StepReport&)>& on_step);

 private:
  Trainer(Job job, TrainerOptions options) : job_(std::move(job)), options_(std::move(options)) {}
  Status Init();
  Status Resume(int step);
  Status WriteCheckpoint(int step, std::string* path);
  StatusOr<float> Validate();

  Job job_;
  TrainerOptions options_;
  std::string checkpoint_dir_;
  int start_step_ = 0;
  std::unique_ptr<kernels::Ops> ops_;
  std::unique_ptr<FragmentChain> chain_;
  std::unique_ptr<DataLoader> train_, val_;
};

}  // namespace longhaul::model
