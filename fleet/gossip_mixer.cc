// Sparse push-sum rounds over replicas' parameters (gossip_mixer.h).
#include "fleet/gossip_mixer.h"

#include <algorithm>
#include <cmath>

namespace longhaul::fleet {

GossipMixer::GossipMixer(int replicas, size_t parameters, std::vector<SyncSlice> slices,
                         double keep, bool tracking, const OuterOptions& outer)
    : nodes_(static_cast<size_t>(replicas),
             GossipNode(std::move(slices), parameters, keep, tracking, outer)) {}

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
  for (size_t j = 0; j < n; ++j) nodes_[j].BeginRound((*params)[j]);
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
      ASSIGN_OR_RETURN(GossipFrame f,
                       DecodeGossipFrame(wire, static_cast<uint32_t>(s.index),
                                         static_cast<uint64_t>(s.size), nodes_[j].tracking()));
      frames[j].push_back(std::move(f));
    }
  }
  std::vector<GossipNode::Received> received;
  for (size_t i = 0; i < n; ++i) {
    const std::vector<int> from = graph.In(static_cast<int>(i));  // in sender order
    for (size_t k = 0; k < slices; ++k) {
      received.clear();
      for (int j : from) {
        received.push_back({share[static_cast<size_t>(j)], &frames[static_cast<size_t>(j)][k]});
      }
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
    std::vector<GossipFrame> frames;
    for (size_t r = 0; r < n; ++r) {
      ASSIGN_OR_RETURN(GossipFrame f, DecodeGossipFrame(nodes_[r].DenseFrame(k, (*params)[r]),
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
