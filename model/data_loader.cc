// Shuffled-window data loader with a one-counter resumable state (see data_loader.h).
#include "model/data_loader.h"

#include <cinttypes>
#include <cstdio>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace longhaul::model {

std::string DataLoaderState::Serialize() const {
  std::string text =
      absl::StrCat("dataloader v1 seed=", seed, " windows=", num_windows, " seq_len=", seq_len,
                   " shuffle=", shuffle ? 1 : 0, " position=", position);
  // Unsharded states keep the line they always had (older checkpoints read the same).
  if (shards > 1) absl::StrAppend(&text, " shard=", shard, "/", shards, " block=", shard_block);
  if (shards > 1 && round > 0) absl::StrAppend(&text, " round=", round, " offset=", offset);
  return text;
}

StatusOr<DataLoaderState> DataLoaderState::Parse(const std::string& text) {
  DataLoaderState s;
  uint64_t seed = 0;
  int64_t windows = 0, position = 0;
  int seq_len = 0, shuffle = 0, consumed = 0;
  const int n = std::sscanf(text.c_str(),
                            "dataloader v1 seed=%" SCNu64 " windows=%" SCNd64
                            " seq_len=%d shuffle=%d position=%" SCNd64 "%n",
                            &seed, &windows, &seq_len, &shuffle, &position, &consumed);
  auto malformed = [&] {
    return absl::InvalidArgumentError(absl::StrCat("malformed data loader state '", text, "'"));
  };
  if (n != 5) return malformed();
  std::string rest = text.substr(size_t(consumed));
  if (!rest.empty() && rest.back() == '\n') rest.pop_back();
  int shard = 0, shards = 1, used = 0;
  int64_t block = 1, round = 0, offset = 0;
  if (!rest.empty()) {
    if (std::sscanf(rest.c_str(), " shard=%d/%d block=%" SCNd64 "%n", &shard, &shards, &block,
                    &used) != 3 ||
        shards < 2 || shard < 0 || shard >= shards || block <= 0) {
      return malformed();
    }
    if (used != int(rest.size())) {  // unequal blocks
      int more = 0;
      if (std::sscanf(rest.c_str() + used, " round=%" SCNd64 " offset=%" SCNd64 "%n", &round,
                      &offset, &more) != 2 ||
          used + more != int(rest.size()) || round <= 0 || offset < 0 || offset > round - block) {
        return malformed();
      }
    }
  }
  if (windows <= 0 || seq_len <= 0 || position < 0 || (shuffle != 0 && shuffle != 1)) {
    return malformed();
  }
  s.shards = shards;
  s.shard = shard;
  s.shard_block = block;
  s.round = round;
  s.offset = offset;
  s.seed = seed;
  s.num_windows = windows;
  s.seq_len = seq_len;
  s.shuffle = shuffle == 1;
  s.position = position;
  return s;
}

void SetShard(const std::vector<int64_t>& blocks, int shard, DataLoaderOptions* options) {
  int64_t round = 0, offset = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (static_cast<int>(i) == shard) offset = round;
    round += blocks[i];
  }
  options->shards = static_cast<int>(blocks.size());
  options->shard = shard;
  options->shard_block = blocks[static_cast<size_t>(shard)];
  options->shard_round = round;
  options->shard_offset = offset;
}

DataLoader::DataLoader(std::shared_ptr<const TokenData> data, const DataLoaderOptions& options)
    : data_(std::move(data)), options_(options) {
  num_windows_ = (int64_t(data_->tokens.size()) - 1) / options_.seq_len;
}

StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(std::shared_ptr<const TokenData> data,
                                                         const DataLoaderOptions& options) {
  if (options.batch_size <= 0 || options.seq_len <= 0) {
    return absl::InvalidArgumentError("data loader: batch size and sequence length must be > 0");
  }
  if (options.shards < 1 || options.shard < 0 || options.shard >= options.shards ||
      options.shard_block < 1 || options.shard_block > options.round() ||
      options.offset() > options.round() - options.shard_block) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader: shard ", options.shard, " of ", options.shards, " (block ",
                     options.shard_block, " windows at ", options.offset(), " of a round of ",
                     options.round(), ") is not a shard"));
  }
  if (int64_t(data->tokens.size()) < int64_t(options.seq_len) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data '", data->source, "' has ", data->tokens.size(), " tokens; a sequence length of ",
        options.seq_len, " needs at least ", options.seq_len + 1));
  }
  return std::unique_ptr<DataLoader>(new DataLoader(std::move(data), options));
}

int64_t DataLoader::WindowAt(int64_t local) {
  const int64_t block = options_.shard_block;
  const int64_t position =
      options_.shards == 1 ? local
                           : local / block * options_.round() + options_.offset() + local % block;
  const int64_t epoch = position / num_windows_;
  const int64_t index = position % num_windows_;
  if (!options_.shuffle) return index;
  if (epoch != perm_epoch_) {
    perm_.resize(num_windows_);
    std::iota(perm_.begin(), perm_.end(), int64_t{0});
    std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ull + uint64_t(epoch));
    for (int64_t i = num_windows_ - 1; i > 0; --i) {
      // Unbiased enough for shuffling and, unlike std::uniform_int_distribution, the same
      // on every standard library.
      const int64_t j = int64_t(rng() % uint64_t(i + 1));
      std::swap(perm_[i], perm_[j]);
    }
    perm_epoch_ = epoch;
  }
  return perm_[index];
}

void DataLoader::Next(int32_t* inputs, int32_t* targets) {
  const int T = options_.seq_len;
  for (int b = 0; b < options_.batch_size; ++b) {
    const uint32_t* w = data_->tokens.data() + WindowAt(position_++) * T;
    for (int t = 0; t < T; ++t) {  // ids <= INT32_MAX (token_data.h)
      inputs[b * T + t] = int32_t(w[t]);
      targets[b * T + t] = int32_t(w[t + 1]);
    }
  }
}

DataLoaderState DataLoader::state() const {
  DataLoaderState s;
  s.seed = options_.seed;
  s.num_windows = num_windows_;
  s.seq_len = options_.seq_len;
  s.shuffle = options_.shuffle;
  s.position = position_;
  if (options_.shards > 1) {
    s.shards = options_.shards;
    s.shard = options_.shard;
    s.shard_block = options_.shard_block;
    if (options_.round() != int64_t{options_.shards} * options_.shard_block ||
        options_.offset() != options_.shard * options_.shard_block) {
      s.round = options_.round();
      s.offset = options_.offset();
    }
  }
  return s;
}

Status DataLoader::Restore(const DataLoaderState& s) {
  if (s.seed != options_.seed || s.num_windows != num_windows_ || s.seq_len != options_.seq_len ||
      s.shuffle != options_.shuffle || s.shards != options_.shards || s.shard != options_.shard ||
      (s.shards > 1 && (s.shard_block != options_.shard_block || s.round != state().round ||
                        s.offset != state().offset))) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader state (", s.Serialize(), ") does not match this loader (",
                     state().Serialize(), "): different data, seed, sequence length or shard"));
  }
  position_ = s.position;
  return absl::OkStatus();
}

}  // namespace longhaul::model
