// The durable-file shape (durable_file.h): header, payload, checks.
#include "model/durable_file.h"

#include <xxhash.h>

#include <algorithm>
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

bool HasDurableMagic(std::string_view bytes, const DurableFormat& format) {
  return bytes.size() >= sizeof format.magic &&
         std::memcmp(bytes.data(), format.magic, sizeof format.magic) == 0;
}

StatusOr<std::string> ReadSmallFile(FileEnv& env, const std::string& path, uint64_t max_bytes,
                                    const std::string& what) {
  StatusOr<std::string> bytes =
      env.ReadFile(path, static_cast<int64_t>(std::min<uint64_t>(max_bytes, INT64_MAX)));
  if (absl::IsResourceExhausted(bytes.status())) {
    return absl::DataLossError(what + ": " + std::string(bytes.status().message()));
  }
  if (!bytes.ok()) {
    return Status(bytes.status().code(),
                  "cannot read " + what + ": " + std::string(bytes.status().message()));
  }
  return bytes;
}

namespace {

// The file read once: at most the format's payload and its header.
StatusOr<std::string> ReadFormatFile(FileEnv& env, const std::string& path,
                                     const DurableFormat& format) {
  const uint64_t most = format.max_bytes > UINT64_MAX - sizeof(Header)
                            ? UINT64_MAX
                            : format.max_bytes + sizeof(Header);
  return ReadSmallFile(env, path, most, Named(format, path));
}

}  // namespace

StatusOr<DurablePayload> ReadDurableFile(FileEnv& env, const std::string& path,
                                         const DurableFormat& format) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFormatFile(env, path, format));
  return ParseDurableFile(std::move(bytes), path, format);
}

StatusOr<DurablePayload> ReadDurableOrEarlier(FileEnv& env, const std::string& path,
                                              const DurableFormat& format) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFormatFile(env, path, format));
  if (HasDurableMagic(bytes, format)) return ParseDurableFile(std::move(bytes), path, format);
  DurablePayload earlier;
  earlier.bytes = std::move(bytes);
  return earlier;
}

StatusOr<DurablePayload> ParseDurableFile(std::string bytes, const std::string& path,
                                          const DurableFormat& format) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(Named(format, path) + ": " + why);
  };
  if (bytes.size() < sizeof(Header)) {
    return bad(std::to_string(bytes.size()) + " bytes, shorter than its header (truncated?)");
  }
  Header h{};
  std::memcpy(&h, bytes.data(), sizeof h);
  if (std::memcmp(h.magic, format.magic, sizeof h.magic) != 0) return bad("bad magic");
  if (h.reserved != 0) return bad("a header field that must be 0 is " + std::to_string(h.reserved));
  if (h.version == 0 || h.version > format.version) {
    return bad("format version " + std::to_string(h.version) + ", this build reads 1 to " +
               std::to_string(format.version));
  }
  if (h.length > format.max_bytes) {
    return bad("its header describes " + std::to_string(h.length) + " bytes, more than " +
               std::to_string(format.max_bytes));
  }
  const uint64_t expected = sizeof h + h.length;
  if (static_cast<uint64_t>(bytes.size()) != expected) {
    return bad(std::to_string(bytes.size()) + " bytes, its header describes " +
               std::to_string(expected) + " (truncated?)");
  }
  if (XXH64(bytes.data() + sizeof h, h.length, 0) != h.xxh64) {
    return bad("checksum mismatch (corrupt)");
  }
  DurablePayload out;
  out.version = h.version;
  bytes.erase(0, sizeof h);
  out.bytes = std::move(bytes);
  return out;
}

}  // namespace longhaul::model
