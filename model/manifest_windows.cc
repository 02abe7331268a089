// Manifest windows streamed shard by shard, and weighted mixtures (see manifest_windows.h).
#include "model/manifest_windows.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/sha256.h"

namespace longhaul::model {
namespace {

// The same Fisher-Yates as the in-memory loader (data_loader.cc), so that a permutation is
// the same on every standard library.
void Shuffle(std::vector<int64_t>* v, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (int64_t i = int64_t(v->size()) - 1; i > 0; --i) {
    const int64_t j = int64_t(rng() % uint64_t(i + 1));
    std::swap((*v)[size_t(i)], (*v)[size_t(j)]);
  }
}

uint64_t Mix(uint64_t a, uint64_t b) {
  return a * 0x9E3779B97F4A7C15ull ^ (b + 0x7F4A7C159E3779B9ull + (a << 6) + (a >> 2));
}

}  // namespace

StatusOr<std::unique_ptr<ManifestWindows>> ManifestWindows::Create(TokenManifest manifest,
                                                                   bool val_split, int seq_len,
                                                                   bool shuffle, uint64_t seed) {
  std::unique_ptr<ManifestWindows> w(new ManifestWindows());
  w->val_ = val_split;
  w->seq_len_ = seq_len;
  w->shuffle_ = shuffle;
  w->seed_ = seed;
  const char* split = val_split ? "val" : "train";
  w->name_ = absl::StrCat(manifest.dir, " (", split, ")");
  std::string shas;
  for (const ManifestShard& s : manifest.split(val_split)) {
    const int64_t n = s.tokens > seq_len ? (s.tokens - 1) / seq_len : 0;
    w->windows_.push_back(n);
    w->num_windows_ += n;
    absl::StrAppend(&shas, s.sha256, "\n");
  }
  if (w->num_windows_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token manifest '", manifest.dir, "': its ", split, " split (",
                     manifest.split(val_split).size(), " shards, ", manifest.Tokens(val_split),
                     " tokens) has no shard of ", seq_len + 1,
                     " tokens or more, which a sequence length of ", seq_len, " needs"));
  }
  w->fingerprint_ = Sha256Hex(absl::StrCat(split, "\n", shas)).substr(0, 16);
  w->manifest_ = std::move(manifest);
  return w;
}

void ManifestWindows::SetEpoch(int64_t epoch) {
  if (epoch == epoch_) return;
  std::vector<int64_t> order;
  for (size_t i = 0; i < windows_.size(); ++i) {
    if (windows_[i] > 0) order.push_back(int64_t(i));
  }
  if (shuffle_) Shuffle(&order, Mix(seed_, uint64_t(epoch)));
  order_.assign(order.begin(), order.end());
  starts_.assign(1, 0);
  for (size_t s : order_) starts_.push_back(starts_.back() + windows_[s]);
  epoch_ = epoch;
}

Status ManifestWindows::LoadShard(size_t shard) {
  tokens_.clear();
  loaded_ = SIZE_MAX;
  ASSIGN_OR_RETURN(tokens_, ReadManifestShard(manifest_, val_, shard, /*verify_hash=*/true));
  if (int64_t(tokens_.size()) < windows_[shard] * seq_len_ + 1) {
    return absl::DataLossError(absl::StrCat("token shard '",
                                            manifest_.ShardPath(manifest_.split(val_)[shard]),
                                            "' is shorter than its manifest says"));
  }
  loaded_ = shard;
  perm_epoch_ = -1;
  shard_reads_ += 1;
  return absl::OkStatus();
}

Status ManifestWindows::Window(int64_t position, int32_t* out) {
  const int64_t epoch = position / num_windows_;
  const int64_t index = position % num_windows_;
  SetEpoch(epoch);
  const size_t k =
      size_t(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin() - 1);
  const size_t shard = order_[k];
  if (loaded_ != shard) RETURN_IF_ERROR(LoadShard(shard));
  int64_t local = index - starts_[k];
  if (shuffle_) {
    if (perm_epoch_ != epoch) {
      perm_.resize(size_t(windows_[shard]));
      std::iota(perm_.begin(), perm_.end(), int64_t{0});
      Shuffle(&perm_, Mix(Mix(seed_, uint64_t(epoch)), uint64_t(shard) + 1));
      perm_epoch_ = epoch;
    }
    local = perm_[size_t(local)];
  }
  const uint32_t* w = tokens_.data() + local * seq_len_;
  for (int t = 0; t <= seq_len_; ++t) out[t] = int32_t(w[t]);  // ids < vocabulary <= INT32_MAX
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<MixtureWindows>> MixtureWindows::Create(std::vector<MixturePart> parts) {
  if (parts.empty()) return absl::InvalidArgumentError("a data mixture needs at least one source");
  double total = 0;
  for (const MixturePart& p : parts) {
    if (!(p.weight > 0) || !std::isfinite(p.weight)) {
      return absl::InvalidArgumentError(absl::StrCat("data mixture: source ", p.source->name(),
                                                     " has weight ", p.weight,
                                                     "; weights must be positive"));
    }
    total += p.weight;
  }
  if (int64_t(parts.size()) > kMixturePeriod) {
    return absl::InvalidArgumentError(
        absl::StrCat("a data mixture takes at most ", kMixturePeriod, " sources"));
  }
  std::unique_ptr<MixtureWindows> m(new MixtureWindows());
  // Largest remainders, every part at least one slot.
  const size_t n = parts.size();
  std::vector<double> exact(n);
  int64_t given = 0;
  m->shares_.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    exact[i] = parts[i].weight / total * double(kMixturePeriod);
    m->shares_[i] = std::max<int64_t>(1, int64_t(std::floor(exact[i])));
    given += m->shares_[i];
  }
  std::vector<size_t> by_remainder(n);
  std::iota(by_remainder.begin(), by_remainder.end(), size_t{0});
  std::stable_sort(by_remainder.begin(), by_remainder.end(), [&](size_t a, size_t b) {
    return exact[a] - double(m->shares_[a]) > exact[b] - double(m->shares_[b]);
  });
  for (size_t k = 0; given < kMixturePeriod; k = (k + 1) % n, ++given)
    m->shares_[by_remainder[k]] += 1;
  while (given > kMixturePeriod) {  // the at-least-one rule overshot: take from the largest
    const size_t big =
        size_t(std::max_element(m->shares_.begin(), m->shares_.end()) - m->shares_.begin());
    m->shares_[big] -= 1;
    given -= 1;
  }
  // Smooth weighted round robin over one period.
  std::vector<int64_t> credit(n, 0), taken(n, 0);
  m->prefix_.assign(n, std::vector<int64_t>(size_t(kMixturePeriod) + 1, 0));
  for (int64_t slot = 0; slot < kMixturePeriod; ++slot) {
    size_t best = 0;
    for (size_t i = 0; i < n; ++i) {
      credit[i] += m->shares_[i];
      if (credit[i] > credit[best]) best = i;
    }
    credit[best] -= kMixturePeriod;
    m->slot_part_.push_back(int(best));
    m->slot_rank_.push_back(taken[best]++);
    for (size_t i = 0; i < n; ++i) m->prefix_[i][size_t(slot) + 1] = taken[i];
  }
  std::string fp;
  for (size_t i = 0; i < n; ++i) {
    m->num_windows_ += parts[i].source->num_windows();
    absl::StrAppend(&m->name_, i == 0 ? "" : " + ", parts[i].source->name(),
                    absl::StrFormat(" x%.3g", parts[i].weight));
    absl::StrAppend(&fp, parts[i].source->fingerprint(), ":", m->shares_[i], "\n");
  }
  m->fingerprint_ = Sha256Hex(fp).substr(0, 16);
  m->parts_ = std::move(parts);
  return m;
}

Status MixtureWindows::Window(int64_t position, int32_t* out) {
  const int64_t period = position / kMixturePeriod;
  const size_t slot = size_t(position % kMixturePeriod);
  const size_t part = size_t(slot_part_[slot]);
  return parts_[part].source->Window(period * shares_[part] + slot_rank_[slot], out);
}

int64_t MixtureWindows::PartWindows(int part, int64_t end) const {
  const size_t p = size_t(part);
  return end / kMixturePeriod * shares_[p] + prefix_[p][size_t(end % kMixturePeriod)];
}

}  // namespace longhaul::model
