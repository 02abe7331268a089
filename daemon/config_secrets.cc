// The site's secret files (config.h): the bearer token and the TLS private key must be
// readable by their owner alone, and a token must be one line of printable ASCII, 16 bytes
// to 4 KiB, since it travels in gRPC metadata.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "daemon/config.h"
#include "daemon/config_checks.h"

namespace longhaul::daemon {

Status CheckPrivateFile(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", what, " '", path, "'"));
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
    return absl::PermissionDeniedError(absl::StrCat(what, " '", path, "' has mode ", mode,
                                                    ": group and others may not read it "
                                                    "(chmod 600 '",
                                                    path, "')"));
  }
  return absl::OkStatus();
}

StatusOr<std::string> ReadTokenFile(const std::string& path) {
  RETURN_IF_ERROR(CheckPrivateFile(path, "token file"));
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && st.st_size > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' holds ", st.st_size,
                                                   " bytes; a token is one line of at most 4 KiB"));
  }
  ASSIGN_OR_RETURN(std::string contents, config_internal::ReadFileToString(path, "token file"));
  absl::string_view token = absl::StripAsciiWhitespace(contents);
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' is empty"));
  }
  if (token.size() < kMinTokenBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", path, "' holds a ", token.size(), "-byte token; use at least ",
                     kMinTokenBytes, " (for example: head -c 24 /dev/urandom | base64)"));
  }
  for (char c : token) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token file '", path, "' must hold one line of printable ASCII (gRPC metadata)"));
    }
  }
  return std::string(token);
}

}  // namespace longhaul::daemon
