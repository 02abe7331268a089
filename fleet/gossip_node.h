// One replica's side of a sparse push-sum round (gossip_mixer.h describes the round): what it
// picks of each parameter slice, the frame that carries the pick to its out-neighbours, and what
// it makes of its own share and the frames it takes. The fleet simulator's mixer runs every
// replica's node in one process; a daemon's stage runs its own over its fragment's slices
// (daemon/job/sync/replica_sync.h) and exchanges the frames over its links. Both run this code
// on the same frames, so a daemon's round gives the simulator's bits.
//
// A gossip frame, little-endian: u32 magic "LHGS", u8 version 1, u8 flags (bit 0: dense, every
// coordinate of the slice in order and no indices; bit 1: tracked, drifts follow the weights),
// u16 zero, u32 the slice's index, u32 the count of coordinates; then count u32 slice-relative
// indices (strictly ascending; none when dense), count fp32 parameter values x, count fp32
// push-sum weights w, when tracked count fp32 drifts z, and a u64 XXH64 of everything before
// it. The receiver forms the value share from them and the sender's share 1 / (1 +
// out-degree), which it knows from the round's graph. A frame from a peer is checked whole
// before anything is applied: its size, its checksum, its slice, whether it is tracked as the
// receiver expects, indices inside the slice and ascending, values and drifts finite, weights
// positive and finite.
//
// Gradient tracking (sync.tracking; K-GT: Liu, Koloskova, Jaggi and Lin 2023, here on
// push-sum's directed rounds): replicas on different data drift towards their own data between
// rounds, and mixing alone pulls them back only as far as a round reaches. A tracking node
// keeps a correction c per parameter (parameter units per unit of learning rate) that each of
// its local steps applies (x -= lr c), and its drift over the local steps since its last round,
// z = (x then - x now) / (the sum of those steps' learning rates), rides in the round beside x,
// on x's picks; a node's mixed z is its kept share of its own plus the shares it takes (the
// round's column-stochastic shares, not divided by the push-sum weight), and after the round
// c += (mixed z - z). Shares leave a node's correction and arrive in others', so the sum of the
// corrections over the replicas stays 0, as K-GT's does with doubly stochastic mixing: the
// replicas can only stop moving where the sum of their local gradients is 0, the minimizer of
// the sum, not each near its own (test/fleet/gossip_mixer_test.cc, dense and sparse rounds).
// Its limit: a round's row sums (a node's kept share plus the shares it takes) are 1 only when
// in-degrees are, so while the replicas still move (training never stops) a node that takes two
// shares gains about half the mean drift in its correction and one that takes none loses half:
// the corrections walk by the mean drift, which costs more than tracking saves on sparse, noisy
// rounds (docs/BENCHMARKS.md, "Gradient tracking"). Two variants measured worse: mixing z as a
// push-sum estimate (divided by the weights) does not keep the sum at 0 (a bias of 0.04 on the
// test's quadratics), and a push-sum tracker (its mass moved by each own drift's change, c =
// tracker - own drift) diverged with sparse picks (a low weight amplifies the own change).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "fleet/outer_optimizer.h"
#include "fleet/sync_slices.h"

namespace longhaul::fleet {

struct GossipFrame {
  uint32_t slice = 0;           // SyncSlice::index
  bool dense = false;           // every coordinate, in order (index empty)
  std::vector<uint32_t> index;  // slice-relative, ascending
  std::vector<float> x, w;
  std::vector<float> z;  // tracked frames: the sender's drifts (empty otherwise)
  size_t count() const { return x.size(); }
  uint32_t at(size_t n) const { return dense ? static_cast<uint32_t>(n) : index[n]; }
};

inline constexpr size_t kGossipHeaderBytes = 16;
inline constexpr size_t kGossipChecksumBytes = 8;

// The coordinates a sender keeping `keep` in (0, 1] of a slice picks of its `size`: every one
// when keep is 1, else ceil(keep size), at least 1.
size_t GossipPicked(double keep, size_t size);

// The bytes of a frame of `count` coordinates of a slice of `slice_size` (`tracked`: with
// drifts).
uint64_t GossipFrameBytes(uint64_t count, uint64_t slice_size, bool tracked = false);

// The frame of `picked` (slice-relative, ascending) of a slice whose values and weights are
// `x` and `w` (the slice's own spans), and when `z` is not empty its drifts (tracked).
std::vector<uint8_t> EncodeGossipFrame(uint32_t slice, std::span<const uint32_t> picked,
                                       std::span<const float> x, std::span<const float> w,
                                       std::span<const float> z = {});

// The header's fields, from a prefix of at least kGossipHeaderBytes: checked for the slice
// `slice` of `slice_size`, tracked or not as `tracked`, and a total size of exactly
// `frame_bytes`.
Status CheckGossipFrameHeader(std::span<const uint8_t> prefix, uint32_t slice, uint64_t slice_size,
                              uint64_t frame_bytes, bool tracked = false);

// A whole frame, checked (see above); errors name the slice and what is wrong.
StatusOr<GossipFrame> DecodeGossipFrame(std::span<const uint8_t> bytes, uint32_t slice,
                                        uint64_t slice_size, bool tracked = false);

class GossipNode {
 public:
  // A replica's `parameters` cut into `slices` (covering them, offsets into the same array);
  // `keep` in (0, 1]: the fraction of each slice it picks; `tracking`: gradient tracking (see
  // above); `outer`: the outer step each round starts with (see BeginRound).
  GossipNode(std::vector<SyncSlice> slices, size_t parameters, double keep, bool tracking = false,
             const OuterOptions& outer = kPlainAveraging);

  // Every weight 1 and every reference (a coordinate's value when last sent) at `params`;
  // tracking: every correction 0, the drift measured from `params`.
  void Reset(std::span<const float> params);
  // A checkpoint's weights and references (each `parameters` long; DataLoss otherwise).
  Status Restore(std::vector<float> weights, std::vector<float> refs);
  const std::vector<float>& weights() const { return weights_; }
  const std::vector<float>& refs() const { return refs_; }
  const std::vector<SyncSlice>& slices() const { return slices_; }
  bool tracking() const { return tracking_; }
  const std::vector<float>& corrections() const { return correction_; }
  // Tracking: x after the last round, and the learning rates of the steps since, summed.
  const std::vector<float>& drift_anchor() const { return anchor_; }
  double lr_sum() const { return lr_sum_; }
  // Tracking: a checkpoint's corrections, anchor and learning-rate sum (the first two
  // `parameters` long and finite, the sum finite and not negative; DataLoss otherwise).
  Status RestoreTracking(std::vector<float> corrections, std::vector<float> anchor, double lr_sum);
  // Tracking: every correction 0 again (the drift's anchor and sum kept), as every replica
  // does when the replicas taking part change: their corrections sum to 0 only among the
  // same replicas.
  void ZeroCorrections() { std::fill(correction_.begin(), correction_.end(), 0.0f); }

  // Tracking: a local step with learning rate `lr` has moved `x` (the whole parameter array);
  // the correction moves it on, x -= lr c. Nothing without tracking.
  void Correct(std::span<float> x, double lr);
  // The round's start, on `x` before this round (call before its frames). Tracking: the drift
  // since the last round. An outer step other than plain averaging (sync.outer): x moves from
  // where the last round left it by the outer step on its own pseudo-gradient, the DiLoCo step
  // of outer_optimizer.h with this node's momentum, x = a - lr (d + m buf) with d = a - x;
  // the round then mixes what each node sent, and the mixed x is the next a. With exact,
  // all-to-all rounds every node holds the same a and the mean of the buffers follows the
  // ring's recurrence, so the mix is the ring's outer step; with sparse rounds each node steps
  // on its own and the mixing averages the steps.
  void BeginRound(std::span<float> x);
  // The outer step's state (when not plain averaging): the anchor a and the momentum buffer.
  bool outer_step() const { return !IsPlainAveraging(outer_); }
  const OuterOptimizer& outer_state() const { return outer_state_; }
  // Slice k's values in `x` were replaced whole (a mended tied embedding, taken from the
  // replica's first stage, daemon/job/sync/tied_round.h): the outer step starts over there
  // (OuterOptimizer::RestartPart), alike on the stage that sent the copy and the one that took
  // it. Nothing without an outer step.
  void RestartOuter(size_t k, std::span<const float> x);
  // A checkpoint's outer anchor and momentum (each `parameters` long and finite).
  Status RestoreOuter(std::vector<float> anchor, std::vector<float> momentum);

  // The coordinates a sender picks of a slice of `size` (GossipPicked).
  size_t Picked(size_t size) const { return GossipPicked(keep_, size); }
  // What this node sends of slice k in round `round` (slice-relative, ascending): every
  // coordinate when keep is 1; else half a window that turns with the rounds (the same on
  // every replica) and half the largest moves |x - ref| outside it, equal moves by index.
  std::vector<uint32_t> Pick(size_t k, std::span<const float> x, uint64_t round) const;
  // Its frame of slice k carrying `picked` of `x` (the whole parameter array).
  std::vector<uint8_t> Frame(size_t k, std::span<const uint32_t> picked,
                             std::span<const float> x) const;
  // Its dense frame of slice k (every coordinate, never tracked): what the exact average takes.
  std::vector<uint8_t> DenseFrame(size_t k, std::span<const float> x) const;

  struct Received {
    double share = 1;  // the sender's 1 / (1 + its out-degree)
    const GossipFrame* frame = nullptr;
  };
  // The round's end on slice k, in place on `x` (the whole parameter array): this node keeps
  // `own_share` of the (value, weight) of what it sent (`picked`), adds each received share in
  // the order given (sender order), and each coordinate becomes value / weight. Tracking: the
  // drifts mix by the same shares (no weights), the corrections move by the mixed drift less
  // the own, and the next drift is measured from the new x. REQUIRES: frames checked for this slice
  // (tracked as this node is), and with tracking BeginRound.
  void Apply(size_t k, std::span<const uint32_t> picked, double own_share,
             std::span<const Received> received, std::span<float> x);
  // The exact average on slice k: every replica's (x, w) of the whole slice in replica order
  // (this node's among them), x = sum w x / sum w, weights 1, references x. Frames checked for
  // this slice; one that is not dense (every coordinate) is refused, nothing changed.
  Status Average(size_t k, std::span<const GossipFrame* const> replicas, std::span<float> x);

 private:
  // Slice k's frame of `picked` of `x`, with this node's drifts when `drifts`.
  std::vector<uint8_t> Encode(size_t k, std::span<const uint32_t> picked, std::span<const float> x,
                              bool drifts) const;

  std::vector<SyncSlice> slices_;
  size_t parameters_;
  double keep_;
  bool tracking_;
  OuterOptions outer_;
  OuterOptimizer outer_state_;      // outer_step(): the anchor is x after the last round
  std::vector<float> outer_delta_;  // outer_step(): BeginRound's pseudo-gradient (scratch)
  std::vector<float> weights_, refs_;
  // Tracking: by parameter, c, x after the last round, and z this round; the learning rates
  // of the local steps since the last round, summed.
  std::vector<float> correction_, anchor_, drift_;
  double lr_sum_ = 0;
};

}  // namespace longhaul::fleet
