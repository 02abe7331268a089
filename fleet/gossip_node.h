// One replica's side of a sparse push-sum round (gossip_mixer.h describes the round): what it
// picks of each parameter slice, the frame that carries the pick to its out-neighbours, and what
// it makes of its own share and the frames it takes. The fleet simulator's mixer runs every
// replica's node in one process; a daemon's stage runs its own over its fragment's slices
// (daemon/job/sync/replica_sync.h) and exchanges the frames over its links. Both run this code
// on the same frames, so a daemon's round gives the simulator's bits.
//
// A gossip frame, little-endian: u32 magic "LHGS", u8 version 1, u8 flags (bit 0: dense, every
// coordinate of the slice in order and no indices), u16 zero, u32 the slice's index, u32 the
// count of coordinates; then count u32 slice-relative indices (strictly ascending; none when
// dense), count fp32 parameter values x, count fp32 push-sum weights w, and a u64 XXH64 of
// everything before it. The receiver forms
// the value share from them and the sender's share 1 / (1 + out-degree), which it knows from
// the round's graph. A frame from a peer is checked whole before anything is applied: its
// size, its checksum, its slice, indices inside the slice and ascending, values finite,
// weights positive and finite.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "fleet/sync_slices.h"

namespace longhaul::fleet {

struct GossipFrame {
  uint32_t slice = 0;           // SyncSlice::index
  bool dense = false;           // every coordinate, in order (index empty)
  std::vector<uint32_t> index;  // slice-relative, ascending
  std::vector<float> x, w;
  size_t count() const { return x.size(); }
  uint32_t at(size_t n) const { return dense ? static_cast<uint32_t>(n) : index[n]; }
};

inline constexpr size_t kGossipHeaderBytes = 16;
inline constexpr size_t kGossipChecksumBytes = 8;

// The bytes of a frame of `count` coordinates of a slice of `slice_size`.
uint64_t GossipFrameBytes(uint64_t count, uint64_t slice_size);

// The frame of `picked` (slice-relative, ascending) of a slice whose values and weights are
// `x` and `w` (the slice's own spans).
std::vector<uint8_t> EncodeGossipFrame(uint32_t slice, std::span<const uint32_t> picked,
                                       std::span<const float> x, std::span<const float> w);

// The header's fields, from a prefix of at least kGossipHeaderBytes: checked for the slice
// `slice` of `slice_size` and a total size of exactly `frame_bytes`.
Status CheckGossipFrameHeader(std::span<const uint8_t> prefix, uint32_t slice, uint64_t slice_size,
                              uint64_t frame_bytes);

// A whole frame, checked (see above); errors name the slice and what is wrong.
StatusOr<GossipFrame> DecodeGossipFrame(std::span<const uint8_t> bytes, uint32_t slice,
                                        uint64_t slice_size);

class GossipNode {
 public:
  // A replica's `parameters` cut into `slices` (covering them, offsets into the same array);
  // `keep` in (0, 1]: the fraction of each slice it picks.
  GossipNode(std::vector<SyncSlice> slices, size_t parameters, double keep);

  // Every weight 1 and every reference (a coordinate's value when last sent) at `params`.
  void Reset(std::span<const float> params);
  // A checkpoint's weights and references (each `parameters` long; DataLoss otherwise).
  Status Restore(std::vector<float> weights, std::vector<float> refs);
  const std::vector<float>& weights() const { return weights_; }
  const std::vector<float>& refs() const { return refs_; }
  const std::vector<SyncSlice>& slices() const { return slices_; }

  // The coordinates a sender picks of a slice of `size` (at least 1).
  size_t Picked(size_t size) const;
  // What this node sends of slice k in round `round` (slice-relative, ascending): every
  // coordinate when keep is 1; else half a window that turns with the rounds (the same on
  // every replica) and half the largest moves |x - ref| outside it, equal moves by index.
  std::vector<uint32_t> Pick(size_t k, std::span<const float> x, uint64_t round) const;
  // Its frame of slice k carrying `picked` of `x` (the whole parameter array).
  std::vector<uint8_t> Frame(size_t k, std::span<const uint32_t> picked,
                             std::span<const float> x) const;
  // Its dense frame of slice k (every coordinate): what the exact average takes.
  std::vector<uint8_t> DenseFrame(size_t k, std::span<const float> x) const;

  struct Received {
    double share = 1;  // the sender's 1 / (1 + its out-degree)
    const GossipFrame* frame = nullptr;
  };
  // The round's end on slice k, in place on `x` (the whole parameter array): this node keeps
  // `own_share` of the (value, weight) of what it sent (`picked`), adds each received share in
  // the order given (sender order), and each coordinate becomes value / weight. REQUIRES:
  // frames checked for this slice.
  void Apply(size_t k, std::span<const uint32_t> picked, double own_share,
             std::span<const Received> received, std::span<float> x);
  // The exact average on slice k: every replica's (x, w) of the whole slice in replica order
  // (this node's among them), x = sum w x / sum w, weights 1, references x. Frames checked for
  // this slice; one that is not dense (every coordinate) is refused, nothing changed.
  Status Average(size_t k, std::span<const GossipFrame* const> replicas, std::span<float> x);

 private:
  std::vector<SyncSlice> slices_;
  size_t parameters_;
  double keep_;
  std::vector<float> weights_, refs_;
};

}  // namespace longhaul::fleet
