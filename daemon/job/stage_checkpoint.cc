#include "daemon/job/stage_checkpoint.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "model/file_io.h"

namespace longhaul::daemon {
namespace {

constexpr char kMagic[8] = {'L', 'H', 'S', 'T', 'A', 'G', 'E', '1'};

struct Header {
  char magic[8];
  uint64_t step;
  int64_t layer_begin, layer_end;
  uint64_t n;  // floats in each of params, m, v
  uint64_t loader_bytes;
};

}  // namespace

std::string StageCheckpointPath(const std::string& dir, uint64_t step, int layer_begin,
                                int layer_end) {
  char name[96];
  std::snprintf(name, sizeof name, "/stage_%08llu_%d-%d.bin", static_cast<unsigned long long>(step),
                layer_begin, layer_end);
  return dir + name;
}

Status WriteStageState(const std::string& path, const StageState& s) {
  if (s.m.size() != s.params.size() || s.v.size() != s.params.size()) {
    return absl::InvalidArgumentError("stage state: parameter and moment sizes differ");
  }
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.step = s.step;
  h.layer_begin = s.layer_begin;
  h.layer_end = s.layer_end;
  h.n = s.params.size();
  h.loader_bytes = s.loader_state.size();
  model::AtomicFileWriter w;
  RETURN_IF_ERROR(w.Open(path));
  RETURN_IF_ERROR(w.Write(&h, sizeof h));
  for (const auto* vec : {&s.params, &s.m, &s.v}) {
    RETURN_IF_ERROR(w.Write(vec->data(), vec->size() * sizeof(float)));
  }
  RETURN_IF_ERROR(w.Write(s.loader_state.data(), s.loader_state.size()));
  return w.Commit();
}

StatusOr<StageState> ReadStageState(const std::string& path, int layer_begin, int layer_end) {
  ASSIGN_OR_RETURN(const int64_t size, model::FileSize(path, "stage checkpoint"));
  Header h{};
  RETURN_IF_ERROR(model::ReadFileRange(path, "stage checkpoint", 0, &h, sizeof h));
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
    return absl::DataLossError("stage checkpoint '" + path + "': bad magic");
  }
  if (h.layer_begin != layer_begin || h.layer_end != layer_end) {
    return absl::FailedPreconditionError(
        "stage checkpoint '" + path + "' holds layers " + std::to_string(h.layer_begin) + ".." +
        std::to_string(h.layer_end) + ", this stage runs " + std::to_string(layer_begin) + ".." +
        std::to_string(layer_end));
  }
  const uint64_t expected = sizeof h + 3 * h.n * sizeof(float) + h.loader_bytes;
  if (h.n > (uint64_t(1) << 36) || h.loader_bytes > (1 << 20) ||
      static_cast<uint64_t>(size) != expected) {
    return absl::DataLossError("stage checkpoint '" + path + "': " + std::to_string(size) +
                               " bytes, expected " + std::to_string(expected) + " (truncated?)");
  }
  StageState s;
  s.step = h.step;
  s.layer_begin = layer_begin;
  s.layer_end = layer_end;
  int64_t off = sizeof h;
  for (auto* vec : {&s.params, &s.m, &s.v}) {
    vec->resize(h.n);
    RETURN_IF_ERROR(
        model::ReadFileRange(path, "stage checkpoint", off, vec->data(), h.n * sizeof(float)));
    off += h.n * sizeof(float);
  }
  s.loader_state.resize(h.loader_bytes);
  RETURN_IF_ERROR(
      model::ReadFileRange(path, "stage checkpoint", off, s.loader_state.data(), h.loader_bytes));
  return s;
}

void PruneStageStates(const std::string& dir, uint64_t keep_from) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    unsigned long long step = 0;
    if (std::sscanf(name.c_str(), "stage_%llu_", &step) == 1 && step < keep_from) {
      std::filesystem::remove(e.path(), ec);
    }
  }
}

}  // namespace longhaul::daemon
