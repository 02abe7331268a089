// FileEnv: the seam through which durable state touches the disk and the clock (leveldb's
// Env). Checkpoints and job records are written and read through it (model/file_io.h), so a
// test can put a faulty env in place and tear writes, fail fsync, fill the disk or flip bytes
// on read, and check that nothing corrupt is ever loaded and nothing committed is lost. The
// job runtime's clocks are its too (NowSeconds for durations, link measurements and timeouts;
// WallSeconds for the job record's times), so a test with a fake clock drives what they report.
// The daemon passes its env down to what it builds (DaemonOptions::env.files, Default() unless a
// test gives another); options that take one default to Default(). There is no process-wide
// env to swap: files a user names (data, configs, model and tokenizer files) are read through
// Default() by readers that take no env (model/file_io.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace longhaul {

class FileEnv {
 public:
  virtual ~FileEnv() = default;
  // Writes all `n` bytes to `fd` (the file `path`), retrying short writes.
  virtual Status Write(int fd, const std::string& path, const void* data, size_t n);
  // fsync(2) of `fd` (the file `path`).
  virtual Status Sync(int fd, const std::string& path);
  // rename(2): replaces `to` atomically.
  virtual Status Rename(const std::string& from, const std::string& to);
  // Reads `n` bytes at `offset` of `path`; a short file is DataLoss naming the sizes.
  virtual Status ReadRange(const std::string& path, int64_t offset, void* out, size_t n);
  // The whole regular file `path`, read through one descriptor (so a rename over it between
  // reads cannot mix two versions): ResourceExhausted naming the sizes when it holds more than
  // `max_bytes`, nothing read.
  virtual StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes);
  // Size of the regular file `path` (NotFound without one; InvalidArgument for a directory
  // or device).
  virtual StatusOr<int64_t> FileSize(const std::string& path);
  // The names of the entries of directory `dir` (no "." or ".."), in no order; NotFound
  // without one.
  virtual StatusOr<std::vector<std::string>> ListDirectory(const std::string& dir);
  // Whether `path` exists (a file or a directory).
  virtual bool Exists(const std::string& path);
  // unlink(2) of the file `path`; NotFound when there is none.
  virtual Status RemoveFile(const std::string& path);
  // Creates directory `dir` and its missing parents (mode 0777 less the umask); OK when it is
  // there already (or a link to one). Errors as ErrnoStatus gives them: a path through a
  // regular file is Internal ("Not a directory").
  virtual Status CreateDirectories(const std::string& dir);
  // Seconds on a monotonic clock (the steady clock's epoch): durations and deadlines.
  virtual double NowSeconds();
  // Seconds since the Unix epoch (the system clock, which may jump): time stamps.
  virtual double WallSeconds();

  // The real thing.
  static FileEnv* Default();
};

// errno as a Status whose message is "WHAT: strerror" (NotFound, PermissionDenied,
// ResourceExhausted for a full disk, Internal otherwise).
Status ErrnoStatus(int err, const std::string& what);

}  // namespace longhaul
