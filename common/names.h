// The two name rules every layer checks: a site's name (a peer's, a TLS certificate's, a job
// file's site) and a job's id (a directory under the data dir, a volunteer's job). One copy of
// each rule; the config, the job spec and the edge checks word their own errors around them.
#pragma once

#include <string_view>

namespace longhaul {

// A site name: 1-63 of [a-z0-9-], not starting with '-' (also a TLS certificate name).
inline bool IsSiteName(std::string_view name) {
  if (name.empty() || name.size() > 63 || name.front() == '-') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

// A job id (and the name a volunteer may give instead): 1-128 of [A-Za-z0-9._-], starting
// with a letter or digit, so that it never names a path outside the job's directory.
inline bool IsJobId(std::string_view id) {
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (id.empty() || id.size() > 128 || !alnum(id.front())) return false;
  for (char c : id) {
    if (!alnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace longhaul
