// One stage's side of the syncs between replicas (see sync_exchange.h): set-up, contributions
// out along the routes, frames in as they come on the receiver thread, the gathered sum in
// replica order, the codec and its residuals, and the sync's usage. The ring reduction's hops
// are in sync_exchange_ring.cc.
#include "daemon/job/sync/sync_exchange.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "compression/frame.h"
#include "daemon/job/sync/gossip_round.h"
#include "fleet/sync_options.h"

namespace longhaul::daemon {
StatusOr<std::unique_ptr<SyncExchange>> SyncExchange::Create(SyncExchangeOptions options) {
  const int replicas = options.grid.replicas;
  if (options.inbox == nullptr) return absl::InvalidArgumentError("sync exchange: no inbox");
  if (options.file_env == nullptr) {
    return absl::InvalidArgumentError("sync exchange: no file env");
  }
  if (options.live.empty()) options.live.assign(static_cast<size_t>(replicas), true);
  if (static_cast<int>(options.live.size()) != replicas) {
    return absl::InvalidArgumentError("sync exchange: " + std::to_string(replicas) +
                                      " replicas, liveness of " +
                                      std::to_string(options.live.size()));
  }
  for (const SyncRoute& route : options.routes) {
    if (static_cast<int>(route.source.size()) != replicas) {
      return absl::InvalidArgumentError(
          "sync exchange: slice " + std::to_string(route.slice.index) + " has sources for " +
          std::to_string(route.source.size()) + " of " + std::to_string(replicas) + " replicas");
    }
    for (int d : route.to) {
      if (options.live[options.grid.replica(d)] && options.to_stage.count(d) == 0) {
        return absl::FailedPreconditionError("sync exchange: no sender to stage " +
                                             std::to_string(d) + " (slice " +
                                             std::to_string(route.slice.index) + ")");
      }
    }
  }
  std::unique_ptr<SyncExchange> x(new SyncExchange(std::move(options)));
  RETURN_IF_ERROR(x->PlaceRings());
  RETURN_IF_ERROR(fleet::FixedSyncCodec(x->o_.codec).status());
  for (size_t k = 0; k < x->o_.routes.size(); ++k) {
    ASSIGN_OR_RETURN(auto encoder, fleet::ContributionEncoder::Create(x->o_.codec));
    x->encoders_.push_back(std::move(encoder));
  }
  x->NoteUsage();
  return x;
}

Status SyncExchange::PlaceRings() {
  if (!o_.ring) return absl::OkStatus();
  std::vector<RingPlace> places;
  for (const SyncRoute& route : o_.routes) {
    RingPlace place = RingOf(route, o_.live, o_.stage);
    if (place.position < 0) {
      return absl::FailedPreconditionError("sync exchange: stage " + std::to_string(o_.stage) +
                                           " is not on the ring of slice " +
                                           std::to_string(route.slice.index));
    }
    if (place.size() > 1 && o_.to_stage.count(place.next()) == 0) {
      return absl::FailedPreconditionError(
          "sync exchange: no sender to stage " + std::to_string(place.next()) +
          ", next on the ring of slice " + std::to_string(route.slice.index));
    }
    places.push_back(std::move(place));
  }
  places_ = std::move(places);
  return absl::OkStatus();
}

void SyncExchange::NoteUsage() {
  const std::vector<int> sends_to = SendsTo();
  const std::string codec = fleet::FixedSyncCodec(o_.codec)->ToString();
  MutexLock lock(mu_);
  // A stage no longer sent to (a replica left) keeps its entry: the bytes sent to it stay
  // counted in the usage and the sync report.
  for (const auto& [stage, sender] : o_.to_stage) {
    if (std::find(sends_to.begin(), sends_to.end(), stage) == sends_to.end()) continue;
    if (usage_.count(stage) > 0) continue;  // its bytes so far stay
    OutboundUsage& u = usage_[stage];
    const auto site = o_.stage_sites.find(stage);
    u.to_site = site == o_.stage_sites.end() ? "" : site->second;
    u.codec = codec;
    u.reason = std::string(o_.ring ? "sync around a ring" : "sync") + " (replica " +
               std::to_string(o_.grid.replica(stage)) + "'s stage " + std::to_string(stage) + ")";
  }
}

Status SyncExchange::Leave(std::span<const uint32_t> left) {
  if (in_flight()) {
    return absl::FailedPreconditionError("sync exchange: replicas cannot leave a sync in flight");
  }
  const int me = o_.grid.replica(o_.stage);
  for (uint32_t r : left) {
    if (r >= o_.live.size() || static_cast<int>(r) == me) {
      return absl::InvalidArgumentError("sync exchange of stage " + std::to_string(o_.stage) +
                                        ": replica " + std::to_string(r) + " cannot leave (" +
                                        std::to_string(o_.live.size()) +
                                        " replicas, this stage's " + std::to_string(me) + ")");
    }
  }
  const std::vector<bool> before = o_.live;
  for (uint32_t r : left) o_.live[r] = false;
  if (Status s = PlaceRings(); !s.ok()) {
    o_.live = before;
    return s;
  }
  NoteUsage();
  return absl::OkStatus();
}

Status SyncExchange::SendError() const {
  for (const auto& [stage, sender] : o_.to_stage) {
    if (sender != nullptr) RETURN_IF_ERROR(sender->error());
  }
  return absl::OkStatus();
}

Status SyncExchange::AllGather(uint64_t step, std::span<const float> values,
                               std::span<const float> weights, std::span<float> out, int phase) {
  // Refused before anything is sent: a member that failed only at the end would leave the
  // others a sync it did not finish.
  if (out.size() != values.size()) {
    return absl::InvalidArgumentError("sync of step " + std::to_string(step) + ": " +
                                      std::to_string(values.size()) + " values into " +
                                      std::to_string(out.size()));
  }
  RETURN_IF_ERROR(Start(step, values, weights, phase));
  blocking_ = true;  // all of it exposed
  return Finish(out);
}

std::vector<int> SyncExchange::SendsTo() const {
  std::vector<int> to;
  if (o_.ring) {
    for (const RingPlace& place : places_) {
      if (place.size() > 1) to.push_back(place.next());
    }
  } else {
    for (const SyncRoute& route : o_.routes) {
      for (int d : route.to) {
        if (o_.live[o_.grid.replica(d)]) to.push_back(d);
      }
    }
  }
  std::sort(to.begin(), to.end());
  to.erase(std::unique(to.begin(), to.end()), to.end());
  return to;
}

int64_t SyncExchange::PhaseValues(int phase) const {
  int64_t values = 0;
  for (const SyncRoute& route : o_.routes) {
    if (fleet::InPhase(route.phase, phase)) values += route.slice.size;
  }
  return values;
}

double SyncExchange::SentShare() const {
  if (!o_.ring || places_.empty()) return 1.0;
  const double L = places_[0].size();
  return L > 1 ? 2.0 * (L - 1) / L : 0.0;
}

Status SyncExchange::Send(uint64_t step, size_t k, uint32_t microbatch, int to,
                          std::vector<uint8_t> frame, bool backlog, uint32_t links_epoch) {
  // The values it carries: the slice (gather) or the hop's chunk of it (ring).
  const fleet::SyncSlice& slice = o_.routes[k].slice;
  const uint64_t values =
      o_.ring ? static_cast<uint64_t>(
                    fleet::RingChunkOf(slice.size, places_[k].size(),
                                       fleet::RingSendChunk(places_[k].size(), places_[k].position,
                                                            static_cast<int>(microbatch)))
                        .size())
              : static_cast<uint64_t>(slice.size);
  OutgoingTensor t;
  v1::TensorFrame& h = t.header;
  h.set_job_id(o_.job_id);
  h.set_attempt(o_.attempt);
  h.set_step(step);
  h.set_microbatch(microbatch);
  h.set_kind(v1::TENSOR_KIND_SYNC);
  h.set_tensor_id(static_cast<uint32_t>(slice.index));
  h.set_from_stage(static_cast<uint32_t>(o_.stage));
  h.set_to_stage(static_cast<uint32_t>(to));
  h.set_from_site(o_.site);
  if (links_epoch > 0) h.set_links_epoch(links_epoch);
  const uint64_t wire = frame.size();
  t.payload = std::move(frame);
  if (backlog) {
    backlog_.emplace_back(to, std::move(t));
    RETURN_IF_ERROR(DrainBacklog());
  } else {
    RETURN_IF_ERROR(o_.to_stage.at(to)->Enqueue(std::move(t)));
  }
  MutexLock lock(mu_);
  OutboundUsage& u = usage_[to];
  ++u.tensors;
  u.raw_bytes += values * sizeof(float);
  u.wire_bytes += wire;
  return absl::OkStatus();
}

Status SyncExchange::Start(uint64_t step, std::span<const float> values,
                           std::span<const float> weights, int phase) {
  if (in_flight()) {
    return absl::FailedPreconditionError("sync of step " + std::to_string(step) +
                                         ": the previous sync has not finished");
  }
  const int replicas = o_.grid.replicas;
  if (weights.size() != static_cast<size_t>(replicas)) {
    return absl::InvalidArgumentError("sync: " + std::to_string(weights.size()) + " weights for " +
                                      std::to_string(replicas) + " replicas");
  }
  begin_ = o_.file_env->NowSeconds();
  blocking_ = false;
  weights_.assign(weights.begin(), weights.end());
  const int me = o_.grid.replica(o_.stage);
  const size_t n = values.size();
  for (const SyncRoute& route : o_.routes) {
    const fleet::SyncSlice& slice = route.slice;
    if (slice.offset < 0 || slice.offset + slice.size > static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError("sync: slice " + std::to_string(slice.index) +
                                        " outside the fragment's " + std::to_string(n) + " values");
    }
  }
  std::vector<TensorKey> wanted;
  if (o_.ring) {
    RETURN_IF_ERROR(StartRing(step, values, weights_[static_cast<size_t>(me)], phase, &wanted));
  } else {
    decoded_.assign(static_cast<size_t>(replicas), std::vector<float>(n));
    for (size_t k = 0; k < o_.routes.size(); ++k) {
      if (!fleet::InPhase(o_.routes[k].phase, phase)) continue;
      const fleet::SyncSlice& slice = o_.routes[k].slice;
      const std::span<const float> part = values.subspan(slice.offset, slice.size);
      std::vector<uint8_t> frame;
      RETURN_IF_ERROR(encoders_[k]->Encode(
          part, fleet::SyncSeed(step, slice.index, o_.model_slices, me, replicas), &frame));
      ASSIGN_OR_RETURN(const compression::FrameHeader own, compression::ParseFrameHeader(frame));
      RETURN_IF_ERROR(compression::DecodeFrameValues(
          own, frame, std::span<float>(decoded_[me].data() + slice.offset, slice.size)));
      for (int r = 0; r < replicas; ++r) {
        if (r == me || !o_.live[r]) continue;
        wanted.push_back({o_.attempt, step, static_cast<uint32_t>(r), v1::TENSOR_KIND_SYNC,
                          static_cast<uint32_t>(slice.index)});
      }
      for (int d : o_.routes[k].to) {
        if (!o_.live[o_.grid.replica(d)]) continue;
        RETURN_IF_ERROR(Send(step, k, static_cast<uint32_t>(me), d, frame));
      }
    }
  }
  // The others' frames, as they come, on a thread of its own.
  started_at_ = o_.file_env->NowSeconds();
  cancel_ = false;
  receive_status_ = absl::OkStatus();
  receiver_ =
      std::thread([this, wanted = std::move(wanted)]() mutable { Receive(std::move(wanted)); });
  return absl::OkStatus();
}

Status SyncExchange::TakeGathered(const TensorKey& key, const ReceivedTensor& t) {
  const fleet::SyncSlice* slice = nullptr;
  for (const auto& route : o_.routes) {
    if (static_cast<uint32_t>(route.slice.index) == key.tensor_id) slice = &route.slice;
  }
  if (slice == nullptr || key.microbatch >= static_cast<uint32_t>(o_.grid.replicas)) {
    return absl::InternalError("sync: unexpected tensor " + key.DebugString());
  }
  compression::FrameLimits limits;
  limits.max_elements = static_cast<uint64_t>(slice->size);
  auto header = compression::ParseFrameHeader(t.payload, limits);
  if (!header.ok() || header->element_count != static_cast<uint64_t>(slice->size)) {
    return absl::InvalidArgumentError(
        "sync tensor " + key.DebugString() + " from " + t.from_site + ": " +
        (header.ok() ? std::to_string(header->element_count) + " values, the slice has " +
                           std::to_string(slice->size)
                     : std::string(header.status().message())));
  }
  return Annotate(
      compression::DecodeFrameValues(
          *header, t.payload,
          std::span<float>(decoded_[key.microbatch].data() + slice->offset, slice->size)),
      "sync tensor " + key.DebugString() + " from " + t.from_site);
}

void SyncExchange::Receive(std::vector<TensorKey> wanted) {
  auto stopped = [this] { return cancel_.load() || (o_.stop != nullptr && o_.stop->load()); };
  // Gossip asks after senders whose frames are late: at once for those lost before, else
  // after the grace, then every grace.
  const double grace = std::max(o_.gossip_grace_seconds, 0.0);
  const double began = o_.file_env->NowSeconds();
  bool suspect = false;
  for (const TensorKey& key : wanted) {
    const int r = static_cast<int>(key.microbatch - gossip_tag_);
    suspect = suspect || (gossip_ && r >= 0 && static_cast<size_t>(r) < lost_.size() && lost_[r]);
  }
  double next_check = began + (suspect ? 0.0 : grace);
  auto run = [&]() -> Status {
    while (!wanted.empty() || !backlog_.empty()) {
      if (stopped()) return absl::AbortedError("stopped");
      RETURN_IF_ERROR(SendError());  // a member that refused ours will not send its own
      RETURN_IF_ERROR(DrainBacklog());
      if (gossip_ && o_.peer_status && !wanted.empty()) {
        const double now = o_.file_env->NowSeconds();
        if (now >= next_check) {
          const bool unsure = DropLostSenders(&wanted);
          // A sender not known yet is asked again after a heartbeat, not a whole grace.
          next_check =
              now + (unsure ? o_.heartbeat_seconds : std::max(grace, o_.heartbeat_seconds));
          if (wanted.empty()) continue;
        }
      }
      // With frames still to queue, look back at the links often.
      const double wait =
          backlog_.empty() ? o_.heartbeat_seconds : std::min(o_.heartbeat_seconds, 0.01);
      if (wanted.empty()) {
        std::this_thread::sleep_for(std::chrono::duration<double>(wait));
        continue;
      }
      auto got = o_.inbox->TakeAny(wanted, wait);
      if (!got.ok() && got.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
      if (!got.ok()) return got.status();
      const TensorKey key = got->first;
      wanted.erase(std::find(wanted.begin(), wanted.end(), key));
      RETURN_IF_ERROR(o_.ring   ? TakeRing(key, std::move(got->second))
                      : gossip_ ? TakeGossip(key, got->second)
                                : TakeGathered(key, got->second));
    }
    return absl::OkStatus();
  };
  receive_status_ = run();
  received_at_ = o_.file_env->NowSeconds();
}

void SyncExchange::Join() {
  if (receiver_.joinable()) receiver_.join();
}

void SyncExchange::Cancel() {
  cancel_ = true;
  Join();
  decoded_.clear();
  gossip_in_.clear();
  gossip_link_in_.clear();
  gossip_ = false;
  ring_.clear();
  early_.clear();
  backlog_.clear();
  ring_values_ = {};
  ring_out_ = {};
}

SyncExchange::~SyncExchange() { Cancel(); }

Status SyncExchange::Finish(std::span<float> out) {
  if (!in_flight()) return absl::FailedPreconditionError("sync: no sync in flight to finish");
  const double wait_start = o_.file_env->NowSeconds();
  Join();  // the receiver ends when every frame is in, on a stop, or on an error
  const double wait_end = o_.file_env->NowSeconds();
  wait_seconds_ += wait_end - wait_start;
  RETURN_IF_ERROR(receive_status_);
  const int replicas = o_.grid.replicas;
  if (o_.ring) {
    if (out.size() != ring_out_.size()) {
      return absl::InvalidArgumentError("sync: " + std::to_string(ring_out_.size()) +
                                        " values into " + std::to_string(out.size()));
    }
    for (const std::optional<fleet::RingMember>& m : ring_) {
      if (m && !m->done()) return absl::InternalError("sync: a ring ended before its last hop");
    }
    std::copy(ring_out_.begin(), ring_out_.end(), out.begin());
    ring_.clear();
    early_.clear();
    ring_values_ = {};  // two fragments' worth, until the next sync
    ring_out_ = {};
  } else {
    const size_t n = decoded_.empty() ? 0 : decoded_[0].size();
    if (out.size() != n) {
      return absl::InvalidArgumentError("sync: " + std::to_string(n) + " values into " +
                                        std::to_string(out.size()));
    }
    // The sum in replica order, as fleet::SumContributions adds: from zero, weight x value.
    std::fill(out.begin(), out.end(), 0.0f);
    for (int r = 0; r < replicas; ++r) {
      if (!o_.live[r]) continue;
      fleet::AddWeighted(weights_[static_cast<size_t>(r)], decoded_[static_cast<size_t>(r)], out);
    }
    decoded_.clear();
  }
  MutexLock lock(mu_);
  ++syncs_;
  // Exposed: from Start to the return when it blocks (AllGather), else Start's encoding and
  // queueing and the wait here; the receiver's time before Finish was called ran behind the
  // steps.
  const double now = o_.file_env->NowSeconds();
  sync_seconds_ += blocking_ ? now - begin_ : (started_at_ - begin_) + (now - wait_start);
  if (!blocking_) {
    hidden_seconds_ += std::max(0.0, std::min(received_at_, wait_start) - started_at_);
  }
  return absl::OkStatus();
}

Status SyncExchange::Gossip(uint64_t step, uint32_t tag,
                            std::span<const std::vector<std::vector<uint8_t>>> frames,
                            std::span<const int> to, std::span<const int> from,
                            std::vector<std::vector<fleet::GossipFrame>>* received,
                            std::vector<int>* senders, std::vector<int>* unsent,
                            std::vector<std::vector<fleet::LinkFrame>>* links,
                            uint32_t links_epoch) {
  const bool link = o_.gossip_link_codec.has_value() && tag == kGossipRoundTag;
  if (link && links == nullptr) {
    return absl::InvalidArgumentError("gossip of step " + std::to_string(step) +
                                      ": a round over compressed links needs room for its frames");
  }
  if (in_flight()) {
    return absl::FailedPreconditionError("gossip of step " + std::to_string(step) +
                                         ": a sync is in flight");
  }
  if (frames.size() != o_.routes.size()) {
    return absl::InvalidArgumentError("gossip of step " + std::to_string(step) + ": " +
                                      std::to_string(frames.size()) + " frames for " +
                                      std::to_string(o_.routes.size()) + " slices");
  }
  const int me = o_.grid.replica(o_.stage);
  begin_ = o_.file_env->NowSeconds();
  blocking_ = true;
  gossip_ = true;
  // However it ends, the exchange is back to gathering (or its ring) for the next sync.
  struct Reset {
    SyncExchange* x;
    ~Reset() {
      x->gossip_ = false;
      x->gossip_from_.clear();
      x->gossip_in_.clear();
      x->gossip_link_in_.clear();
      x->gossip_raw_.clear();
    }
  } reset{this};
  gossip_tag_ = tag;
  gossip_skipped_.clear();
  unsent->clear();
  lost_.resize(static_cast<size_t>(o_.grid.replicas), false);
  for (int r = 0; o_.removed && r < o_.grid.replicas; ++r) {
    if (o_.removed(r)) lost_[static_cast<size_t>(r)] = true;  // its stages answer kGone
  }
  gossip_from_.assign(from.begin(), from.end());
  gossip_in_.assign(o_.routes.size(), std::vector<std::optional<fleet::GossipFrame>>(from.size()));
  if (link) {
    gossip_link_in_.assign(o_.routes.size(),
                           std::vector<std::optional<fleet::LinkFrame>>(from.size()));
  }
  forwarded_.clear();
  const bool forwards = o_.tied_slice >= 0 && o_.grid.tied(o_.stage) >= 0 &&
                        o_.grid.first(o_.stage) && tag == kGossipRoundTag;
  if (forwards) gossip_raw_.assign(from.size(), {});
  std::vector<TensorKey> wanted;
  for (size_t k = 0; k < o_.routes.size(); ++k) {
    const SyncRoute& route = o_.routes[k];
    if (Relays(route, o_.stage)) continue;  // the first stage's to exchange
    for (int r : from) {
      wanted.push_back({o_.attempt, step, tag + static_cast<uint32_t>(r), v1::TENSOR_KIND_SYNC,
                        static_cast<uint32_t>(route.slice.index)});
    }
    if (frames[k].empty()) continue;
    if (frames[k].size() != 1 && frames[k].size() != static_cast<size_t>(o_.grid.replicas)) {
      return absl::InvalidArgumentError("gossip of step " + std::to_string(step) + ": slice " +
                                        std::to_string(route.slice.index) + " has " +
                                        std::to_string(frames[k].size()) + " frames for " +
                                        std::to_string(o_.grid.replicas) + " replicas");
    }
    for (int d : route.to) {
      const int r = o_.grid.replica(d);
      if (!o_.live[r] || std::find(to.begin(), to.end(), r) == to.end()) continue;
      if (Relays(route, d)) continue;  // takes it from its own first stage
      if (std::find(unsent->begin(), unsent->end(), r) != unsent->end()) continue;
      // A replica lost before gets frames again once its stage runs this attempt (asked
      // once per exchange).
      if (lost_[static_cast<size_t>(r)]) {
        if (StatusOf(d) != PeerStatus::kRunning) {
          unsent->push_back(r);
          // Told for a round (the final average shares its step): for its skipped_me.
          if (o_.on_unsent && tag == kGossipRoundTag) o_.on_unsent(r, step);
          continue;
        }
        lost_[static_cast<size_t>(r)] = false;
      }
      const std::vector<uint8_t>& frame = frames[k][frames[k].size() == 1 ? 0 : r];
      if (frame.empty()) {
        return absl::InvalidArgumentError("gossip of step " + std::to_string(step) +
                                          ": no frame of slice " +
                                          std::to_string(route.slice.index) + " for replica " +
                                          std::to_string(r) + ", an out-neighbour");
      }
      RETURN_IF_ERROR(Send(step, k, tag + static_cast<uint32_t>(me), d, frame, false, links_epoch));
    }
  }
  std::sort(unsent->begin(), unsent->end());
  started_at_ = o_.file_env->NowSeconds();
  cancel_ = false;
  receive_status_ = absl::OkStatus();
  receiver_ =
      std::thread([this, wanted = std::move(wanted)]() mutable { Receive(std::move(wanted)); });
  const double wait_start = o_.file_env->NowSeconds();
  Join();
  wait_seconds_ += o_.file_env->NowSeconds() - wait_start;
  RETURN_IF_ERROR(receive_status_);
  received->assign(o_.routes.size(), {});
  if (links != nullptr) links->assign(o_.routes.size(), {});
  senders->clear();
  for (int r : gossip_from_) {
    if (std::find(gossip_skipped_.begin(), gossip_skipped_.end(), r) == gossip_skipped_.end()) {
      senders->push_back(r);
    }
  }
  for (size_t i = 0; i < gossip_raw_.size(); ++i) {
    if (std::find(gossip_skipped_.begin(), gossip_skipped_.end(), gossip_from_[i]) ==
        gossip_skipped_.end()) {
      forwarded_.emplace_back(gossip_from_[i], std::move(gossip_raw_[i]));
    }
  }
  for (size_t k = 0; k < o_.routes.size(); ++k) {
    if (Relays(o_.routes[k], o_.stage)) continue;  // none taken here
    for (size_t i = 0; i < gossip_in_[k].size(); ++i) {
      std::optional<fleet::GossipFrame>& f = gossip_in_[k][i];
      if (std::find(gossip_skipped_.begin(), gossip_skipped_.end(), gossip_from_[i]) !=
          gossip_skipped_.end()) {
        continue;  // lost: what came of it is left out whole
      }
      if (link && gossip_link_in_[k][i]) {
        (*links)[k].push_back(std::move(*gossip_link_in_[k][i]));
        continue;
      }
      if (!f || link) {
        return absl::InternalError(
            "gossip of step " + std::to_string(step) + " (tag " + std::to_string(tag) +
            "): slice " + std::to_string(o_.routes[k].slice.index) + "'s frame from " + "replica " +
            std::to_string(gossip_from_[i]) + " missing after the exchange");
      }
      (*received)[k].push_back(std::move(*f));
    }
  }
  MutexLock lock(mu_);
  if (tag == 0) ++syncs_;  // a round (the job's final average is not one more sync)
  sync_seconds_ += o_.file_env->NowSeconds() - begin_;
  return absl::OkStatus();
}

bool SyncExchange::NothingFrom(int replica) const {
  const auto at = std::find(gossip_from_.begin(), gossip_from_.end(), replica);
  if (at == gossip_from_.end()) return true;
  const size_t i = static_cast<size_t>(at - gossip_from_.begin());
  for (size_t k = 0; k < gossip_in_.size(); ++k) {
    if (i < gossip_in_[k].size() && gossip_in_[k][i]) return false;
    if (k < gossip_link_in_.size() && i < gossip_link_in_[k].size() && gossip_link_in_[k][i]) {
      return false;
    }
  }
  return true;
}

bool SyncExchange::SkippedByAll(int replica, const std::vector<TensorKey>& wanted,
                                uint64_t step) const {
  std::set<int> stages;  // the replica's stages whose frames this round still waits for
  for (const TensorKey& key : wanted) {
    if (static_cast<int>(key.microbatch - gossip_tag_) != replica) continue;
    for (const SyncRoute& route : o_.routes) {
      if (static_cast<uint32_t>(route.slice.index) == key.tensor_id &&
          static_cast<size_t>(replica) < route.source.size()) {
        stages.insert(route.source[static_cast<size_t>(replica)]);
      }
    }
  }
  for (int stage : stages) {
    if (!o_.skipped_me(stage, step)) return false;
  }
  return !stages.empty();
}

PeerStatus SyncExchange::StatusOf(int stage) const {
  return o_.peer_status ? o_.peer_status(stage) : PeerStatus::kRunning;
}

bool SyncExchange::DropLostSenders(std::vector<TensorKey>* wanted) {
  bool unsure = false;
  // The stage each late replica's frames come from (its first late slice's source).
  std::map<int, int> late;  // replica -> stage
  for (const TensorKey& key : *wanted) {
    const int r = static_cast<int>(key.microbatch - gossip_tag_);
    for (const SyncRoute& route : o_.routes) {
      if (static_cast<uint32_t>(route.slice.index) == key.tensor_id &&
          static_cast<size_t>(r) < route.source.size()) {
        late.emplace(r, route.source[static_cast<size_t>(r)]);
      }
    }
  }
  const uint64_t step = wanted->empty() ? 0 : wanted->front().step;
  for (const auto& [replica, stage] : late) {
    const PeerStatus p = StatusOf(stage);
    unsure = unsure || p == PeerStatus::kStarting;
    // A running sender that left this replica out of the round (it found it lost: a link
    // down between them while it sent) sends nothing more for it: each of its stages this
    // round waits for says so, and none of its frames came (a round's, not the final
    // average's, which shares the step).
    const bool skipped = p == PeerStatus::kRunning && o_.skipped_me &&
                         gossip_tag_ == kGossipRoundTag && NothingFrom(replica) &&
                         SkippedByAll(replica, *wanted, step);
    if (p != PeerStatus::kGone && !skipped) continue;
    const int r = replica;  // (a lambda may not capture a structured binding before C++20's)
    std::erase_if(*wanted, [&](const TensorKey& key) {
      return static_cast<int>(key.microbatch - gossip_tag_) == r;
    });
    gossip_skipped_.push_back(r);
    if (skipped) continue;  // running: not lost
    if (!lost_[static_cast<size_t>(r)]) ++gossip_losses_;
    lost_[static_cast<size_t>(r)] = true;
  }
  return unsure;
}

Status SyncExchange::TakeGossip(const TensorKey& key, const ReceivedTensor& t) {
  size_t k = 0;
  while (k < o_.routes.size() && static_cast<uint32_t>(o_.routes[k].slice.index) != key.tensor_id) {
    ++k;
  }
  const auto at = std::find(gossip_from_.begin(), gossip_from_.end(),
                            static_cast<int>(key.microbatch - gossip_tag_));
  if (k == o_.routes.size() || key.microbatch < gossip_tag_ || at == gossip_from_.end()) {
    return absl::InternalError("gossip: unexpected tensor " + key.DebugString());
  }
  const fleet::SyncSlice& slice = o_.routes[k].slice;
  const size_t i = static_cast<size_t>(at - gossip_from_.begin());
  if (slice.index == o_.tied_slice && !gossip_raw_.empty()) gossip_raw_[i] = t.payload;
  auto decoded = DecodeGossipSliceFrame(t.payload, static_cast<uint32_t>(slice.index),
                                        static_cast<uint64_t>(slice.size), o_.gossip_link_codec,
                                        o_.gossip_tracking, key.microbatch, o_.grid.replicas);
  if (!decoded.ok()) {
    return Status(decoded.status().code(), "sync tensor " + key.DebugString() + " from " +
                                               t.from_site + ": " +
                                               std::string(decoded.status().message()));
  }
  if (decoded->link.has_value() != !gossip_link_in_.empty()) {
    return absl::InternalError("gossip: tensor " + key.DebugString() +
                               " is not of the round this exchange waits for");
  }
  if (decoded->link) {  // a round over compressed links
    gossip_link_in_[k][i] = std::move(*decoded->link);
    return absl::OkStatus();
  }
  std::optional<fleet::GossipFrame>& f = decoded->gossip;
  if (gossip_tag_ != 0 && !f->dense) {  // the final average takes every coordinate
    return absl::InvalidArgumentError(
        "sync tensor " + key.DebugString() + " from " + t.from_site +
        ": a final average's frame of slice " + std::to_string(slice.index) + " with " +
        std::to_string(f->count()) + " of its " + std::to_string(slice.size) + " coordinates");
  }
  gossip_in_[k][i] = std::move(*f);
  return absl::OkStatus();
}

v1::SyncReport SyncExchange::Report() const {
  MutexLock lock(mu_);
  v1::SyncReport r;
  r.set_syncs(syncs_);
  r.set_seconds(sync_seconds_);
  r.set_hidden_seconds(hidden_seconds_);
  for (const auto& [stage, u] : usage_) {
    if (r.codec().empty()) r.set_codec(u.codec);
    r.set_raw_bytes(r.raw_bytes() + u.raw_bytes);
    r.set_wire_bytes(r.wire_bytes() + u.wire_bytes);
  }
  return r;
}

Status SyncExchange::SetCodec(const std::string& codec, const std::string& reason) {
  if (in_flight()) {
    return absl::FailedPreconditionError("sync codec " + codec +
                                         ": a sync is in flight (set it between syncs)");
  }
  ASSIGN_OR_RETURN(const compression::CodecSpec spec, fleet::FixedSyncCodec(codec));
  if (codec != o_.codec) {
    std::vector<std::unique_ptr<fleet::ContributionEncoder>> encoders;
    for (size_t k = 0; k < encoders_.size(); ++k) {
      if (o_.routes[k].slice.index == o_.pinned_slice) {
        encoders.push_back(std::move(encoders_[k]));
        continue;
      }
      ASSIGN_OR_RETURN(auto encoder, fleet::ContributionEncoder::Create(codec));
      RETURN_IF_ERROR(encoder->RestoreResidual(encoders_[k]->residual(),
                                               static_cast<size_t>(o_.routes[k].slice.size)));
      encoders.push_back(std::move(encoder));
    }
    encoders_ = std::move(encoders);
    o_.codec = codec;
  }
  MutexLock lock(mu_);
  for (auto& [stage, u] : usage_) {
    u.codec = spec.ToString();
    if (!reason.empty()) u.reason = reason;
  }
  return absl::OkStatus();
}

std::vector<std::vector<float>> SyncExchange::residuals() const {
  std::vector<std::vector<float>> r;
  for (const auto& e : encoders_) r.push_back(e->residual());
  return r;
}

Status SyncExchange::RestoreResiduals(std::vector<std::vector<float>> residuals) {
  if (residuals.empty()) return absl::OkStatus();  // none carried
  if (residuals.size() != encoders_.size()) {
    return absl::DataLossError("sync residuals for " + std::to_string(residuals.size()) +
                               " slices, the fragment has " + std::to_string(encoders_.size()));
  }
  for (size_t k = 0; k < residuals.size(); ++k) {
    RETURN_IF_ERROR(encoders_[k]->RestoreResidual(std::move(residuals[k]),
                                                  static_cast<size_t>(o_.routes[k].slice.size)));
  }
  return absl::OkStatus();
}

std::vector<OutboundUsage> SyncExchange::Usage() const {
  MutexLock lock(mu_);
  std::vector<OutboundUsage> out;
  for (const auto& [stage, u] : usage_) {
    out.push_back(u);
    out.back().send_seconds = o_.to_stage.at(stage)->stats().send_seconds;
  }
  return out;
}

}  // namespace longhaul::daemon
