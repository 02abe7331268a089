// The durable-file shape (durable_file.h): header, payload, checks.
#include "model/durable_file.h"

#include <xxhash.h>

#include <cstring>

#include "model/file_io.h"

namespace longhaul::model {
namespace {

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t reserved;  // 0
  uint64_t length;    // payload bytes
  uint64_t xxh64;     // of the payload
};
static_assert(sizeof(Header) == kDurableHeaderBytes);

std::string Named(const DurableFormat& f, const std::string& path) {
  return std::string(f.what) + " '" + path + "'";
}

}  // namespace

Status WriteDurableFile(FileEnv& env, const std::string& path, const DurableFormat& format,
                        const std::vector<std::string_view>& parts) {
  Header h{};
  std::memcpy(h.magic, format.magic, sizeof h.magic);
  h.version = format.version;
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  for (std::string_view p : parts) {
    XXH64_update(state, p.data(), p.size());
    h.length += p.size();
  }
  h.xxh64 = XXH64_digest(state);
  XXH64_freeState(state);
  if (h.length > format.max_bytes) {
    return absl::InvalidArgumentError(Named(format, path) + ": " + std::to_string(h.length) +
                                      " bytes, more than its format's " +
                                      std::to_string(format.max_bytes));
  }
  AtomicFileWriter w(&env);
  RETURN_IF_ERROR(w.Open(path));
  RETURN_IF_ERROR(w.Write(&h, sizeof h));
  for (std::string_view p : parts) RETURN_IF_ERROR(w.Write(p.data(), p.size()));
  return w.Commit();
}

StatusOr<bool> HasDurableMagic(FileEnv& env, const std::string& path, const DurableFormat& format) {
  ASSIGN_OR_RETURN(const int64_t size, env.FileSize(path));
  if (size < static_cast<int64_t>(sizeof format.magic)) return false;
  char magic[sizeof format.magic];
  RETURN_IF_ERROR(env.ReadRange(path, 0, magic, sizeof magic));
  return std::memcmp(magic, format.magic, sizeof magic) == 0;
}

StatusOr<DurablePayload> ReadDurableFile(FileEnv& env, const std::string& path,
                                         const DurableFormat& format) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(Named(format, path) + ": " + why);
  };
  StatusOr<int64_t> size = env.FileSize(path);
  if (!size.ok()) {
    return Status(size.status().code(), "cannot read " + Named(format, path) + ": " +
                                            std::string(size.status().message()));
  }
  if (*size < static_cast<int64_t>(sizeof(Header))) {
    return bad(std::to_string(*size) + " bytes, shorter than its header (truncated?)");
  }
  Header h{};
  RETURN_IF_ERROR(env.ReadRange(path, 0, &h, sizeof h));
  if (std::memcmp(h.magic, format.magic, sizeof h.magic) != 0) return bad("bad magic");
  if (h.version == 0 || h.version > format.version || h.reserved != 0) {
    return bad("format version " + std::to_string(h.version) + ", this build reads 1 to " +
               std::to_string(format.version));
  }
  if (h.length > format.max_bytes) {
    return bad("its header describes " + std::to_string(h.length) + " bytes, more than " +
               std::to_string(format.max_bytes));
  }
  const uint64_t expected = sizeof h + h.length;
  if (static_cast<uint64_t>(*size) != expected) {
    return bad(std::to_string(*size) + " bytes, its header describes " + std::to_string(expected) +
               " (truncated?)");
  }
  DurablePayload out;
  out.version = h.version;
  out.bytes.resize(static_cast<size_t>(h.length));
  if (h.length > 0) {
    RETURN_IF_ERROR(env.ReadRange(path, sizeof h, out.bytes.data(), out.bytes.size()));
  }
  if (XXH64(out.bytes.data(), out.bytes.size(), 0) != h.xxh64) {
    return bad("checksum mismatch (corrupt)");
  }
  return out;
}

}  // namespace longhaul::model
