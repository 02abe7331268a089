// File helpers: bounded reads with clear errors and atomic writes (see file_io.h).
#include "model/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/file_env.h"

namespace longhaul::model {
namespace {

Status Errno(int err, const std::string& what) { return ErrnoStatus(err, what); }

// An env's error about `path` named as the caller's `what`: "cannot read 'P': why" ->
// "cannot read WHAT 'P': why"; "'P' is truncated" -> "WHAT 'P' is truncated".
Status NameFile(const Status& s, const std::string& what) {
  absl::string_view m = s.message();
  constexpr absl::string_view kCannot = "cannot read ";
  if (m.substr(0, kCannot.size()) == kCannot) {
    return Status(s.code(), absl::StrCat(kCannot, what, " ", m.substr(kCannot.size())));
  }
  return Status(s.code(), absl::StrCat(what, " ", m));
}

}  // namespace

StatusOr<int64_t> FileSize(FileEnv& env, const std::string& path, const std::string& what) {
  StatusOr<int64_t> size = env.FileSize(path);
  if (!size.ok()) return NameFile(size.status(), what);
  return size;
}

Status ReadFileRange(FileEnv& env, const std::string& path, const std::string& what, int64_t offset,
                     void* out, size_t n) {
  const Status s = env.ReadRange(path, offset, out, n);
  return s.ok() ? s : NameFile(s, what);
}

StatusOr<int64_t> FileSize(const std::string& path, const std::string& what) {
  return FileSize(*FileEnv::Default(), path, what);
}

Status ReadFileRange(const std::string& path, const std::string& what, int64_t offset, void* out,
                     size_t n) {
  return ReadFileRange(*FileEnv::Default(), path, what, offset, out, n);
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
  if (!parent.empty()) RETURN_IF_ERROR(env_->CreateDirectories(parent.string()));
  temp_path_ = absl::StrCat(path, ".tmp.XXXXXX");
  fd_ = ::mkstemp(temp_path_.data());
  if (fd_ < 0) return Errno(errno, absl::StrCat("cannot create '", temp_path_, "'"));
  return absl::OkStatus();
}

Status AtomicFileWriter::Write(const void* data, size_t n) {
  return env_->Write(fd_, temp_path_, data, n);
}

Status AtomicFileWriter::Commit() {
  FileEnv* env = env_;
  if (::fchmod(fd_, 0644) != 0)
    return Errno(errno, absl::StrCat("cannot chmod '", temp_path_, "'"));
  RETURN_IF_ERROR(env->Sync(fd_, temp_path_));
  ::close(fd_);
  fd_ = -1;
  if (Status s = env->Rename(temp_path_, path_); !s.ok()) {
    ::unlink(temp_path_.c_str());
    return s;
  }
  std::string dir = std::filesystem::path(path_).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    const Status s = env->Sync(dfd, dir);
    ::close(dfd);
    RETURN_IF_ERROR(s);
  }
  return absl::OkStatus();
}

Status WriteFileAtomically(FileEnv& env, const std::string& path, const std::string& contents) {
  AtomicFileWriter writer(&env);
  RETURN_IF_ERROR(writer.Open(path));
  RETURN_IF_ERROR(writer.Write(contents.data(), contents.size()));
  return writer.Commit();
}

Status WriteFileAtomically(const std::string& path, const std::string& contents) {
  return WriteFileAtomically(*FileEnv::Default(), path, contents);
}

}  // namespace longhaul::model
