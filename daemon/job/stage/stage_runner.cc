// StageRunner: the stage thread and the schedule loop (Run, RunStep in the 1F1B order, Forward,
// Backward); set-up (Init) is in stage_runner_init.cc, the tied-embedding exchange in
// stage_runner_sync.cc, checkpoints and layer moves in stage_runner_state.cc. What crosses the
// links is the StageExchange's (stage_exchange.h, set up in stage_runner_links.cc).
#include "daemon/job/stage/stage_runner.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <thread>

#include "compression/frame.h"
#include "daemon/job/spec/input_errors.h"
#include "daemon/job/state/stage_checkpoint.h"
#include "daemon/job/sync/replica_membership.h"
#include "model/layout.h"
#include "model/optimizer.h"
#include "model/targets_frame.h"
#include "model/trainer.h"
#include "scheduler/in_flight.h"
#include "scheduler/pipeline_order.h"

namespace longhaul::daemon {

void StageRunner::Start() {
  started_at_ = Now();
  {
    MutexLock lock(mu_);
    status_.running = true;
  }
  thread_ = std::thread([this] { Run(); });
}

void StageRunner::Stop() {
  stop_ = true;
  for (auto* sender : {ctx_.to_prev.get(), ctx_.to_next.get(), ctx_.to_tied.get()}) {
    if (sender) sender->Close();
  }
  for (auto& [peer, sender] : ctx_.to_sync) {
    if (sender) sender->Close();
  }
  if (thread_.joinable()) thread_.join();
  if (replicas_) replicas_->Cancel();  // a streaming sync's receiver, too
}

StageRunnerStatus StageRunner::status() const {
  StageRunnerStatus s;
  {
    MutexLock lock(mu_);
    s = status_;
  }
  s.outbound = exchange_->Usage(/*tied=*/false);
  return s;
}

void StageRunner::Run() {
  const uint64_t steps = static_cast<uint64_t>(ctx_.spec.job.steps);
  Status s;
  if (migrate_) s = Migrate(ctx_.assignment.migrate_from(), start_step_);
  if (rejoin_) s = Rejoin(start_step_);
  // A pass due at the step this attempt starts from may have been cut off with the last one:
  // measured again (the coordinator keeps the first it has for a step).
  if (s.ok() && start_step_ > 0 && start_step_ < steps && ValDue(ctx_.spec.job, start_step_)) {
    s = Validate(start_step_, start_step_);
  }
  // A streaming sync starts after its step's checkpoint: from that checkpoint, again.
  if (s.ok() && start_step_ > 0 && replicas_) {
    s = replicas_->StartSync(start_step_ - 1, compute_acc_, /*resumed=*/true);
  }
  // Gossip replicas step without the coordinator (step_reporter.h).
  if (replicas_ && replicas_->gossip() && ctx_.coordinator != nullptr) {
    reporter_ = std::make_unique<StepReporter>(ctx_.coordinator, &stop_);
  }
  for (uint64_t step = start_step_; s.ok() && step < steps && !stop_; ++step) {
    s = RunStep(step);
    if (!s.ok()) break;
  }
  if (reporter_ && s.ok()) {
    reporter_->Drain();  // the steps' reports go first, in order
    if (const std::string why = reporter_->stopped(); !why.empty() && !stop_) {
      s = absl::AbortedError("coordinator: " + why);
    }
  }
  // A failed stage does not wait for the coordinator: what it did not take is dropped (and
  // the stage shows as stopped to the peers that ask, below, without delay).
  if (reporter_ && !s.ok()) reporter_->Close();
  if (s.ok() && !stop_) {
    // Final report: nothing to reduce, only that the last checkpoint is durable.
    v1::StepReport final_report;
    final_report.set_job_id(ctx_.assignment.job_id());
    final_report.set_attempt(attempt());
    final_report.set_step(steps);
    final_report.set_stage(stage_);
    {
      MutexLock lock(mu_);
      final_report.set_checkpoint_step(status_.checkpoint_step);
    }
    if (val_step_ > 0) {
      final_report.set_val_step(val_step_);
      final_report.set_val_loss(val_loss_);
    }
    while (!stop_) {
      auto d = ctx_.coordinator->ReportStep(final_report, 30);
      if (d.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  // The stage is done with its fragment: a finished or failed job holds no model memory
  // while its record stays for status, export (from the checkpoints) and pings.
  exchange_->ReleaseDevice();
  if (replicas_) replicas_->Cancel();  // a streaming sync left in flight by an error
  replicas_.reset();                   // it holds the fragment, which goes next
  fragment_.reset();
  ops_.clear();
  loader_.reset();
  {
    MutexLock lock(mu_);
    status_.running = false;
    if (!s.ok() && !stop_) {
      status_.error = std::string(s.message());
      status_.permanent = IsInputDataError(s);
      ctx_.log->error("job {} stage {}: {}", ctx_.assignment.job_id(), stage_,
                      std::string(s.message()));
    } else if (!stop_) {
      status_.finished = true;
    }
  }
  reporter_.reset();  // its thread ends within one call to the coordinator (a short timeout)
}

Status StageRunner::TakeLeaving(const v1::StepDecision& decision) {
  if (decision.removed_replicas_size() == 0) return absl::OkStatus();
  const std::vector<uint32_t> left(decision.removed_replicas().begin(),
                                   decision.removed_replicas().end());
  const uint32_t own = static_cast<uint32_t>(grid_.replica(stage_));
  if (std::find(left.begin(), left.end(), own) != left.end()) {
    // Stopped as by the coordinator's KIND_STOP_ATTEMPT: not a failure of the stage.
    ctx_.log->info("job {}: stage {}: replica {} was removed from the job; stopping",
                   ctx_.assignment.job_id(), stage_, own);
    stop_ = true;
    return absl::AbortedError("coordinator: replica " + std::to_string(own) +
                              " was removed from the job");
  }
  if (decision.stop()) return absl::OkStatus();  // stopped anyway: the caller says why
  if (!replicas_) {
    return absl::InvalidArgumentError("job " + ctx_.assignment.job_id() + " stage " +
                                      std::to_string(stage_) +
                                      ": the step decision removes replicas from a stage that "
                                      "syncs with none");
  }
  RETURN_IF_ERROR(replicas_->Leave(left));
  ctx_.log->info("job {}: stage {}: {} left the job; its syncs go on without them",
                 ctx_.assignment.job_id(), stage_, ReplicaNames(left));
  return absl::OkStatus();
}

Status StageRunner::TakeWarmups(const v1::StepDecision& decision) {
  if (ctx_.spec.extra_in_flight != JobSpec::kAutoInFlight || decision.warmups_size() == 0) {
    return absl::OkStatus();
  }
  const int standard = scheduler::StandardWarmup(pos_, num_stages_, M_);
  const int64_t w = stage_ < decision.warmups_size() ? decision.warmups(stage_) : -1;
  // The replica's warm-ups must be deadlock-free as a whole, not only this stage's in range.
  std::vector<int> replica;
  const int r = grid_.replica(stage_);
  for (int p = 0; p < num_stages_ && decision.warmups_size() == grid_.size(); ++p) {
    replica.push_back(
        static_cast<int>(std::min<uint32_t>(decision.warmups(grid_.flat(r, p)), uint32_t(M_) + 1)));
  }
  if (decision.warmups_size() != grid_.size() || w < standard || w > max_warmup_ ||
      !scheduler::ValidWarmups(replica, M_)) {
    return absl::InvalidArgumentError(
        "job " + ctx_.assignment.job_id() + " stage " + std::to_string(stage_) +
        ": the step decision asks for " + std::to_string(w) + " warm-up forwards (of " +
        std::to_string(decision.warmups_size()) + " stages' for " + std::to_string(grid_.size()) +
        ", the replica's deadlock-free: " + (scheduler::ValidWarmups(replica, M_) ? "yes" : "no") +
        "); the stage runs from " + std::to_string(standard) + " to " +
        std::to_string(max_warmup_));
  }
  if (w != warmup_ && ctx_.log) {
    // The first change at info, the later ones (round trips drifting) at debug.
    ctx_.log->log(warmups_changed_ ? spdlog::level::debug : spdlog::level::info,
                  "job {}: stage {} keeps up to {} microbatches in flight (was {})",
                  ctx_.assignment.job_id(), stage_, std::min<int64_t>(M_, w + 1),
                  std::min(M_, warmup_ + 1));
    warmups_changed_ = true;
  }
  warmup_ = static_cast<int>(w);
  return absl::OkStatus();
}

Status StageRunner::RunStep(uint64_t step) {
  const double start = Now();
  ctx_.inbox->AdvanceTo(step);  // earlier steps' tensors are no longer taken
  compute_acc_ = 0;
  const double waited = exchange_->wait_seconds();
  fragment_->ZeroGrads();
  double loss_sum = 0;
  for (int k = 0; k < 2 * M_; ++k) {  // the 1F1B order (scheduler/pipeline_order.h)
    const scheduler::PipelineOp op = scheduler::OneFOneBWarm(warmup_, M_, k);
    RETURN_IF_ERROR(op.forward ? Forward(step, op.microbatch, &loss_sum)
                               : Backward(step, op.microbatch));
  }
  RETURN_IF_ERROR(exchange_->FinishPendingSend());
  {
    const double t0 = Now();
    RETURN_IF_ERROR(fragment_->ReduceGradients());  // data-parallel replicas: sum their grads
    compute_acc_ += Now() - t0;
  }
  RETURN_IF_ERROR(ExchangeTiedGrads(step));
  RETURN_IF_ERROR(exchange_->FinishPendingSend());
  const double sync_waited = replicas_ ? replicas_->wait_seconds() : 0;
  if (replicas_) {  // sync mode step: the replicas' gradients summed
    RETURN_IF_ERROR(replicas_->SyncGradients(step, compute_acc_));
  }
  wait_acc_ = exchange_->wait_seconds() - waited;

  // The barrier: every stage's gradient sums in, the global clipping scale out.
  v1::StepReport report;
  report.set_job_id(ctx_.assignment.job_id());
  report.set_attempt(attempt());
  report.set_step(step);
  report.set_stage(stage_);
  for (double v : fragment_->GradSliceSums()) report.add_grad_sums(v);
  if (fragment_->is_last()) report.set_loss(static_cast<float>(loss_sum / M_));
  report.set_compute_seconds(compute_acc_);
  report.set_wait_seconds(wait_acc_);
  report.set_step_seconds(Now() - start);
  {
    MutexLock lock(mu_);
    report.set_checkpoint_step(status_.checkpoint_step);
  }
  report.set_tokens(static_cast<uint64_t>(B_) * T_ * M_);
  if (loader_) {
    for (int64_t w : loader_->part_windows()) report.add_source_windows(static_cast<uint64_t>(w));
  }
  report.set_max_warmup(static_cast<uint32_t>(max_warmup_));
  // Activations the stage before may send ahead: a quarter of the inbox's budget, which the
  // gradients coming back and other tensors share.
  const uint64_t activation_bytes = uint64_t(B_) * T_ * in_width_ * sizeof(float) + 1;
  report.set_max_ahead(static_cast<uint32_t>(
      std::clamp<uint64_t>(ctx_.inbox->capacity() / 4 / activation_bytes, 1, M_)));
  if (val_step_ > 0) {
    report.set_val_step(val_step_);
    report.set_val_loss(val_loss_);
  }
  // The stage's outbound links, and the tied-embedding link between the first and the last
  // stage when they are not neighbours (the re-plan prices it from this estimate).
  std::vector<OutboundUsage> usage = exchange_->Usage(/*tied=*/num_stages_ > 2);
  if (replicas_) {
    for (const OutboundUsage& o : replicas_->Usage()) usage.push_back(o);
    *report.mutable_sync() = replicas_->Report();
  }
  for (const OutboundUsage& o : usage) {
    v1::LinkUsage* l = report.add_links();
    l->set_from_site(ctx_.site);
    l->set_to_site(o.to_site);
    l->set_codec(o.codec);
    l->set_reason(o.reason);
    l->set_raw_bytes(o.raw_bytes);
    l->set_wire_bytes(o.wire_bytes);
    l->set_tensors(o.tensors);
    l->set_device_tensors(o.device_tensors);
    const v1::LinkEstimate estimate = ctx_.monitor->Outbound(o.to_site);
    l->set_bandwidth_bytes_per_second(estimate.bandwidth_bytes_per_second());
    l->set_rtt_seconds(estimate.rtt_seconds());
    if (o.send_seconds > 0) l->set_achieved_bytes_per_second(o.wire_bytes / o.send_seconds);
  }
  StatusOr<v1::StepDecision> decision;
  const double barrier_start = Now();
  const model::OptimizerOptions& opt = ctx_.spec.job.optimizer;
  if (reporter_) {
    // A gossip replica has no barrier: the report goes behind the step, and the replica's own
    // gradient norm clips the step (the scale the whole step's decision gives it).
    if (const std::string why = reporter_->stopped(); !why.empty()) {
      return absl::AbortedError("coordinator: " + why);
    }
    ASSIGN_OR_RETURN(const float scale, ReplicaClipScale(step, {report.grad_sums().begin(),
                                                                report.grad_sums().end()}));
    v1::StepDecision own;
    own.set_grad_scale(scale);
    own.set_committed_step(reporter_->committed_step());
    decision = std::move(own);
  } else {
    while (true) {
      if (stop_) return absl::AbortedError("stopped");
      decision = ctx_.coordinator->ReportStep(report, 3600);
      if (decision.ok()) break;
      // The coordinator may be restarting: keep knocking until it answers or stops us.
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    }
  }
  wait_acc_ += Now() - barrier_start;
  val_step_ = 0;                            // reported
  RETURN_IF_ERROR(TakeLeaving(*decision));  // this stage's replica removed: stops it first
  if (decision->stop()) return absl::AbortedError("coordinator: " + decision->detail());
  RETURN_IF_ERROR(TakeWarmups(*decision));
  if (decision->act_budgets_size() == grid_.size() &&
      decision->grad_budgets_size() == grid_.size()) {
    exchange_->SetScheduleBudgets(decision->act_budgets(stage_), decision->grad_budgets(stage_));
  }
  const float lr = model::LearningRate(opt, static_cast<int>(step), ctx_.spec.job.steps);
  const double step_start = Now();
  // Pipeline replicas: each replica clips by its own stages' gradient norm.
  const int replica = grid_.replica(stage_);
  const double scale = replica < decision->replica_grad_scales_size()
                           ? decision->replica_grad_scales(replica)
                           : decision->grad_scale();
  RETURN_IF_ERROR(fragment_->Step(opt, lr, static_cast<float>(scale), static_cast<int>(step) + 1));
  if (reporter_) reporter_->Add(std::move(report));  // the step taken: reported behind it
  fragment_->Synchronize();
  compute_acc_ += Now() - step_start;
  if (replicas_) {           // local mode, at a sync step
    replicas_->Correct(lr);  // gossip with gradient tracking
    RETURN_IF_ERROR(replicas_->OuterStep(step, compute_acc_));
    wait_acc_ += replicas_->wait_seconds() - sync_waited;
  }
  // Two committed checkpoints stay: if the newest turns out corrupt, the job falls back to
  // the one before.
  if (decision->committed_step() > last_committed_) {
    previous_committed_ = last_committed_;
    last_committed_ = decision->committed_step();
  }
  if (Status s = PruneStageStates(*ctx_.env.files, ctx_.job_dir, previous_committed_); !s.ok()) {
    ctx_.log->warn("job {}: stage {}: older checkpoints not removed: {}", ctx_.assignment.job_id(),
                   stage_, std::string(s.message()));
  }

  const int every = ctx_.spec.job.checkpoint.every;
  const uint64_t done = step + 1;
  if (ValDue(ctx_.spec.job, done)) RETURN_IF_ERROR(Validate(step, done));
  if ((every > 0 && done % every == 0) || done == static_cast<uint64_t>(ctx_.spec.job.steps)) {
    RETURN_IF_ERROR(Checkpoint(done));
  }
  if (replicas_) {  // local mode with sync.overlap, at a sync step
    RETURN_IF_ERROR(replicas_->StartSync(step, compute_acc_, /*resumed=*/false));
  }
  MutexLock lock(mu_);
  status_.step = done;
  status_.compute_seconds = compute_acc_;
  status_.wait_seconds = wait_acc_;
  status_.step_seconds = Now() - start;
  return absl::OkStatus();
}

Status StageRunner::Forward(uint64_t step, int mb, double* loss_sum) {
  const int slot = mb % static_cast<int>(slot_targets_.size());
  const size_t act = static_cast<size_t>(B_) * T_ * out_width_;
  const model::ModelConfig& config = ctx_.spec.job.model;
  const int per_row = model::TargetsFrameRow(config, T_);
  const size_t frame_floats = static_cast<size_t>(B_) * per_row;
  const float* input = nullptr;
  if (fragment_->is_first()) {
    RETURN_IF_ERROR(
        InputDataError((mb < M_ ? loader_ : val_loader_)->Next(tokens_.data(), targets_.data())));
    slot_targets_[slot] = targets_;
    if (window_) slot_tokens_[slot] = tokens_;
  } else {
    ASSIGN_OR_RETURN(input, ReceiveInput(v1::TENSOR_KIND_ACTIVATION, step, mb));
    std::vector<float> t(frame_floats);
    RETURN_IF_ERROR(exchange_->Receive(v1::TENSOR_KIND_TARGETS, step, mb, t.data(), frame_floats));
    RETURN_IF_ERROR(Annotate(
        model::UnpackTargetsFrame(config, B_, T_, t, window_ ? slot_tokens_[slot].data() : nullptr,
                                  slot_targets_[slot].data()),
        "job " + ctx_.assignment.job_id() + ": step " + std::to_string(step) + ", microbatch " +
            std::to_string(mb) + " from stage " + std::to_string(grid_.prev(stage_))));
  }
  const int32_t* tokens = nullptr;
  if (fragment_->needs_tokens()) tokens = window_ ? slot_tokens_[slot].data() : tokens_.data();
  const double start = Now(), sending = exchange_->send_seconds();
  RETURN_IF_ERROR(Throttle());
  RETURN_IF_ERROR(fragment_->Forward(slot, tokens, input));
  RETURN_IF_ERROR(exchange_->FinishPendingSend(/*wait=*/false));  // while a GPU computes
  if (fragment_->is_last()) {
    ASSIGN_OR_RETURN(const float loss, fragment_->Loss(slot, slot_targets_[slot].data()));
    *loss_sum += loss;
    compute_acc_ += Now() - start - (exchange_->send_seconds() - sending);
    return exchange_->FinishPendingSend();  // if the link's queue was full
  }
  float* host = exchange_->host_buffer();
  const float* device_out =
      exchange_->encodes_on_device() ? fragment_->DeviceOutput(slot) : nullptr;
  if (device_out == nullptr) fragment_->Output(slot, host);
  fragment_->Synchronize();  // a GPU's forward is only done when its queue is
  const double elapsed = Now() - start - (exchange_->send_seconds() - sending);
  compute_acc_ += elapsed;
  std::vector<float> t = model::PackTargetsFrame(
      config, B_, T_, window_ ? slot_tokens_[slot].data() : nullptr, slot_targets_[slot].data());
  // The targets first, so that activations encoded on a GPU can stay pending (see Send).
  using To = StageExchange::To;
  RETURN_IF_ERROR(exchange_->Send(To::kNext, v1::TENSOR_KIND_TARGETS, step, mb, t.data(),
                                  frame_floats, {B_, per_row}, false));
  return exchange_->Send(To::kNext, v1::TENSOR_KIND_ACTIVATION, step, mb, host, act,
                         {B_, T_, out_width_}, true, device_out);
}

Status StageRunner::Backward(uint64_t step, int mb) {
  const int slot = mb % static_cast<int>(slot_targets_.size());
  const size_t act = static_cast<size_t>(B_) * T_ * in_width_;
  // Sync mode step: each replica's share of the union batch's mean, its microbatches of all
  // replicas' (fleet/local_fleet.h); local mode: the mean over its own.
  const int microbatches = ctx_.spec.sync.mode == fleet::SyncMode::kStep && replicas_
                               ? replicas_->union_microbatches()
                               : M_;
  const float dloss = 1.0f / (float(B_) * T_ * float(microbatches));
  const float* output_grad = nullptr;
  if (!fragment_->is_last()) {
    ASSIGN_OR_RETURN(output_grad, ReceiveInput(v1::TENSOR_KIND_ACTIVATION_GRAD, step, mb));
  }
  const double start = Now(), sending = exchange_->send_seconds();
  RETURN_IF_ERROR(Throttle());
  RETURN_IF_ERROR(fragment_->Backward(slot, output_grad, fragment_->is_last() ? dloss : 0.0f));
  RETURN_IF_ERROR(exchange_->FinishPendingSend(/*wait=*/false));  // while a GPU computes
  fragment_->Synchronize();
  const double elapsed = Now() - start - (exchange_->send_seconds() - sending);
  // The controller's budget: compute per microbatch (forward + backward), smoothed.
  exchange_->NoteMicrobatchCompute(elapsed);
  compute_acc_ += elapsed;
  if (fragment_->is_first()) return exchange_->FinishPendingSend();  // if the queue was full
  float* host = exchange_->host_buffer();
  const float* device_grad =
      exchange_->encodes_on_device() ? fragment_->DeviceInputGrad() : nullptr;
  if (device_grad == nullptr) fragment_->InputGrad(host);
  return exchange_->Send(StageExchange::To::kPrev, v1::TENSOR_KIND_ACTIVATION_GRAD, step, mb, host,
                         act, {B_, T_, in_width_}, true, device_grad);
}

StatusOr<const float*> StageRunner::ReceiveInput(v1::TensorKind kind, uint64_t step, int mb) {
  const int width = kind == v1::TENSOR_KIND_ACTIVATION ? in_width_ : out_width_;
  const size_t n = static_cast<size_t>(B_) * T_ * width;
  float* staged = exchange_->decodes_on_device() ? fragment_->DeviceInput() : nullptr;
  bool on_device = false;
  RETURN_IF_ERROR(
      exchange_->Receive(kind, step, mb, exchange_->host_buffer(), n, staged, &on_device));
  return on_device ? staged : exchange_->host_buffer();
}

Status StageRunner::Throttle() {
  // Seconds per layer and microbatch, like a slower device: half before forward, half
  // before backward, so it reads as compute time. A slower device would not hold back what
  // it has already sent.
  const double t = (ctx_.throttle ? ctx_.throttle->load() : 0) * fragment_->layout().num_layers();
  if (t <= 0) return absl::OkStatus();
  RETURN_IF_ERROR(exchange_->FinishPendingSend());
  std::this_thread::sleep_for(std::chrono::duration<double>(t / 2));
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
