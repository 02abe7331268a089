// Stages' carried state files (see sync_checkpoint.h), in the durable-file shape
// (model/durable_file.h, magic "LHSYNCST", version 4) whose payload is, little-endian: u64 step,
// u64 anchor floats, u64 momentum floats, u64 residual count, u64 tied residual floats, u64
// tracking floats (each of corrections and drift anchor), f64 learning-rate sum, u64 gossip
// outer floats (each of its anchor and momentum), u64 gossip link state bytes, u64 size of each
// residual, then the floats in that order (the tied residual, the corrections and the drift
// anchor, then the gossip outer anchor and momentum), and last the gossip link state's bytes.
// Each state is written in the lowest version that holds it, so builds before a version still
// read what they can: version 3, without a link state, lacks its field and bytes; version 2,
// without a gossip outer state, its field and floats too; version 1, without tracking either,
// the tracking fields and floats too. Files
// of earlier builds are read too: magic "LHSYNC02", version 1's fields, then u64 XXH64 of all
// before it; "LHSYNC01", the same without the tied residual's count and floats.
#include "daemon/job/state/sync_checkpoint.h"

#include <xxhash.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "common/file_env.h"
#include "model/durable_file.h"
#include "model/file_io.h"

namespace longhaul::daemon {
namespace {

constexpr model::DurableFormat kFormat{
    {'L', 'H', 'S', 'Y', 'N', 'C', 'S', 'T'}, 4, 0, "sync state"};
constexpr char kMagicV2[8] = {'L', 'H', 'S', 'Y', 'N', 'C', '0', '2'};
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

Status WriteSyncState(FileEnv& env, const std::string& path, const SyncState& s) {
  std::string head;
  AppendU64(&head, s.step);
  AppendU64(&head, s.anchor.size());
  AppendU64(&head, s.momentum.size());
  AppendU64(&head, s.residuals.size());
  AppendU64(&head, s.tied_residual.size());
  // Version 2's fields only with a tracking or gossip outer state, version 3's only with the
  // latter: a state without them stays readable by the builds before.
  const bool links = !s.gossip_links.empty();
  const bool outer = !s.gossip_outer_anchor.empty() || links;
  const bool tracking = !s.corrections.empty() || outer;
  if (tracking) {
    AppendU64(&head, s.corrections.size());
    uint64_t lr_bits;
    std::memcpy(&lr_bits, &s.lr_sum, 8);
    AppendU64(&head, lr_bits);
  }
  if (outer) AppendU64(&head, s.gossip_outer_anchor.size());
  if (links) AppendU64(&head, s.gossip_links.size());
  for (const auto& r : s.residuals) AppendU64(&head, r.size());
  auto bytes = [](const std::vector<float>& v) {
    return std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  std::vector<std::string_view> parts = {head, bytes(s.anchor), bytes(s.momentum)};
  for (const auto& r : s.residuals) parts.push_back(bytes(r));
  parts.push_back(bytes(s.tied_residual));
  if (tracking) {
    parts.push_back(bytes(s.corrections));
    parts.push_back(bytes(s.drift_anchor));
  }
  if (outer) {
    parts.push_back(bytes(s.gossip_outer_anchor));
    parts.push_back(bytes(s.gossip_outer_momentum));
  }
  if (links) {
    parts.emplace_back(reinterpret_cast<const char*>(s.gossip_links.data()), s.gossip_links.size());
  }
  model::DurableFormat format = kFormat;
  format.version = links ? 4 : outer ? 3 : tracking ? 2 : 1;
  format.max_bytes = UINT64_MAX;
  return model::WriteDurableFile(env, path, format, parts);
}

StatusOr<SyncState> ReadSyncState(FileEnv& env, const std::string& path, uint64_t step,
                                  int64_t fragment_floats, const std::vector<int64_t>& slice_sizes,
                                  int64_t tied_floats, uint64_t max_link_bytes) {
  const std::string what = "sync state";
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(what + " '" + path + "': " + why);
  };
  // The most a state of this fragment can hold; nothing larger is read.
  const uint64_t n = static_cast<uint64_t>(fragment_floats);
  uint64_t most_floats = 6 * n + static_cast<uint64_t>(tied_floats);
  for (int64_t size : slice_sizes) most_floats += static_cast<uint64_t>(size);
  const uint64_t most_bytes =
      9 * 8 + slice_sizes.size() * 8 + most_floats * sizeof(float) + max_link_bytes;
  // The fields and floats, after the magic (and, in the durable shape, its checks).
  std::string body;
  int fields = 5;
  // Read once, nothing larger than a state of this fragment (either shape) can be.
  model::DurableFormat format = kFormat;
  format.max_bytes = most_bytes;
  ASSIGN_OR_RETURN(model::DurablePayload p, model::ReadDurableOrEarlier(env, path, format));
  if (p.version > 0) {
    body = std::move(p.bytes);
    fields = p.version >= 4 ? 9 : p.version >= 3 ? 8 : p.version >= 2 ? 7 : 5;
  } else {  // an earlier build's: magic, fields, floats, XXH64 of all before it
    const std::string& all = p.bytes;
    const size_t size = all.size();
    const bool v1 = size >= 8 && std::memcmp(all.data(), kMagicV1, 8) == 0;
    if (!v1 && (size < 8 || std::memcmp(all.data(), kMagicV2, 8) != 0)) return bad("bad magic");
    fields = v1 ? 4 : 5;
    if (size < static_cast<size_t>(8 + fields * 8 + 8)) {
      return bad(std::to_string(size) + " bytes, not a state of this fragment (truncated?)");
    }
    uint64_t checksum = 0;
    std::memcpy(&checksum, all.data() + all.size() - 8, 8);
    if (checksum != XXH64(all.data(), all.size() - 8, 0)) return bad("checksum mismatch (corrupt)");
    body = all.substr(8, all.size() - 16);
  }
  const size_t fixed = static_cast<size_t>(fields) * 8;
  if (body.size() < fixed) return bad("shorter than its header");
  uint64_t head[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  std::memcpy(head, body.data(), fixed);
  const uint64_t file_step = head[0], anchor = head[1], momentum = head[2], count = head[3];
  const uint64_t tied = head[4], tracking = head[5], outer = head[7], links = head[8];
  double lr_sum = 0;
  std::memcpy(&lr_sum, &head[6], 8);
  if (file_step != step) {
    return bad("holds step " + std::to_string(file_step) + ", not " + std::to_string(step));
  }
  if ((anchor != 0 && anchor != n) || momentum != anchor ||
      (count != 0 && count != slice_sizes.size())) {
    return bad("anchor of " + std::to_string(anchor) + ", momentum of " + std::to_string(momentum) +
               " floats and " + std::to_string(count) + " residuals for a fragment of " +
               std::to_string(n) + " floats in " + std::to_string(slice_sizes.size()) + " slices");
  }
  if ((tracking != 0 && tracking != n) || !std::isfinite(lr_sum) || lr_sum < 0) {
    return bad("tracking state of " + std::to_string(tracking) + " floats and a learning-rate " +
               "sum of " + std::to_string(lr_sum) + " for a fragment of " + std::to_string(n) +
               " floats");
  }
  if (outer != 0 && outer != n) {
    return bad("gossip outer state of " + std::to_string(outer) + " floats for a fragment of " +
               std::to_string(n) + " floats");
  }
  if (links > max_link_bytes) {
    return bad("gossip link state of " + std::to_string(links) + " bytes, this fragment's " +
               "takes at most " + std::to_string(max_link_bytes));
  }
  if (tied != 0 && tied != static_cast<uint64_t>(tied_floats)) {
    return bad("tied-embedding residual of " + std::to_string(tied) + " floats, the part has " +
               std::to_string(tied_floats));
  }
  if (body.size() < fixed + count * 8) return bad("shorter than its residual sizes");
  std::vector<uint64_t> sizes(count);
  if (count > 0) std::memcpy(sizes.data(), body.data() + fixed, count * 8);
  uint64_t floats = anchor + momentum + tied + 2 * tracking + 2 * outer;
  for (uint64_t k = 0; k < count; ++k) {
    if (sizes[k] != 0 && sizes[k] != static_cast<uint64_t>(slice_sizes[k])) {
      return bad("residual " + std::to_string(k) + " of " + std::to_string(sizes[k]) +
                 " floats, the slice has " + std::to_string(slice_sizes[k]));
    }
    floats += sizes[k];
  }
  const uint64_t expected = fixed + count * 8 + floats * sizeof(float) + links;
  if (body.size() != expected) {
    return bad(std::to_string(body.size()) + " bytes of fields and floats, its header describes " +
               std::to_string(expected) + " (truncated?)");
  }
  SyncState s;
  s.step = step;
  size_t off = static_cast<size_t>(fixed + count * 8);
  auto take = [&](std::vector<float>* v, uint64_t count_floats) {
    v->resize(count_floats);
    if (count_floats == 0) return;  // an empty vector's data() may be null: no memcpy
    std::memcpy(v->data(), body.data() + off, count_floats * sizeof(float));
    off += count_floats * sizeof(float);
  };
  take(&s.anchor, anchor);
  take(&s.momentum, momentum);
  s.residuals.resize(count);
  for (uint64_t k = 0; k < count; ++k) take(&s.residuals[k], sizes[k]);
  take(&s.tied_residual, tied);
  take(&s.corrections, tracking);
  take(&s.drift_anchor, tracking);
  take(&s.gossip_outer_anchor, outer);
  take(&s.gossip_outer_momentum, outer);
  s.gossip_links.assign(body.begin() + static_cast<ptrdiff_t>(off),
                        body.begin() + static_cast<ptrdiff_t>(off + links));
  s.lr_sum = lr_sum;
  return s;
}

}  // namespace longhaul::daemon
