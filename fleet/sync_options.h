// How the pipeline replicas of a job stay in sync (the job's `sync:` block, job_spec.h):
//
//   step:  every step the replicas' gradients are summed (in replica order) before the
//          optimizer step, so the replicas are one model training the union batch;
//   local: each replica takes `every` inner steps with its own optimizer, then the group
//          averages the pseudo-gradients and takes an outer step (outer_optimizer.h).
//          With `overlap` k > 0 the sync streams: it starts after the `every`-th step and
//          the replicas train k more inner steps while its frames cross the links; then the
//          outer step applies and each replica keeps what those k steps moved
//          (OuterOptimizer::Rebase). The last step's sync blocks, so the replicas end equal.
//          With `stagger` P > 1 the model's layers sync in P phases at staggered steps
//          (Streaming DiLoCo, Douillard et al. 2025): phase p's slices (SlicePhase,
//          sync_slices.h: layer l in phase l mod P) sync after the steps k every + p every / P,
//          each phase every `every` steps with its part of the parameters (the embeddings
//          make phase 0 the largest: PhaseShares), so a link carries the same bytes spread
//          over the round instead of all at once; every phase syncs after the last.
//
// What crosses a link between replicas is encoded with `codec`, with error feedback for
// every lossy codec (sync_reduce.h): "exact" (fp32, bit for bit), a fixed codec spec
// ("q4", "topk:0.01+q4", codec_spec.h), or "adaptive" (the daemon's controller picks from the
// measured bandwidth; a runtime matter, not a fixed spec).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"
#include "compression/codec_spec.h"
#include "fleet/outer_optimizer.h"

namespace longhaul::fleet {

enum class SyncMode { kStep, kLocal };

// What the job does when a site of one replica is lost (unreachable, restarted, failed):
//   drop: the replicas without it go on from the last committed step, and it rejoins from a
//         live replica's state at the first committed step after its sites answer again (in
//         mode step the live replicas take its microbatches meanwhile, Malleus-style, so that
//         every step still trains the union batch);
//   wait: every replica rolls back and waits for the site, as a single pipeline does (the
//         result is then the same bit for bit as a run without the fault).
enum class SiteLoss { kDrop, kWait };

// How a sync group reduces (sync_reduce.h, sync_ring.h):
//   gather: every member sends its frame of a slice to every other member and each sums all
//           of them in replica order: one hop, N - 1 frames out of every member;
//   ring:   the members in replica order form a ring; each slice is cut into N chunks that
//           are summed around it (each hop adds its member's part and re-encodes the partial
//           sum with error feedback), then each chunk's owner encodes the sum once and its
//           frame goes around unchanged: 2 (N - 1) hops, 2 (N - 1) / N frames out of every
//           member. Every member still applies the same bytes, so the replicas stay equal.
//   auto:   the planner prices both on the measured links and picks (a job placed by the
//           planner; the coordinator records the choice).
//   gossip: no collective: at each sync every member mixes its parameters with `fanout`
//           out-neighbours drawn that round (gossip.h, gossip_mixer.h: sparse push-sum), so the
//           members stay close rather than equal. Mode local with stagger 1 and overlap 0,
//           codec exact or topk:F; an outer step other than plain averaging is each member's
//           own, on its pseudo-gradient since its last round, before the mix
//           (GossipNode::BeginRound). The fleet simulator (local_fleet.h) and the daemons
//           (daemon/job/sync/replica_sync.h) run the same rounds.
enum class SyncReduce { kGather, kRing, kAuto, kGossip };

struct SyncOptions {
  SyncMode mode = SyncMode::kLocal;
  int every = 50;   // local: inner steps per outer step; >= 1
  int overlap = 0;  // local: inner steps a sync runs behind (0: it blocks); < every
  OuterOptions outer;
  std::string codec = "adaptive";
  // The job spec's default is drop in local mode (daemon/job/spec/job_spec.h), wait in step mode.
  SiteLoss on_site_loss = SiteLoss::kWait;
  SyncReduce reduce = SyncReduce::kGather;
  int stagger = 1;  // local: phases of a sync round (1: everything at once); <= every
  int fanout = 1;   // gossip: out-neighbours per member and round; >= 1
  // Gossip: each round's graph the one-peer exponential graph (`sync: {graph: exponential}`,
  // fleet::ExponentialGossipGraph: offsets 1, 2, 4, ... in turn, backward every other period,
  // one out-neighbour, the links only telling which are down) instead of `fanout` drawn from
  // the measured links.
  bool exponential_graph = false;
  // Gossip: gradient tracking (gossip_node.h), a correction per replica that its local steps
  // apply so that replicas on different data move as their mean does (`sync: {tracking:
  // true}`; the fleet simulator and the daemons alike).
  bool tracking = false;
  // Local mode: the first `warmup` steps each end in a blocking sync of every slice with plain
  // averaging (gossip: a round each); the cadence (`every`, `stagger`, `overlap`) and the
  // outer step take over after them. The replicas then train apart only once the first, fastest
  // phase of training is behind them (post-local SGD); 0: none (the replica study in
  // BENCHMARKS.md).
  int warmup = 0;
};

// A LocalSyncAction's phase when a sync covers every slice (the last step's, or stagger 1).
inline constexpr int kEveryPhase = -1;

const char* SyncModeName(SyncMode mode);
// "step" or "local"; the error names the accepted values.
StatusOr<SyncMode> ParseSyncMode(std::string_view text);

const char* SyncReduceName(SyncReduce reduce);
// "gather", "ring", "auto" or "gossip"; the error names the accepted values.
StatusOr<SyncReduce> ParseSyncReduce(std::string_view text);

const char* SiteLossName(SiteLoss loss);
// "drop" or "wait"; the error names the accepted values.
StatusOr<SiteLoss> ParseSiteLoss(std::string_view text);

// Local mode's syncs after `done` of `total` steps (1-based), in this order: `finish` the
// streaming sync started `overlap` steps ago (or earlier, at the last step), then `start`
// one (a phase's sync step before the last step, overlap > 0) or run one `blocking`
// (overlap 0: a phase's sync step or the last step; overlap > 0: the last step). A phase's
// sync steps are those k every + PhaseOffset (k >= 0, >= 1); with stagger 1 the multiples of
// every.
struct LocalSyncAction {
  bool finish = false;
  bool start = false;
  bool blocking = false;
  uint64_t started = 0;     // with finish: the `done` at which the finishing sync started
  int finish_phase = 0;     // with finish: the phase it syncs (kEveryPhase: every slice)
  int phase = kEveryPhase;  // with start or blocking: the phase whose slices sync
};
// Within the warm-up (done <= warmup) every step's sync blocks and covers every slice.
LocalSyncAction LocalSyncAt(const SyncOptions& options, uint64_t done, uint64_t total);
// The outer step of the sync after step `done`: plain averaging within the warm-up, the
// options' outer step after it.
OuterOptions OuterStepAt(const SyncOptions& options, uint64_t done);
// The outer step of a job whose file gives none (a given lr or momentum stays, the other from
// here), measured on real text (docs/BENCHMARKS.md, "The outer step's defaults follow the
// cadence"): plain averaging for gossip (each replica mixes its parameters), for a top-k
// codec (its error feedback carries what a sync leaves out, as momentum would) and for syncs
// more often than every kOuterMomentumFromEvery steps (momentum on syncs that close overshoots);
// Nesterov lr 1, momentum 0.5 from there on (DiLoCo's lr 0.7 and momentum 0.9 lost 29% every 5
// steps and 11% every 50 where these lost 3.8% and 7.6%).
inline constexpr int kOuterMomentumFromEvery = 10;
inline constexpr OuterOptions kCadenceMomentum{1.0f, 0.5f, true};
OuterOptions DefaultOuterStep(const SyncOptions& options);
// How many syncs came before the one after step `done` (>= 1) with stagger 1 and overlap 0
// (gossip's rounds): one after each warm-up step, then one every `every` steps, and one after
// the job's last step.
uint64_t SyncsBefore(const SyncOptions& options, uint64_t done);
// The inner steps from the sync after step `done` (>= 1) to the next one of any phase: 1
// within the warm-up; after it to the next multiple of `every`, or `every / stagger` when a
// staggered round's next phase comes sooner (the last warm-up step's next sync may be closer
// than `every`). What the adaptive codec prices a sync's time against.
double StepsToNextSync(const SyncOptions& options, uint64_t done);
// Phase p's first sync step within a round of `every`: p every / stagger (phase 0: 0, that is
// every). REQUIRES: 0 <= p < stagger.
uint64_t PhaseOffset(const SyncOptions& options, int phase);
// Whether a slice of phase `slice_phase` syncs in a sync of `phase`.
inline bool InPhase(int slice_phase, int phase) {
  return phase == kEveryPhase || slice_phase == phase;
}

// every >= 1, 1 <= stagger <= every (stagger > 1 only in local mode), 0 <= overlap <
// every / stagger (overlap > 0 only in local mode: one sync in flight at a time), the outer
// options' ranges, a codec that is "exact", "adaptive" or parses, and gossip's conditions
// (see SyncReduce) with fanout >= 1, tracking only with gossip, and warmup >= 0 (> 0 only in
// local mode, with gossip only with plain averaging).
Status ValidateSyncOptions(const SyncOptions& options);

// Gossip's shape: mode local, stagger 1, overlap 0; else the error naming the field.
Status GossipShape(const SyncOptions& options);

// The fraction of each slice a gossip round sends as fp32 shares (1 for codec exact, F for
// topk:F), or the error naming which of gossip's conditions (see SyncReduce) `options` breaks
// (a codec of compressed links among them: GossipSendsLinks).
StatusOr<double> GossipKeep(const SyncOptions& options);

// The spec of `codec` when compressed links can send in it (fleet/gossip_links.h): a dense
// lossy codec of 4 bits or more (bf16, fp16, q8, q4); else InvalidArgument naming it (top-k,
// lossless, q2: it diverged).
StatusOr<compression::CodecSpec> GossipLinkCodec(std::string_view codec);

// Whether a sync is gossip over compressed links: sync.reduce gossip with a codec
// GossipLinkCodec takes (exact and topk:F send fp32 shares instead, GossipKeep).
bool GossipSendsLinks(const SyncOptions& options);

// The codec spec of a fixed sync codec ("exact" is fp32); "adaptive" and unparsable specs
// are errors naming the value.
StatusOr<compression::CodecSpec> FixedSyncCodec(std::string_view codec);

}  // namespace longhaul::fleet
