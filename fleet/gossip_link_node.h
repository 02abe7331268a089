// One replica's side of push-sum gossip over compressed links (gossip_links.h describes the
// round): the copies its links keep, the frame it sends each out-neighbour, and what it makes of
// its own share and the frames it takes. The fleet simulator's LinkGossipMixer runs every
// replica's node in one process; a daemon's stage runs its own over its fragment's slices
// (daemon/job/sync/replica_sync.h) and exchanges the frames over its links. Both run this code
// on the same frames, so a daemon's rounds give the simulator's bits.
//
// A node keeps, for every other replica q, the copy of its own parameters that link me -> q
// holds (its out-copy) and the copy of q's that link q -> me holds (its in-copy), and each
// copy's XXH64 per slice. Copies that hold the same values share one array, copied on the
// first write: after Reset every link's copy is the one starting array until the link carries
// a frame, and a restored state shares what it holds alike, so a node holds one array plus
// one for each link its graphs have used (the exponential graph at most 2 ceil(log2 N)
// out-links and as many in-links of the N - 1 each way; CopyBytes). The two ends of a link hold the
// same copy as long as every frame the sender built reached the receiver. When one did not (a frame
// lost with a peer, a stage that restarted from an older checkpoint, a replica that rejoined), the
// copies differ, and a difference built on one end's copy would be added to another: so every
// difference frame names the hash of the copy it builds on, and a receiver whose copy hashes
// otherwise skips the frame whole (value and weight, which push-sum survives as a lost frame) and
// asks for a key frame: its next frame to that sender carries the request, and the sender's next
// frame on that link carries x itself in fp32, which both ends take as the copy. A sender that
// knows its frame did not go (the exchange's unsent) sends a key frame next without being asked,
// and an attempt with a rejoining replica starts the links to and from it from key frames at both
// ends (ResyncWith). A request needs the graph to draw the link back some round: the random
// graph does, and the exponential graph (sync.graph) within a period, since it turns its
// direction every period (fleet::ExponentialGossipGraph).
//
// A link frame, little-endian: u32 magic "LHGL", u8 version 1, u8 flags (bit 0: key, the
// values are x in fp32; bit 1: tracked, a drift frame follows; bit 2: the sender asks for a key
// frame on the reverse link of this slice), u16 zero, u32 the slice's index, u32 its count of
// coordinates, u64 the hash of the copy a difference builds on (0 in a key frame), f64 the
// sender's push-sum weight of the slice, u64 the values' frame bytes, when tracked u64 the
// drift's frame bytes; then the values as a compression frame (compression/frame.h: the
// difference in the job's codec, or x in fp32), when tracked the drift as one in the job's
// codec, and a u64 XXH64 of everything before it. A frame from a peer is checked whole before
// anything is applied: its size, its checksum, its slice and count, the codec of each
// compression frame (the job's, or fp32 in a key frame: a peer does not choose), the weight
// positive and at most kMaxLinkWeight, every decoded value finite; and a difference that would
// take the receiver's copy past fp32's range is skipped as one on another copy.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "compression/codec.h"
#include "compression/codec_spec.h"
#include "fleet/outer_optimizer.h"
#include "fleet/sync_options.h"
#include "fleet/sync_slices.h"

namespace longhaul::fleet {

// A peer's request for a key frame is honoured once this many frames have gone on its link since
// the last key frame: a peer that asks every round gets a fifth of the bytes of fp32 frames, not
// all of them (a key frame is about 7x a q4 difference).
inline constexpr uint32_t kKeyRequestFrames = 8;

// An untracked frame's bytes beside its compression frames: its header and checksum.
inline constexpr uint64_t kLinkFrameFixedBytes = 48;
// The largest push-sum weight a frame may carry. The weights of all replicas sum to at most
// their count (frames lost only lose mass), so this is far above any a replica holds, and low
// enough that no product of a weight and an fp32 value leaves double's range.
inline constexpr double kMaxLinkWeight = 1e6;

struct LinkFrame {
  uint32_t slice = 0;
  bool key = false;           // values are the sender's x: the link's copy becomes them
  bool want_key = false;      // the sender asks for a key frame on the link back to it
  uint64_t base = 0;          // a difference: the hash of the link's copy it builds on
  double weight = 0;          // the sender's push-sum weight of the slice
  std::vector<float> values;  // decoded: the difference from the copy, or x
  std::vector<float> drift;   // tracked: the sender's drift as decoded
};

// Checks a whole frame from a peer for slice `slice` of `size` coordinates sent in `codec`
// (tracked: with a drift) and decodes it; errors name the slice and what is wrong.
StatusOr<LinkFrame> DecodeLinkFrame(std::span<const uint8_t> bytes, uint32_t slice, uint64_t size,
                                    const compression::CodecSpec& codec, bool tracked);
// The checks DecodeLinkFrame makes of a frame's first bytes (at least its header): for a
// receiver refusing a frame before it has arrived whole.
Status CheckLinkFrameHeader(std::span<const uint8_t> prefix, uint32_t slice, uint64_t size,
                            bool tracked);
// The most bytes a frame of a slice of `size` in `codec` can take (a key frame's): a
// receiver's bound before it buffers one.
StatusOr<uint64_t> MaxLinkFrameBytes(const compression::CodecSpec& codec, uint64_t size,
                                     bool tracked);

// One thread at a time (a stage's sync thread, or the simulator's): its copies are shared and
// copied on write without a lock.
class LinkGossipNode {
 public:
  // Replica `replica` of `replicas`, whose `parameters` are cut into `slices` (offsets into
  // the same array; a daemon stage's are its fragment's); `codec`: one GossipLinkCodec takes;
  // `outer`: the outer step each round starts with (BeginRound; sync.outer).
  static StatusOr<std::unique_ptr<LinkGossipNode>> Create(
      int replica, int replicas, std::vector<SyncSlice> slices, size_t parameters,
      std::string_view codec, bool tracking, const OuterOptions& outer = kPlainAveraging);

  // Every weight 1 and every link's copy `params` (every replica starts from the same), no key
  // frame owed or asked for; tracking: every correction 0, the drift measured from `params`.
  void Reset(std::span<const float> params);
  // This node's copies no longer match its peers' (it rejoined from a live replica's
  // parameters): its next frame on every out-link is a key frame, and its frames ask every
  // in-link for one.
  void ResyncAll();
  // The same for the links to and from replica q alone (q rejoined from another's parameters).
  void ResyncWith(int q);
  // The durable state (weights, copies, the key frames owed and asked for, tracking's, the
  // outer step's), and a checkpoint's: DataLoss naming what does not fit this node.
  std::vector<uint8_t> Save() const;
  Status Restore(std::span<const uint8_t> state);
  // The bytes Save writes (the same for every state of this node).
  size_t StateBytes() const;

  int replica() const { return replica_; }
  bool tracking() const { return tracking_; }
  const std::vector<SyncSlice>& slices() const { return slices_; }
  double weight(size_t k) const { return weights_[k]; }
  // Link me -> q's copy (out) and link q -> me's (in), the whole parameter array.
  const std::vector<float>& out_copy(int q) const { return *out_[static_cast<size_t>(q)]; }
  const std::vector<float>& in_copy(int q) const { return *in_[static_cast<size_t>(q)]; }
  // The bytes the links' copies take: each array the copies hold once, however many share it.
  size_t CopyBytes() const;
  const std::vector<float>& corrections() const { return correction_; }
  // Frames skipped because their link's copies differed, and key frames sent (built and, as
  // Apply was told, sent; since Create).
  uint64_t stale_frames() const { return stale_; }
  uint64_t key_frames() const { return key_frames_; }
  // Slice k's rounds replay another node's (a multi-stage replica's tied embedding on its last
  // stage, which takes its first stage's frames: daemon/job/sync/tied_round.h): their key
  // frames and skipped frames are that node's, not counted here.
  void Uncount(size_t k) { uncounted_[k] = 1; }
  // Tracking: every correction 0 again, as every replica does when the replicas taking part
  // change (their corrections sum to 0 only among the same replicas).
  void ZeroCorrections();
  // An exact average has given every replica the same parameters `x`: every weight 1, and the
  // outer step's anchor x (its momentum stays).
  void Averaged(std::span<const float> x);

  // Tracking: a local step with learning rate `lr` has moved `x` (the whole parameter array);
  // the correction moves it on, x -= lr c. Nothing without tracking.
  void Correct(std::span<float> x, double lr);
  // The round's start, on `x` before this round (before its frames): tracking's drift since
  // the last round. An outer step other than plain averaging (sync.outer) then moves x from
  // where the last round left it (the anchor a) by the outer step on its own pseudo-gradient,
  // x = a - lr (d + m buf) with d = a - x, as GossipNode::BeginRound does; the frames carry the
  // stepped x, and the mixed x is the next anchor (Apply).
  void BeginRound(std::span<float> x);
  bool outer_step() const { return !IsPlainAveraging(outer_); }
  const OuterOptimizer& outer_state() const { return outer_state_; }
  // Slice k's values in `x` were replaced whole (a mended tied embedding, taken from the
  // replica's first stage, daemon/job/sync/tied_round.h): the outer step starts over there
  // (OuterOptimizer::RestartPart), alike on the stage that sent the copy and the one that took
  // it. Nothing without an outer step.
  void RestartOuter(size_t k, std::span<const float> x);
  // Slice k's frame to replica `to` in round `round`, from `x` (the whole parameter array):
  // the difference from link me -> to's copy in the codec (or x in fp32 when a key frame is
  // owed), the copy moved by it as the receiver will decode it.
  StatusOr<std::vector<uint8_t>> Frame(size_t k, int to, uint64_t round, std::span<const float> x);

  struct Received {
    int from = 0;
    double share = 1;  // the sender's 1 / (1 + its out-degree)
    const LinkFrame* frame = nullptr;
  };
  // The round's end on slice k, in place on `x` (the whole parameter array, as the round
  // started): `sent`, the out-neighbours its frames of the slice went to, and `unsent`, those
  // they did not (their shares stay here, their links owe a key frame); `received`, the frames
  // that came, checked for this slice, in sender order. This node keeps its share of (w x, w)
  // less the shares its out-links' copies carry, adds each in-link's copy's share, and each
  // coordinate becomes value / weight. A frame whose copy differs from this end's is skipped
  // (stale_frames). Tracking: the drifts mix by the same shares, the correction moves by the
  // mixed drift less the own, and the next drift is measured from the new x.
  void Apply(size_t k, std::span<const int> sent, std::span<const int> unsent,
             std::span<const Received> received, std::span<float> x);

 private:
  LinkGossipNode(int replica, int replicas, std::vector<SyncSlice> slices, size_t parameters,
                 std::unique_ptr<compression::Codec> codec,
                 std::unique_ptr<compression::Codec> key_codec, bool tracking,
                 const OuterOptions& outer);
  size_t Flag(int q, size_t k) const { return static_cast<size_t>(q) * slices_.size() + k; }
  // The state's flags byte: 1 tracked, 2 an outer step's anchor and momentum follow.
  uint8_t StateFlags() const {
    return static_cast<uint8_t>((tracking_ ? 1 : 0) | (outer_step() ? 2 : 0));
  }
  uint64_t Hash(const std::vector<float>& copy, size_t k) const;
  // A link's copy as this node may change it: its own array, copied first if shared.
  using Copy = std::shared_ptr<std::vector<float>>;
  static std::vector<float>& Own(Copy& copy);
  // Every link's hashes from its copies.
  void Rehash();
  // Encodes `values` with `codec` into the compression frame `out`, and decodes it as the
  // receiver will into `decoded`.
  Status Encode(const compression::Codec& codec, std::span<const float> values, uint64_t seed,
                std::vector<uint8_t>* out, std::span<float> decoded) const;

  int replica_, replicas_;
  std::vector<SyncSlice> slices_;
  size_t parameters_;
  std::unique_ptr<compression::Codec> codec_, key_codec_;
  bool tracking_;
  std::vector<double> weights_;               // by slice
  std::vector<Copy> out_, in_;                // by replica (this one's empty), maybe shared
  std::vector<uint64_t> out_hash_, in_hash_;  // by Flag(q, k)
  // By Flag(q, k): a key frame owed (this end knows the copies differ), asked for by the peer
  // (honoured at most once every kKeyRequestFrames frames of the link), asked of the peer; the
  // link's frames since its last key frame.
  std::vector<uint8_t> key_owed_, key_asked_, key_wanted_;
  std::vector<uint32_t> since_key_;
  uint64_t stale_ = 0, key_frames_ = 0;
  std::vector<uint8_t> uncounted_;  // by slice: Uncount
  // Tracking: the correction c, x after the last round, the learning rates summed since it,
  // this round's drift and its decoded frame (by slice: the round it was encoded in).
  std::vector<float> correction_, anchor_, drift_, sent_drift_;
  std::vector<std::vector<uint8_t>> drift_bytes_;
  std::vector<uint64_t> drift_round_;
  double lr_sum_ = 0;
  std::vector<float> scratch_;
  // The outer step (outer_step()): its anchor (x after the last round) and momentum, and the
  // pseudo-gradient's scratch.
  OuterOptions outer_;
  OuterOptimizer outer_state_;
  std::vector<float> outer_delta_;
};

// The exact average of one slice over the replicas' values `x` (each the slice's) with their
// push-sum weights `w` (by replica, each rounded to fp32 as a dense gossip frame carries it),
// into `out` (the slice's): sum w x / sum w. What the daemons' final average computes from
// their frames and the simulator from its replicas.
void AverageLinkSlice(std::span<const double> w, std::span<const std::span<const float>> x,
                      std::span<float> out);

}  // namespace longhaul::fleet
