// Training-state files for exact resume (see train_state.h).
#include "model/train_state.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "model/file_io.h"

namespace longhaul::model {
namespace {

constexpr int32_t kMagic = 20241122;
constexpr int32_t kVersion = 1;
constexpr int kHeaderInts = 256;
constexpr int64_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

std::string Numbered(const std::string& dir, const char* prefix, int step) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s_%08d.bin", prefix, step);
  return (std::filesystem::path(dir) / name).string();
}

}  // namespace

std::string ModelCheckpointPath(const std::string& dir, int step) {
  return Numbered(dir, "model", step);
}

std::string TrainStatePath(const std::string& dir, int step) {
  return Numbered(dir, "state", step);
}

int LatestCheckpointStep(const std::string& dir) {
  int best = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    int step = 0;
    char tail = 0;
    const std::string name = entry.path().filename().string();
    if (std::sscanf(name.c_str(), "state_%d.bi%c", &step, &tail) == 2 && tail == 'n' &&
        name == std::filesystem::path(TrainStatePath(dir, step)).filename().string() &&
        std::filesystem::exists(ModelCheckpointPath(dir, step))) {
      best = std::max(best, step);
    }
  }
  return best;
}

Status WriteTrainState(const std::string& path, const ModelConfig& c, const TrainState& s) {
  const int64_t n = NumParameters(c);
  if (int64_t(s.m.size()) != n || int64_t(s.v.size()) != n) {
    return absl::InvalidArgumentError("train state: moments do not match the model size");
  }
  int32_t header[kHeaderInts] = {};
  header[0] = kMagic;
  header[1] = kVersion;
  header[2] = s.step;
  header[3] = c.num_layers;
  header[4] = c.channels;
  header[5] = c.vocab_size;
  header[6] = c.max_seq_len;
  header[7] = int32_t(s.loader_state.size());
  header[8] = c.residual_subspace;
  header[9] = c.unconstrained_layers;
  AtomicFileWriter writer;
  RETURN_IF_ERROR(writer.Open(path));
  RETURN_IF_ERROR(writer.Write(header, sizeof(header)));
  RETURN_IF_ERROR(writer.Write(s.m.data(), n * sizeof(float)));
  RETURN_IF_ERROR(writer.Write(s.v.data(), n * sizeof(float)));
  RETURN_IF_ERROR(writer.Write(s.loader_state.data(), s.loader_state.size()));
  return writer.Commit();
}

StatusOr<TrainState> ReadTrainState(const std::string& path, const ModelConfig& c) {
  ASSIGN_OR_RETURN(const int64_t size, FileSize(path, "training state"));
  int32_t header[kHeaderInts];
  if (size < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat("training state '", path, "' is truncated"));
  }
  RETURN_IF_ERROR(ReadFileRange(path, "training state", 0, header, kHeaderBytes));
  if (header[0] != kMagic || header[1] != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a longhaul training state (bad magic or version)"));
  }
  if (header[3] != c.num_layers || header[4] != c.channels || header[5] != c.vocab_size ||
      header[6] != c.max_seq_len || header[8] != c.residual_subspace ||
      header[9] != c.unconstrained_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("training state '", path, "' was written for another model shape"));
  }
  const int64_t n = NumParameters(c);
  const int64_t expected = kHeaderBytes + 2 * n * int64_t(sizeof(float)) + header[7];
  if (header[2] < 0 || header[7] < 0 || size != expected) {
    return absl::DataLossError(
        absl::StrCat("training state '", path, "' has ", size, " bytes, expected ", expected));
  }
  TrainState s;
  s.step = header[2];
  s.m.resize(n);
  s.v.resize(n);
  s.loader_state.resize(header[7]);
  RETURN_IF_ERROR(ReadFileRange(path, "training state", kHeaderBytes, s.m.data(), n * 4));
  RETURN_IF_ERROR(ReadFileRange(path, "training state", kHeaderBytes + n * 4, s.v.data(), n * 4));
  RETURN_IF_ERROR(ReadFileRange(path, "training state", kHeaderBytes + 2 * n * 4,
                                s.loader_state.data(), s.loader_state.size()));
  return s;
}

}  // namespace longhaul::model
