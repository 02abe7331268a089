// StageRunner with pipeline replicas: the sync group's exchange (sync_exchange.h), sync mode
// step's gradient sum before the step report, local mode's outer step (fleet/
// outer_optimizer.h) after every `every`-th step and the last (with sync.overlap, streaming:
// started after the every-th step's checkpoint, finished `overlap` steps later), and the sync state
// kept beside the stage checkpoints (sync_checkpoint.h); and the tied-embedding exchange between
// the first and last stage, whose lossy codec's residual that state also holds.
#include <algorithm>

#include "daemon/job/stage/stage_runner.h"
#include "daemon/job/state/sync_checkpoint.h"
#include "daemon/job/sync/replica_membership.h"
#include "model/layout.h"

namespace longhaul::daemon {

Status StageRunner::InitSync(uint64_t resume_step) {
  if (grid_.replicas >= 2) RETURN_IF_ERROR(InitSyncExchange());
  if (!sync_ && !tied_codec_) return absl::OkStatus();
  const v1::StageAssignment& a = ctx_.assignment;
  const size_t n = static_cast<size_t>(fragment_->layout().total());
  const bool local = sync_ && ctx_.spec.sync.mode == fleet::SyncMode::kLocal;
  if (resume_step == 0 || migrate_ || rejoin_) {
    // Nothing carried yet; a layer move starts the residuals afresh (a rejoin too, and it
    // takes the outer state from the live replica: Rejoin).
    if (local) {  // the first anchor: the initial parameters
      std::vector<float> params(n);
      fragment_->GetParameters(params.data());
      outer_.Reset(params);
    }
    return absl::OkStatus();
  }
  std::vector<int64_t> sizes;
  if (sync_) {
    for (const auto& s : fleet::SyncSlices(fragment_->layout())) sizes.push_back(s.size);
  }
  const int64_t tied_floats =
      static_cast<int64_t>(ctx_.spec.job.model.padded_vocab_size) * ctx_.spec.job.model.channels;
  const auto& me = a.stages(stage_);
  ASSIGN_OR_RETURN(SyncState state,
                   ReadSyncState(SyncCheckpointPath(ctx_.job_dir, resume_step,
                                                    static_cast<int>(me.layer_begin()),
                                                    static_cast<int>(me.layer_end())),
                                 resume_step, static_cast<int64_t>(n), sizes, tied_floats));
  if (tied_codec_) {
    RETURN_IF_ERROR(tied_codec_->RestoreResidual(std::move(state.tied_residual),
                                                 static_cast<size_t>(tied_floats)));
  }
  if (!sync_) return absl::OkStatus();
  if (local) {
    if (state.anchor.empty()) {
      return absl::DataLossError("job " + a.job_id() + ": the sync state of step " +
                                 std::to_string(resume_step) + " has no outer-step anchor");
    }
    RETURN_IF_ERROR(outer_.Restore(std::move(state.anchor), std::move(state.momentum)));
  }
  return sync_->RestoreResiduals(std::move(state.residuals));
}

void StageRunner::InitReplicaWeights() {
  const v1::StageAssignment& a = ctx_.assignment;
  const ReplicaList dropped(a.dropped_replicas().begin(), a.dropped_replicas().end());
  std::vector<bool> live;
  union_microbatches_ = 0;
  for (int r = 0; r < grid_.replicas; ++r) {
    live.push_back(!Contains(dropped, r));
    union_microbatches_ += microbatches_[static_cast<size_t>(r)];
  }
  token_weights_ = fleet::TokenWeights(microbatches_, live);
}

Status StageRunner::InitSyncExchange() {
  const v1::StageAssignment& a = ctx_.assignment;
  SyncExchangeOptions so;
  so.site = ctx_.site;
  so.job_id = a.job_id();
  so.attempt = a.attempt();
  so.stage = stage_;
  so.grid = grid_;
  const ReplicaList dropped(a.dropped_replicas().begin(), a.dropped_replicas().end());
  for (int r = 0; r < grid_.replicas; ++r) so.live.push_back(!Contains(dropped, r));
  so.routes = SyncRoutes(grid_, ctx_.spec.job.model, stage_, ctx_.spec.sync.stagger);
  so.ring = a.sync_ring();  // the coordinator's decision, checked with the assignment
  // A dropped replica's stages sit out this attempt: no sender, no frames (SyncExchange).
  for (const auto& [peer, sender] : ctx_.to_sync) {
    if (sender) so.to_stage[peer] = sender.get();
    so.stage_sites[peer] = a.stages(peer).site();
  }
  const bool adaptive = ctx_.spec.sync.codec == "adaptive";
  so.codec = adaptive ? kAdaptiveSyncStart : ctx_.spec.sync.codec;
  // The tied embedding's copies (first and last stage) choose from different links: that
  // slice stays at the start codec, the same on both.
  if (adaptive) so.pinned_slice = fragment_->layout().model().SliceIndex(model::Tensor::kWte, 0);
  if (adaptive) {
    ASSIGN_OR_RETURN(SyncCodecChooser chooser, SyncCodecChooser::Create());
    sync_codec_.emplace(std::move(chooser));
  }
  so.model_slices = fragment_->layout().model().num_slices();
  so.inbox = ctx_.inbox;  // keeps a streaming sync's frames `overlap` steps (JobHost)
  so.heartbeat_seconds = ctx_.heartbeat_seconds;
  so.stop = &stop_;
  ASSIGN_OR_RETURN(sync_, SyncExchange::Create(std::move(so)));
  return absl::OkStatus();
}

Status StageRunner::SyncGradients(uint64_t step) {
  if (!sync_ || ctx_.spec.sync.mode != fleet::SyncMode::kStep) return absl::OkStatus();
  const size_t n = static_cast<size_t>(fragment_->layout().total());
  std::vector<float> grads(n), sum(n);
  fragment_->GetGradients(grads.data());
  RETURN_IF_ERROR(ChooseSyncCodec(compute_acc_, fleet::kEveryPhase));  // this step's compute
  const std::vector<float> ones(static_cast<size_t>(grid_.replicas), 1.0f);
  RETURN_IF_ERROR(sync_->AllGather(step, grads, ones, sum));
  fragment_->SetGradients(sum.data());
  return absl::OkStatus();
}

Status StageRunner::OuterStep(uint64_t step) {
  if (!sync_ || ctx_.spec.sync.mode != fleet::SyncMode::kLocal) return absl::OkStatus();
  const fleet::LocalSyncAction action =
      fleet::LocalSyncAt(ctx_.spec.sync, step + 1, static_cast<uint64_t>(ctx_.spec.job.steps));
  const size_t n = static_cast<size_t>(fragment_->layout().total());
  std::vector<float> params(n);
  if (action.finish) {
    // The streaming sync started `overlap` steps ago: the outer step, and what the inner
    // steps since then moved kept on top of the new anchor (fleet::OuterOptimizer::Rebase),
    // on the slices of its phase.
    if (sync_started_.size() != n) {
      return absl::InternalError("job " + ctx_.assignment.job_id() + " stage " +
                                 std::to_string(stage_) + ": the sync started after step " +
                                 std::to_string(action.started) + " has no start state");
    }
    std::vector<float> mean(n);
    RETURN_IF_ERROR(sync_->Finish(mean));
    fragment_->GetParameters(params.data());
    for (const fleet::SyncSlice& slice : PhaseSlices(action.finish_phase)) {
      const size_t at = static_cast<size_t>(slice.offset), size = static_cast<size_t>(slice.size);
      outer_.StepPart(ctx_.spec.sync.outer, at, std::span<const float>(mean).subspan(at, size));
      outer_.RebasePart(at, std::span<const float>(sync_started_).subspan(at, size),
                        std::span<float>(params).subspan(at, size));
    }
    fragment_->SetParameters(params.data());
    sync_started_ = {};
  }
  if (!action.blocking) return absl::OkStatus();
  std::vector<float> delta(n), mean(n);
  fragment_->GetParameters(params.data());
  outer_.PseudoGradient(params, delta);
  RETURN_IF_ERROR(ChooseSyncCodec(SyncComputeSeconds(), action.phase));
  // Each live replica's pseudo-gradient weighs by the tokens it trained since the last sync:
  // its microbatches of theirs (fleet::TokenWeights; equal when every replica trains as many).
  RETURN_IF_ERROR(sync_->AllGather(step, delta, token_weights_, mean, action.phase));
  // The phase's slices take the outer step and continue from the new anchor.
  for (const fleet::SyncSlice& slice : PhaseSlices(action.phase)) {
    const size_t at = static_cast<size_t>(slice.offset), size = static_cast<size_t>(slice.size);
    outer_.StepPart(ctx_.spec.sync.outer, at, std::span<const float>(mean).subspan(at, size));
    std::copy_n(outer_.anchor().begin() + slice.offset, size, params.begin() + slice.offset);
  }
  fragment_->SetParameters(params.data());
  return absl::OkStatus();
}

double StageRunner::SyncComputeSeconds() const {
  // The inner steps' compute until the next sync, as that many times this step's: `every`
  // steps, shared by the phases of a staggered round.
  const fleet::SyncOptions& sync = ctx_.spec.sync;
  return static_cast<double>(sync.every) / std::max(1, sync.stagger) * compute_acc_;
}

std::vector<fleet::SyncSlice> StageRunner::PhaseSlices(int phase) const {
  const model::FragmentLayout& layout = fragment_->layout();
  std::vector<fleet::SyncSlice> slices;
  for (const fleet::SyncSlice& slice : fleet::SyncSlices(layout)) {
    if (fleet::InPhase(fleet::SlicePhase(layout.model(), slice.index, ctx_.spec.sync.stagger),
                       phase)) {
      slices.push_back(slice);
    }
  }
  return slices;
}

Status StageRunner::StartSync(uint64_t step) {
  if (!sync_ || ctx_.spec.sync.mode != fleet::SyncMode::kLocal) return absl::OkStatus();
  const fleet::LocalSyncAction action =
      fleet::LocalSyncAt(ctx_.spec.sync, step + 1, static_cast<uint64_t>(ctx_.spec.job.steps));
  if (!action.start) return absl::OkStatus();
  const size_t n = static_cast<size_t>(fragment_->layout().total());
  std::vector<float> params(n), delta(n);
  fragment_->GetParameters(params.data());
  outer_.PseudoGradient(params, delta);
  RETURN_IF_ERROR(ChooseSyncCodec(SyncComputeSeconds(), action.phase));
  std::vector<float> weights = token_weights_;
  const v1::StageAssignment& a = ctx_.assignment;
  if (step + 1 == start_step_ && a.rejoining_replicas_size() > 0) {
    // Started again at a rejoin: a rejoining replica starts from the anchor (Rejoin) and has
    // trained nothing since, so its zero pseudo-gradient does not count in this sync
    // (staggered, it starts from a live replica's parameters: a copy, not counted twice).
    const ReplicaList dropped(a.dropped_replicas().begin(), a.dropped_replicas().end());
    const ReplicaList rejoining(a.rejoining_replicas().begin(), a.rejoining_replicas().end());
    std::vector<bool> counted;
    for (int r = 0; r < grid_.replicas; ++r) {
      counted.push_back(!Contains(dropped, r) && !Contains(rejoining, r));
    }
    weights = fleet::TokenWeights(microbatches_, counted);
  }
  RETURN_IF_ERROR(sync_->Start(step, delta, weights, action.phase));
  sync_started_ = std::move(params);
  return absl::OkStatus();
}

Status StageRunner::ChooseSyncCodec(double compute_seconds, int phase) {
  // A phase this stage holds nothing of sends nothing: no choice to make.
  if (!sync_codec_ || sync_->PhaseValues(phase) == 0) return absl::OkStatus();
  std::vector<v1::LinkEstimate> links;
  // The links this stage's frames take (every other live holder's, or the next live one
  // around each ring) and the fragment's share each carries.
  for (int peer : sync_->SendsTo()) {
    links.push_back(ctx_.monitor->Outbound(ctx_.assignment.stages(peer).site()));
  }
  const uint64_t bytes = static_cast<uint64_t>(static_cast<double>(sync_->PhaseValues(phase)) *
                                               sizeof(float) * sync_->SentShare());
  ASSIGN_OR_RETURN(const compression::Decision d,
                   sync_codec_->Choose(links, bytes, compute_seconds, Now()));
  if (d.changed) {
    ctx_.log->info("job {} stage {}: sync codec {}: {}", ctx_.assignment.job_id(), stage_, d.codec,
                   d.explanation);
  }
  return sync_->SetCodec(d.codec, "sync group, adaptive: " + d.explanation);
}

Status StageRunner::CheckpointSync(uint64_t step) {
  if (!sync_ && !tied_codec_) return absl::OkStatus();
  SyncState s;
  s.step = step;
  if (sync_ && ctx_.spec.sync.mode == fleet::SyncMode::kLocal) {
    s.anchor = outer_.anchor();
    s.momentum = outer_.momentum();
  }
  if (sync_) s.residuals = sync_->residuals();
  if (tied_codec_) s.tied_residual = tied_codec_->residual();
  bool any = false;
  for (const auto& r : s.residuals) any = any || !r.empty();
  if (!any) s.residuals.clear();
  const auto& me = ctx_.assignment.stages(stage_);
  return WriteSyncState(SyncCheckpointPath(ctx_.job_dir, step, static_cast<int>(me.layer_begin()),
                                           static_cast<int>(me.layer_end())),
                        s);
}

Status StageRunner::ExchangeTiedGrads(uint64_t step) {
  if (num_stages_ == 1 || !grid_.tied_head) {  // a whole model, or an untied head
    fragment_->CombineTiedGrads();
    return absl::OkStatus();
  }
  if (!fragment_->is_first() && !fragment_->is_last()) return absl::OkStatus();
  const size_t n = static_cast<size_t>(ctx_.spec.job.model.padded_vocab_size) * C_;
  std::vector<float> own(n), peer(n);
  fragment_->TiedGradOwn(own.data());
  // First and last stage swap their parts: both copies of wte must take bit-identical steps.
  // They are not neighbours unless there are two stages, so the exchange goes over a direct
  // link between them. Exactly (fp32), or with the job's tied codec: then each end adds the
  // parts as their frames carry them, its own included (model/tied_exchange.h).
  const std::vector<int64_t> shape = {ctx_.spec.job.model.padded_vocab_size, C_};
  if (tied_codec_) {
    std::vector<uint8_t> frame;
    RETURN_IF_ERROR(tied_codec_->EncodeInPlace(
        own, shape, step * 1000003 + v1::TENSOR_KIND_WEIGHT_GRAD, &frame));
    fragment_->SetTiedGradOwn(own.data());
    RETURN_IF_ERROR(exchange_->SendFrame(StageExchange::To::kTied, v1::TENSOR_KIND_WEIGHT_GRAD,
                                         step, 0, std::move(frame), n));
  } else {
    RETURN_IF_ERROR(exchange_->Send(StageExchange::To::kTied, v1::TENSOR_KIND_WEIGHT_GRAD, step, 0,
                                    own.data(), n, shape, false));
  }
  RETURN_IF_ERROR(exchange_->Receive(v1::TENSOR_KIND_WEIGHT_GRAD, step, 0, peer.data(), n));
  fragment_->SetTiedGradPeer(peer.data());
  fragment_->CombineTiedGrads();
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
