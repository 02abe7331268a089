// Stages' carried state files (see sync_checkpoint.h). Layout, little-endian:
//   magic "LHSYNC02", u64 step, u64 anchor floats, u64 momentum floats, u64 residual count,
//   u64 tied residual floats, u64 size of each residual, then the floats in that order (the
//   tied residual last), then u64 XXH64 of all before it. Version 01 (read, not written) is
//   the same without the tied residual's count and floats.
#include "daemon/job/state/sync_checkpoint.h"

#include <xxhash.h>

#include <cstdio>
#include <cstring>

#include "model/file_io.h"

namespace longhaul::daemon {
namespace {

constexpr char kMagic[8] = {'L', 'H', 'S', 'Y', 'N', 'C', '0', '2'};
constexpr char kMagicV1[8] = {'L', 'H', 'S', 'Y', 'N', 'C', '0', '1'};

void Append(std::string* out, const void* data, size_t n) {
  out->append(static_cast<const char*>(data), n);
}

void AppendU64(std::string* out, uint64_t v) { Append(out, &v, sizeof v); }

}  // namespace

std::string SyncCheckpointPath(const std::string& dir, uint64_t step, int layer_begin,
                               int layer_end) {
  char name[96];
  std::snprintf(name, sizeof name, "/sync_%08llu_%d-%d.bin", static_cast<unsigned long long>(step),
                layer_begin, layer_end);
  return dir + name;
}

Status WriteSyncState(const std::string& path, const SyncState& s) {
  std::string out;
  Append(&out, kMagic, sizeof kMagic);
  AppendU64(&out, s.step);
  AppendU64(&out, s.anchor.size());
  AppendU64(&out, s.momentum.size());
  AppendU64(&out, s.residuals.size());
  AppendU64(&out, s.tied_residual.size());
  for (const auto& r : s.residuals) AppendU64(&out, r.size());
  Append(&out, s.anchor.data(), s.anchor.size() * sizeof(float));
  Append(&out, s.momentum.data(), s.momentum.size() * sizeof(float));
  for (const auto& r : s.residuals) Append(&out, r.data(), r.size() * sizeof(float));
  Append(&out, s.tied_residual.data(), s.tied_residual.size() * sizeof(float));
  AppendU64(&out, XXH64(out.data(), out.size(), 0));
  return model::WriteFileAtomically(path, out);
}

StatusOr<SyncState> ReadSyncState(const std::string& path, uint64_t step, int64_t fragment_floats,
                                  const std::vector<int64_t>& slice_sizes, int64_t tied_floats) {
  const std::string what = "sync state";
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(what + " '" + path + "': " + why);
  };
  ASSIGN_OR_RETURN(const int64_t size, model::FileSize(path, what));
  if (size < 8 + 4 * 8 + 8) return bad(std::to_string(size) + " bytes, shorter than its header");
  char magic[8];
  RETURN_IF_ERROR(model::ReadFileRange(path, what, 0, magic, sizeof magic));
  const bool v1 = std::memcmp(magic, kMagicV1, sizeof magic) == 0;
  if (!v1 && std::memcmp(magic, kMagic, sizeof magic) != 0) return bad("bad magic");
  const int fields = v1 ? 4 : 5;
  const int64_t kFixed = 8 + fields * 8;
  if (size < kFixed + 8) return bad(std::to_string(size) + " bytes, shorter than its header");
  uint64_t head[5] = {0, 0, 0, 0, 0};
  RETURN_IF_ERROR(model::ReadFileRange(path, what, 8, head, fields * 8));
  const uint64_t file_step = head[0], anchor = head[1], momentum = head[2], count = head[3];
  const uint64_t tied = head[4];
  if (file_step != step) {
    return bad("holds step " + std::to_string(file_step) + ", not " + std::to_string(step));
  }
  const uint64_t n = static_cast<uint64_t>(fragment_floats);
  if ((anchor != 0 && anchor != n) || momentum != anchor ||
      (count != 0 && count != slice_sizes.size())) {
    return bad("anchor of " + std::to_string(anchor) + ", momentum of " + std::to_string(momentum) +
               " floats and " + std::to_string(count) + " residuals for a fragment of " +
               std::to_string(n) + " floats in " + std::to_string(slice_sizes.size()) + " slices");
  }
  if (tied != 0 && tied != static_cast<uint64_t>(tied_floats)) {
    return bad("tied-embedding residual of " + std::to_string(tied) + " floats, the part has " +
               std::to_string(tied_floats));
  }
  std::vector<uint64_t> sizes(count);
  if (count > 0) {
    RETURN_IF_ERROR(model::ReadFileRange(path, what, kFixed, sizes.data(), count * 8));
  }
  uint64_t floats = anchor + momentum + tied;
  for (uint64_t k = 0; k < count; ++k) {
    if (sizes[k] != 0 && sizes[k] != static_cast<uint64_t>(slice_sizes[k])) {
      return bad("residual " + std::to_string(k) + " of " + std::to_string(sizes[k]) +
                 " floats, the slice has " + std::to_string(slice_sizes[k]));
    }
    floats += sizes[k];
  }
  const uint64_t expected = kFixed + count * 8 + floats * sizeof(float) + 8;
  if (static_cast<uint64_t>(size) != expected) {
    return bad(std::to_string(size) + " bytes, its header describes " + std::to_string(expected) +
               " (truncated?)");
  }
  std::string all(static_cast<size_t>(size), '\0');
  RETURN_IF_ERROR(model::ReadFileRange(path, what, 0, all.data(), all.size()));
  uint64_t checksum = 0;
  std::memcpy(&checksum, all.data() + all.size() - 8, 8);
  if (checksum != XXH64(all.data(), all.size() - 8, 0)) return bad("checksum mismatch (corrupt)");
  SyncState s;
  s.step = step;
  size_t off = static_cast<size_t>(kFixed + count * 8);
  auto take = [&](std::vector<float>* v, uint64_t count_floats) {
    v->resize(count_floats);
    if (count_floats == 0) return;  // an empty vector's data() may be null: no memcpy
    std::memcpy(v->data(), all.data() + off, count_floats * sizeof(float));
    off += count_floats * sizeof(float);
  };
  take(&s.anchor, anchor);
  take(&s.momentum, momentum);
  s.residuals.resize(count);
  for (uint64_t k = 0; k < count; ++k) take(&s.residuals[k], sizes[k]);
  take(&s.tied_residual, tied);
  return s;
}

}  // namespace longhaul::daemon
