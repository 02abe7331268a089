// Windows from token manifests (token_manifest.h), streamed shard by shard, and weighted
// mixtures of them.
//
// ManifestWindows: a split's shards, each cut into (tokens - 1) / T windows (none crosses a
// shard). Shuffled, epoch e visits the shards in an order drawn from (seed, e) and each
// shard's windows in an order drawn from (seed, e, shard); so a reader moving forward holds
// one shard in memory at a time and reads only the shards its positions fall in. A shard is
// read whole when first needed, with its size, ids and SHA-256 checked against the manifest.
//
// MixtureWindows: sources with weights. Each period of P positions (P = kMixturePeriod)
// gives source i exactly n_i positions (n_i from the weights, largest remainders, at least 1
// each), spread by smooth weighted round robin; so any prefix of the sequence holds each
// source within one window of its share, and position p maps to its source's own position in
// O(1). Each source runs through its own epochs (a small source repeats sooner).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/token_manifest.h"
#include "model/window_source.h"

namespace longhaul::model {

inline constexpr int64_t kMixturePeriod = 1000;

class ManifestWindows : public WindowSource {
 public:
  // The train or val split of `manifest` in windows of `seq_len` + 1 tokens. Errors: a split
  // with no window (no shard has seq_len + 1 tokens).
  static StatusOr<std::unique_ptr<ManifestWindows>> Create(TokenManifest manifest, bool val_split,
                                                           int seq_len, bool shuffle,
                                                           uint64_t seed);

  int64_t num_windows() const override { return num_windows_; }
  Status Window(int64_t position, int32_t* out) override;
  const std::string& name() const override { return name_; }
  std::string fingerprint() const override { return fingerprint_; }

  // Shards read so far (for tests: a reader moving forward reads each one once an epoch).
  int shard_reads() const { return shard_reads_; }

 private:
  ManifestWindows() = default;
  // The shard order and prefix sums of epoch `epoch`.
  void SetEpoch(int64_t epoch);
  Status LoadShard(size_t shard);

  TokenManifest manifest_;
  bool val_ = false;
  int seq_len_ = 0;
  bool shuffle_ = true;
  uint64_t seed_ = 0;
  std::string name_, fingerprint_;
  std::vector<int64_t> windows_;  // per shard
  int64_t num_windows_ = 0;
  int64_t epoch_ = -1;
  std::vector<size_t> order_;    // shards in epoch order (only those with windows)
  std::vector<int64_t> starts_;  // first window of each, in epoch order (+ total)
  size_t loaded_ = SIZE_MAX;     // shard whose tokens are held
  int64_t perm_epoch_ = -1;
  std::vector<uint32_t> tokens_;
  std::vector<int64_t> perm_;  // window order of the held shard this epoch
  int shard_reads_ = 0;
};

struct MixturePart {
  std::unique_ptr<WindowSource> source;
  double weight = 1;
};

class MixtureWindows : public WindowSource {
 public:
  // Errors: no parts, a weight that is not positive and finite.
  static StatusOr<std::unique_ptr<MixtureWindows>> Create(std::vector<MixturePart> parts);

  int64_t num_windows() const override { return num_windows_; }
  Status Window(int64_t position, int32_t* out) override;
  const std::string& name() const override { return name_; }
  std::string fingerprint() const override { return fingerprint_; }
  int num_parts() const override { return static_cast<int>(parts_.size()); }
  std::string part_name(int part) const override { return parts_[size_t(part)].source->name(); }
  int64_t PartWindows(int part, int64_t end) const override;

  // Positions of each part in one period (sums to kMixturePeriod).
  const std::vector<int64_t>& shares() const { return shares_; }

 private:
  MixtureWindows() = default;

  std::vector<MixturePart> parts_;
  std::vector<int64_t> shares_;
  std::vector<int> slot_part_;                // part of each position in a period
  std::vector<int64_t> slot_rank_;            // its index among that part's positions
  std::vector<std::vector<int64_t>> prefix_;  // per part: its positions before each slot
  int64_t num_windows_ = 0;
  std::string name_, fingerprint_;
};

}  // namespace longhaul::model
