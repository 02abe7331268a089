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
enum class SyncReduce { kGather, kRing, kAuto };

struct SyncOptions {
  SyncMode mode = SyncMode::kLocal;
  int every = 50;   // local: inner steps per outer step; >= 1
  int overlap = 0;  // local: inner steps a sync runs behind (0: it blocks); < every
  OuterOptions outer;
  std::string codec = "adaptive";
  // The job spec's default is drop in local mode (daemon/job/job_spec.h), wait in step mode.
  SiteLoss on_site_loss = SiteLoss::kWait;
  SyncReduce reduce = SyncReduce::kGather;
};

const char* SyncModeName(SyncMode mode);
// "step" or "local"; the error names the accepted values.
StatusOr<SyncMode> ParseSyncMode(std::string_view text);

const char* SyncReduceName(SyncReduce reduce);
// "gather", "ring" or "auto"; the error names the accepted values.
StatusOr<SyncReduce> ParseSyncReduce(std::string_view text);

const char* SiteLossName(SiteLoss loss);
// "drop" or "wait"; the error names the accepted values.
StatusOr<SiteLoss> ParseSiteLoss(std::string_view text);

// Local mode's syncs after `done` of `total` steps (1-based), in this order: `finish` the
// streaming sync started `overlap` steps ago (or earlier, at the last step), then `start`
// one (a multiple of `every` before the last step, overlap > 0) or run one `blocking`
// (overlap 0: a multiple of every or the last step; overlap > 0: the last step).
struct LocalSyncAction {
  bool finish = false;
  bool start = false;
  bool blocking = false;
  uint64_t started = 0;  // with finish: the `done` at which the finishing sync started
};
LocalSyncAction LocalSyncAt(const SyncOptions& options, uint64_t done, uint64_t total);

// every >= 1, 0 <= overlap < every (overlap > 0 only in local mode), the outer options' ranges, and
// a codec that is "exact", "adaptive" or parses.
Status ValidateSyncOptions(const SyncOptions& options);

// The codec spec of a fixed sync codec ("exact" is fp32); "adaptive" and unparsable specs
// are errors naming the value.
StatusOr<compression::CodecSpec> FixedSyncCodec(std::string_view codec);

}  // namespace longhaul::fleet
