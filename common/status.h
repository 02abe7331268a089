// Status helpers used everywhere: absl::Status / absl::StatusOr (which gRPC brings) plus
// the two macros that keep error propagation short. Errors name what failed and where.
#pragma once

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace longhaul {

using Status = absl::Status;
template <typename T>
using StatusOr = absl::StatusOr<T>;

// Returns `status` with `context` prepended to its message ("context: message").
inline Status Annotate(const Status& status, const std::string& context) {
  if (status.ok()) return status;
  return Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

}  // namespace longhaul

#define LH_CONCAT_INNER_(a, b) a##b
#define LH_CONCAT_(a, b) LH_CONCAT_INNER_(a, b)

// Returns from the current function if `expr` (a Status) is not OK.
#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::absl::Status lh_status_ = (expr);      \
    if (!lh_status_.ok()) return lh_status_; \
  } while (0)

// `lhs` = value of `expr` (a StatusOr<T>), or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(LH_CONCAT_(lh_statusor_, __LINE__), lhs, expr)
#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()
