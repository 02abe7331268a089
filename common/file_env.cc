// The real FileEnv; see file_env.h.
#include "common/file_env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace longhaul {

Status ErrnoStatus(int err, const std::string& what) {
  const std::string message = what + ": " + std::strerror(err);
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

Status FileEnv::Write(int fd, const std::string& path, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return ErrnoStatus(errno, "cannot write '" + path + "'");
    p += w;
    n -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

Status FileEnv::Sync(int fd, const std::string& path) {
  if (::fsync(fd) != 0) return ErrnoStatus(errno, "cannot sync '" + path + "'");
  return absl::OkStatus();
}

Status FileEnv::Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return ErrnoStatus(errno, "cannot rename '" + from + "' to '" + to + "'");
  }
  return absl::OkStatus();
}

Status FileEnv::ReadRange(const std::string& path, int64_t offset, void* out, size_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot read '" + path + "'");
  size_t done = 0;
  while (done < n) {
    const ssize_t r =
        ::pread(fd, static_cast<char*>(out) + done, n - done, offset + static_cast<int64_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "cannot read '" + path + "'");
    }
    if (r == 0) {
      ::close(fd);
      return absl::DataLossError("'" + path + "' is truncated: needed " +
                                 std::to_string(offset + static_cast<int64_t>(n)) +
                                 " bytes, the file has " +
                                 std::to_string(offset + static_cast<int64_t>(done)));
    }
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  return absl::OkStatus();
}

StatusOr<std::string> FileEnv::ReadFile(const std::string& path, int64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot read '" + path + "'");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoStatus(err, "cannot read '" + path + "'");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError("cannot read '" + path + "': not a regular file");
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    return absl::ResourceExhaustedError("'" + path + "' holds " + std::to_string(st.st_size) +
                                        " bytes, more than the " + std::to_string(max_bytes) +
                                        " expected of it");
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t r = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(err, "cannot read '" + path + "'");
    }
    if (r == 0) break;  // shrank while read: what is there
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  out.resize(done);
  return out;
}

StatusOr<int64_t> FileEnv::FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot read '" + path + "'");
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError("cannot read '" + path + "': not a regular file");
  }
  return static_cast<int64_t>(st.st_size);
}

StatusOr<std::vector<std::string>> FileEnv::ListDirectory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, "cannot list '" + dir + "'");
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
    errno = 0;
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return ErrnoStatus(err, "cannot list '" + dir + "'");
  return names;
}

bool FileEnv::Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

Status FileEnv::RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0) return ErrnoStatus(errno, "cannot remove '" + path + "'");
  return absl::OkStatus();
}

Status FileEnv::CreateDirectories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return ErrnoStatus(ec.value(), "cannot create directory '" + dir + "'");
  return absl::OkStatus();
}

double FileEnv::NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double FileEnv::WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

FileEnv* FileEnv::Default() {
  static FileEnv env;
  return &env;
}

}  // namespace longhaul
