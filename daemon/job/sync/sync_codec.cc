// SyncCodecChooser; see sync_codec.h.
#include "daemon/job/sync/sync_codec.h"

#include <algorithm>

namespace longhaul::daemon {

StatusOr<SyncCodecChooser> SyncCodecChooser::Create() {
  ASSIGN_OR_RETURN(compression::Controller controller, compression::Controller::Create());
  return SyncCodecChooser(std::move(controller));
}

StatusOr<compression::Decision> SyncCodecChooser::Choose(const std::vector<v1::LinkEstimate>& links,
                                                         uint64_t bytes, double compute_seconds,
                                                         double now) {
  compression::ControllerInput in;
  in.bandwidth_bytes_per_second = links.empty() ? 0 : -1;
  for (const v1::LinkEstimate& l : links) {
    const double bw = l.bandwidth_bytes_per_second();
    if (bw <= 0) {  // a member not measured yet: no estimate for the group
      in.bandwidth_bytes_per_second = 0;
      break;
    }
    if (in.bandwidth_bytes_per_second < 0 || bw < in.bandwidth_bytes_per_second) {
      in.bandwidth_bytes_per_second = bw;
    }
    in.rtt_seconds = std::max(in.rtt_seconds, std::max(0.0, l.rtt_seconds()));
  }
  in.bandwidth_bytes_per_second = std::max(0.0, in.bandwidth_bytes_per_second);
  in.tensor_bytes = bytes;
  // A floor on the budget, so that a first sync with no compute measured still has one.
  in.budget_seconds = std::max(1e-3, kSyncBudgetFraction * compute_seconds);
  in.quality_floor = controller_.rungs() - 1;
  in.now_seconds = now;
  ASSIGN_OR_RETURN(compression::Decision d, controller_.Decide(in, state_));
  state_ = d.next;
  return d;
}

}  // namespace longhaul::daemon
