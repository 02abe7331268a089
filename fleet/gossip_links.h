// Push-sum gossip whose frames carry compressed differences, one reference per directed link:
// the fleet simulator's side of `sync: {reduce: gossip, codec: q4}` (`replica_study --reduce
// gossip --codecs q4`), each replica a LinkGossipNode (gossip_link_node.h), whose code and
// frames the daemons' stages run too.
//
// GossipMixer (gossip_mixer.h) sends fp32 values and weights of the coordinates it picks: 8
// bytes a coordinate dense, 12 sparse, so at the ring's bytes it can send only a twentieth of
// them and the replicas drift apart (docs/BENCHMARKS.md, "Gossip's other cells"). Here every
// round sends every coordinate, in a lossy dense codec (q4: about 0.56 bytes a coordinate),
// as the difference from what that link carried before (CHOCO-SGD's public copies, Koloskova,
// Stich and Jaggi 2019, kept per directed link so that a graph that changes every round needs
// no broadcast):
// - Link j -> i keeps one copy of j's parameters, held alike by both ends: the initial
//   parameters at the start. When j sends to i it encodes x_j - copy, both ends decode the
//   same bytes and add them to the copy. What the codec rounds away stays in x_j - copy and
//   goes with the next frame on that link: error feedback by construction.
// - The mixing is push-sum on the copies: j keeps (w_j x_j - s_j w_j sum of its out-links'
//   copies, s_j w_j) with s_j = 1 / (1 + out-degree), and each receiver adds (s_j w_j copy,
//   s_j w_j). Mass leaves j exactly as it arrives elsewhere, so every coordinate's sums of
//   values and weights over the replicas never change in a round (as GossipMixer's), while
//   j's own value moves only by what its links' copies lag behind it.
// - Every coordinate of a slice takes the same weight, so a frame carries one a slice (f64).
// - Tracking (gossip_node.h's K-GT): each frame also carries the sender's drift z in the same
//   codec (no reference: a drift is a new value each round), and the sender keeps z minus the
//   shares it sent as decoded, so the corrections still sum to zero.
// The simulator loses no frame, so its links never need the key frames a daemon's may.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "compression/codec.h"
#include "compression/codec_spec.h"
#include "fleet/gossip.h"
#include "fleet/gossip_link_node.h"
#include "fleet/gossip_mixer.h"
#include "fleet/sync_slices.h"

namespace longhaul::fleet {

class LinkGossipMixer : public GossipRounds {
 public:
  // `replicas` replicas of `parameters` parameters cut into `slices` (covering them); `codec`:
  // one GossipLinkCodec takes, else its error; `outer`: each node's outer step (sync.outer).
  static StatusOr<std::unique_ptr<LinkGossipMixer>> Create(
      int replicas, size_t parameters, std::vector<SyncSlice> slices, std::string_view codec,
      bool tracking, const OuterOptions& outer = kPlainAveraging);

  void Reset(std::span<const float> params) override;
  bool tracking() const override { return tracking_; }
  void Correct(int r, std::span<float> x, double lr) override;
  StatusOr<uint64_t> Round(const GossipGraph& graph,
                           std::vector<std::vector<float>>* params) override;
  Status Average(std::vector<std::vector<float>>* params) override;

  // Replica r's push-sum weight of slice k.
  double weight(int r, size_t k) const { return nodes_[static_cast<size_t>(r)]->weight(k); }
  // Link j -> i's copy of j's parameters (as j holds it; i holds the same).
  const std::vector<float>& copy(int j, int i) const {
    return nodes_[static_cast<size_t>(j)]->out_copy(i);
  }
  // Tracking: replica r's correction.
  const std::vector<float>& corrections(int r) const {
    return nodes_[static_cast<size_t>(r)]->corrections();
  }
  const LinkGossipNode& node(int r) const { return *nodes_[static_cast<size_t>(r)]; }

 private:
  LinkGossipMixer(std::vector<std::unique_ptr<LinkGossipNode>> nodes, size_t parameters,
                  std::vector<SyncSlice> slices, compression::CodecSpec spec, bool tracking)
      : nodes_(std::move(nodes)),
        parameters_(parameters),
        slices_(std::move(slices)),
        spec_(spec),
        tracking_(tracking) {}

  bool reset_ = false;                                  // Reset has set every link's copy
  std::vector<std::unique_ptr<LinkGossipNode>> nodes_;  // by replica
  size_t parameters_;
  std::vector<SyncSlice> slices_;
  compression::CodecSpec spec_;
  bool tracking_;
  uint64_t rounds_ = 0;
};

}  // namespace longhaul::fleet
