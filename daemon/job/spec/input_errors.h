// Errors in a job's input data: a shard that is corrupt or unreadable, data that does not fit
// the model. Unlike a lost site or a broken link, a rollback would meet them again, so a stage
// that stops on one says so (JobCommandResponse.permanent) and the coordinator fails the job
// at once with the reason instead of retrying it.
#pragma once

#include "absl/strings/cord.h"
#include "common/status.h"

namespace longhaul::daemon {

inline constexpr char kInputDataErrorPayload[] = "type.longhaul/input-data-error";

// `s` marked as an input-data error when it says the data itself is wrong or missing
// (DataLoss, InvalidArgument, NotFound, OutOfRange, PermissionDenied); other errors (an I/O
// error on a network filesystem, say) may pass, and stay errors a rollback retries. OK stays
// OK.
inline Status InputDataError(Status s) {
  switch (s.code()) {
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kPermissionDenied:
      s.SetPayload(kInputDataErrorPayload, absl::Cord("1"));
      break;
    default:
      break;
  }
  return s;
}

inline bool IsInputDataError(const Status& s) {
  return s.GetPayload(kInputDataErrorPayload).has_value();
}

}  // namespace longhaul::daemon
