// Parsing and validating the sync options (see sync_options.h).
#include "fleet/sync_options.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace longhaul::fleet {

const char* SyncModeName(SyncMode mode) { return mode == SyncMode::kStep ? "step" : "local"; }

StatusOr<SyncMode> ParseSyncMode(std::string_view text) {
  if (text == "step") return SyncMode::kStep;
  if (text == "local") return SyncMode::kLocal;
  return absl::InvalidArgumentError(
      absl::StrCat("sync.mode must be step or local, not '", std::string(text), "'"));
}

const char* SyncReduceName(SyncReduce reduce) {
  return reduce == SyncReduce::kRing ? "ring" : reduce == SyncReduce::kAuto ? "auto" : "gather";
}

StatusOr<SyncReduce> ParseSyncReduce(std::string_view text) {
  if (text == "gather") return SyncReduce::kGather;
  if (text == "ring") return SyncReduce::kRing;
  if (text == "auto") return SyncReduce::kAuto;
  return absl::InvalidArgumentError(
      absl::StrCat("sync.reduce must be gather, ring or auto, not '", std::string(text), "'"));
}

const char* SiteLossName(SiteLoss loss) { return loss == SiteLoss::kDrop ? "drop" : "wait"; }

StatusOr<SiteLoss> ParseSiteLoss(std::string_view text) {
  if (text == "drop") return SiteLoss::kDrop;
  if (text == "wait") return SiteLoss::kWait;
  return absl::InvalidArgumentError(
      absl::StrCat("sync.on_site_loss must be drop or wait, not '", std::string(text), "'"));
}

StatusOr<compression::CodecSpec> FixedSyncCodec(std::string_view codec) {
  if (codec == "exact") return compression::ParseCodecSpec("fp32");
  if (codec == "adaptive") {
    return absl::InvalidArgumentError("sync codec 'adaptive' is chosen at run time, not fixed");
  }
  auto spec = compression::ParseCodecSpec(codec);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("sync.codec '", std::string(codec),
                                                   "': ", std::string(spec.status().message())));
  }
  return spec;
}

LocalSyncAction LocalSyncAt(const SyncOptions& o, uint64_t done, uint64_t total) {
  LocalSyncAction a;
  const uint64_t every = static_cast<uint64_t>(std::max(1, o.every));
  const uint64_t overlap = static_cast<uint64_t>(std::max(0, o.overlap));
  if (done == 0) return a;
  if (overlap == 0) {
    a.blocking = done % every == 0 || done == total;
    return a;
  }
  // The one sync that can be in flight (overlap < every): the last multiple of every before
  // `done`, if it started within `overlap` steps or this is the last step.
  const uint64_t last_start = (done - 1) / every * every;
  if (last_start > 0 && last_start < total &&
      (last_start + overlap == done || (done == total && last_start + overlap > done))) {
    a.finish = true;
    a.started = last_start;
  }
  a.start = done % every == 0 && done < total;
  a.blocking = done == total;
  return a;
}

Status ValidateSyncOptions(const SyncOptions& o) {
  if (o.every < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sync.every must be >= 1, not ", o.every));
  }
  if (o.overlap < 0 || (o.overlap > 0 && o.overlap >= o.every)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync.overlap must be in [0, every) = [0, ", o.every, "), not ", o.overlap,
                     " (a sync has to finish before the next one starts)"));
  }
  if (o.overlap > 0 && o.mode != SyncMode::kLocal) {
    return absl::InvalidArgumentError(
        "sync.overlap needs mode local (in mode step the gradients are summed before each "
        "step's update)");
  }
  RETURN_IF_ERROR(ValidateOuterOptions(o.outer));
  if (o.codec != "adaptive") RETURN_IF_ERROR(FixedSyncCodec(o.codec).status());
  return absl::OkStatus();
}

}  // namespace longhaul::fleet
