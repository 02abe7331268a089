// One shape for longhaul's own small durable files (a coordinator's job record, a stage
// site's assignment, a stage's sync state): a 32-byte header, then the payload.
//
//   8 bytes  magic, the format's name ("LHJOBREC", ...)
//   u32      version of the payload's layout
//   u32      0
//   u64      payload bytes
//   u64      XXH64 of the payload
//
// Written atomically (a temporary file beside it, fsync, rename, fsync of the directory) and
// read back with every field checked, all through the FileEnv the caller passes: a torn,
// truncated, overlong or flipped file is DataLoss naming the file and what is wrong, never a
// payload. Formats whose files are large and streamed (stage checkpoints, model checkpoints,
// token files) keep their own headers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/file_env.h"
#include "common/status.h"

namespace longhaul::model {

struct DurableFormat {
  char magic[8];
  uint32_t version = 1;                    // written; reading accepts versions 1..version
  uint64_t max_bytes = uint64_t{1} << 30;  // a payload above this is refused unread
  const char* what = "file";               // the file's kind, in errors
};

struct DurablePayload {
  uint32_t version = 0;
  std::string bytes;
};

inline constexpr size_t kDurableHeaderBytes = 32;

// Writes `payload` (the concatenation of `parts`) to `path` in `format`'s shape.
Status WriteDurableFile(FileEnv& env, const std::string& path, const DurableFormat& format,
                        const std::vector<std::string_view>& parts);
// NotFound when there is no file; DataLoss naming the file and what is wrong otherwise.
StatusOr<DurablePayload> ReadDurableFile(FileEnv& env, const std::string& path,
                                         const DurableFormat& format);
// Whether the file at `path` starts with `format`'s magic (a reader that also takes an earlier
// build's files, written before this shape, looks here first).
StatusOr<bool> HasDurableMagic(FileEnv& env, const std::string& path, const DurableFormat& format);

}  // namespace longhaul::model
