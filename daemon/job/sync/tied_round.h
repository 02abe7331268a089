// The tied embedding's two holders in a gossip job (a multi-stage replica's first and last
// stage) agreeing on each round. Each holder gossips the embedding with the other replicas'
// holders at its own end (sync_routes.h): two groups over different links, which make the
// same rounds only while they take the same frames. When they do not (a peer's first stage
// lost while its last still sends, a link between last stages cut), the two copies of the
// embedding would split and nothing would bring them back. So after each exchange of a
// round, and of the job's final average, the two holders swap what theirs did (a view) and
// both apply what they agree on:
//   - a replica's frame counts as come when it came to both holders (one that came to one only
//     is left out by both, as a frame lost on the way, which push-sum survives; over
//     compressed links the copy it would have moved then differs and asks for a key frame);
//   - a frame counts as gone unless neither holder's went (one that went from one holder only
//     is lost to the other group, as one lost on the way; the reverse, keeping a share that
//     reached a peer, would count its mass twice);
//   - the replicas removed from the job: the more of the two counts (tracking's corrections
//     start again from 0 at the same round on both).
// The view also carries a hash of the holder's embedding before the exchange: two that differ
// say the copies split by some other way, and the first stage's copy is then sent to the last
// after the round (TENSOR_KIND_TIED_ROUND, kTiedValues).
//
// A view, little-endian: u32 magic "LHTV", u8 version 1, u8 kind (kTiedViewRound or
// kTiedViewFinal), u16 the job's replicas, u64 the step of the sync, u64 the replicas removed
// that the holder has seen, u64 the XXH64 of its tied embedding (fp32) before the exchange,
// then one byte per replica: bit 0 its frame came, bit 1 this holder's frame to it did not
// go (the exchange's unsent); and a u64 XXH64 of everything before it. The sender's own
// replica's byte is 0.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"

namespace longhaul::daemon {

// The microbatches of TENSOR_KIND_TIED_ROUND: a round's view, the final average's view, and
// the first stage's tied embedding (a compression frame of padded_vocab x channels in fp32)
// after views whose hashes differed.
inline constexpr uint32_t kTiedViewRound = 0;
inline constexpr uint32_t kTiedViewFinal = 1;
inline constexpr uint32_t kTiedValues = 2;

struct TiedRoundView {
  uint32_t kind = kTiedViewRound;
  uint64_t step = 0;
  uint64_t removed = 0;
  uint64_t hash = 0;
  std::vector<int> came;    // replicas whose frames came, ascending
  std::vector<int> unsent;  // replicas this holder's frames did not go to, ascending
};

// The bytes of a view of a job of `replicas`.
inline size_t TiedRoundViewBytes(int replicas) { return 40 + static_cast<size_t>(replicas); }

// REQUIRES: came and unsent within [0, replicas), `self` in neither.
std::vector<uint8_t> EncodeTiedRoundView(const TiedRoundView& view, int replicas, int self);

// Checks a view from the partner of replica `self` of `replicas` for the sync of `step` of
// `kind` and decodes it; errors name what is wrong. `removed` is at most `replicas`.
StatusOr<TiedRoundView> DecodeTiedRoundView(std::span<const uint8_t> bytes, int replicas, int self,
                                            uint32_t kind, uint64_t step);

// What both holders apply (the same whichever of the two views is `a`): came in both, unsent
// from both, the larger removed count, and whether their hashes differ.
struct TiedAgreement {
  std::vector<int> came, unsent;
  uint64_t removed = 0;
  bool split = false;  // the hashes differ: the copies were not the same before the exchange
};
TiedAgreement AgreeTiedRound(const TiedRoundView& a, const TiedRoundView& b);

// The XXH64 of `values` as fp32 bytes (a view's hash).
uint64_t TiedHash(std::span<const float> values);

}  // namespace longhaul::daemon
