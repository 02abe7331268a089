// The replica-level graph of a gossip round in the daemons (sync.reduce: gossip): what every
// stage of a job computes alike, the sender to choose its out-neighbours and the receiver to
// know whom it hears from (and to refuse a frame from anyone else).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "compression/codec_spec.h"
#include "daemon/job/spec/stage_grid.h"
#include "fleet/gossip.h"
#include "fleet/gossip_link_node.h"
#include "fleet/gossip_node.h"
#include "fleet/sync_options.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

// The key tags of a gossip sync's frames, whose microbatch is the tag plus the sender's
// replica: a round's, and the job's final average's after its last step (the replicas).
inline constexpr uint32_t kGossipRoundTag = 0;
inline uint32_t GossipFinalTag(int replicas) { return static_cast<uint32_t>(replicas); }
// Whether a gossip frame whose key carries `microbatch` carries the sender's drifts: a round's
// frame (below the final tag) of a job with sync.tracking; the final average's never. The
// sender (ReplicaSync), the receiver (SyncExchange) and the admission read it alike.
inline bool GossipFrameTracked(bool tracking, uint64_t microbatch, int replicas) {
  return tracking && microbatch < GossipFinalTag(replicas);
}

// Whether a gossip sync frame whose key carries `microbatch` is a round's over compressed links
// (fleet/gossip_link_node.h): in a job that gossips over links (`links`), a round's frame; the
// final average's are push-sum frames whatever the codec.
inline bool GossipLinkRoundFrame(bool links, uint64_t microbatch, int replicas) {
  return links && microbatch < GossipFinalTag(replicas);
}

// One slice's gossip sync frame as the job sends it, decoded and checked whole: a LinkFrame
// where GossipLinkRoundFrame says (in `link_codec`, the job's fleet::GossipLinkCodec; set only
// when the job gossips over links), else a push-sum GossipFrame (its drifts as
// GossipFrameTracked says). The exchange that takes the frames, the admission that checks them
// and a last stage replaying its first stage's tied-embedding rounds all decode through this.
struct GossipSliceFrame {
  std::optional<fleet::LinkFrame> link;
  std::optional<fleet::GossipFrame> gossip;
};
StatusOr<GossipSliceFrame> DecodeGossipSliceFrame(
    std::span<const uint8_t> bytes, uint32_t slice, uint64_t size,
    const std::optional<compression::CodecSpec>& link_codec, bool tracking, uint64_t microbatch,
    int replicas);

// The round of the sync after `step` (0-based): how many syncs came before it
// (fleet::SyncsBefore: one after each warm-up step, then one every `every` steps, and one
// after the job's last step).
uint64_t GossipRoundOf(const fleet::SyncOptions& sync, uint64_t step);

// That round's graph over the replicas, drawn from the job's `seed` (fleet::ChooseGossipGraph):
// out-neighbours with probability proportional to `links`, the attempt's measured bandwidth
// between the replicas (StageAssignment.gossip_links: row-major, replicas x replicas), or every
// link alike when `links` is empty; a dropped replica's links down. `live`: by replica.
fleet::GossipGraph GossipRoundGraph(const fleet::SyncOptions& sync, const std::vector<bool>& live,
                                    uint64_t seed, uint64_t step,
                                    const std::vector<double>& links = {});

// A gossip attempt's link matrices by round: the assignment's (StageAssignment.gossip_links,
// epoch 0) from round 0, then each the coordinator sent while the attempt ran
// (JobCommand.KIND_GOSSIP_LINKS, epochs 1, 2, ...) from its round on. Every stage of the
// attempt draws round r's graph from At(r), the senders and the receivers alike: a stage takes
// an epoch only for rounds it has not drawn yet, and a sync frame names the epoch it was drawn
// from (TensorFrame.links_epoch), so that a receiver told later answers "not yet" rather than
// "not an in-neighbour".
struct GossipLinkEpoch {
  uint32_t epoch = 0;
  uint64_t from_round = 0;
  std::vector<double> links;  // as StageAssignment.gossip_links (empty: every link alike)
};
class GossipLinkSchedule {
 public:
  explicit GossipLinkSchedule(std::vector<double> links = {})
      : epochs_{GossipLinkEpoch{0, 0, std::move(links)}} {}
  // The epoch whose matrix round `round` draws from.
  const GossipLinkEpoch& At(uint64_t round) const;
  const GossipLinkEpoch& latest() const { return epochs_.back(); }
  // Epoch `epoch` from round `from_round` on. INVALID_ARGUMENT unless it is the next epoch and
  // starts after the latest one's round; an epoch known already (the same one told again) is OK
  // and changes nothing.
  Status Add(uint32_t epoch, uint64_t from_round, std::vector<double> links);

 private:
  std::vector<GossipLinkEpoch> epochs_;  // by epoch
};

// The most bytes a round's frame of a slice of `slice_size` takes in a job of `sync`: a key
// frame over compressed links (fleet::MaxLinkFrameBytes), else a frame of every coordinate.
StatusOr<uint64_t> GossipRoundFrameMaxBytes(const fleet::SyncOptions& sync, uint64_t slice_size);

// The most bandwidth a link of the matrix may claim (bytes/s: 8 Pbit/s); more is refused.
inline constexpr double kMaxGossipLinkBandwidth = 1e15;
// Whether a reported link estimate (bytes/s) may go into the matrix: positive, finite and
// within kMaxGossipLinkBandwidth.
inline bool UsableLinkEstimate(double bw) { return bw > 0 && bw <= kMaxGossipLinkBandwidth; }
// Each link of a replica's row counts at least this fraction of the row's fastest: a slow link
// is drawn less often, never almost never. Push-sum needs it: a replica that sends every round
// but is rarely sent to would see its weights halve round after round towards underflow.
inline constexpr double kGossipLinkFloor = 0.1;

// The measured link matrix a gossip attempt draws its graphs from (StageAssignment.gossip_links),
// replicas x replicas, row-major. Link r -> q is the slowest link from a stage of r to a stage of
// q it sends sync frames to (the same layers, or both first, or both last), since r's round
// waits for every one of them, raised to kGossipLinkFloor of row r's fastest.
// `bandwidth(from, to)`: a site link's measured bytes per second, 0 when unknown. Empty when a
// link a live pair needs is unknown: the graphs then count every link alike. A dropped
// replica's row and column are 0.
std::vector<double> GossipLinkMatrix(
    const StageGrid& grid, const google::protobuf::RepeatedPtrField<v1::StageInfo>& stages,
    const std::vector<bool>& live,
    const std::function<double(const std::string& from, const std::string& to)>& bandwidth);

// Whether a link matrix `to` differs from `from` enough to draw the rounds from it instead: a
// different shape (one of them empty), or a link present in both whose rate moved by the
// factor kGossipLinksMoved or more, either way.
inline constexpr double kGossipLinksMoved = 2;
bool GossipLinksMoved(const std::vector<double>& from, const std::vector<double>& to);

// "0->1 1000, 0->2 10, ..." (Mbit/s) for the log: each live link of a GossipLinkMatrix.
std::string GossipLinksDebugString(const std::vector<double>& links);

// Whether `links` is a matrix GossipRoundGraph can draw from for `replicas` (`live`: by
// replica, not dropped; missing entries live): empty, or replicas x replicas values in
// [0, kMaxGossipLinkBandwidth], positive between live replicas (a zero column would starve a
// replica of push-sum weight). An error naming the entry otherwise.
Status CheckGossipLinks(const google::protobuf::RepeatedField<double>& links, int replicas,
                        const std::vector<bool>& live);

}  // namespace longhaul::daemon
