// How the pipeline replicas of a job stay in sync (the job's `sync:` block, job_spec.h):
//
//   step:  every step the replicas' gradients are summed (in replica order) before the
//          optimizer step, so the replicas are one model training the union batch;
//   local: each replica takes `every` inner steps with its own optimizer, then the group
//          averages the pseudo-gradients and takes an outer step (outer_optimizer.h).
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

struct SyncOptions {
  SyncMode mode = SyncMode::kLocal;
  int every = 50;  // local: inner steps per outer step; >= 1
  OuterOptions outer;
  std::string codec = "adaptive";
};

const char* SyncModeName(SyncMode mode);
// "step" or "local"; the error names the accepted values.
StatusOr<SyncMode> ParseSyncMode(std::string_view text);

// every >= 1, the outer options' ranges, and a codec that is "exact", "adaptive" or parses.
Status ValidateSyncOptions(const SyncOptions& options);

// The codec spec of a fixed sync codec ("exact" is fp32); "adaptive" and unparsable specs
// are errors naming the value.
StatusOr<compression::CodecSpec> FixedSyncCodec(std::string_view codec);

}  // namespace longhaul::fleet
