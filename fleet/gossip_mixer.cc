// Sparse push-sum rounds over replicas' parameters (gossip_mixer.h).
#include "fleet/gossip_mixer.h"

#include <algorithm>
#include <cmath>

namespace longhaul::fleet {
namespace {

constexpr uint64_t kSliceHeaderBytes = 16;  // slice index, count, round, sender
constexpr uint64_t kCoordinateBytes = 12;   // index, value share, weight share (fp32 each)

}  // namespace

GossipMixer::GossipMixer(int replicas, size_t parameters, std::vector<SyncSlice> slices,
                         double keep)
    : replicas_(replicas),
      parameters_(parameters),
      slices_(std::move(slices)),
      keep_(std::clamp(keep, 1e-9, 1.0)),
      weights_(static_cast<size_t>(replicas), std::vector<float>(parameters, 1.0f)),
      refs_(static_cast<size_t>(replicas), std::vector<float>(parameters, 0.0f)) {}

void GossipMixer::Reset(std::span<const float> params) {
  for (size_t r = 0; r < refs_.size(); ++r) {
    std::copy(params.begin(), params.end(), refs_[r].begin());
    std::fill(weights_[r].begin(), weights_[r].end(), 1.0f);
  }
  rounds_ = 0;
}

size_t GossipMixer::Picked(size_t size) const {
  if (keep_ >= 1.0) return size;
  return std::clamp<size_t>(static_cast<size_t>(std::ceil(keep_ * static_cast<double>(size))), 1,
                            size);
}

uint64_t GossipMixer::FrameBytes(uint64_t picked, uint64_t slices) {
  return slices * kSliceHeaderBytes + picked * kCoordinateBytes;
}

uint64_t GossipMixer::Round(const GossipGraph& graph, std::vector<std::vector<float>>* params) {
  const size_t n = static_cast<size_t>(replicas_);
  // Each sender's picked coordinates (ascending) and its share 1 / (1 + d_j).
  std::vector<std::vector<uint32_t>> picked(n);
  std::vector<double> share(n);
  uint64_t bytes = 0;
  std::vector<uint32_t> order;
  for (size_t j = 0; j < n; ++j) {
    const size_t d = graph.out[j].size();
    share[j] = 1.0 / (1.0 + static_cast<double>(d));
    if (d == 0) continue;  // no out-link this round: it keeps everything
    const std::vector<float>& x = (*params)[j];
    const std::vector<float>& ref = refs_[j];
    uint64_t count = 0;
    for (const SyncSlice& s : slices_) {
      const size_t size = static_cast<size_t>(s.size), want = Picked(size);
      order.clear();
      if (want == size) {
        for (size_t i = 0; i < size; ++i) order.push_back(static_cast<uint32_t>(s.offset + i));
      } else {
        // Half the budget a window that turns with the rounds (the same on every replica), so
        // every coordinate is sent every size / window rounds however little it moves; the
        // other half the largest moves outside it, equal moves by index.
        const size_t window = (want + 1) / 2, first = (rounds_ * window) % size;
        std::vector<uint8_t> in_window(size, 0);
        for (size_t i = 0; i < window; ++i) in_window[(first + i) % size] = 1;
        std::vector<uint32_t> rest;
        for (size_t i = 0; i < size; ++i) {
          const uint32_t c = static_cast<uint32_t>(s.offset + i);
          (in_window[i] != 0 ? order : rest).push_back(c);
        }
        auto larger = [&](uint32_t a, uint32_t b) {
          const float da = std::fabs(x[a] - ref[a]), db = std::fabs(x[b] - ref[b]);
          return da != db ? da > db : a < b;
        };
        const size_t top = want - window;
        std::nth_element(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(top), rest.end(),
                         larger);
        order.insert(order.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(top));
        std::sort(order.begin(), order.end());
      }
      picked[j].insert(picked[j].end(), order.begin(), order.end());
      count += want;
    }
    bytes += FrameBytes(count, slices_.size()) * d;
  }
  // Who sends to each receiver, in sender order.
  std::vector<std::vector<size_t>> from(n);
  for (size_t j = 0; j < n; ++j) {
    for (int i : graph.out[j]) from[static_cast<size_t>(i)].push_back(j);
  }
  for (auto& f : from) std::sort(f.begin(), f.end());
  // Per coordinate: what each replica keeps of its own (v, w), then what it receives. Every
  // share is read from the round's start: `params` and the weights change only in the last
  // loop, so the order of receivers is free.
  const std::vector<std::vector<float>>& x = *params;
  std::vector<std::vector<double>> value(n), weight(n);
  for (size_t i = 0; i < n; ++i) {
    value[i].resize(parameters_);
    weight[i].resize(parameters_);
    for (size_t c = 0; c < parameters_; ++c) {
      weight[i][c] = weights_[i][c];
      value[i][c] = static_cast<double>(weights_[i][c]) * x[i][c];
    }
    for (uint32_t c : picked[i]) {  // sent coordinates: it keeps one share
      weight[i][c] *= share[i];
      value[i][c] *= share[i];
    }
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j : from[i]) {
      for (uint32_t c : picked[j]) {
        weight[i][c] += share[j] * weights_[j][c];
        value[i][c] += share[j] * static_cast<double>(weights_[j][c]) * x[j][c];
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    std::vector<float>& out = (*params)[i];
    for (size_t c = 0; c < parameters_; ++c) {
      weights_[i][c] = static_cast<float>(weight[i][c]);
      out[c] = static_cast<float>(value[i][c] / weight[i][c]);
    }
    for (uint32_t c : picked[i]) refs_[i][c] = out[c];
  }
  ++rounds_;
  return bytes;
}

void GossipMixer::Average(std::vector<std::vector<float>>* params) {
  const size_t n = static_cast<size_t>(replicas_);
  std::vector<float> mean(parameters_);
  for (size_t c = 0; c < parameters_; ++c) {
    double v = 0, w = 0;
    for (size_t r = 0; r < n; ++r) {
      v += static_cast<double>(weights_[r][c]) * (*params)[r][c];
      w += weights_[r][c];
    }
    mean[c] = static_cast<float>(v / w);
  }
  for (size_t r = 0; r < n; ++r) {
    (*params)[r] = mean;
    std::fill(weights_[r].begin(), weights_[r].end(), 1.0f);
    refs_[r] = mean;
  }
}

}  // namespace longhaul::fleet
