// The tied embedding in a gossip job's multi-stage replica: held by its first and its last
// stage (the head's weights are the embedding), two copies that must stay one. Only the first
// stage gossips it with the other replicas (their first stages); the last stage replays the
// first's rounds on its own copy: after each round's exchange the first stage sends it the
// embedding's frames it took, as they came (TENSOR_KIND_TIED_ROUND, kTiedFrames), and its
// view of the round (kTiedView: whose frames came, whose of its own did not go), and the last
// stage builds and applies exactly what the first did (its frames of the embedding go nowhere,
// but build the same link copies). So a frame lost to one holder is lost to both, and the two
// copies, their weights, links and corrections take the same steps, whatever the links between
// the replicas do. The last stage sends its view back: the replicas removed as it knows them
// (tracking's corrections start again from 0 at the same round on both: the larger count) and
// the hash of its copy before the round. Hashes that differ say the copies split some other
// way (nothing known does): the first stage's copy then goes to the last after the round
// (kTiedValues), as it does after the job's final average, which the first stage makes alone.
//
// A view, little-endian: u32 magic "LHTV", u8 version 1, u8 zero, u16 the job's replicas, u64
// the step of the sync, u64 the replicas removed that the holder has seen, u64 the XXH64 of its
// tied embedding (fp32) before the exchange, then one byte per replica: bit 0 its frame came,
// bit 1 this holder's frame to it did not go (the exchange's unsent); and a u64 XXH64 of
// everything before it. The sender's own replica's byte is 0.
//
// The frames, little-endian: u32 magic "LHTF", u8 version 1, u8 zero, u16 their count, u64 the
// step of the sync, then per frame u32 the sending replica (ascending, not the receiver's) and
// u64 its bytes, then the frame as it came (a link frame, fleet/gossip_link_node.h, or a gossip
// frame, fleet/gossip_node.h, each checked for the slice by its decoder); and a u64 XXH64 of
// everything before it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "daemon/job/spec/stage_grid.h"

namespace longhaul::daemon {

// Whether `stage` of `grid` is a multi-stage replica's last stage with a tied head: in a gossip
// job it replays its first stage's rounds of the tied embedding, and exchanges none of that
// slice with other replicas.
inline bool ReplaysTied(const StageGrid& grid, int stage) {
  return grid.tied(stage) >= 0 && !grid.first(stage);
}

// The microbatches of TENSOR_KIND_TIED_ROUND.
inline constexpr uint32_t kTiedView = 0;    // a holder's view, each way
inline constexpr uint32_t kTiedFrames = 1;  // the frames the first stage took, to the last
inline constexpr uint32_t kTiedValues = 2;  // the first stage's copy (fp32), to the last

struct TiedRoundView {
  uint64_t step = 0;
  uint64_t removed = 0;
  uint64_t hash = 0;
  std::vector<int> came;    // replicas whose frames came, ascending
  std::vector<int> unsent;  // replicas this holder's frames did not go to, ascending
};

// The bytes of a view of a job of `replicas`.
inline size_t TiedRoundViewBytes(int replicas) { return 40 + static_cast<size_t>(replicas); }

// REQUIRES: came and unsent within [0, replicas), ascending, `self` in neither.
std::vector<uint8_t> EncodeTiedRoundView(const TiedRoundView& view, int replicas, int self);

// Checks a view from the other holder of replica `self` of `replicas` for the sync after `step`
// and decodes it; errors name what is wrong. `removed` is at most `replicas`.
StatusOr<TiedRoundView> DecodeTiedRoundView(std::span<const uint8_t> bytes, int replicas, int self,
                                            uint64_t step);

// What both holders apply: the first stage's frames and unsent, the larger removed count, and
// whether the hashes differ.
struct TiedAgreement {
  std::vector<int> came, unsent;
  uint64_t removed = 0;
  bool split = false;  // the copies were not the same before the exchange
};
TiedAgreement AgreeTiedRound(const TiedRoundView& first, const TiedRoundView& last);

// The XXH64 of `values` as fp32 bytes (a view's hash).
uint64_t TiedHash(std::span<const float> values);

// One frame the first stage took: from `replica`, its bytes as they came.
using TiedFrame = std::pair<int, std::vector<uint8_t>>;

// The most bytes the frames of one sync take, each frame at most `frame_bytes`.
uint64_t TiedFramesMaxBytes(int replicas, uint64_t frame_bytes);

// REQUIRES: replicas ascending.
std::vector<uint8_t> EncodeTiedFrames(uint64_t step, std::span<const TiedFrame> frames);

// Checks the frames from the first stage of replica `self` of `replicas` for the sync after
// `step`: their count, senders (ascending, others than `self`), sizes (each at most
// `frame_bytes`) and checksum; the frames themselves are for their decoder to check.
StatusOr<std::vector<TiedFrame>> DecodeTiedFrames(std::span<const uint8_t> bytes, int replicas,
                                                  int self, uint64_t step, uint64_t frame_bytes);

}  // namespace longhaul::daemon
