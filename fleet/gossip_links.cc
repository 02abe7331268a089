// Push-sum rounds with per-link compressed differences (gossip_links.h).
#include "fleet/gossip_links.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "compression/frame.h"
#include "fleet/sync_options.h"

namespace longhaul::fleet {

StatusOr<std::unique_ptr<LinkGossipMixer>> LinkGossipMixer::Create(int replicas, size_t parameters,
                                                                   std::vector<SyncSlice> slices,
                                                                   std::string_view codec,
                                                                   bool tracking,
                                                                   const OuterOptions& outer) {
  ASSIGN_OR_RETURN(const compression::CodecSpec spec, GossipLinkCodec(codec));
  if (replicas < 1) {
    return absl::InvalidArgumentError("gossip over compressed links: " + std::to_string(replicas) +
                                      " replicas (1 or more)");
  }
  std::vector<std::unique_ptr<LinkGossipNode>> nodes;
  for (int r = 0; r < replicas; ++r) {
    ASSIGN_OR_RETURN(
        auto node, LinkGossipNode::Create(r, replicas, slices, parameters, codec, tracking, outer));
    nodes.push_back(std::move(node));
  }
  return std::unique_ptr<LinkGossipMixer>(
      new LinkGossipMixer(std::move(nodes), parameters, std::move(slices), spec, tracking));
}

void LinkGossipMixer::Reset(std::span<const float> params) {
  for (auto& node : nodes_) node->Reset(params);
  rounds_ = 0;
  reset_ = true;
}

void LinkGossipMixer::Correct(int r, std::span<float> x, double lr) {
  nodes_[static_cast<size_t>(r)]->Correct(x, lr);
}

StatusOr<uint64_t> LinkGossipMixer::Round(const GossipGraph& graph,
                                          std::vector<std::vector<float>>* params) {
  const size_t n = nodes_.size();
  if (!reset_) {
    return absl::FailedPreconditionError("gossip round over compressed links before Reset");
  }
  if (graph.nodes() != static_cast<int>(n) || params->size() != n) {
    return absl::InvalidArgumentError("gossip round: a graph of " + std::to_string(graph.nodes()) +
                                      " nodes and " + std::to_string(params->size()) +
                                      " parameter arrays for " + std::to_string(n) + " replicas");
  }
  for (size_t j = 0; j < n; ++j) {
    if ((*params)[j].size() != parameters_) {
      return absl::InvalidArgumentError("gossip round: replica " + std::to_string(j) + " has " +
                                        std::to_string((*params)[j].size()) + " parameters, not " +
                                        std::to_string(parameters_));
    }
    for (int i : graph.out[j]) {
      if (i < 0 || i >= static_cast<int>(n) || static_cast<size_t>(i) == j) {
        return absl::InvalidArgumentError("gossip round: replica " + std::to_string(j) +
                                          " sends to " + std::to_string(i) + " of " +
                                          std::to_string(n) + " replicas");
      }
    }
  }
  // Every frame first, from the round's start (each link's copy moves as it is built), then
  // every replica's end of the round from the frames it takes, checked as a daemon checks them.
  // frames[j][k][e]: replica j's frame of slice k to its e-th out-neighbour.
  uint64_t bytes = 0;
  std::vector<std::vector<std::vector<std::vector<uint8_t>>>> frames(n);
  for (size_t j = 0; j < n; ++j) {
    nodes_[j]->BeginRound((*params)[j]);
    frames[j].resize(slices_.size());
    for (size_t k = 0; k < slices_.size(); ++k) {
      for (int i : graph.out[j]) {
        ASSIGN_OR_RETURN(std::vector<uint8_t> f, nodes_[j]->Frame(k, i, rounds_, (*params)[j]));
        bytes += f.size();
        frames[j][k].push_back(std::move(f));
      }
    }
  }
  std::vector<LinkFrame> decoded;
  std::vector<LinkGossipNode::Received> received;
  for (size_t i = 0; i < n; ++i) {
    const std::vector<int> from = graph.In(static_cast<int>(i));
    for (size_t k = 0; k < slices_.size(); ++k) {
      const SyncSlice& s = slices_[k];
      decoded.clear();
      received.clear();
      for (int j : from) {
        const std::vector<int>& to = graph.out[static_cast<size_t>(j)];
        const size_t e =
            static_cast<size_t>(std::find(to.begin(), to.end(), static_cast<int>(i)) - to.begin());
        ASSIGN_OR_RETURN(
            LinkFrame f,
            DecodeLinkFrame(frames[static_cast<size_t>(j)][k][e], static_cast<uint32_t>(s.index),
                            static_cast<uint64_t>(s.size), spec_, tracking_));
        decoded.push_back(std::move(f));
      }
      for (size_t e = 0; e < from.size(); ++e) {
        const double degree = static_cast<double>(graph.out[static_cast<size_t>(from[e])].size());
        received.push_back({from[e], 1.0 / (1.0 + degree), &decoded[e]});
      }
      nodes_[i]->Apply(k, graph.out[i], {}, received, (*params)[i]);
    }
  }
  ++rounds_;
  return bytes;
}

Status LinkGossipMixer::Average(std::vector<std::vector<float>>* params) {
  const size_t n = nodes_.size();
  std::vector<float> mean(parameters_);
  std::vector<double> w(n);
  std::vector<std::span<const float>> x(n);
  for (size_t k = 0; k < slices_.size(); ++k) {
    const size_t at = static_cast<size_t>(slices_[k].offset);
    const size_t size = static_cast<size_t>(slices_[k].size);
    for (size_t r = 0; r < n; ++r) {
      w[r] = nodes_[r]->weight(k);
      x[r] = std::span<const float>((*params)[r]).subspan(at, size);
    }
    AverageLinkSlice(w, x, std::span<float>(mean).subspan(at, size));
  }
  for (size_t r = 0; r < n; ++r) (*params)[r] = mean;
  for (auto& node : nodes_) node->Averaged(mean);
  return absl::OkStatus();
}

}  // namespace longhaul::fleet
