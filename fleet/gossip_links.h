// Push-sum gossip whose frames carry compressed differences, one reference per directed link:
// the fleet simulator's gossip with a dense lossy codec (`replica_study --reduce gossip
// --codecs q4`, LocalFleetOptions::gossip_link_codec), not yet a daemon's sync.
//
// GossipMixer (gossip_mixer.h) sends fp32 values and weights of the coordinates it picks: 8
// bytes a coordinate dense, 12 sparse, so at the ring's bytes it can send only a twentieth of
// them and the replicas drift apart (docs/BENCHMARKS.md, "Gossip's other cells"). Here every
// round sends every coordinate, in a lossy dense codec (q4: about 0.56 bytes a coordinate),
// as the difference from what that link carried before (CHOCO-SGD's public copies, Koloskova,
// Stich and Jaggi 2019, kept per directed link so that a graph that changes every round needs
// no broadcast):
// - Link j -> i keeps one copy of j's parameters, held alike by both ends (here one array):
//   the initial parameters at the start. When j sends to i it encodes x_j - copy, both ends
//   decode the same bytes and add them to the copy. What the codec rounds away stays in
//   x_j - copy and goes with the next frame on that link: error feedback by construction.
// - The mixing is push-sum on the copies: j keeps (w_j x_j - s_j w_j sum of its out-links'
//   copies, s_j w_j) with s_j = 1 / (1 + out-degree), and each receiver adds (s_j w_j copy,
//   s_j w_j). Mass leaves j exactly as it arrives elsewhere, so every coordinate's sums of
//   values and weights over the replicas never change in a round (as GossipMixer's), while
//   j's own value moves only by what its links' copies lag behind it.
// - Every coordinate of a slice takes the same weights, so a frame needs one weight a slice
//   (counted as an fp32; the simulator keeps them in double, so a daemon that sends fp32
//   weights would round where it does not).
// - Tracking (gossip_node.h's K-GT): each frame also carries the sender's drift z in the same
//   codec (no reference: a drift is a new value each round), and the sender keeps z minus the
//   shares it sent as decoded, so the corrections still sum to zero.
// A frame counts its compression frames (header, payload, checksum: compression/frame.h) and
// kLinkFrameOverhead bytes: the slice and the weight a daemon's frame would add.
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
#include "fleet/gossip_mixer.h"
#include "fleet/sync_slices.h"

namespace longhaul::fleet {

inline constexpr uint64_t kLinkFrameOverhead = 20;

// The spec of `codec` when compressed links can send in it: a dense lossy codec of 4 bits or
// more (bf16, fp16, q8, q4); else InvalidArgument naming it (top-k, lossless, q2: it diverged).
StatusOr<compression::CodecSpec> GossipLinkCodec(std::string_view codec);

class LinkGossipMixer : public GossipRounds {
 public:
  // `replicas` replicas of `parameters` parameters cut into `slices` (covering them); `codec`:
  // one GossipLinkCodec takes, else its error.
  static StatusOr<std::unique_ptr<LinkGossipMixer>> Create(int replicas, size_t parameters,
                                                           std::vector<SyncSlice> slices,
                                                           std::string_view codec, bool tracking);

  void Reset(std::span<const float> params) override;
  bool tracking() const override { return tracking_; }
  void Correct(int r, std::span<float> x, double lr) override;
  StatusOr<uint64_t> Round(const GossipGraph& graph,
                           std::vector<std::vector<float>>* params) override;
  Status Average(std::vector<std::vector<float>>* params) override;

  // Replica r's push-sum weight of slice k.
  double weight(int r, size_t k) const { return weights_[static_cast<size_t>(r)][k]; }
  // Link j -> i's copy of j's parameters.
  const std::vector<float>& copy(int j, int i) const { return copies_[Index(j, i)]; }
  // Tracking: replica r's correction.
  const std::vector<float>& corrections(int r) const { return correction_[static_cast<size_t>(r)]; }

 private:
  LinkGossipMixer(int replicas, size_t parameters, std::vector<SyncSlice> slices,
                  std::unique_ptr<compression::Codec> codec, bool tracking);
  size_t Index(int j, int i) const {
    return static_cast<size_t>(j) * static_cast<size_t>(replicas_) + static_cast<size_t>(i);
  }
  // Encodes `values` into a frame, decodes it as a receiver would into `out`; the frame's bytes.
  StatusOr<uint64_t> Send(std::span<const float> values, uint64_t seed, std::span<float> out);

  bool reset_ = false;  // Reset has set every link's copy
  int replicas_;
  size_t parameters_;
  std::vector<SyncSlice> slices_;
  std::unique_ptr<compression::Codec> codec_;
  bool tracking_;
  uint64_t rounds_ = 0;
  std::vector<std::vector<double>> weights_;  // by replica: one a slice
  std::vector<std::vector<float>> copies_;    // by link j -> i at Index(j, i)
  // Tracking, by replica: the correction c, x after the last round, the learning rates summed
  // since it.
  std::vector<std::vector<float>> correction_, anchor_;
  std::vector<double> lr_sum_;
  std::vector<float> scratch_, delta_;  // Round's: one frame's decoded values, its difference
};

}  // namespace longhaul::fleet
