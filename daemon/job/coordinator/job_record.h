// A coordinator's durable job record (v1::JobStatus: plan, attempt, committed step, losses),
// in job.pb under the job's directory. The file carries a magic, a format version, the
// record's length and its XXH64, all verified on load, so a flipped byte or a torn file is
// DataLoss naming the file and never taken for a record. Records written by earlier builds
// (the bare protobuf) are still read.
#pragma once

#include <string>

#include "common/file_env.h"
#include "common/status.h"
#include "proto/longhaul.pb.h"

namespace longhaul::daemon {

// Writes `record` to `path` atomically (model/file_io.h), through `env` (the coordinator's,
// CoordinatorEnv::file_env).
Status WriteJobRecord(FileEnv& env, const std::string& path, const v1::JobStatus& record);

// NotFound when there is no file; DataLoss naming the file and what is wrong otherwise.
StatusOr<v1::JobStatus> ReadJobRecord(FileEnv& env, const std::string& path);

// Completed, failed or cancelled: a job in this state never runs again.
inline bool TerminalState(v1::JobState s) {
  return s == v1::JOB_STATE_COMPLETED || s == v1::JOB_STATE_FAILED || s == v1::JOB_STATE_CANCELLED;
}

}  // namespace longhaul::daemon
