// Deterministic, resumable batches of (B, T+1)-token windows from a WindowSource
// (window_source.h): a token stream in memory, a token manifest's shards, a mixture.
//
// A stream in memory is cut into W = (N - 1) / T windows; window w covers tokens
// [w T, w T + T], so consecutive windows share one token, as in llm.c. With shuffling, epoch e
// visits the windows in a permutation drawn from (seed, e) by Fisher-Yates over mt19937_64;
// without it they come in file order. The whole state is one counter (windows handed out so
// far), so saving and restoring it resumes the exact sequence of batches.
//
// Shards (pipeline replicas, each reading its own part of the data): with S shards of block
// K windows, shard r's position p reads the global position (p / K * S + r) * K + p % K of
// that same sequence, so the S shards together read, block after block, exactly what one
// unsharded loader reads; with K = a step's windows per replica, one step of the S replicas
// covers one step of a single pipeline with S times the batch. Shards of unequal blocks
// (replicas training different numbers of microbatches per step) name their round (the
// windows of one step of all shards) and their offset in it: position p reads
// p / K * round + offset + p % K.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "model/token_data.h"
#include "model/window_source.h"

namespace longhaul::model {

struct DataLoaderOptions {
  int batch_size = 1;  // B: windows per batch; REQUIRES: > 0
  int seq_len = 1;     // T; REQUIRES: > 0
  uint64_t seed = 0;
  bool shuffle = true;
  int shards = 1;           // S; REQUIRES: > 0
  int shard = 0;            // r; REQUIRES: 0 <= r < S
  int64_t shard_block = 1;  // K windows; REQUIRES: > 0
  // Unequal blocks: windows of one round of every shard (0: S x K) and this shard's first
  // window in it (-1: r x K). REQUIRES: offset + K <= round.
  int64_t shard_round = 0;
  int64_t shard_offset = -1;

  int64_t round() const { return shard_round > 0 ? shard_round : shards * shard_block; }
  int64_t offset() const { return shard_offset >= 0 ? shard_offset : shard * shard_block; }
};

// Sets `options` to shard `shard` of shards whose blocks are blocks[i] windows (in shard
// order): a round of all of them, this shard's block at the sum of those before it.
// REQUIRES: 0 <= shard < blocks.size().
void SetShard(const std::vector<int64_t>& blocks, int shard, DataLoaderOptions* options);

// Where a loader stands. Serialized as one text line so checkpoints can carry it.
struct DataLoaderState {
  uint64_t seed = 0;
  int64_t num_windows = 0;
  int seq_len = 0;
  bool shuffle = true;
  int64_t position = 0;  // windows handed out since the start
  int shards = 1, shard = 0;
  int64_t shard_block = 1;
  int64_t round = 0, offset = 0;  // 0, 0: equal blocks (S x K, r x K)
  std::string data;               // the source's fingerprint ("" for streams in memory)

  std::string Serialize() const;
  static StatusOr<DataLoaderState> Parse(const std::string& text);
};

// A token stream in memory as windows (shuffled by options.shuffle and options.seed).
// Fails when the data has fewer than T + 1 tokens.
StatusOr<std::unique_ptr<WindowSource>> MemoryWindows(std::shared_ptr<const TokenData> data,
                                                      int seq_len, bool shuffle, uint64_t seed);

class DataLoader {
 public:
  // Windows of a token stream in memory (MemoryWindows). Fails when the data has fewer
  // than T + 1 tokens.
  static StatusOr<std::unique_ptr<DataLoader>> Create(std::shared_ptr<const TokenData> data,
                                                      const DataLoaderOptions& options);
  // Windows of `source`, made for options.seq_len (its shuffling is its own).
  static StatusOr<std::unique_ptr<DataLoader>> Create(std::unique_ptr<WindowSource> source,
                                                      const DataLoaderOptions& options);

  // Fills inputs (B*T) with each window's first T tokens and targets (B*T) with its last T.
  // Errors come from the source (a shard that cannot be read or is corrupt).
  Status Next(int32_t* inputs, int32_t* targets);

  int64_t num_windows() const { return num_windows_; }
  // Full batches in one pass over the data.
  int64_t batches_per_epoch() const { return num_windows_ / options_.batch_size; }
  const WindowSource& source() const { return *source_; }
  // Windows of each of the source's parts this loader has handed out (a mixture's sources).
  const std::vector<int64_t>& part_windows() const { return part_windows_; }

  DataLoaderState state() const;
  // Fails when `state` belongs to a different data set or configuration.
  Status Restore(const DataLoaderState& state);

 private:
  DataLoader(std::unique_ptr<WindowSource> source, const DataLoaderOptions& options);
  // The source position of this loader's `local`-th position (sharding applied).
  int64_t PositionAt(int64_t local) const;
  // part_windows_ for positions [0, position_).
  void CountParts();

  std::unique_ptr<WindowSource> source_;
  DataLoaderOptions options_;
  int64_t num_windows_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> part_windows_;
  std::vector<int32_t> window_;
};

}  // namespace longhaul::model
