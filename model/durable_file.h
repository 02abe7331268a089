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
  uint32_t version = 0;  // 0: an earlier build's file, without the shape (ReadDurableOrEarlier)
  std::string bytes;
};

inline constexpr size_t kDurableHeaderBytes = 32;

// Writes `payload` (the concatenation of `parts`) to `path` in `format`'s shape.
Status WriteDurableFile(FileEnv& env, const std::string& path, const DurableFormat& format,
                        const std::vector<std::string_view>& parts);
// The file read once (FileEnv::ReadFile), then checked. NotFound when there is no file; DataLoss
// naming the file and what is wrong otherwise.
StatusOr<DurablePayload> ReadDurableFile(FileEnv& env, const std::string& path,
                                         const DurableFormat& format);
// The same checks of a file's bytes already read (`path` names it in errors). A reader that
// also takes an earlier build's files reads the file once and looks at HasDurableMagic first.
StatusOr<DurablePayload> ParseDurableFile(std::string bytes, const std::string& path,
                                          const DurableFormat& format);
bool HasDurableMagic(std::string_view bytes, const DurableFormat& format);
// A file of `format` read once and checked, or, where it does not start with the format's
// magic, an earlier build's file written before the shape: version 0 and the whole file as
// the payload, for the caller to parse as it did. Either is at most format.max_bytes plus the
// header, or DataLoss unread.
StatusOr<DurablePayload> ReadDurableOrEarlier(FileEnv& env, const std::string& path,
                                              const DurableFormat& format);
// A whole small file read once through `env`: NotFound as the env says it; a file larger than
// `max_bytes` is DataLoss naming `what`, the file and the sizes, nothing read.
StatusOr<std::string> ReadSmallFile(FileEnv& env, const std::string& path, uint64_t max_bytes,
                                    const std::string& what);

}  // namespace longhaul::model
