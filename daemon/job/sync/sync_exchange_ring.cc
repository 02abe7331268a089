// SyncExchange's ring reduction (sync.reduce: ring, fleet/sync_ring.h; see sync_exchange.h):
// Start's first hop of each slice's ring, the receiver thread's hops taken in order however
// they come (early ones kept here) with the next hop sent on, and the backlog through which
// the receiver queues those sends without blocking.
#include <map>
#include <utility>
#include <vector>

#include "daemon/job/sync/sync_exchange.h"
#include "fleet/sync_options.h"

namespace longhaul::daemon {

Status SyncExchange::DrainBacklog() {
  while (!backlog_.empty()) {
    auto& [to, tensor] = backlog_.front();
    ASSIGN_OR_RETURN(const bool queued, o_.to_stage.at(to)->TryEnqueue(&tensor));
    if (!queued) return absl::OkStatus();  // the link is full: later
    backlog_.pop_front();
  }
  return absl::OkStatus();
}

Status SyncExchange::StartRing(uint64_t step, std::span<const float> values, float weight,
                               int phase, std::vector<TensorKey>* wanted) {
  const int me = o_.grid.replica(o_.stage);
  ring_values_.assign(values.begin(), values.end());
  ring_out_.assign(values.size(), 0.0f);
  ring_.clear();
  ring_.resize(o_.routes.size());
  early_.assign(o_.routes.size(), {});
  backlog_.clear();
  for (size_t k = 0; k < o_.routes.size(); ++k) {
    if (!fleet::InPhase(o_.routes[k].phase, phase)) continue;
    const fleet::SyncSlice& slice = o_.routes[k].slice;
    const RingPlace& place = places_[k];
    const size_t at = static_cast<size_t>(slice.offset), size = static_cast<size_t>(slice.size);
    ring_[k].emplace(place.size(), place.position,
                     std::span<const float>(ring_values_).subspan(at, size), weight,
                     encoders_[k].get(),
                     fleet::SyncSeed(step, slice.index, o_.model_slices, me, o_.grid.replicas),
                     std::span<float>(ring_out_).subspan(at, size));
    std::vector<uint8_t> frame;
    RETURN_IF_ERROR(ring_[k]->Begin(&frame));
    if (ring_[k]->done()) continue;  // a ring of one
    RETURN_IF_ERROR(Send(step, k, 0, place.next(), std::move(frame)));
    // Every hop's frame, taken as it comes (one may overtake another on a link).
    for (int hop = 0; hop < fleet::RingHops(place.size()); ++hop) {
      wanted->push_back({o_.attempt, step, static_cast<uint32_t>(hop), v1::TENSOR_KIND_SYNC,
                         static_cast<uint32_t>(slice.index)});
    }
  }
  return absl::OkStatus();
}

Status SyncExchange::TakeRing(const TensorKey& key, ReceivedTensor t) {
  size_t k = 0;
  while (k < o_.routes.size() && static_cast<uint32_t>(o_.routes[k].slice.index) != key.tensor_id) {
    ++k;
  }
  if (k == o_.routes.size() || !ring_[k] ||
      key.microbatch >= static_cast<uint32_t>(ring_[k]->RingHopCount())) {
    return absl::InternalError("sync: unexpected tensor " + key.DebugString());
  }
  std::map<int, ReceivedTensor>& early = early_[k];
  early[static_cast<int>(key.microbatch)] = std::move(t);
  // The hops in order, as far as they are in.
  for (auto it = early.find(ring_[k]->next_hop()); it != early.end();
       it = early.find(ring_[k]->next_hop())) {
    const int hop = it->first;
    const ReceivedTensor frame = std::move(it->second);
    early.erase(it);
    TensorKey at = key;
    at.microbatch = static_cast<uint32_t>(hop);
    std::vector<uint8_t> next;
    RETURN_IF_ERROR(Annotate(ring_[k]->Take(hop, frame.payload, &next),
                             "sync tensor " + at.DebugString() + " from " + frame.from_site));
    if (!next.empty()) {
      RETURN_IF_ERROR(Send(key.step, k, static_cast<uint32_t>(hop + 1), places_[k].next(),
                           std::move(next), /*backlog=*/true));
    }
  }
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
