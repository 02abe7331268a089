// Checksummed job records; see job_record.h.
#include "daemon/job/coordinator/job_record.h"

#include <cstring>

#include "common/file_env.h"
#include "model/durable_file.h"
#include "model/file_io.h"

namespace longhaul::daemon {
namespace {

// The durable-file shape (model/durable_file.h); version 1 files were written in it before it
// had a name, byte for byte.
constexpr model::DurableFormat kFormat{
    {'L', 'H', 'J', 'O', 'B', 'R', 'E', 'C'}, 1, uint64_t{256} << 20, "job record"};

}  // namespace

Status WriteJobRecord(FileEnv& env, const std::string& path, const v1::JobStatus& record) {
  const std::string bytes = record.SerializeAsString();
  return model::WriteDurableFile(env, path, kFormat, {bytes});
}

StatusOr<v1::JobStatus> ReadJobRecord(FileEnv& env, const std::string& path) {
  // Read once: a record renamed over this one meanwhile cannot mix into it.
  ASSIGN_OR_RETURN(model::DurablePayload p, model::ReadDurableOrEarlier(env, path, kFormat));
  v1::JobStatus record;
  // An earlier build's record is the bare protobuf.
  const bool earlier = p.version == 0;
  if (!record.ParseFromString(p.bytes) ||
      (earlier && (p.bytes.compare(0, 5, "LHJOB") == 0 || record.job_id().empty()))) {
    return absl::DataLossError(std::string(kFormat.what) + " '" + path + "': not a job record");
  }
  return record;
}

}  // namespace longhaul::daemon
