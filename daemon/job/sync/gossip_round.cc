// The daemons' gossip rounds (gossip_round.h).
#include "daemon/job/sync/gossip_round.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "fleet/gossip_link_node.h"
#include "fleet/gossip_node.h"

namespace longhaul::daemon {

StatusOr<GossipSliceFrame> DecodeGossipSliceFrame(
    std::span<const uint8_t> bytes, uint32_t slice, uint64_t size,
    const std::optional<compression::CodecSpec>& link_codec, bool tracking, uint64_t microbatch,
    int replicas) {
  GossipSliceFrame out;
  if (GossipLinkRoundFrame(link_codec.has_value(), microbatch, replicas)) {
    ASSIGN_OR_RETURN(out.link, fleet::DecodeLinkFrame(bytes, slice, size, *link_codec, tracking));
  } else {
    ASSIGN_OR_RETURN(out.gossip,
                     fleet::DecodeGossipFrame(bytes, slice, size,
                                              GossipFrameTracked(tracking, microbatch, replicas)));
  }
  return out;
}

uint64_t GossipRoundOf(const fleet::SyncOptions& sync, uint64_t step) {
  return fleet::SyncsBefore(sync, step + 1);
}

fleet::GossipGraph GossipRoundGraph(const fleet::SyncOptions& sync, const std::vector<bool>& live,
                                    uint64_t seed, uint64_t step,
                                    const std::vector<double>& measured) {
  const size_t n = live.size();
  std::vector<std::vector<double>> links(n, std::vector<double>(n, 1.0));
  if (measured.size() == n * n) {
    for (size_t r = 0; r < n; ++r) {
      for (size_t q = 0; q < n; ++q) links[r][q] = measured[r * n + q];
    }
  }
  for (size_t r = 0; r < n; ++r) {
    if (live[r]) continue;
    for (size_t q = 0; q < n; ++q) links[r][q] = links[q][r] = 0;
  }
  const uint64_t round = GossipRoundOf(sync, step);
  if (sync.exponential_graph) return fleet::ExponentialGossipGraph(links, round);
  return fleet::ChooseGossipGraph(links, sync.fanout, seed, round);
}

bool GossipLinksMoved(const std::vector<double>& from, const std::vector<double>& to) {
  if (from.size() != to.size()) return true;
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] <= 0 || to[i] <= 0) {
      if ((from[i] > 0) != (to[i] > 0)) return true;
      continue;
    }
    if (to[i] >= kGossipLinksMoved * from[i] || from[i] >= kGossipLinksMoved * to[i]) return true;
  }
  return false;
}

const GossipLinkEpoch& GossipLinkSchedule::At(uint64_t round) const {
  size_t e = epochs_.size() - 1;
  while (e > 0 && epochs_[e].from_round > round) --e;
  return epochs_[e];
}

Status GossipLinkSchedule::Add(uint32_t epoch, uint64_t from_round, std::vector<double> links) {
  if (epoch < epochs_.size()) {
    const GossipLinkEpoch& known = epochs_[epoch];
    if (epoch > 0 && known.from_round == from_round && known.links == links) return Status();
    return absl::InvalidArgumentError("gossip links epoch " + std::to_string(epoch) +
                                      " is known already, otherwise (from round " +
                                      std::to_string(known.from_round) + ")");
  }
  if (epoch != epochs_.size() || from_round <= latest().from_round) {
    return absl::InvalidArgumentError("gossip links epoch " + std::to_string(epoch) +
                                      " from round " + std::to_string(from_round) +
                                      " does not follow epoch " + std::to_string(latest().epoch) +
                                      " from round " + std::to_string(latest().from_round));
  }
  epochs_.push_back(GossipLinkEpoch{epoch, from_round, std::move(links)});
  return Status();
}

namespace {

// Whether stages a and b (of different replicas) exchange sync frames: they hold some of the
// same layers, or the embedding (both first) or the head (both last).
bool Partners(const StageGrid& grid, int a, int b) {
  if (grid.first(a) && grid.first(b)) return true;
  if (grid.last(a) && grid.last(b)) return true;
  if (grid.layers.empty()) return grid.position(a) == grid.position(b);
  const auto& la = grid.layers[static_cast<size_t>(a)];
  const auto& lb = grid.layers[static_cast<size_t>(b)];
  return la.first < lb.second && lb.first < la.second;
}

bool Live(const std::vector<bool>& live, int r) {
  return static_cast<size_t>(r) >= live.size() || live[static_cast<size_t>(r)];
}

}  // namespace

std::vector<double> GossipLinkMatrix(
    const StageGrid& grid, const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
    const std::vector<bool>& live,
    const std::function<double(const std::string& from, const std::string& to)>& bandwidth) {
  const int n = grid.replicas;
  if (n < 2 || grid.size() != stages.size() || live.size() != static_cast<size_t>(n)) return {};
  std::vector<double> m(static_cast<size_t>(n) * n, 0.0);
  for (int r = 0; r < n; ++r) {
    if (!live[static_cast<size_t>(r)]) continue;
    double fastest = 0;
    for (int q = 0; q < n; ++q) {
      if (r == q || !live[static_cast<size_t>(q)]) continue;
      // Every pair has partners (their first stages at least), each on its own site (a plan
      // puts no two stages on one site).
      double slowest = kMaxGossipLinkBandwidth;
      for (int a = grid.start[r]; a < grid.start[r + 1]; ++a) {
        for (int b = grid.start[q]; b < grid.start[q + 1]; ++b) {
          if (!Partners(grid, a, b)) continue;
          const double bw = bandwidth(stages[a].site(), stages[b].site());
          if (!(bw > 0) || !std::isfinite(bw)) return {};  // unknown: every link alike
          slowest = std::min(slowest, bw);
        }
      }
      m[static_cast<size_t>(r) * n + q] = slowest;
      fastest = std::max(fastest, slowest);
    }
    for (int q = 0; q < n; ++q) {
      double& v = m[static_cast<size_t>(r) * n + q];
      if (v > 0) v = std::max(v, fastest * kGossipLinkFloor);
    }
  }
  return m;
}

std::string GossipLinksDebugString(const std::vector<double>& links) {
  const size_t n = static_cast<size_t>(std::llround(std::sqrt(static_cast<double>(links.size()))));
  std::string out;
  for (size_t r = 0; r < n; ++r) {
    for (size_t q = 0; q < n; ++q) {
      const double bw = r * n + q < links.size() ? links[r * n + q] : 0;
      if (r == q || bw <= 0) continue;
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%s%zu->%zu %.4g", out.empty() ? "" : ", ", r, q,
                    bw * 8 / 1e6);
      out += buf;
    }
  }
  return out;
}

Status CheckGossipLinks(const google::protobuf::RepeatedField<double>& links, int replicas,
                        const std::vector<bool>& live) {
  if (links.empty()) return Status();
  const int64_t want = int64_t{replicas} * replicas;
  if (links.size() != want) {
    return absl::InvalidArgumentError("gossip_links: " + std::to_string(links.size()) +
                                      " values for " + std::to_string(replicas) +
                                      " replicas (want " + std::to_string(want) + ")");
  }
  for (int i = 0; i < links.size(); ++i) {
    const int r = i / replicas, q = i % replicas;
    const bool pair = r != q && Live(live, r) && Live(live, q);
    if (!(links[i] >= 0) || links[i] > kMaxGossipLinkBandwidth || (pair && links[i] == 0)) {
      return absl::InvalidArgumentError(
          "gossip_links: the link from replica " + std::to_string(r) + " to replica " +
          std::to_string(q) + " is " + std::to_string(links[i]) + " (want " +
          (pair ? "a bandwidth in (0, 1e15] between live replicas" : "0 to 1e15") + ")");
    }
  }
  return Status();
}

StatusOr<uint64_t> GossipRoundFrameMaxBytes(const fleet::SyncOptions& sync, uint64_t slice_size) {
  if (fleet::GossipSendsLinks(sync)) {
    ASSIGN_OR_RETURN(const compression::CodecSpec codec, fleet::GossipLinkCodec(sync.codec));
    return fleet::MaxLinkFrameBytes(codec, slice_size, sync.tracking);
  }
  return fleet::GossipFrameBytes(slice_size, slice_size, sync.tracking);
}

}  // namespace longhaul::daemon
