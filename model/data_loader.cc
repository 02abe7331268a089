// Shuffled-window data loader with a one-counter resumable state (see data_loader.h).
#include "model/data_loader.h"

#include <algorithm>
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
  if (!data.empty()) absl::StrAppend(&text, " data=", data);
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
  // A manifest's fingerprint comes last: " data=HEX".
  if (const size_t d = rest.find(" data="); d != std::string::npos) {
    s.data = rest.substr(d + 6);
    rest.resize(d);
    if (s.data.empty() || s.data.size() > 64) return malformed();
    for (char c : s.data) {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return malformed();
    }
  }
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

namespace {

// A token stream in memory: W = (N - 1) / T windows, shuffled per epoch by Fisher-Yates.
class TokenWindows : public WindowSource {
 public:
  TokenWindows(std::shared_ptr<const TokenData> data, int seq_len, bool shuffle, uint64_t seed)
      : data_(std::move(data)), seq_len_(seq_len), shuffle_(shuffle), seed_(seed) {
    num_windows_ = (int64_t(data_->tokens.size()) - 1) / seq_len_;
  }
  int64_t num_windows() const override { return num_windows_; }
  const std::string& name() const override { return data_->source; }
  Status Window(int64_t position, int32_t* out) override {
    const uint32_t* w = data_->tokens.data() + WindowAt(position) * seq_len_;
    for (int t = 0; t <= seq_len_; ++t) out[t] = int32_t(w[t]);  // ids <= INT32_MAX (token_data.h)
    return absl::OkStatus();
  }

 private:
  int64_t WindowAt(int64_t position) {
    const int64_t epoch = position / num_windows_;
    const int64_t index = position % num_windows_;
    if (!shuffle_) return index;
    if (epoch != perm_epoch_) {
      perm_.resize(size_t(num_windows_));
      std::iota(perm_.begin(), perm_.end(), int64_t{0});
      std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ull + uint64_t(epoch));
      for (int64_t i = num_windows_ - 1; i > 0; --i) {
        // Unbiased enough for shuffling and, unlike std::uniform_int_distribution, the same
        // on every standard library.
        const int64_t j = int64_t(rng() % uint64_t(i + 1));
        std::swap(perm_[size_t(i)], perm_[size_t(j)]);
      }
      perm_epoch_ = epoch;
    }
    return perm_[size_t(index)];
  }

  std::shared_ptr<const TokenData> data_;
  int seq_len_;
  bool shuffle_;
  uint64_t seed_;
  int64_t num_windows_ = 0;
  int64_t perm_epoch_ = -1;
  std::vector<int64_t> perm_;
};

}  // namespace

StatusOr<std::unique_ptr<WindowSource>> MemoryWindows(std::shared_ptr<const TokenData> data,
                                                      int seq_len, bool shuffle, uint64_t seed) {
  if (seq_len <= 0) return absl::InvalidArgumentError("data loader: sequence length must be > 0");
  if (int64_t(data->tokens.size()) < int64_t(seq_len) + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("data '", data->source, "' has ", data->tokens.size(),
                     " tokens; a sequence length of ", seq_len, " needs at least ", seq_len + 1));
  }
  return std::unique_ptr<WindowSource>(new TokenWindows(std::move(data), seq_len, shuffle, seed));
}

DataLoader::DataLoader(std::unique_ptr<WindowSource> source, const DataLoaderOptions& options)
    : source_(std::move(source)), options_(options) {
  num_windows_ = source_->num_windows();
  part_windows_.assign(size_t(source_->num_parts()), 0);
  window_.resize(size_t(options_.seq_len) + 1);
}

StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(std::shared_ptr<const TokenData> data,
                                                         const DataLoaderOptions& options) {
  ASSIGN_OR_RETURN(auto source,
                   MemoryWindows(std::move(data), options.seq_len, options.shuffle, options.seed));
  return Create(std::move(source), options);
}

StatusOr<std::unique_ptr<DataLoader>> DataLoader::Create(std::unique_ptr<WindowSource> source,
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
  if (source->num_windows() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("data '", source->name(), "' holds no window"));
  }
  return std::unique_ptr<DataLoader>(new DataLoader(std::move(source), options));
}

int64_t DataLoader::PositionAt(int64_t local) const {
  const int64_t block = options_.shard_block;
  return options_.shards == 1
             ? local
             : local / block * options_.round() + options_.offset() + local % block;
}

Status DataLoader::Next(int32_t* inputs, int32_t* targets) {
  const int T = options_.seq_len;
  const bool parts = part_windows_.size() > 1;
  for (int b = 0; b < options_.batch_size; ++b) {
    const int64_t position = PositionAt(position_);
    RETURN_IF_ERROR(source_->Window(position, window_.data()));
    position_ += 1;
    if (parts) {
      for (size_t p = 0; p < part_windows_.size(); ++p) {
        if (source_->PartWindows(int(p), position + 1) != source_->PartWindows(int(p), position)) {
          part_windows_[p] += 1;
        }
      }
    } else {
      part_windows_[0] += 1;
    }
    std::copy(window_.begin(), window_.begin() + T, inputs + b * T);
    std::copy(window_.begin() + 1, window_.end(), targets + b * T);
  }
  return absl::OkStatus();
}

void DataLoader::CountParts() {
  for (size_t p = 0; p < part_windows_.size(); ++p) {
    if (part_windows_.size() == 1) {
      part_windows_[0] = position_;
      break;
    }
    if (options_.shards == 1) {
      part_windows_[p] = source_->PartWindows(int(p), position_);
      continue;
    }
    // Block after block: this loader's positions are [j round + offset, + block).
    const int64_t block = options_.shard_block;
    int64_t n = 0;
    for (int64_t local = 0; local < position_; local += block) {
      const int64_t begin = PositionAt(local);
      const int64_t end = begin + std::min(block, position_ - local);
      n += source_->PartWindows(int(p), end) - source_->PartWindows(int(p), begin);
    }
    part_windows_[p] = n;
  }
}

DataLoaderState DataLoader::state() const {
  DataLoaderState s;
  s.seed = options_.seed;
  s.num_windows = num_windows_;
  s.seq_len = options_.seq_len;
  s.shuffle = options_.shuffle;
  s.position = position_;
  s.data = source_->fingerprint();
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
      s.data != source_->fingerprint() ||
      (s.shards > 1 && (s.shard_block != options_.shard_block || s.round != state().round ||
                        s.offset != state().offset))) {
    return absl::InvalidArgumentError(
        absl::StrCat("data loader state (", s.Serialize(), ") does not match this loader (",
                     state().Serialize(), "): different data, seed, sequence length or shard"));
  }
  position_ = s.position;
  CountParts();
  return absl::OkStatus();
}

}  // namespace longhaul::model
