// Stage checkpoints (stage_checkpoint.h): versioned, checksummed files of a fragment's
// parameters, AdamW moments and data position, written through the FileEnv seam.
#include "daemon/job/state/stage_checkpoint.h"

#include <xxhash.h>

#include <cstddef>
#include <cstdio>
#include <cstring>

#include "common/file_env.h"
#include "common/layer_range.h"
#include "model/durable_file.h"
#include "model/file_io.h"

namespace longhaul::daemon {
namespace {

// Version 2 (written now): the header names its version and carries a checksum of itself and
// one of everything after it, both verified on load. Version 1 files (no checksums), written
// by earlier builds, are still read.
constexpr char kMagicV1[8] = {'L', 'H', 'S', 'T', 'A', 'G', 'E', '1'};
constexpr char kMagic[8] = {'L', 'H', 'S', 'T', 'A', 'G', 'E', '2'};
constexpr uint32_t kVersion = 2;

struct HeaderV1 {
  char magic[8];
  uint64_t step;
  int64_t layer_begin, layer_end;
  uint64_t n;  // floats in each of params, m, v
  uint64_t loader_bytes;
};

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint64_t step;
  int64_t layer_begin, layer_end;
  uint64_t n;  // floats in each of params, m, v
  uint64_t loader_bytes;
  uint64_t payload_xxh64;  // of params, m, v and the loader state, in file order
  uint64_t header_xxh64;   // of the header up to this field
};

uint64_t HeaderChecksum(const Header& h) { return XXH64(&h, offsetof(Header, header_xxh64), 0); }

}  // namespace

std::string StageCheckpointPath(const std::string& dir, uint64_t step, int layer_begin,
                                int layer_end) {
  char name[96];
  std::snprintf(name, sizeof name, "/stage_%08llu_%d-%d.bin", static_cast<unsigned long long>(step),
                layer_begin, layer_end);
  return dir + name;
}

Status WriteStageState(FileEnv& env, const std::string& path, const StageState& s) {
  if (s.m.size() != s.params.size() || s.v.size() != s.params.size()) {
    return absl::InvalidArgumentError("stage state: parameter and moment sizes differ");
  }
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.header_bytes = sizeof h;
  h.step = s.step;
  h.layer_begin = s.layer_begin;
  h.layer_end = s.layer_end;
  h.n = s.params.size();
  h.loader_bytes = s.loader_state.size();
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  for (const auto* vec : {&s.params, &s.m, &s.v}) {
    XXH64_update(state, vec->data(), vec->size() * sizeof(float));
  }
  XXH64_update(state, s.loader_state.data(), s.loader_state.size());
  h.payload_xxh64 = XXH64_digest(state);
  XXH64_freeState(state);
  h.header_xxh64 = HeaderChecksum(h);
  model::AtomicFileWriter w(&env);
  RETURN_IF_ERROR(w.Open(path));
  RETURN_IF_ERROR(w.Write(&h, sizeof h));
  for (const auto* vec : {&s.params, &s.m, &s.v}) {
    RETURN_IF_ERROR(w.Write(vec->data(), vec->size() * sizeof(float)));
  }
  RETURN_IF_ERROR(w.Write(s.loader_state.data(), s.loader_state.size()));
  return w.Commit();
}

StatusOr<StageState> ReadStageState(FileEnv& env, const std::string& path, int layer_begin,
                                    int layer_end) {
  const std::string what = "stage checkpoint";
  ASSIGN_OR_RETURN(const int64_t size, model::FileSize(env, path, what));
  if (size < static_cast<int64_t>(sizeof(HeaderV1))) {
    return absl::DataLossError(what + " '" + path + "': " + std::to_string(size) +
                               " bytes, shorter than its header (truncated?)");
  }
  char magic[8];
  RETURN_IF_ERROR(model::ReadFileRange(env, path, what, 0, magic, sizeof magic));
  Header h{};
  const bool v1 = std::memcmp(magic, kMagicV1, sizeof magic) == 0;
  if (v1) {
    HeaderV1 old{};
    RETURN_IF_ERROR(model::ReadFileRange(env, path, what, 0, &old, sizeof old));
    h.header_bytes = sizeof old;
    h.step = old.step;
    h.layer_begin = old.layer_begin;
    h.layer_end = old.layer_end;
    h.n = old.n;
    h.loader_bytes = old.loader_bytes;
  } else if (std::memcmp(magic, kMagic, sizeof magic) == 0) {
    if (size < static_cast<int64_t>(sizeof h)) {
      return absl::DataLossError(what + " '" + path + "': " + std::to_string(size) +
                                 " bytes, shorter than its header (truncated?)");
    }
    RETURN_IF_ERROR(model::ReadFileRange(env, path, what, 0, &h, sizeof h));
    if (h.header_xxh64 != HeaderChecksum(h) || h.version != kVersion ||
        h.header_bytes != sizeof h) {
      return absl::DataLossError(what + " '" + path + "': header checksum mismatch (corrupt)");
    }
  } else {
    return absl::DataLossError(what + " '" + path + "': bad magic");
  }
  if (h.layer_begin != layer_begin || h.layer_end != layer_end) {
    return absl::FailedPreconditionError(what + " '" + path + "' holds layers " +
                                         LayerRange(h.layer_begin, h.layer_end) +
                                         ", this stage runs " + LayerRange(layer_begin, layer_end));
  }
  if (h.n > (uint64_t(1) << 36) || h.loader_bytes > (1 << 20) ||
      static_cast<uint64_t>(size) != h.header_bytes + 3 * h.n * sizeof(float) + h.loader_bytes) {
    return absl::DataLossError(
        what + " '" + path + "': " + std::to_string(size) + " bytes, its header describes " +
        std::to_string(h.header_bytes + 3 * h.n * sizeof(float) + h.loader_bytes) +
        " (truncated?)");
  }
  StageState s;
  s.step = h.step;
  s.layer_begin = layer_begin;
  s.layer_end = layer_end;
  int64_t off = h.header_bytes;
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  Status read;
  for (auto* vec : {&s.params, &s.m, &s.v}) {
    vec->resize(h.n);
    if (read.ok())
      read = model::ReadFileRange(env, path, what, off, vec->data(), h.n * sizeof(float));
    XXH64_update(state, vec->data(), h.n * sizeof(float));
    off += h.n * sizeof(float);
  }
  s.loader_state.resize(h.loader_bytes);
  if (read.ok())
    read = model::ReadFileRange(env, path, what, off, s.loader_state.data(), h.loader_bytes);
  XXH64_update(state, s.loader_state.data(), s.loader_state.size());
  const uint64_t checksum = XXH64_digest(state);
  XXH64_freeState(state);
  RETURN_IF_ERROR(read);
  if (!v1 && checksum != h.payload_xxh64) {
    return absl::DataLossError(what + " '" + path + "': checksum mismatch (corrupt)");
  }
  return s;
}

Status PruneStageStates(FileEnv& env, const std::string& dir, uint64_t keep_from) {
  ASSIGN_OR_RETURN(const std::vector<std::string> names, env.ListDirectory(dir));
  Status first = absl::OkStatus();
  for (const std::string& name : names) {
    unsigned long long step = 0;
    if ((std::sscanf(name.c_str(), "stage_%llu_", &step) == 1 ||
         std::sscanf(name.c_str(), "sync_%llu_", &step) == 1) &&
        step < keep_from) {
      const Status s = env.RemoveFile(dir + "/" + name);
      if (!s.ok() && !absl::IsNotFound(s) && first.ok()) first = s;
    }
  }
  return first;
}

namespace {

// stage.pb in the durable-file shape (model/durable_file.h).
constexpr model::DurableFormat kAssignmentFormat{
    {'L', 'H', 'S', 'T', 'A', 'S', 'G', 'N'}, 1, uint64_t{64} << 20, "stage assignment"};

}  // namespace

Status WriteStageAssignment(FileEnv& env, const std::string& path, const v1::StageAssignment& a) {
  const std::string bytes = a.SerializeAsString();
  return model::WriteDurableFile(env, path, kAssignmentFormat, {bytes});
}

StatusOr<v1::StageAssignment> ReadStageAssignment(FileEnv& env, const std::string& path) {
  // Read once: an assignment renamed over this one meanwhile (the site taking its next
  // attempt) cannot mix into it. An earlier build's is the bare protobuf.
  StatusOr<model::DurablePayload> read = model::ReadDurableOrEarlier(env, path, kAssignmentFormat);
  if (absl::IsNotFound(read.status())) return absl::NotFoundError("no stage assignment at " + path);
  RETURN_IF_ERROR(read.status());
  const std::string& bytes = read->bytes;
  v1::StageAssignment a;
  if (!a.ParseFromString(bytes)) return absl::DataLossError(path + ": malformed");
  if (a.stage() >= static_cast<uint32_t>(a.stages_size())) {
    return absl::DataLossError(path + ": stage index out of its plan");
  }
  return a;
}

}  // namespace longhaul::daemon
