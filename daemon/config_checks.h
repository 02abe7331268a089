// Checks of single config values that know nothing about YAML: site names, host:port
// addresses, device names, numbers, file paths. Internal to //daemon:config; each check
// returns a Status whose message is the bare problem, and the YAML walker in config.cc
// prefixes it with "file:line:column: key.path: ".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/status.h"

namespace longhaul::daemon::config_internal {

// A site or peer name: [a-z0-9][a-z0-9-]{0,62} (it is also a TLS certificate name).
Status CheckSiteName(absl::string_view name);

// A job a site volunteers for: its id or name, 1-128 of [A-Za-z0-9._-] starting with a
// letter or digit (what job ids are made of).
Status CheckVolunteerJob(absl::string_view job);

// A parsed "host:port".
struct HostPort {
  std::string host;  // lowercased name, or the IP address in canonical form (no brackets)
  int port = 0;
  bool wildcard = false;  // 0.0.0.0 or [::]: binds every interface
  std::string Key() const { return host + ":" + std::to_string(port); }
};

// Parses "host:port" where host is a DNS name, IPv4, or bracketed IPv6 ("[::1]:7101").
// The port must be 1..65535, or 0..65535 when `allow_port_zero` (listen addresses).
StatusOr<HostPort> ParseHostPort(absl::string_view text, bool allow_port_zero);

// A device: "cpu" or "cuda:N".
Status CheckDevice(absl::string_view device);

// A log level: trace, debug, info, warn or error.
Status CheckLogLevel(absl::string_view level);

// A decimal number (no inf/nan), and a whole number that fits uint64_t.
StatusOr<double> ParseNumber(absl::string_view text);
StatusOr<uint64_t> ParseWholeNumber(absl::string_view text);

// `path` made absolute: relative paths are taken from `base_dir` (itself taken from the
// current directory when relative or empty). Lexically normalized; no symlinks resolved.
std::string ResolvePath(const std::string& base_dir, const std::string& path);

// OK when `path` is an existing, readable regular file.
Status CheckReadableFile(const std::string& path);

// The whole contents of `path`. Errors carry the errno-derived code (NotFound for a
// missing file) and read "cannot read WHAT 'PATH': reason".
StatusOr<std::string> ReadFileToString(const std::string& path, absl::string_view what);

// The same, at most `max_bytes` (InvalidArgument "NAME is larger than ..." beyond); `name`
// stands for the file in messages ("cannot read NAME: reason"), e.g. "tls.ca 'certs/ca.pem'".
StatusOr<std::string> ReadFileBounded(const std::string& path, const std::string& name,
                                      size_t max_bytes);

}  // namespace longhaul::daemon::config_internal
