// File helpers: bounded reads with clear errors and atomic writes (see file_io.h).
#include "model/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"

namespace longhaul::model {
namespace {

Status Errno(int err, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(message);
  return absl::InternalError(message);
}

}  // namespace

StatusOr<int64_t> FileSize(const std::string& path, const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return Errno(errno, absl::StrCat("cannot read ", what, " '", path, "'"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", what, " '", path, "': not a regular file"));
  }
  return int64_t(st.st_size);
}

Status ReadFileRange(const std::string& path, const std::string& what, int64_t offset, void* out,
                     size_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, absl::StrCat("cannot read ", what, " '", path, "'"));
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, static_cast<char*>(out) + done, n - done, offset + done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      return Errno(err, absl::StrCat("cannot read ", what, " '", path, "'"));
    }
    if (r == 0) {
      ::close(fd);
      return absl::DataLossError(absl::StrCat(what, " '", path, "' is truncated: needed ",
                                              offset + n, " bytes, the file has ", offset + done));
    }
    done += size_t(r);
  }
  ::close(fd);
  return absl::OkStatus();
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_path_.c_str());
  }
}

Status AtomicFileWriter::Open(const std::string& path) {
  path_ = path;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot create directory '", parent.string(), "': ", ec.message()));
  }
  temp_path_ = absl::StrCat(path, ".tmp.XXXXXX");
  fd_ = ::mkstemp(temp_path_.data());
  if (fd_ < 0) return Errno(errno, absl::StrCat("cannot create '", temp_path_, "'"));
  return absl::OkStatus();
}

Status AtomicFileWriter::Write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Errno(errno, absl::StrCat("cannot write '", temp_path_, "'"));
    p += w;
    n -= size_t(w);
  }
  return absl::OkStatus();
}

Status AtomicFileWriter::Commit() {
  if (::fchmod(fd_, 0644) != 0 || ::fsync(fd_) != 0) {
    return Errno(errno, absl::StrCat("cannot sync '", temp_path_, "'"));
  }
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_path_.c_str());
    return Errno(err, absl::StrCat("cannot rename '", temp_path_, "' to '", path_, "'"));
  }
  std::string dir = std::filesystem::path(path_).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  AtomicFileWriter writer;
  RETURN_IF_ERROR(writer.Open(path));
  RETURN_IF_ERROR(writer.Write(contents.data(), contents.size()));
  return writer.Commit();
}

}  // namespace longhaul::model
