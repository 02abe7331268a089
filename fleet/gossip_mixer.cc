// Sparse push-sum rounds over replicas' parameters (gossip_mixer.h).
#include "fleet/gossip_mixer.h"

#include <algorithm>
#include <cmath>

namespace longhaul::fleet {

GossipMixer::GossipMixer(int replicas, size_t parameters, std::vector<SyncSlice> slices,
                         double keep)
    : nodes_(static_cast<size_t>(replicas), GossipNode(std::move(slices), parameters, keep)) {}

void GossipMixer::Reset(std::span<const float> params) {
  for (GossipNode& node : nodes_) node.Reset(params);
  rounds_ = 0;
}

StatusOr<uint64_t> GossipMixer::Round(const GossipGraph& graph,
                                      std::vector<std::vector<float>>* params) {
  const size_t n = nodes_.size(), slices = nodes_[0].slices().size();
  // Each sender's picks and frames (by slice), from the round's start, before any replica
  // applies anything; and its share 1 / (1 + d_j).
  std::vector<std::vector<std::vector<uint32_t>>> picked(
      n, std::vector<std::vector<uint32_t>>(slices));
  std::vector<std::vector<GossipFrame>> frames(n);
  std::vector<double> share(n);
  uint64_t bytes = 0;
  for (size_t j = 0; j < n; ++j) {
    const size_t d = graph.out[j].size();
    share[j] = 1.0 / (1.0 + static_cast<double>(d));
    if (d == 0) continue;  // no out-link this round: it keeps everything
    const std::vector<float>& x = (*params)[j];
    for (size_t k = 0; k < slices; ++k) {
      const SyncSlice& s = nodes_[j].slices()[k];
      picked[j][k] = nodes_[j].Pick(k, x, rounds_);
      const std::vector<uint8_t> wire = nodes_[j].Frame(k, picked[j][k], x);
      bytes += wire.size() * d;
      ASSIGN_OR_RETURN(GossipFrame f, DecodeGossipFrame(wire, static_cast<uint32_t>(s.index),
                                                        static_cast<uint64_t>(s.size)));
      frames[j].push_back(std::move(f));
    }
  }
  // Who sends to each receiver, in sender order.
  std::vector<std::vector<size_t>> from(n);
  for (size_t j = 0; j < n; ++j) {
    for (int i : graph.out[j]) from[static_cast<size_t>(i)].push_back(j);
  }
  for (auto& f : from) std::sort(f.begin(), f.end());
  std::vector<GossipNode::Received> received;
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < slices; ++k) {
      received.clear();
      for (size_t j : from[i]) received.push_back({share[j], &frames[j][k]});
      nodes_[i].Apply(k, picked[i][k], share[i], received, (*params)[i]);
    }
  }
  ++rounds_;
  return bytes;
}

Status GossipMixer::Average(std::vector<std::vector<float>>* params) {
  const size_t n = nodes_.size();
  for (size_t k = 0; k < nodes_[0].slices().size(); ++k) {
    const SyncSlice& s = nodes_[0].slices()[k];
    std::vector<uint32_t> all(static_cast<size_t>(s.size));
    for (size_t c = 0; c < all.size(); ++c) all[c] = static_cast<uint32_t>(c);
    std::vector<GossipFrame> frames;
    for (size_t r = 0; r < n; ++r) {
      ASSIGN_OR_RETURN(GossipFrame f, DecodeGossipFrame(nodes_[r].Frame(k, all, (*params)[r]),
                                                        static_cast<uint32_t>(s.index),
                                                        static_cast<uint64_t>(s.size)));
      frames.push_back(std::move(f));
    }
    std::vector<const GossipFrame*> by_replica;
    for (const GossipFrame& f : frames) by_replica.push_back(&f);
    for (size_t r = 0; r < n; ++r) RETURN_IF_ERROR(nodes_[r].Average(k, by_replica, (*params)[r]));
  }
  return absl::OkStatus();
}

}  // namespace longhaul::fleet
