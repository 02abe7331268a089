// What every transport shares (link.h).
#include "daemon/transport/link.h"

namespace longhaul::daemon::transport {

bool Retryable(const Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:     // the tensor or request is wrong
    case absl::StatusCode::kNotFound:            // no such job or stage there
    case absl::StatusCode::kFailedPrecondition:  // an attempt the other side has left behind
    case absl::StatusCode::kUnimplemented:
      return false;
    default:
      return true;
  }
}

}  // namespace longhaul::daemon::transport
