// The adaptive sync codec (`sync: {codec: adaptive}`): before each sync a stage asks the
// compression controller (compression/controller.h, the pipeline links' own: ladder fp32,
// bf16, q8, q4; hysteresis; a one-line reason) for the least lossy codec whose predicted time
// to send its fragment over the slowest link to another member fits a budget: a fraction of
// the compute between two syncs (the inner steps in local mode, the step in step mode), so
// that syncs the runtime cannot yet hide cost at most that fraction. Error feedback carries
// what a lossy choice drops into the next sync, whichever codec that one uses. Each member
// chooses for itself; every member still decodes the same frames, so replicas stay identical.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "compression/controller.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

// The codec an adaptive sync starts with, before any bandwidth estimate: the ladder's floor.
inline constexpr char kAdaptiveSyncStart[] = "q4";
// The share of the compute between syncs a sync may take.
inline constexpr double kSyncBudgetFraction = 0.1;

class SyncCodecChooser {
 public:
  static StatusOr<SyncCodecChooser> Create();

  // The codec for the next sync of `bytes` raw fp32 bytes to the members whose outbound link
  // estimates are `links` (the slowest bandwidth and the longest round trip count), with
  // `compute_seconds` of compute since the last sync; `now` a monotonic clock in seconds.
  StatusOr<compression::Decision> Choose(const std::vector<v1::LinkEstimate>& links, uint64_t bytes,
                                         double compute_seconds, double now);

 private:
  explicit SyncCodecChooser(compression::Controller controller)
      : controller_(std::move(controller)) {}

  compression::Controller controller_;
  compression::ControllerState state_;
};

}  // namespace longhaul::daemon
