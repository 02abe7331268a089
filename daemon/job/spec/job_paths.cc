// Confinement of a job's files to the site's data_roots; see job_paths.h.
#include "daemon/job/spec/job_paths.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "model/job.h"
#include "model/job_windows.h"

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
  std::vector<std::pair<std::string, std::string>> files = {{"data.train", spec.job.data.train},
                                                            {"data.val", spec.job.data.val},
                                                            {"init_from", spec.job.init_from}};
  for (size_t i = 0; i < spec.job.data.mixture.size(); ++i) {
    files.push_back(
        {absl::StrCat("data.train[", i, "].manifest"), spec.job.data.mixture[i].manifest});
  }
  auto inside = [&](const std::string& key, const std::string& path) -> Status {
    const fs::path resolved = Resolved(path);
    bool in = false;
    for (const auto& root : roots) in = in || Under(resolved, Resolved(root));
    if (in) return absl::OkStatus();
    std::string list;
    for (const auto& root : roots) list += (list.empty() ? "" : ", ") + root;
    return absl::PermissionDeniedError(spec.job.source + ": " + key + ": '" + path +
                                       "' is outside site '" + site + "''s data_roots [" + list +
                                       "] (add its directory to data_roots in the site config)");
  };
  for (const auto& [key, path] : files) {
    if (path.empty() || path == model::kBuiltinData) continue;
    RETURN_IF_ERROR(inside(key, path));
  }
  // A manifest inside the roots may still name shards that are links out of them; and one
  // made with another vocabulary than the model's is refused here, before the job starts.
  std::string tokenizer, first_key;
  for (const auto& [key, path] : files) {
    if (key == "init_from" || path.empty() || path == model::kBuiltinData ||
        !model::IsManifestPath(path)) {
      continue;
    }
    // The manifest file itself too: a folder inside the roots may hold a link out of them.
    RETURN_IF_ERROR(inside(key, model::ManifestFile(path)));
    ASSIGN_OR_RETURN(model::TokenManifest m,
                     model::LoadJobManifest(path, spec.job.model, spec.job.source + ": " + key));
    // A mixture's sources and the validation data share the training data's tokenizer.
    if (tokenizer.empty()) tokenizer = m.tokenizer.sha256;
    if (m.tokenizer.sha256 != tokenizer) {
      return absl::InvalidArgumentError(absl::StrCat(
          spec.job.source, ": ", key, ": token manifest '", path, "' was made with tokenizer '",
          m.tokenizer.name, "' (sha256 ", m.tokenizer.sha256.substr(0, 16), "...), not the one ",
          first_key, " was made with: a job's manifests must share one tokenizer"));
    }
    if (first_key.empty()) first_key = key;
    for (bool val : {false, true}) {
      for (const model::ManifestShard& shard : m.split(val)) {
        RETURN_IF_ERROR(inside(absl::StrCat(key, " shard ", shard.file), m.ShardPath(shard)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace longhaul::daemon
