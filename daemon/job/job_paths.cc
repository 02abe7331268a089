// Confinement of a job's files to the site's data_roots; see job_paths.h.
#include "daemon/job/job_paths.h"

#include <filesystem>

#include "model/job.h"

namespace longhaul::daemon {
namespace {

namespace fs = std::filesystem;

// The path with symlinks and ".." resolved as far as it exists.
fs::path Resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::path(path), ec);
  return ec ? fs::path(path).lexically_normal() : p;
}

bool Under(const fs::path& path, const fs::path& root) {
  auto r = root.begin(), p = path.begin();
  for (; r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

}  // namespace

Status CheckJobPaths(const JobSpec& spec, const std::vector<std::string>& roots,
                     const std::string& site) {
  const std::pair<const char*, const std::string*> files[] = {{"data.train", &spec.job.data.train},
                                                              {"data.val", &spec.job.data.val},
                                                              {"init_from", &spec.job.init_from}};
  for (const auto& [key, path] : files) {
    if (path->empty() || *path == model::kBuiltinData) continue;
    const fs::path resolved = Resolved(*path);
    bool inside = false;
    for (const auto& root : roots) inside = inside || Under(resolved, Resolved(root));
    if (inside) continue;
    std::string list;
    for (const auto& root : roots) list += (list.empty() ? "" : ", ") + root;
    return absl::PermissionDeniedError(spec.job.source + ": " + key + ": '" + *path +
                                       "' is outside site '" + site + "''s data_roots [" + list +
                                       "] (add its directory to data_roots in the site config)");
  }
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
