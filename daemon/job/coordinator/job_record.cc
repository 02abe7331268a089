// Checksummed job records; see job_record.h.
#include "daemon/job/coordinator/job_record.h"

#include <chrono>
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

Status WriteJobRecord(const std::string& path, const v1::JobStatus& record) {
  const std::string bytes = record.SerializeAsString();
  return model::WriteDurableFile(*CurrentFileEnv(), path, kFormat, {bytes});
}

StatusOr<v1::JobStatus> ReadJobRecord(const std::string& path) {
  FileEnv& env = *CurrentFileEnv();
  v1::JobStatus record;
  ASSIGN_OR_RETURN(const bool sealed, model::HasDurableMagic(env, path, kFormat));
  if (sealed) {
    ASSIGN_OR_RETURN(model::DurablePayload p, model::ReadDurableFile(env, path, kFormat));
    if (!record.ParseFromString(p.bytes)) {
      return absl::DataLossError(std::string(kFormat.what) + " '" + path + "': not a job record");
    }
    return record;
  }
  // An earlier build's record: the bare protobuf.
  ASSIGN_OR_RETURN(const int64_t size, model::FileSize(path, kFormat.what));
  if (size < 0 || static_cast<uint64_t>(size) > kFormat.max_bytes) {
    return absl::DataLossError(std::string(kFormat.what) + " '" + path +
                               "': " + std::to_string(size) + " bytes");
  }
  std::string data(static_cast<size_t>(size), '\0');
  RETURN_IF_ERROR(model::ReadFileRange(path, kFormat.what, 0, data.data(), data.size()));
  if (data.compare(0, 5, "LHJOB") == 0 || !record.ParseFromString(data) ||
      record.job_id().empty()) {
    return absl::DataLossError(std::string(kFormat.what) + " '" + path + "': not a job record");
  }
  return record;
}

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace longhaul::daemon
