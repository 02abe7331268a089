// StageRunner's validation pass (data.val): after each step val_every divides and after the
// last, the pipeline runs val_batches microbatches of the validation data forward only, as
// microbatches M, M+1, ... of that step over the same links and codecs as training. The first
// stage reads them from the start of the data every time (as `longhaul train-local` does), the
// last stage averages their losses the same way, so with compression off a pipeline's
// validation losses are those of training in one process, bit for bit.
#include <algorithm>

#include "daemon/job/spec/input_errors.h"
#include "daemon/job/stage/stage_runner.h"
#include "model/job_windows.h"
#include "model/trainer.h"

namespace longhaul::daemon {

Status StageRunner::InitValidation() {
  const model::Job& job = ctx_.spec.job;
  val_batches_ = ValBatches(job);
  if (val_batches_ == 0 || !fragment_->is_first()) return absl::OkStatus();
  auto data = model::JobValWindows(job, T_);
  if (!data.ok()) return InputDataError(data.status());
  model::DataLoaderOptions lo;
  lo.batch_size = B_;
  lo.seq_len = T_;
  lo.seed = job.seed;
  lo.shuffle = false;
  ASSIGN_OR_RETURN(val_loader_, model::DataLoader::Create(std::move(data).value(), lo));
  // Every stage runs val_batches microbatches per pass; the data must hold that many distinct
  // ones (one process would evaluate fewer; a pipeline's stages do not see the data).
  if (val_loader_->batches_per_epoch() < val_batches_) {
    return absl::InvalidArgumentError(
        job.source + ": data.val holds " + std::to_string(val_loader_->batches_per_epoch()) +
        " batches of " + std::to_string(B_) + " x " + std::to_string(T_) +
        " tokens, val_batches is " + std::to_string(val_batches_) + ": set val_batches: " +
        std::to_string(std::max<int64_t>(val_loader_->batches_per_epoch(), 1)) + " or fewer");
  }
  return absl::OkStatus();
}

Status StageRunner::Validate(uint64_t step, uint64_t done) {
  if (val_loader_ != nullptr) {
    model::DataLoaderState start = val_loader_->state();
    start.position = 0;
    RETURN_IF_ERROR(val_loader_->Restore(start));
  }
  double sum = 0;
  for (int v = 0; v < val_batches_; ++v) {
    double loss = 0;
    RETURN_IF_ERROR(Forward(step, M_ + v, &loss));
    sum += static_cast<float>(loss);
  }
  RETURN_IF_ERROR(exchange_->FinishPendingSend());
  if (fragment_->is_last()) {
    val_step_ = done;
    val_loss_ = static_cast<float>(sum / std::max(val_batches_, 1));
  }
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
