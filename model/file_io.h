// Small file helpers for the model's formats: whole-file reads with errno-derived errors,
// and an atomic writer (temp file in the same directory, fsync, rename, fsync of the
// directory) so that a crash never leaves a half-written checkpoint under the final name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/file_env.h"
#include "common/status.h"

namespace longhaul::model {

// Size of regular file `path`, asked of `env`; errors read "cannot read WHAT 'PATH': reason".
StatusOr<int64_t> FileSize(FileEnv& env, const std::string& path, const std::string& what);

// Reads `n` bytes at `offset` of `path` into `out`, through `env`. A short file is an error
// naming the sizes (a truncated file).
Status ReadFileRange(FileEnv& env, const std::string& path, const std::string& what, int64_t offset,
                     void* out, size_t n);

// The same on the real disk (FileEnv::Default()), for the files a user names, read by readers
// that are not handed an env (data, config, tokenizer and model files).
StatusOr<int64_t> FileSize(const std::string& path, const std::string& what);
Status ReadFileRange(const std::string& path, const std::string& what, int64_t offset, void* out,
                     size_t n);

// Where a format writer's bytes go: a file written atomically (AtomicFileWriter), or a caller's
// stream (an export sent over RPC as it is produced, with no file in between).
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual Status Write(const void* data, size_t n) = 0;
};

// Writes a file atomically: Open, Write any number of times, Commit. Destroying an
// uncommitted writer removes the temporary file.
class AtomicFileWriter : public ByteSink {
 public:
  // Writes, syncs and renames through `env` (the real disk, FileEnv::Default(), when null).
  explicit AtomicFileWriter(FileEnv* env = nullptr) : env_(env ? env : FileEnv::Default()) {}
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Creates the parent directory if needed and a temporary file next to `path`.
  Status Open(const std::string& path);
  Status Write(const void* data, size_t n) override;
  // fsync, close, rename over `path`, fsync the directory.
  Status Commit();

 private:
  FileEnv* env_;
  std::string path_, temp_path_;
  int fd_ = -1;
};

// Writes `contents` to `path` atomically, through `env` (the second form: the real disk).
Status WriteFileAtomically(FileEnv& env, const std::string& path, const std::string& contents);
Status WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace longhaul::model
