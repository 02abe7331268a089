// Single-value checks for the site config loader; see config_checks.h.
#include "daemon/config_checks.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/names.h"

namespace longhaul::daemon::config_internal {
namespace {

namespace fs = std::filesystem;

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A DNS name: dot-separated labels of letters, digits, '-' and '_' (common in container
// names), 1..63 chars each, not starting or ending with '-'.
bool IsHostName(absl::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t end = host.find('.', start);
    absl::string_view label =
        host.substr(start, end == absl::string_view::npos ? end : end - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') {
      return false;
    }
    for (char c : label) {
      if (!absl::ascii_isalnum(c) && c != '-' && c != '_') return false;
    }
    if (end == absl::string_view::npos) return true;
    start = end + 1;
  }
}

// Canonical text of an IP address of family `af` (AF_INET or AF_INET6), or "" if invalid.
std::string CanonicalIp(int af, const std::string& text, bool* wildcard) {
  unsigned char buf[sizeof(struct in6_addr)];
  if (inet_pton(af, text.c_str(), buf) != 1) return "";
  char out[INET6_ADDRSTRLEN];
  if (inet_ntop(af, buf, out, sizeof(out)) == nullptr) return "";
  size_t len = af == AF_INET ? 4 : 16;
  *wildcard = std::all_of(buf, buf + len, [](unsigned char b) { return b == 0; });
  return out;
}

}  // namespace

Status CheckSiteName(absl::string_view name) {
  if (IsSiteName({name.data(), name.size()})) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid name '", name,
                   "': use 1-63 lowercase letters, digits and '-', not starting with '-'"));
}

Status CheckVolunteerJob(absl::string_view job) {
  if (IsJobId({job.data(), job.size()})) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid job '", job.substr(0, 64),
                   "': a job's id or name is 1-128 letters, digits, '.', '_' and '-', starting "
                   "with a letter or digit"));
}

StatusOr<HostPort> ParseHostPort(absl::string_view text, bool allow_port_zero) {
  HostPort result;
  absl::string_view port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("expected [ipv6]:port, got '", text, "'"));
    }
    std::string ip(text.substr(1, close - 1));
    result.host = CanonicalIp(AF_INET6, ip, &result.wildcard);
    if (result.host.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("invalid IPv6 address '", ip, "'"));
    }
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("expected host:port, got '", text, "'"));
    }
    if (text.find(':') != colon) {
      return absl::InvalidArgumentError(absl::StrCat(
          "expected host:port, got '", text, "' (put IPv6 addresses in brackets: [::1]:7101)"));
    }
    std::string host(text.substr(0, colon));
    port = text.substr(colon + 1);
    if (host.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("missing host in '", text, "'"));
    }
    if (host.find_first_not_of("0123456789.") == std::string::npos) {
      result.host = CanonicalIp(AF_INET, host, &result.wildcard);
      if (result.host.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("invalid IPv4 address '", host, "'"));
      }
    } else if (IsHostName(host)) {
      result.host = absl::AsciiStrToLower(host);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("invalid host name '", host, "'"));
    }
  }
  if (port.empty()) return absl::InvalidArgumentError(absl::StrCat("missing port in '", text, "'"));
  if (!AllDigits(port)) {
    return absl::InvalidArgumentError(absl::StrCat("port '", port, "' is not a number"));
  }
  int min_port = allow_port_zero ? 0 : 1;
  int value = port.size() > 5 ? 100000 : std::stoi(std::string(port));
  if (value < min_port || value > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port ", port, " is out of range ", min_port, "..65535"));
  }
  result.port = value;
  return result;
}

Status CheckDevice(absl::string_view device) {
  if (device == "cpu") return absl::OkStatus();
  for (absl::string_view prefix : {"cuda:", "cpu:"}) {
    if (device.substr(0, prefix.size()) != prefix) continue;
    absl::string_view index = device.substr(prefix.size());
    if (AllDigits(index) && !index.empty() && index.size() <= 4 &&
        (index.size() == 1 || index.front() != '0')) {
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid device '", device, "': use 'cpu', 'cpu:N' or 'cuda:N'"));
}

Status CheckLogLevel(absl::string_view level) {
  for (absl::string_view known : {"trace", "debug", "info", "warn", "error"}) {
    if (level == known) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("invalid log level '", level, "': use one of trace, debug, info, warn, error"));
}

StatusOr<double> ParseNumber(absl::string_view text) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat("expected a number, got '", text, "'"));
  }
  return value;
}

StatusOr<uint64_t> ParseWholeNumber(absl::string_view text) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("expected a whole number, got '", text, "'"));
  }
  return value;
}

std::string ResolvePath(const std::string& base_dir, const std::string& path) {
  fs::path resolved(path);
  if (resolved.is_relative()) resolved = fs::path(base_dir) / resolved;
  std::error_code ec;
  fs::path absolute = fs::absolute(resolved, ec);
  fs::path normal = (ec ? resolved : absolute).lexically_normal();
  // "dir/" normalizes to "dir/"; drop the trailing separator (but keep "/").
  if (normal.filename().empty() && normal.has_relative_path()) normal = normal.parent_path();
  return normal.string();
}

Status CheckReadableFile(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("file '", path, "' does not exist"));
  }
  if (!fs::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  if (access(path.c_str(), R_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("file '", path, "' is not readable"));
  }
  return absl::OkStatus();
}

StatusOr<std::string> ReadFileToString(const std::string& path, absl::string_view what) {
  return ReadFileBounded(path, absl::StrCat(what, " '", path, "'"),
                         std::numeric_limits<size_t>::max());
}

StatusOr<std::string> ReadFileBounded(const std::string& path, const std::string& name,
                                      size_t max_bytes) {
  const std::string context = absl::StrCat("cannot read ", name);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, context);
  std::string contents;
  char buf[16384];
  while (true) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int error = errno;
      close(fd);
      return absl::ErrnoToStatus(error, context);
    }
    if (n == 0) break;
    if (static_cast<size_t>(n) > max_bytes - contents.size()) {
      close(fd);
      return absl::InvalidArgumentError(
          absl::StrCat(name, " is larger than ", max_bytes, " bytes"));
    }
    contents.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return contents;
}

}  // namespace longhaul::daemon::config_internal
