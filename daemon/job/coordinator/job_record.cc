// Checksummed job records; see job_record.h.
#include "daemon/job/coordinator/job_record.h"

#include <xxhash.h>

#include <chrono>
#include <cstring>

#include "model/file_io.h"

namespace longhaul::daemon {
namespace {

constexpr char kMagic[8] = {'L', 'H', 'J', 'O', 'B', 'R', 'E', 'C'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxRecordBytes = 256 << 20;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t reserved;  // 0
  uint64_t length;    // bytes of the serialized record after the header
  uint64_t xxh64;     // of those bytes
};

}  // namespace

Status WriteJobRecord(const std::string& path, const v1::JobStatus& record) {
  const std::string bytes = record.SerializeAsString();
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.length = bytes.size();
  h.xxh64 = XXH64(bytes.data(), bytes.size(), 0);
  model::AtomicFileWriter w;
  RETURN_IF_ERROR(w.Open(path));
  RETURN_IF_ERROR(w.Write(&h, sizeof h));
  RETURN_IF_ERROR(w.Write(bytes.data(), bytes.size()));
  return w.Commit();
}

StatusOr<v1::JobStatus> ReadJobRecord(const std::string& path) {
  const std::string what = "job record";
  ASSIGN_OR_RETURN(const int64_t size, model::FileSize(path, what));
  if (size < 0 || static_cast<uint64_t>(size) > kMaxRecordBytes) {
    return absl::DataLossError(what + " '" + path + "': " + std::to_string(size) + " bytes");
  }
  std::string data(static_cast<size_t>(size), '\0');
  RETURN_IF_ERROR(model::ReadFileRange(path, what, 0, data.data(), data.size()));
  v1::JobStatus record;
  if (data.size() >= 5 && data.compare(0, 5, "LHJOB") == 0) {
    Header h{};
    if (data.size() < sizeof h) {
      return absl::DataLossError(what + " '" + path + "': truncated header");
    }
    std::memcpy(&h, data.data(), sizeof h);
    if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kVersion ||
        h.reserved != 0) {
      return absl::DataLossError(what + " '" + path + "': unknown format or version");
    }
    if (h.length != data.size() - sizeof h) {
      return absl::DataLossError(what + " '" + path + "': " + std::to_string(data.size()) +
                                 " bytes, its header describes " +
                                 std::to_string(sizeof h + h.length) + " (truncated?)");
    }
    if (XXH64(data.data() + sizeof h, h.length, 0) != h.xxh64) {
      return absl::DataLossError(what + " '" + path + "': checksum mismatch (corrupt)");
    }
    if (!record.ParseFromArray(data.data() + sizeof h, static_cast<int>(h.length))) {
      return absl::DataLossError(what + " '" + path + "': not a job record");
    }
  } else if (!record.ParseFromString(data) || record.job_id().empty()) {  // an earlier build's
    return absl::DataLossError(what + " '" + path + "': not a job record");
  }
  return record;
}

double NowUnix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace longhaul::daemon
