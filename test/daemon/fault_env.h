// FaultEnv: a FileEnv (common/file_env.h) for tests that fails the way disks do: fsync
// returning EIO, a disk that fills up after some bytes (ENOSPC, the write torn there), and
// a byte flipped on its way back from a read (ReadRange or ReadFile). Pass it where an env is
// taken (DaemonOptions::env.files, a writer's or reader's FileEnv&).
#pragma once

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "common/file_env.h"

namespace longhaul::testing {

class FaultEnv : public FileEnv {
 public:
  // fsync fails with EIO.
  std::atomic<bool> fail_sync{false};
  // Writes stop with ENOSPC once this many more bytes were written (-1: never).
  std::atomic<int64_t> space_left{-1};
  // Removing a file whose path ends in this suffix fails with EACCES (empty: never).
  std::string refuse_remove_suffix;
  // Files removed through this env, in order.
  std::vector<std::string> removed;
  // Reads of files whose path ends in `flip_suffix` return byte `flip_offset` XOR 0x40.
  void FlipOnRead(const std::string& suffix, int64_t offset) {
    std::lock_guard<std::mutex> lock(mu_);
    flip_suffix_ = suffix;
    flip_offset_ = offset;
  }

  Status Write(int fd, const std::string& path, const void* data, size_t n) override {
    int64_t left = space_left.load();
    if (left >= 0 && static_cast<int64_t>(n) > left) {
      if (left > 0) RETURN_IF_ERROR(FileEnv::Write(fd, path, data, static_cast<size_t>(left)));
      space_left = 0;
      return ErrnoStatus(ENOSPC, "cannot write '" + path + "'");
    }
    if (left >= 0) space_left = left - static_cast<int64_t>(n);
    return FileEnv::Write(fd, path, data, n);
  }

  Status RemoveFile(const std::string& path) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (EndsWith(path, refuse_remove_suffix)) {
      return ErrnoStatus(EACCES, "cannot remove '" + path + "'");
    }
    removed.push_back(path);
    return FileEnv::RemoveFile(path);
  }

  Status Sync(int fd, const std::string& path) override {
    if (fail_sync) return ErrnoStatus(EIO, "cannot sync '" + path + "'");
    return FileEnv::Sync(fd, path);
  }

  StatusOr<std::string> ReadFile(const std::string& path, int64_t max_bytes) override {
    ASSIGN_OR_RETURN(std::string bytes, FileEnv::ReadFile(path, max_bytes));
    std::lock_guard<std::mutex> lock(mu_);
    if (Flips(path) && flip_offset_ >= 0 && flip_offset_ < static_cast<int64_t>(bytes.size())) {
      bytes[static_cast<size_t>(flip_offset_)] ^= 0x40;
    }
    return bytes;
  }

  Status ReadRange(const std::string& path, int64_t offset, void* out, size_t n) override {
    RETURN_IF_ERROR(FileEnv::ReadRange(path, offset, out, n));
    std::lock_guard<std::mutex> lock(mu_);
    if (Flips(path) && flip_offset_ >= offset && flip_offset_ < offset + static_cast<int64_t>(n)) {
      static_cast<unsigned char*>(out)[flip_offset_ - offset] ^= 0x40;
    }
    return absl::OkStatus();
  }

 private:
  // REQUIRES: mu_ held.
  bool Flips(const std::string& path) const { return EndsWith(path, flip_suffix_); }
  static bool EndsWith(const std::string& path, const std::string& suffix) {
    return !suffix.empty() && path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  }
  std::mutex mu_;
  std::string flip_suffix_;
  int64_t flip_offset_ = -1;
};

}  // namespace longhaul::testing
