// Sharded Hugging Face checkpoints: model.safetensors.index.json and HfTensorSource, which
// opens each shard on first use (see safetensors.h).
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/json_load.h"
#include "model/file_io.h"
#include "model/safetensors.h"

namespace longhaul::model {
namespace {

constexpr int64_t kMaxIndexBytes = int64_t{100} << 20;
constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

// OK when `file` is a plain file name in the index's directory that names a shard.
Status CheckShardName(const std::string& file, const std::string& tensor,
                      const std::string& index_path) {
  if (file.empty() || file.find('/') != std::string::npos || file.find('\0') != std::string::npos ||
      file.find("..") != std::string::npos || !absl::EndsWith(file, ".safetensors")) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors index '", index_path, "' puts tensor '", tensor, "' in '", file,
                     "', which is not a plain file name ending in .safetensors (no '/' or '..')"));
  }
  return absl::OkStatus();
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

StatusOr<std::map<std::string, std::string>> ReadSafetensorsIndex(const std::string& index_path) {
  ASSIGN_OR_RETURN(const int64_t size, FileSize(index_path, "safetensors index"));
  if (size > kMaxIndexBytes) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors index '", index_path, "' is ", size,
                                                   " bytes, over the limit of ", kMaxIndexBytes));
  }
  std::string text(size_t(size), '\0');
  RETURN_IF_ERROR(ReadFileRange(index_path, "safetensors index", 0, text.data(), text.size()));
  const std::string what = absl::StrCat("safetensors index '", index_path, "'");
  ASSIGN_OR_RETURN(const nlohmann::json index, ParseUntrustedJson(text.data(), text.size(), what));
  const auto bad = [&what](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
  };
  if (!index.is_object()) return bad(absl::StrCat("a JSON ", index.type_name(), ", not an object"));
  if (index.contains("metadata") && !index.at("metadata").is_object()) {
    return bad("\"metadata\" is not an object");
  }
  if (!index.contains("weight_map") || !index.at("weight_map").is_object()) {
    return bad("no \"weight_map\" object");
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, file] : index.at("weight_map").items()) {
    if (tensor.empty()) return bad("\"weight_map\" has an empty tensor name");
    if (!file.is_string()) {
      return bad(absl::StrCat("the file of tensor '", tensor, "' is a ", file.type_name(),
                              ", not a string"));
    }
    RETURN_IF_ERROR(CheckShardName(file.get<std::string>(), tensor, index_path));
    weight_map[tensor] = file.get<std::string>();
  }
  return weight_map;
}

Status WriteSafetensorsIndex(const std::string& path, int64_t total_size,
                             const std::map<std::string, std::string>& weight_map) {
  ASSIGN_OR_RETURN(const std::string text, SafetensorsIndexJson(total_size, weight_map, path));
  return WriteFileAtomically(path, text);
}

StatusOr<std::string> SafetensorsIndexJson(int64_t total_size,
                                           const std::map<std::string, std::string>& weight_map,
                                           const std::string& path) {
  for (const auto& [tensor, file] : weight_map) {
    RETURN_IF_ERROR(CheckShardName(file, tensor, path));
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total_size}}},
                                {"weight_map", weight_map}};
  std::string text;
  try {
    text = index.dump(2, ' ', /*ensure_ascii=*/true) + "\n";
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write safetensors index '", path, "': ", e.what()));
  }
  return text;
}

StatusOr<std::unique_ptr<HfTensorSource>> HfTensorSource::Open(const std::string& dir) {
  std::unique_ptr<HfTensorSource> source(new HfTensorSource);
  source->dir_ = dir;
  const std::string single = (std::filesystem::path(dir) / kSingleFile).string();
  if (IsRegularFile(single)) {
    ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(single));
    for (const std::string& name : file->names()) source->shard_of_[name] = kSingleFile;
    source->shards_[kSingleFile] = std::move(file);
  } else {
    source->index_path_ = (std::filesystem::path(dir) / kIndexFile).string();
    if (!IsRegularFile(source->index_path_)) {
      return absl::NotFoundError(absl::StrCat("model directory '", dir, "' holds neither ",
                                              kSingleFile, " nor ", kIndexFile));
    }
    ASSIGN_OR_RETURN(source->shard_of_, ReadSafetensorsIndex(source->index_path_));
  }
  for (const auto& [name, file] : source->shard_of_) source->names_.push_back(name);
  return source;
}

StatusOr<const SafetensorsFile*> HfTensorSource::Shard(const std::string& name) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) {
    return absl::NotFoundError(
        absl::StrCat("model directory '", dir_, "' has no tensor '", name, "'"));
  }
  const std::string& file_name = it->second;
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<SafetensorsFile>& shard = shards_[file_name];
  if (shard == nullptr) {
    const std::string path = (std::filesystem::path(dir_) / file_name).string();
    StatusOr<std::unique_ptr<SafetensorsFile>> opened = SafetensorsFile::Open(path);
    if (!opened.ok()) {
      shards_.erase(file_name);
      return Annotate(opened.status(), absl::StrCat("shard of index '", index_path_, "'"));
    }
    shard = std::move(opened).value();
  }
  if (!shard->Has(name)) {
    return absl::DataLossError(absl::StrCat("safetensors index '", index_path_, "' puts tensor '",
                                            name, "' in '", file_name,
                                            "', which has no such tensor"));
  }
  return shard.get();
}

StatusOr<const StTensorInfo*> HfTensorSource::Find(const std::string& name) const {
  ASSIGN_OR_RETURN(const SafetensorsFile* shard, Shard(name));
  return shard->Find(name);
}

Status HfTensorSource::ReadFloats(const std::string& name, float* out, size_t count) const {
  ASSIGN_OR_RETURN(const SafetensorsFile* shard, Shard(name));
  return shard->ReadFloats(name, out, count);
}

}  // namespace longhaul::model
