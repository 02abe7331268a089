// A ring reduction of one sync slice (sync_options.h, SyncReduce::kRing): the L members (one
// holder of the slice per live replica, in replica order) cut the slice into L chunks, chunk c
// being values [c n / L, (c + 1) n / L). In hop h of the reduce-scatter (h = 0 .. L - 2)
// member p sends chunk (p - h) mod L to member p + 1, which adds its own weighted part of that
// chunk and sends the partial sum on: chunk c is summed starting at member c, in ring order,
// and ends whole at member c - 1, its owner. The owner encodes that sum once, applies the
// decoded frame itself, and in the all-gather (hops L - 1 .. 2 L - 3) the frame goes around the
// ring unchanged, so every member decodes the same bytes into the same bits.
//
// Every frame a member sends is encoded with error feedback on its part of the slice's residual:
// in one sync a member encodes each chunk exactly once (L - 1 partial sums and the sum of the
// chunk it owns), so one residual of the slice's size carries what any of its encodings
// dropped into the next sync. A member sends 2 (L - 1) chunks of n / L values per sync, where
// the gather (sync_reduce.h) sends L - 1 frames of n.
//
// RingMember is one member's side, the same code in the daemon (one member per stage and
// slice, the frames over the network) and in the in-process fleet (every member in turn).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "compression/error_feedback.h"

namespace longhaul::fleet {

struct RingChunk {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
// Chunk `chunk` of a slice of `n` values cut for `members`. REQUIRES: 0 <= chunk < members.
RingChunk RingChunkOf(int64_t n, int members, int chunk);

// The hops of a ring of `members`: 2 (members - 1).
int RingHops(int members);
// The chunk the member at `position` sends in `hop`; it receives RingSendChunk(members,
// position - 1, hop) from its predecessor in the same hop.
int RingSendChunk(int members, int position, int hop);
int RingReceiveChunk(int members, int position, int hop);

// One member's ring reduction of one slice in one sync: out = the sum over members of
// weight x values, each chunk as its owner's frame decodes.
class RingMember {
 public:
  // `encoder`: this member's for the slice (its residual covers the slice). `seed`: the
  // sync's seed for this member and slice (SyncSeed); each chunk's encoding varies it. values,
  // encoder and out must outlive the member. REQUIRES: 0 <= position < members,
  // out.size() == values.size().
  RingMember(int members, int position, std::span<const float> values, float weight,
             compression::FeedbackEncoder* encoder, uint64_t seed, std::span<float> out);

  // The frame of hop 0 into *frame (empty for a ring of one member: out is then done).
  Status Begin(std::vector<uint8_t>* frame);
  // The predecessor's frame of hop `hop` (the hops in order). *next: the frame to send in
  // hop + 1 (empty after the last hop). Errors name the hop, chunk and sizes of a frame that
  // does not decode to its chunk.
  Status Take(int hop, std::span<const uint8_t> frame, std::vector<uint8_t>* next);
  // The next hop whose frame this member waits for (RingHops when done).
  int next_hop() const { return next_hop_; }
  bool done() const { return next_hop_ >= RingHops(members_); }
  int RingHopCount() const { return RingHops(members_); }
  // The chunk a frame of `hop` from the predecessor holds (its size bounds the frame).
  RingChunk ReceiveChunk(int hop) const;

 private:
  // Encodes partial + weight x values over `chunk` into *frame.
  Status EncodeChunk(int chunk, std::span<const float> partial, std::vector<uint8_t>* frame);
  Status Decode(int hop, std::span<const uint8_t> frame, std::span<float> into) const;

  int members_, position_;
  std::span<const float> values_;
  float weight_;
  compression::FeedbackEncoder* encoder_;
  uint64_t seed_;
  std::span<float> out_;
  int next_hop_ = 0;
};

// Every member's ring reduction run in one process (the in-process fleet): member p's
// contribution values[p] with weights[p] and encoders[p]; out = what every member applies.
// *wire_bytes += every frame's bytes sent. REQUIRES: as many values, weights, encoders and
// seeds, each values[p] the size of out.
Status RingReduce(const std::vector<std::span<const float>>& values, std::span<const float> weights,
                  const std::vector<compression::FeedbackEncoder*>& encoders,
                  std::span<const uint64_t> seeds, std::span<float> out, uint64_t* wire_bytes);

}  // namespace longhaul::fleet
