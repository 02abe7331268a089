// ReplicaSync (replica_sync.h): the sync group's exchange and weights set up from the
// attempt's assignment, the three calls of a step (sync mode's gradient sum, local mode's
// outer step and streaming start) and the durable part of its state.
#include "daemon/job/sync/replica_sync.h"

#include <algorithm>
#include <cmath>

#include "daemon/job/sync/gossip_round.h"
#include "daemon/job/sync/replica_membership.h"
#include "daemon/job/sync/sync_routes.h"
#include "fleet/consensus_sketch.h"
#include "fleet/sync_reduce.h"
#include "model/layout.h"

namespace longhaul::daemon {

StatusOr<std::unique_ptr<ReplicaSync>> ReplicaSync::Create(ReplicaSyncOptions options) {
  if (options.grid.replicas < 2 || !options.fragment || !options.inbox || !options.monitor ||
      !options.file_env ||
      options.microbatches.size() != static_cast<size_t>(options.grid.replicas)) {
    return absl::InvalidArgumentError(
        "replica sync of job " + options.assignment.job_id() + ": needs 2 or more replicas (" +
        std::to_string(options.grid.replicas) + "), the stage's fragment, inbox, link " +
        "monitor and file env, and each replica's microbatches (" +
        std::to_string(options.microbatches.size()) + ")");
  }
  std::unique_ptr<ReplicaSync> r(new ReplicaSync(std::move(options)));
  RETURN_IF_ERROR(r->Init());
  return r;
}

ReplicaSync::~ReplicaSync() { Cancel(); }

std::string ReplicaSync::Where() const {
  return "job " + o_.assignment.job_id() + " stage " + std::to_string(stage_);
}

Status ReplicaSync::Init() {
  const v1::StageAssignment& a = o_.assignment;
  stage_ = static_cast<int>(a.stage());
  if (stage_ < 0 || stage_ >= o_.grid.size()) {
    return absl::InvalidArgumentError(Where() + ": not a stage of the plan's " +
                                      std::to_string(o_.grid.size()));
  }
  const ReplicaList dropped(a.dropped_replicas().begin(), a.dropped_replicas().end());
  live_.clear();
  union_microbatches_ = 0;
  for (int r = 0; r < o_.grid.replicas; ++r) {
    live_.push_back(!Contains(dropped, r));
    union_microbatches_ += o_.microbatches[static_cast<size_t>(r)];
  }
  token_weights_ = fleet::TokenWeights(o_.microbatches, live_);
  gossip_links_.assign(a.gossip_links().begin(), a.gossip_links().end());

  SyncExchangeOptions so;
  so.site = o_.site;
  so.job_id = a.job_id();
  so.attempt = a.attempt();
  so.stage = stage_;
  so.grid = o_.grid;
  so.live = live_;
  so.routes = SyncRoutes(o_.grid, o_.model, stage_, o_.sync.stagger);
  routes_ = so.routes;
  if (gossip() && o_.grid.tied_head) {
    // A multi-stage replica's two holders of the tied embedding: the first gossips it, the
    // last replays its rounds (tied_round.h).
    so.tied_slice = o_.fragment->layout().model().SliceIndex(model::Tensor::kWte, 0);
    for (size_t k = 0; o_.grid.tied(stage_) >= 0 && k < routes_.size(); ++k) {
      if (routes_[k].slice.index == so.tied_slice) tied_k_ = static_cast<int>(k);
    }
    tied_first_ = o_.grid.first(stage_);
    if (tied_k_ >= 0 && !(o_.tied_send && o_.tied_receive && o_.tied_values)) {
      return absl::InvalidArgumentError(Where() + ": holds the tied embedding with stage " +
                                        std::to_string(o_.grid.tied(stage_)) +
                                        " in a gossip job, and has no link to it");
    }
  }
  so.ring = a.sync_ring();  // the coordinator's decision, checked with the assignment
  // A dropped replica's stages sit out this attempt: no sender, no frames (SyncExchange).
  for (const auto& [peer, sender] : o_.to_stage) {
    if (peer < 0 || peer >= a.stages_size()) {
      return absl::InvalidArgumentError(Where() + ": a sync sender to stage " +
                                        std::to_string(peer) + " outside the plan");
    }
    if (sender) so.to_stage[peer] = sender;
    so.stage_sites[peer] = a.stages(peer).site();
  }
  const bool adaptive = o_.sync.codec == "adaptive";
  so.codec = adaptive ? kAdaptiveSyncStart : o_.sync.codec;
  const model::FragmentLayout& layout = o_.fragment->layout();
  // The tied embedding's copies (first and last stage) choose from different links: that
  // slice stays at the start codec, the same on both.
  if (adaptive) {
    so.pinned_slice = layout.model().SliceIndex(model::Tensor::kWte, 0);
    ASSIGN_OR_RETURN(SyncCodecChooser chooser, SyncCodecChooser::Create());
    codec_.emplace(std::move(chooser));
  }
  so.model_slices = layout.model().num_slices();
  so.inbox = o_.inbox;
  so.heartbeat_seconds = o_.heartbeat_seconds;
  so.stop = o_.stop;
  so.file_env = o_.file_env;
  if (gossip()) {
    so.peer_status = o_.peer_status;
    so.skipped_me = o_.skipped_me;
    so.on_unsent = o_.on_unsent;
    so.removed = o_.removed;
    so.gossip_grace_seconds = 5 * o_.heartbeat_seconds;
    so.gossip_tracking = o_.sync.tracking;
    if (fleet::GossipSendsLinks(o_.sync)) {
      ASSIGN_OR_RETURN(so.gossip_link_codec, fleet::GossipLinkCodec(o_.sync.codec));
      link_codec_ = so.gossip_link_codec;
    }
  }
  ASSIGN_OR_RETURN(exchange_, SyncExchange::Create(std::move(so)));
  if (gossip()) {
    std::vector<fleet::SyncSlice> slices;
    for (const SyncRoute& route : routes_) slices.push_back(route.slice);
    if (fleet::GossipSendsLinks(o_.sync)) {
      ASSIGN_OR_RETURN(links_, fleet::LinkGossipNode::Create(
                                   o_.grid.replica(stage_), o_.grid.replicas, std::move(slices),
                                   static_cast<size_t>(layout.total()), o_.sync.codec,
                                   o_.sync.tracking, o_.sync.outer));
      // The last stage's tied embedding replays its first stage's rounds: counted there.
      if (tied_k_ >= 0 && !tied_first_) links_->Uncount(static_cast<size_t>(tied_k_));
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(const double keep, fleet::GossipKeep(o_.sync));
    gossip_.emplace(std::move(slices), static_cast<size_t>(layout.total()), keep, o_.sync.tracking,
                    o_.sync.outer);
  }
  return absl::OkStatus();
}

std::vector<int64_t> ReplicaSync::ResidualSizes() const {
  std::vector<int64_t> sizes;
  for (const auto& s : fleet::SyncSlices(o_.fragment->layout())) sizes.push_back(s.size);
  return sizes;
}

void ReplicaSync::Fresh(bool resync) {
  if (!local()) return;
  std::vector<float> params(static_cast<size_t>(o_.fragment->layout().total()));
  o_.fragment->GetParameters(params.data());
  if (links_) {
    links_->Reset(params);  // weights 1, every link's copy at the start
    if (resync) links_->ResyncAll();
    return;
  }
  if (gossip_) {
    gossip_->Reset(params);  // weights 1, every coordinate sent last at its start
    return;
  }
  outer_.Reset(params);  // the first anchor: the initial parameters
}

Status ReplicaSync::Restore(SyncState state, uint64_t step) {
  if (links_) {
    const std::string where = Where() + ", step " + std::to_string(step);
    if (state.gossip_links.empty()) {
      return absl::DataLossError(where + ": the sync state has no gossip link state (sync.codec " +
                                 o_.sync.codec + " with gossip)");
    }
    RETURN_IF_ERROR(Annotate(links_->Restore(state.gossip_links), where));
    // A replica rejoining this attempt starts from another's parameters with copies of its
    // own: the links to and from it start again from key frames, at both ends.
    for (const uint32_t r : o_.assignment.rejoining_replicas()) {
      links_->ResyncWith(static_cast<int>(r));
    }
    // As below: the corrections' zero sum holds only among the same replicas.
    if (links_->tracking() && (o_.assignment.dropped_replicas_size() > 0 ||
                               o_.assignment.rejoining_replicas_size() > 0)) {
      links_->ZeroCorrections();
    }
  } else if (local()) {
    if (state.anchor.empty()) {
      return absl::DataLossError("job " + o_.assignment.job_id() + ": the sync state of step " +
                                 std::to_string(step) + " has no " +
                                 (gossip_ ? "gossip weights" : "outer-step anchor"));
    }
    if (gossip_) {
      const std::string where = Where() + ", step " + std::to_string(step);
      RETURN_IF_ERROR(
          Annotate(gossip_->Restore(std::move(state.momentum), std::move(state.anchor)), where));
      if (gossip_->tracking()) {
        if (state.corrections.empty()) {
          return absl::DataLossError(where + ": the sync state has no gradient-tracking state " +
                                     "(sync.tracking)");
        }
        RETURN_IF_ERROR(
            Annotate(gossip_->RestoreTracking(std::move(state.corrections),
                                              std::move(state.drift_anchor), state.lr_sum),
                     where));
        // A replica out of this attempt (dropped, removed) took its share of the corrections'
        // zero sum with it, and one rejoining brings none: every stage of such an attempt
        // starts the corrections again from 0 (a rejoining one's are 0 already, Fresh).
        if (o_.assignment.dropped_replicas_size() > 0 ||
            o_.assignment.rejoining_replicas_size() > 0) {
          gossip_->ZeroCorrections();
        }
      }
      if (gossip_->outer_step()) {
        if (state.gossip_outer_anchor.empty()) {
          return absl::DataLossError(where + ": the sync state has no outer-step state (" +
                                     "sync.outer with gossip)");
        }
        RETURN_IF_ERROR(Annotate(gossip_->RestoreOuter(std::move(state.gossip_outer_anchor),
                                                       std::move(state.gossip_outer_momentum)),
                                 where));
      }
    } else {
      RETURN_IF_ERROR(RestoreOuter(std::move(state.anchor), std::move(state.momentum)));
    }
  }
  return exchange_->RestoreResiduals(std::move(state.residuals));
}

Status ReplicaSync::Leave(std::span<const uint32_t> left) {
  if (!local() || gossip()) {
    return absl::FailedPreconditionError(
        Where() +
        ": replicas leave a gather or ring job in local mode at a step (a gossip "
        "job's leave its rounds at once; a step-mode job's restart)");
  }
  RETURN_IF_ERROR(Annotate(exchange_->Leave(left), Where()));
  for (uint32_t r : left) live_[r] = false;
  token_weights_ = fleet::TokenWeights(o_.microbatches, live_);
  return absl::OkStatus();
}

Status ReplicaSync::RestoreOuter(std::vector<float> anchor, std::vector<float> momentum) {
  if (!local()) return absl::OkStatus();
  if (gossip_ || links_) {
    // A copy of a live replica's parameters joins with weight 1 (its weights would count that
    // replica's mass twice). Over compressed links its copies are not its peers': every link
    // to and from it starts again from a key frame.
    Fresh();
    if (links_) links_->ResyncAll();
    return absl::OkStatus();
  }
  const size_t n = static_cast<size_t>(o_.fragment->layout().total());
  if (anchor.size() != n || momentum.size() != n) {
    return absl::DataLossError(Where() + ": an outer-step anchor of " +
                               std::to_string(anchor.size()) + " and momentum of " +
                               std::to_string(momentum.size()) + " floats for a fragment of " +
                               std::to_string(n));
  }
  return outer_.Restore(std::move(anchor), std::move(momentum));
}

void ReplicaSync::Save(SyncState* state) const {
  if (links_) {
    state->gossip_links = links_->Save();
  } else if (gossip_) {
    state->anchor = gossip_->refs();
    state->momentum = gossip_->weights();
    if (gossip_->tracking()) {
      state->corrections = gossip_->corrections();
      state->drift_anchor = gossip_->drift_anchor();
      state->lr_sum = gossip_->lr_sum();
    }
    if (gossip_->outer_step()) {
      state->gossip_outer_anchor = gossip_->outer_state().anchor();
      state->gossip_outer_momentum = gossip_->outer_state().momentum();
    }
  } else if (local()) {
    state->anchor = outer_.anchor();
    state->momentum = outer_.momentum();
  }
  state->residuals = exchange_->residuals();
  bool any = false;
  for (const auto& r : state->residuals) any = any || !r.empty();
  if (!any) state->residuals.clear();
}

Status ReplicaSync::SyncGradients(uint64_t step, double compute_seconds) {
  if (o_.sync.mode != fleet::SyncMode::kStep) return absl::OkStatus();
  const size_t n = static_cast<size_t>(o_.fragment->layout().total());
  std::vector<float> grads(n), sum(n);
  o_.fragment->GetGradients(grads.data());
  RETURN_IF_ERROR(ChooseCodec(compute_seconds, fleet::kEveryPhase));
  const std::vector<float> ones(static_cast<size_t>(o_.grid.replicas), 1.0f);
  RETURN_IF_ERROR(exchange_->AllGather(step, grads, ones, sum));
  o_.fragment->SetGradients(sum.data());
  return absl::OkStatus();
}

void ReplicaSync::Correct(float lr) {
  if (!(gossip_ && gossip_->tracking()) && !(links_ && links_->tracking())) return;
  std::vector<float> params(static_cast<size_t>(o_.fragment->layout().total()));
  o_.fragment->GetParameters(params.data());
  if (links_) {
    links_->Correct(params, lr);
  } else {
    gossip_->Correct(params, lr);
  }
  o_.fragment->SetParameters(params.data());
}

Status ReplicaSync::OuterStep(uint64_t step, double compute_seconds) {
  if (!local()) return absl::OkStatus();
  const fleet::LocalSyncAction action = fleet::LocalSyncAt(o_.sync, step + 1, o_.steps);
  if (gossip()) return action.blocking ? GossipSync(step) : absl::OkStatus();
  const size_t n = static_cast<size_t>(o_.fragment->layout().total());
  std::vector<float> params(n);
  if (action.finish) {
    // The streaming sync started `overlap` steps ago: the outer step, and what the inner
    // steps since then moved kept on top of the new anchor (fleet::OuterOptimizer::Rebase),
    // on the slices of its phase.
    if (started_.size() != n) {
      return absl::InternalError(Where() + ": the sync started after step " +
                                 std::to_string(action.started) + " has no start state");
    }
    std::vector<float> mean(n);
    RETURN_IF_ERROR(exchange_->Finish(mean));
    o_.fragment->GetParameters(params.data());
    for (const fleet::SyncSlice& slice : PhaseSlices(action.finish_phase)) {
      const size_t at = static_cast<size_t>(slice.offset), size = static_cast<size_t>(slice.size);
      outer_.StepPart(fleet::OuterStepAt(o_.sync, action.started), at,
                      std::span<const float>(mean).subspan(at, size));
      outer_.RebasePart(at, std::span<const float>(started_).subspan(at, size),
                        std::span<float>(params).subspan(at, size));
    }
    o_.fragment->SetParameters(params.data());
    started_ = {};
  }
  if (!action.blocking) return absl::OkStatus();
  std::vector<float> delta(n), mean(n);
  o_.fragment->GetParameters(params.data());
  outer_.PseudoGradient(params, delta);
  RETURN_IF_ERROR(ChooseCodec(ComputeUntilNextSync(step, compute_seconds), action.phase));
  // Each live replica's pseudo-gradient weighs by the tokens it trained since the last sync:
  // its microbatches of theirs (fleet::TokenWeights; equal when every replica trains as many).
  RETURN_IF_ERROR(exchange_->AllGather(step, delta, token_weights_, mean, action.phase));
  // The phase's slices take the outer step (plain averaging within the warm-up) and continue
  // from the new anchor.
  const fleet::OuterOptions outer = fleet::OuterStepAt(o_.sync, step + 1);
  for (const fleet::SyncSlice& slice : PhaseSlices(action.phase)) {
    const size_t at = static_cast<size_t>(slice.offset), size = static_cast<size_t>(slice.size);
    outer_.StepPart(outer, at, std::span<const float>(mean).subspan(at, size));
    std::copy_n(outer_.anchor().begin() + slice.offset, size, params.begin() + slice.offset);
  }
  o_.fragment->SetParameters(params.data());
  return absl::OkStatus();
}

Status ReplicaSync::GossipSync(uint64_t step) {
  const int N = o_.grid.replicas, me = o_.grid.replica(stage_);
  const uint64_t round = GossipRoundOf(o_.sync, step);
  const GossipLinkEpoch links =
      o_.links_at ? o_.links_at(round) : GossipLinkEpoch{0, 0, gossip_links_};
  const fleet::GossipGraph graph = GossipRoundGraph(o_.sync, live_, o_.seed, step, links.links);
  // The replicas removed as this stage knows them (TakeRemovals, after the exchange).
  uint64_t removed = 0;
  for (int r = 0; o_.removed && r < N; ++r) removed += o_.removed(r) ? 1 : 0;
  const std::vector<int>& out = graph.out[static_cast<size_t>(me)];
  const std::vector<int> from = graph.In(me);
  const size_t n = static_cast<size_t>(o_.fragment->layout().total());
  std::vector<float> params(n);
  o_.fragment->GetParameters(params.data());
  // The parameters before the round, sketched for the coordinator's consensus distance (each
  // slice once per replica: a multi-stage replica's tied embedding on its first stage only).
  const int wte = o_.fragment->layout().model().SliceIndex(model::Tensor::kWte, 0);
  std::vector<double> sketch(fleet::kConsensusSketchSize, 0.0);
  for (const SyncRoute& route : routes_) {
    const fleet::SyncSlice& s = route.slice;
    if (s.index == wte && o_.grid.position(stage_) != 0) continue;
    fleet::AddToSketch(static_cast<uint32_t>(s.index),
                       std::span<const float>(params).subspan(static_cast<size_t>(s.offset),
                                                              static_cast<size_t>(s.size)),
                       sketch);
  }
  {
    MutexLock lock(sketch_mu_);
    sketch_ = std::move(sketch);
    sketch_step_ = step + 1;
  }
  const std::string where = Where() + ", gossip round " + std::to_string(round) + " after step " +
                            std::to_string(step + 1);
  if (links_) {
    RETURN_IF_ERROR(LinkRound(step, round, graph, links.epoch, params, where, removed));
    if (step + 1 == o_.steps) {
      // Each slice's values with its one weight (fp32, in each coordinate's place), averaged as
      // the simulator's LinkGossipMixer::Average does.
      auto frame = [&](size_t k) {
        const fleet::SyncSlice& s = routes_[k].slice;
        const size_t size = static_cast<size_t>(s.size);
        std::vector<uint32_t> all(size);
        for (size_t c = 0; c < size; ++c) all[c] = static_cast<uint32_t>(c);
        const std::vector<float> w(size, static_cast<float>(links_->weight(k)));
        return fleet::EncodeGossipFrame(
            static_cast<uint32_t>(s.index), all,
            std::span<const float>(params).subspan(static_cast<size_t>(s.offset), size), w);
      };
      auto average = [&](size_t k, std::span<const fleet::GossipFrame* const> by_replica) {
        const fleet::SyncSlice& s = routes_[k].slice;
        std::vector<double> w;
        std::vector<std::span<const float>> x;
        for (const fleet::GossipFrame* f : by_replica) {
          for (size_t c = 1; c < f->w.size(); ++c) {
            if (f->w[c] != f->w[0]) {
              return absl::InvalidArgumentError(where + ", final average: a frame of slice " +
                                                std::to_string(s.index) +
                                                " weighs its coordinates differently");
            }
          }
          w.push_back(f->w[0]);
          x.push_back(f->x);
        }
        fleet::AverageLinkSlice(
            w, x, std::span<float>(params).subspan(static_cast<size_t>(s.offset), x[0].size()));
        return absl::OkStatus();
      };
      RETURN_IF_ERROR(FinalAverage(step, where, params, frame, average));
      links_->Averaged(params);
    }
    o_.fragment->SetParameters(params.data());
    return absl::OkStatus();
  }
  const uint64_t tied_hash = TiedHashOf(params);
  // Tracking: the drift since the last round; an outer step: params move by it (what is sent).
  gossip_->BeginRound(params);
  const size_t slices = routes_.size();
  std::vector<std::vector<uint32_t>> picked(slices);
  std::vector<std::vector<std::vector<uint8_t>>> frames(slices);
  if (!out.empty()) {
    for (size_t k = 0; k < slices; ++k) {
      picked[k] = gossip_->Pick(k, params, round);
      frames[k] = {gossip_->Frame(k, picked[k], params)};
    }
  }
  std::vector<std::vector<fleet::GossipFrame>> received;
  std::vector<int> senders;  // the in-neighbours whose frames came (a lost one's did not)
  std::vector<int> unsent;   // the out-neighbours sent nothing (lost): their shares stay here
  RETURN_IF_ERROR(Annotate(exchange_->Gossip(step, kGossipRoundTag, frames, out, from, &received,
                                             &senders, &unsent, nullptr, links.epoch),
                           where));
  ASSIGN_OR_RETURN(TiedSwap tied, SwapTied(step, tied_hash, senders, unsent, removed));
  TakeRemovals(tied.agreed.removed);
  std::vector<fleet::GossipNode::Received> in;
  for (size_t k = 0; k < slices; ++k) {
    const bool replayed = static_cast<int>(k) == tied_k_ && !tied_first_;
    const size_t kept = (replayed ? tied.agreed.unsent : unsent).size();
    const double own_share =
        (1.0 + static_cast<double>(kept)) / (1.0 + static_cast<double>(out.size()));
    const std::vector<int>& came = replayed ? tied.agreed.came : senders;
    in.clear();
    for (size_t i = 0; i < came.size(); ++i) {
      const double degree = static_cast<double>(graph.out[static_cast<size_t>(came[i])].size());
      in.push_back({1.0 / (1.0 + degree), replayed ? &tied.gossip_frames[i] : &received[k][i]});
    }
    gossip_->Apply(k, picked[k], own_share, in, params);
  }
  if (tied.agreed.split) RETURN_IF_ERROR(SendTied(step, params, where, /*mend=*/true));
  if (step + 1 == o_.steps) {
    RETURN_IF_ERROR(FinalAverage(
        step, where, params, [&](size_t k) { return gossip_->DenseFrame(k, params); },
        [&](size_t k, std::span<const fleet::GossipFrame* const> by_replica) {
          return Annotate(gossip_->Average(k, by_replica, params), where);
        }));
  }
  o_.fragment->SetParameters(params.data());
  return absl::OkStatus();
}

Status ReplicaSync::LinkRound(uint64_t step, uint64_t round, const fleet::GossipGraph& graph,
                              uint32_t links_epoch, std::vector<float>& params,
                              const std::string& where, uint64_t removed) {
  const int me = o_.grid.replica(stage_);
  const std::vector<int>& out = graph.out[static_cast<size_t>(me)];
  const std::vector<int> from = graph.In(me);
  const uint64_t tied_hash = TiedHashOf(params);
  links_->BeginRound(params);
  // A frame per out-neighbour, built on every stage that holds the slice even where another
  // of this replica's stages is the one that sends it (the tied embedding's two holders keep
  // the same copies).
  const size_t slices = routes_.size();
  std::vector<std::vector<std::vector<uint8_t>>> frames(slices);
  for (size_t k = 0; k < slices && !out.empty(); ++k) {
    frames[k].resize(static_cast<size_t>(o_.grid.replicas));
    for (int q : out) {
      ASSIGN_OR_RETURN(frames[k][static_cast<size_t>(q)], links_->Frame(k, q, round, params));
    }
  }
  std::vector<std::vector<fleet::GossipFrame>> unused;
  std::vector<std::vector<fleet::LinkFrame>> received;
  std::vector<int> senders, unsent;
  RETURN_IF_ERROR(Annotate(exchange_->Gossip(step, kGossipRoundTag, frames, out, from, &unused,
                                             &senders, &unsent, &received, links_epoch),
                           where));
  ASSIGN_OR_RETURN(TiedSwap tied, SwapTied(step, tied_hash, senders, unsent, removed));
  TakeRemovals(tied.agreed.removed);
  auto sent_of = [&](const std::vector<int>& kept) {
    std::vector<int> sent;
    for (int q : out) {
      if (std::find(kept.begin(), kept.end(), q) == kept.end()) sent.push_back(q);
    }
    return sent;
  };
  const std::vector<int> sent = sent_of(unsent), tied_sent = sent_of(tied.agreed.unsent);
  std::vector<fleet::LinkGossipNode::Received> in;
  for (size_t k = 0; k < slices; ++k) {
    const bool replayed = static_cast<int>(k) == tied_k_ && !tied_first_;
    const std::vector<int>& came = replayed ? tied.agreed.came : senders;
    in.clear();
    for (size_t i = 0; i < came.size(); ++i) {
      const double degree = static_cast<double>(graph.out[static_cast<size_t>(came[i])].size());
      in.push_back(
          {came[i], 1.0 / (1.0 + degree), replayed ? &tied.link_frames[i] : &received[k][i]});
    }
    if (replayed) {
      links_->Apply(k, tied_sent, tied.agreed.unsent, in, params);
    } else {
      links_->Apply(k, sent, unsent, in, params);
    }
    // Frames are checked one by one; what they make together is checked here (values near
    // fp32's range from a peer could still round past it): a round never leaves this stage
    // with parameters that are not finite.
    const fleet::SyncSlice& s = routes_[k].slice;
    for (int64_t c = 0; c < s.size; ++c) {
      if (!std::isfinite(params[static_cast<size_t>(s.offset + c)])) {
        std::string from;
        for (int r : senders) from += (from.empty() ? "" : ", ") + std::to_string(r);
        return absl::InvalidArgumentError(
            where + ": slice " + std::to_string(s.index) + " coordinate " + std::to_string(c) +
            " is not finite after mixing the frames of replicas " + (from.empty() ? "none" : from));
      }
    }
  }
  if (tied.agreed.split) RETURN_IF_ERROR(SendTied(step, params, where, /*mend=*/true));
  if (links_->stale_frames() > stale_seen_ && o_.log) {
    o_.log->warn(
        "{}: {} frames skipped since the start: their links' copies differed (a frame "
        "lost, a restart); key frames asked for",
        where, links_->stale_frames());
  }
  stale_seen_ = links_->stale_frames();
  MutexLock lock(sketch_mu_);
  key_frames_ = links_->key_frames();
  frames_skipped_ = links_->stale_frames();
  return absl::OkStatus();
}

Status ReplicaSync::FinalAverage(
    uint64_t step, const std::string& where, std::span<float> params,
    const std::function<std::vector<uint8_t>(size_t k)>& frame,
    const std::function<Status(size_t k, std::span<const fleet::GossipFrame* const>)>& average) {
  const int N = o_.grid.replicas, me = o_.grid.replica(stage_);
  std::vector<int> others;  // the live replicas but this one
  for (int r = 0; r < N; ++r) {
    if (live_[static_cast<size_t>(r)] && r != me) others.push_back(r);
  }
  const size_t slices = routes_.size();
  std::vector<std::vector<std::vector<uint8_t>>> frames(slices);
  for (size_t k = 0; k < slices; ++k) frames[k] = {frame(k)};
  std::vector<std::vector<fleet::GossipFrame>> received;
  std::vector<int> senders, unsent;
  RETURN_IF_ERROR(Annotate(exchange_->Gossip(step, GossipFinalTag(N), frames, others, others,
                                             &received, &senders, &unsent),
                           where + ", final average"));
  for (size_t k = 0; k < slices; ++k) {
    // The last stage's tied embedding: the first stage's average (below).
    if (static_cast<int>(k) == tied_k_ && !tied_first_) continue;
    const fleet::SyncSlice& s = routes_[k].slice;
    // Its own frame through the same checks (a parameter that is not finite fails here).
    StatusOr<fleet::GossipFrame> own = fleet::DecodeGossipFrame(
        frames[k][0], static_cast<uint32_t>(s.index), static_cast<uint64_t>(s.size));
    if (!own.ok()) return Annotate(own.status(), where + ", final average, this stage's frame");
    std::vector<const fleet::GossipFrame*> by_replica;
    size_t next = 0;
    for (int r = 0; r < N; ++r) {  // over the replicas still there, in replica order
      if (r == me) {
        by_replica.push_back(&*own);
      } else if (next < senders.size() && senders[next] == r) {
        by_replica.push_back(&received[k][next++]);
      }
    }
    RETURN_IF_ERROR(average(k, by_replica));
  }
  if (tied_k_ >= 0) RETURN_IF_ERROR(SendTied(step, params, where + ", final average", false));
  return absl::OkStatus();
}

StatusOr<ReplicaSync::TiedSwap> ReplicaSync::SwapTied(uint64_t step, uint64_t hash,
                                                      const std::vector<int>& senders,
                                                      const std::vector<int>& unsent,
                                                      uint64_t removed) {
  TiedRoundView mine;
  mine.step = step;
  mine.removed = removed;
  mine.hash = hash;
  if (tied_k_ < 0 || tied_first_) {
    mine.came = senders;
    mine.unsent = unsent;
    std::sort(mine.came.begin(), mine.came.end());
    std::sort(mine.unsent.begin(), mine.unsent.end());
  }
  TiedSwap swap;
  if (tied_k_ < 0) {
    swap.agreed = TiedAgreement{mine.came, mine.unsent, removed, false};
    return swap;
  }
  const int N = o_.grid.replicas, me = o_.grid.replica(stage_);
  const std::string where = Where() + ", the sync after step " + std::to_string(step + 1) +
                            ": the tied embedding with stage " +
                            std::to_string(o_.grid.tied(stage_));
  RETURN_IF_ERROR(Annotate(o_.tied_send(step, kTiedView, EncodeTiedRoundView(mine, N, me)), where));
  if (tied_first_) {
    const std::vector<TiedFrame> taken = exchange_->TakeForwarded();
    RETURN_IF_ERROR(
        Annotate(o_.tied_send(step, kTiedFrames, EncodeTiedFrames(step, taken)), where));
  }
  StatusOr<std::vector<uint8_t>> bytes = o_.tied_receive(step, kTiedView);
  if (!bytes.ok()) return Annotate(bytes.status(), where);
  StatusOr<TiedRoundView> theirs = DecodeTiedRoundView(*bytes, N, me, step);
  if (!theirs.ok()) return Annotate(theirs.status(), where);
  swap.agreed = tied_first_ ? AgreeTiedRound(mine, *theirs) : AgreeTiedRound(*theirs, mine);
  if (tied_first_) return swap;
  const fleet::SyncSlice& s = routes_[static_cast<size_t>(tied_k_)].slice;
  ASSIGN_OR_RETURN(const uint64_t most,
                   GossipRoundFrameMaxBytes(o_.sync, static_cast<uint64_t>(s.size)));
  bytes = o_.tied_receive(step, kTiedFrames);
  if (!bytes.ok()) return Annotate(bytes.status(), where);
  StatusOr<std::vector<TiedFrame>> frames = DecodeTiedFrames(*bytes, N, me, step, most);
  if (!frames.ok()) return Annotate(frames.status(), where);
  // Exactly the frames its view says came.
  std::vector<int> from;
  for (const auto& f : *frames) from.push_back(f.first);
  if (from != swap.agreed.came) {
    return absl::InvalidArgumentError(where + ": " + std::to_string(from.size()) +
                                      " frames for the " + std::to_string(swap.agreed.came.size()) +
                                      " replicas its view says came, or from others");
  }
  // The last stage's tied embedding replays the first stage's round from these frames.
  const uint32_t slice = static_cast<uint32_t>(s.index);
  const uint64_t size = static_cast<uint64_t>(s.size);
  for (const auto& [r, frame] : *frames) {
    StatusOr<GossipSliceFrame> f = DecodeGossipSliceFrame(frame, slice, size, link_codec_,
                                                          o_.sync.tracking, kGossipRoundTag, N);
    if (!f.ok()) return Annotate(f.status(), where + ": replica " + std::to_string(r) + "'s frame");
    if (f->link) {
      swap.link_frames.push_back(std::move(*f->link));
    } else {
      swap.gossip_frames.push_back(std::move(*f->gossip));
    }
  }
  return swap;
}

uint64_t ReplicaSync::TiedHashOf(std::span<const float> params) const {
  if (tied_k_ < 0) return 0;
  const fleet::SyncSlice& s = routes_[static_cast<size_t>(tied_k_)].slice;
  return TiedHash(params.subspan(static_cast<size_t>(s.offset), static_cast<size_t>(s.size)));
}

Status ReplicaSync::SendTied(uint64_t step, std::span<float> params, const std::string& where,
                             bool mend) {
  const fleet::SyncSlice& s = routes_[static_cast<size_t>(tied_k_)].slice;
  if (mend && o_.log) {
    o_.log->warn(
        "{}: the tied embedding's copies on this stage and stage {} differed before the round; "
        "the last stage takes the first's",
        where, o_.grid.tied(stage_));
  }
  RETURN_IF_ERROR(Annotate(o_.tied_values(step, params.subspan(static_cast<size_t>(s.offset),
                                                               static_cast<size_t>(s.size))),
                           where + ": the tied embedding " + (tied_first_ ? "to" : "from") +
                               " stage " + std::to_string(o_.grid.tied(stage_))));
  if (mend) {
    // Both holders now have the first's copy; an outer step's state for it starts over on both.
    if (links_) links_->RestartOuter(static_cast<size_t>(tied_k_), params);
    if (gossip_) gossip_->RestartOuter(static_cast<size_t>(tied_k_), params);
  }
  if (mend && !tied_first_) {  // counted once, by the stage that took the copy
    MutexLock lock(sketch_mu_);
    ++tied_mends_;
  }
  return absl::OkStatus();
}

void ReplicaSync::TakeRemovals(uint64_t removed) {
  // A replica removed since the last round took its share of the corrections' zero sum: every
  // live stage starts its corrections again from 0 at its first round after it learns of the
  // removal (near the same round everywhere: the coordinator tells them all at once; the tied
  // embedding's two holders at the same round, SwapTied).
  if (removed <= removed_seen_) return;
  removed_seen_ = removed;
  if (links_ && links_->tracking()) links_->ZeroCorrections();
  if (gossip_ && gossip_->tracking()) gossip_->ZeroCorrections();
}

Status ReplicaSync::StartSync(uint64_t step, double compute_seconds, bool resumed) {
  if (!local()) return absl::OkStatus();
  const fleet::LocalSyncAction action = fleet::LocalSyncAt(o_.sync, step + 1, o_.steps);
  if (!action.start) return absl::OkStatus();
  const size_t n = static_cast<size_t>(o_.fragment->layout().total());
  std::vector<float> params(n), delta(n);
  o_.fragment->GetParameters(params.data());
  outer_.PseudoGradient(params, delta);
  RETURN_IF_ERROR(ChooseCodec(ComputeUntilNextSync(step, compute_seconds), action.phase));
  std::vector<float> weights = token_weights_;
  const v1::StageAssignment& a = o_.assignment;
  if (resumed && a.rejoining_replicas_size() > 0) {
    // Started again at a rejoin: a rejoining replica starts from the anchor (Rejoin) and has
    // trained nothing since, so its zero pseudo-gradient does not count in this sync
    // (staggered, it starts from a live replica's parameters: a copy, not counted twice).
    const ReplicaList dropped(a.dropped_replicas().begin(), a.dropped_replicas().end());
    const ReplicaList rejoining(a.rejoining_replicas().begin(), a.rejoining_replicas().end());
    std::vector<bool> counted;
    for (int r = 0; r < o_.grid.replicas; ++r) {
      counted.push_back(!Contains(dropped, r) && !Contains(rejoining, r));
    }
    weights = fleet::TokenWeights(o_.microbatches, counted);
  }
  RETURN_IF_ERROR(exchange_->Start(step, delta, weights, action.phase));
  started_ = std::move(params);
  return absl::OkStatus();
}

void ReplicaSync::Cancel() {
  if (exchange_) exchange_->Cancel();
}

double ReplicaSync::wait_seconds() const { return exchange_->wait_seconds(); }
std::vector<OutboundUsage> ReplicaSync::Usage() const { return exchange_->Usage(); }
v1::SyncReport ReplicaSync::Report() const {
  v1::SyncReport r = exchange_->Report();
  MutexLock lock(sketch_mu_);
  r.set_key_frames(key_frames_);
  r.set_frames_skipped(frames_skipped_);
  r.set_tied_mends(tied_mends_);
  if (!sketch_.empty()) {
    *r.mutable_sketch() = {sketch_.begin(), sketch_.end()};
    r.set_sketch_step(sketch_step_);
  }
  return r;
}

double ReplicaSync::ComputeUntilNextSync(uint64_t step, double step_compute_seconds) const {
  // The steps to the next sync (fleet::StepsToNextSync: the next step's within the warm-up)
  // of this step's compute.
  return fleet::StepsToNextSync(o_.sync, step + 1) * step_compute_seconds;
}

std::vector<fleet::SyncSlice> ReplicaSync::PhaseSlices(int phase) const {
  const model::FragmentLayout& layout = o_.fragment->layout();
  std::vector<fleet::SyncSlice> slices;
  for (const fleet::SyncSlice& slice : fleet::SyncSlices(layout)) {
    if (fleet::InPhase(fleet::SlicePhase(layout.model(), slice.index, o_.sync.stagger), phase)) {
      slices.push_back(slice);
    }
  }
  return slices;
}

Status ReplicaSync::ChooseCodec(double compute_seconds, int phase) {
  // A phase this stage holds nothing of sends nothing: no choice to make.
  if (!codec_ || exchange_->PhaseValues(phase) == 0) return absl::OkStatus();
  std::vector<v1::LinkEstimate> links;
  // The links this stage's frames take (every other live holder's, or the next live one
  // around each ring) and the fragment's share each carries.
  for (int peer : exchange_->SendsTo()) {
    links.push_back(o_.monitor->Outbound(o_.assignment.stages(peer).site()));
  }
  const uint64_t bytes = static_cast<uint64_t>(static_cast<double>(exchange_->PhaseValues(phase)) *
                                               sizeof(float) * exchange_->SentShare());
  ASSIGN_OR_RETURN(const compression::Decision d,
                   codec_->Choose(links, bytes, compute_seconds, o_.file_env->NowSeconds()));
  if (d.changed && o_.log) {
    o_.log->info("job {} stage {}: sync codec {}: {}", o_.assignment.job_id(), stage_, d.codec,
                 d.explanation);
  }
  return exchange_->SetCodec(d.codec, "sync group, adaptive: " + d.explanation);
}

}  // namespace longhaul::daemon
