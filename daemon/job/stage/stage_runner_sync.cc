// StageRunner's sync state: with pipeline replicas the ReplicaSync (daemon/job/sync/
// replica_sync.h) set up and restored from the sync state kept beside the stage checkpoints
// (sync_checkpoint.h); and the tied-embedding exchange between the first and last stage, whose
// lossy codec's residual that state also holds.
#include <algorithm>

#include "daemon/job/exchange/grad_sums_frame.h"
#include "daemon/job/stage/stage_runner.h"
#include "daemon/job/state/sync_checkpoint.h"
#include "model/layout.h"
#include "model/optimizer.h"

namespace longhaul::daemon {

Status StageRunner::InitSync(uint64_t resume_step) {
  if (grid_.replicas >= 2) {
    ReplicaSyncOptions o;
    o.site = ctx_.site;
    o.assignment = ctx_.assignment;
    o.grid = grid_;
    o.sync = ctx_.spec.sync;
    o.model = ctx_.spec.job.model;
    o.steps = static_cast<uint64_t>(ctx_.spec.job.steps);
    o.seed = ctx_.spec.job.seed;
    o.microbatches = microbatches_;
    o.fragment = fragment_.get();
    for (const auto& [peer, sender] : ctx_.to_sync) o.to_stage[peer] = sender.get();
    o.inbox = ctx_.inbox;  // keeps a streaming sync's frames `overlap` steps (JobHost)
    o.monitor = ctx_.monitor;
    o.log = ctx_.log;
    o.heartbeat_seconds = ctx_.heartbeat_seconds;
    o.stop = &stop_;
    o.file_env = ctx_.env.files;
    // A gossip round goes on without a replica whose stage is gone: its site is asked.
    o.peer_status = [this](int stage) { return PeerStatusOf(stage); };
    // A running sender that left this replica out of a round says so when asked; this stage
    // remembers whom it left out, to say so in turn.
    o.skipped_me = [this](int stage, uint64_t step) { return PeerSkippedMe(stage, step); };
    o.on_unsent = [this](int replica, uint64_t step) {
      MutexLock lock(peers_mu_);
      std::deque<uint64_t>& steps = unsent_[static_cast<uint32_t>(replica)];
      steps.push_back(step);
      if (steps.size() > kUnsentKept) steps.pop_front();
    };
    // ...and sends nothing to, nor waits for, a replica removed from the job.
    o.removed = [this](int replica) {
      MutexLock lock(peers_mu_);
      return removed_replicas_.count(static_cast<uint32_t>(replica)) > 0;
    };
    {
      MutexLock lock(peers_mu_);
      gossip_links_ = GossipLinkSchedule(
          {ctx_.assignment.gossip_links().begin(), ctx_.assignment.gossip_links().end()});
    }
    // Each round's graph from the links the coordinator last sent for it.
    o.links_at = [this](uint64_t round) {
      MutexLock lock(peers_mu_);
      drawn_round_ = std::max(drawn_round_.value_or(0), round);
      return gossip_links_.At(round);
    };
    if (o.sync.reduce == fleet::SyncReduce::kGossip && grid_.tied(stage_) >= 0) {
      // The tied embedding's two holders: the first gossips it, the last replays the first's
      // rounds from what it sends over their link (tied_round.h).
      o.tied_send = [this](uint64_t step, uint32_t what, std::vector<uint8_t> bytes) {
        return exchange_->SendFrame(StageExchange::To::kTied, v1::TENSOR_KIND_TIED_ROUND, step,
                                    static_cast<int>(what), std::move(bytes), 0);
      };
      o.tied_receive = [this](uint64_t step, uint32_t what) {
        return exchange_->ReceiveFrame(v1::TENSOR_KIND_TIED_ROUND, step, static_cast<int>(what));
      };
      o.tied_values = [this](uint64_t step, std::span<float> values) -> Status {
        if (fragment_->is_first()) {
          RETURN_IF_ERROR(exchange_->Send(StageExchange::To::kTied, v1::TENSOR_KIND_TIED_ROUND,
                                          step, static_cast<int>(kTiedValues), values.data(),
                                          values.size(),
                                          {ctx_.spec.job.model.padded_vocab_size, C_}, false));
          return exchange_->FinishPendingSend();
        }
        return exchange_->Receive(v1::TENSOR_KIND_TIED_ROUND, step, static_cast<int>(kTiedValues),
                                  values.data(), values.size());
      };
    }
    ASSIGN_OR_RETURN(replicas_, ReplicaSync::Create(std::move(o)));
  }
  if (!replicas_ && !tied_codec_) return absl::OkStatus();
  if (resume_step == 0 || migrate_ || rejoin_) {
    // Nothing carried yet; a layer move starts the residuals afresh (a rejoin too, and it
    // takes the outer state from the live replica: Rejoin).
    if (replicas_) replicas_->Fresh(/*resync=*/resume_step != 0);
    return absl::OkStatus();
  }
  const int64_t tied_floats =
      static_cast<int64_t>(ctx_.spec.job.model.padded_vocab_size) * ctx_.spec.job.model.channels;
  const auto& me = ctx_.assignment.stages(stage_);
  ASSIGN_OR_RETURN(SyncState state,
                   ReadSyncState(*ctx_.env.files,
                                 SyncCheckpointPath(ctx_.job_dir, resume_step,
                                                    static_cast<int>(me.layer_begin()),
                                                    static_cast<int>(me.layer_end())),
                                 resume_step, fragment_->layout().total(),
                                 replicas_ ? replicas_->ResidualSizes() : std::vector<int64_t>{},
                                 tied_floats, replicas_ ? replicas_->LinkStateBytes() : 0));
  if (tied_codec_) {
    RETURN_IF_ERROR(tied_codec_->RestoreResidual(std::move(state.tied_residual),
                                                 static_cast<size_t>(tied_floats)));
  }
  if (!replicas_) return absl::OkStatus();
  return replicas_->Restore(std::move(state), resume_step);
}

Status StageRunner::CheckpointSync(uint64_t step) {
  if (!replicas_ && !tied_codec_) return absl::OkStatus();
  SyncState s;
  s.step = step;
  if (replicas_) replicas_->Save(&s);
  if (tied_codec_) s.tied_residual = tied_codec_->residual();
  const auto& me = ctx_.assignment.stages(stage_);
  return WriteSyncState(*ctx_.env.files,
                        SyncCheckpointPath(ctx_.job_dir, step, static_cast<int>(me.layer_begin()),
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

void StageRunner::RemoveReplicas(std::span<const uint32_t> removed) {
  MutexLock lock(peers_mu_);
  removed_replicas_.insert(removed.begin(), removed.end());
}

Status StageRunner::SetGossipLinks(uint32_t epoch, uint64_t from_round, std::vector<double> links) {
  const std::string where = "job " + ctx_.assignment.job_id() + ": stage " +
                            std::to_string(stage_) + ", gossip links epoch " +
                            std::to_string(epoch) + " from round " + std::to_string(from_round);
  MutexLock lock(peers_mu_);
  if (drawn_round_ && *drawn_round_ >= from_round) {
    return absl::FailedPreconditionError(where + ": this stage has drawn round " +
                                         std::to_string(*drawn_round_) + "'s graph already");
  }
  std::set<uint32_t> out(removed_replicas_);  // dropped in the attempt, or removed since
  out.insert(ctx_.assignment.dropped_replicas().begin(), ctx_.assignment.dropped_replicas().end());
  std::vector<bool> live;
  for (int r = 0; r < grid_.replicas; ++r) live.push_back(out.count(static_cast<uint32_t>(r)) == 0);
  const google::protobuf::RepeatedField<double> matrix(links.begin(), links.end());
  RETURN_IF_ERROR(Annotate(CheckGossipLinks(matrix, grid_.replicas, live), where));
  return Annotate(gossip_links_.Add(epoch, from_round, std::move(links)), where);
}

PeerStatus StageRunner::PeerStatusOf(int stage) {
  if (stage >= 0 && stage < grid_.size()) {
    MutexLock lock(peers_mu_);
    if (removed_replicas_.count(static_cast<uint32_t>(grid_.replica(stage))) > 0) {
      return PeerStatus::kGone;
    }
  }
  const StatusOr<v1::JobCommandResponse> r = PingStage(stage);
  MutexLock lock(peers_mu_);
  int& unanswered = unanswered_pings_[stage];
  if (!r.ok()) return ++unanswered >= kPingsToGone ? PeerStatus::kGone : PeerStatus::kStarting;
  unanswered = 0;
  if (r->attempt() > attempt()) return PeerStatus::kGone;
  if (r->attempt() == attempt()) {
    return r->running() || r->finished() ? PeerStatus::kRunning : PeerStatus::kGone;
  }
  // No stage of this attempt there (yet): its assignment may still be on the way.
  return Now() - started_at_ >= kStartupGraceSeconds ? PeerStatus::kGone : PeerStatus::kStarting;
}

bool StageRunner::Unsent(uint32_t replica, uint64_t step) {
  MutexLock lock(peers_mu_);
  const auto it = unsent_.find(replica);
  return it != unsent_.end() &&
         std::find(it->second.begin(), it->second.end(), step) != it->second.end();
}

StatusOr<v1::JobCommandResponse> StageRunner::PingStage(int stage, uint64_t gossip_step) {
  const v1::StageAssignment& a = ctx_.assignment;
  transport::Link* link = stage >= 0 && stage < a.stages_size() && ctx_.channel
                              ? ctx_.channel(a.stages(stage).site())
                              : nullptr;
  if (link == nullptr) return absl::NotFoundError("no link");
  v1::JobCommand ping;
  ping.set_job_id(a.job_id());
  ping.set_kind(v1::JobCommand::KIND_PING);
  if (gossip_step > 0) {
    ping.set_gossip_step(gossip_step);
    ping.set_gossip_replica(static_cast<uint32_t>(grid_.replica(stage_)));
  }
  return link->ControlJob(ping, 2);
}

bool StageRunner::PeerSkippedMe(int stage, uint64_t step) {
  const auto r = PingStage(stage, step + 1);
  return r.ok() && r->attempt() == attempt() && r->gossip_skipped();
}

StatusOr<float> StageRunner::ReplicaClipScale(uint64_t step, std::vector<double> sums) {
  // Each slice's sum comes from the one stage that holds it (the others' are 0), so the sums
  // added along the pipeline are the replica decision's bits, whatever the order.
  const size_t slices =
      static_cast<size_t>(model::ParameterLayout(ctx_.spec.job.model).num_slices());
  const std::string where = "job " + ctx_.assignment.job_id() + " stage " + std::to_string(stage_) +
                            ", step " + std::to_string(step) + ": ";
  auto take = [&](v1::TensorKind kind) -> StatusOr<std::vector<double>> {
    ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, exchange_->ReceiveFrame(kind, step, 0));
    auto got = DecodeGradSums(bytes, slices);
    if (!got.ok()) {
      return Status(got.status().code(),
                    where + v1::TensorKind_Name(kind) + " from stage " +
                        std::to_string(kind == v1::TENSOR_KIND_GRAD_SUMS ? grid_.next(stage_)
                                                                         : grid_.prev(stage_)) +
                        ": " + std::string(got.status().message()));
    }
    return got;
  };
  if (sums.size() != slices) {
    return absl::InternalError(where + std::to_string(sums.size()) + " gradient sums for " +
                               std::to_string(slices) + " slices");
  }
  if (pos_ + 1 < num_stages_) {  // the stages after this one, toward the first
    ASSIGN_OR_RETURN(std::vector<double> after, take(v1::TENSOR_KIND_GRAD_SUMS));
    model::AddSliceSums(sums, &after);
    sums = std::move(after);
  }
  if (pos_ > 0) {  // on toward the first stage, and the replica's whole sums back
    RETURN_IF_ERROR(exchange_->SendFrame(StageExchange::To::kPrev, v1::TENSOR_KIND_GRAD_SUMS, step,
                                         0, EncodeGradSums(sums), 0));
    ASSIGN_OR_RETURN(sums, take(v1::TENSOR_KIND_GRAD_TOTAL));
  }
  if (pos_ + 1 < num_stages_) {
    RETURN_IF_ERROR(exchange_->SendFrame(StageExchange::To::kNext, v1::TENSOR_KIND_GRAD_TOTAL, step,
                                         0, EncodeGradSums(sums), 0));
  }
  return model::ClipScale(model::GradNorm(sums), ctx_.spec.job.optimizer.grad_clip);
}

}  // namespace longhaul::daemon
