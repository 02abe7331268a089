// Push-sum rounds with per-link compressed differences (gossip_links.h).
#include "fleet/gossip_links.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "compression/frame.h"
#include "fleet/sync_options.h"

namespace longhaul::fleet {

StatusOr<compression::CodecSpec> GossipLinkCodec(std::string_view codec) {
  ASSIGN_OR_RETURN(const compression::CodecSpec spec, FixedSyncCodec(codec));
  if (spec.topk.enabled || spec.lossless()) {
    return absl::InvalidArgumentError(
        "gossip over compressed links sends every coordinate's difference in a dense lossy codec "
        "(bf16, fp16, q8, q4), not '" +
        std::string(codec) + "'");
  }
  if (spec.value.format == compression::ValueFormat::kQ2) {
    // The sender keeps each link's rounding (its value moves by what its links' copies lag
    // behind it): 2-bit rounding made Moby-Dick runs diverge with one and two out-neighbours
    // (docs/BENCHMARKS.md, "Gossip over compressed links").
    return absl::InvalidArgumentError("gossip over compressed links: '" + std::string(codec) +
                                      "' rounds too coarsely to keep the replicas stable (q2 "
                                      "diverged on real text); use q4 or finer");
  }
  return spec;
}

StatusOr<std::unique_ptr<LinkGossipMixer>> LinkGossipMixer::Create(int replicas, size_t parameters,
                                                                   std::vector<SyncSlice> slices,
                                                                   std::string_view codec,
                                                                   bool tracking) {
  ASSIGN_OR_RETURN(const compression::CodecSpec spec, GossipLinkCodec(codec));
  if (replicas < 1) {
    return absl::InvalidArgumentError("gossip over compressed links: " + std::to_string(replicas) +
                                      " replicas (1 or more)");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<compression::Codec> c, compression::MakeCodec(spec));
  return std::unique_ptr<LinkGossipMixer>(
      new LinkGossipMixer(replicas, parameters, std::move(slices), std::move(c), tracking));
}

LinkGossipMixer::LinkGossipMixer(int replicas, size_t parameters, std::vector<SyncSlice> slices,
                                 std::unique_ptr<compression::Codec> codec, bool tracking)
    : replicas_(replicas),
      parameters_(parameters),
      slices_(std::move(slices)),
      codec_(std::move(codec)),
      tracking_(tracking),
      weights_(static_cast<size_t>(replicas), std::vector<double>(slices_.size(), 1.0)),
      copies_(static_cast<size_t>(replicas) * static_cast<size_t>(replicas)) {
  if (tracking_) {
    correction_.assign(static_cast<size_t>(replicas), std::vector<float>(parameters, 0.0f));
    anchor_.assign(static_cast<size_t>(replicas), std::vector<float>(parameters, 0.0f));
    lr_sum_.assign(static_cast<size_t>(replicas), 0.0);
  }
}

void LinkGossipMixer::Reset(std::span<const float> params) {
  for (int j = 0; j < replicas_; ++j) {
    std::fill(weights_[static_cast<size_t>(j)].begin(), weights_[static_cast<size_t>(j)].end(),
              1.0);
    for (int i = 0; i < replicas_; ++i) {
      if (i != j) copies_[Index(j, i)].assign(params.begin(), params.end());
    }
    if (tracking_) {
      std::fill(correction_[static_cast<size_t>(j)].begin(),
                correction_[static_cast<size_t>(j)].end(), 0.0f);
      anchor_[static_cast<size_t>(j)].assign(params.begin(), params.end());
      lr_sum_[static_cast<size_t>(j)] = 0;
    }
  }
  rounds_ = 0;
  reset_ = true;
}

void LinkGossipMixer::Correct(int r, std::span<float> x, double lr) {
  if (!tracking_) return;
  const std::vector<float>& c = correction_[static_cast<size_t>(r)];
  const float step = static_cast<float>(lr);
  for (size_t p = 0; p < parameters_; ++p) x[p] -= step * c[p];
  lr_sum_[static_cast<size_t>(r)] += lr;
}

StatusOr<uint64_t> LinkGossipMixer::Send(std::span<const float> values, uint64_t seed,
                                         std::span<float> out) {
  std::vector<uint8_t> frame;
  const int64_t shape[1] = {static_cast<int64_t>(values.size())};
  compression::EncodeOptions eo;
  eo.seed = seed;
  RETURN_IF_ERROR(compression::EncodeFrame(*codec_, values, shape, eo, &frame));
  // What the receiver does with the bytes: checked whole (sizes, checksum, finite values).
  ASSIGN_OR_RETURN(const compression::FrameHeader header, compression::ParseFrameHeader(frame));
  if (header.element_count != values.size()) {
    return absl::InternalError("gossip link frame: " + std::to_string(header.element_count) +
                               " values decoded of " + std::to_string(values.size()));
  }
  RETURN_IF_ERROR(compression::DecodeFrameValues(header, frame, out));
  return frame.size();
}

StatusOr<uint64_t> LinkGossipMixer::Round(const GossipGraph& graph,
                                          std::vector<std::vector<float>>* params) {
  const size_t n = static_cast<size_t>(replicas_);
  if (!reset_) {
    return absl::FailedPreconditionError("gossip round over compressed links before Reset");
  }
  if (graph.nodes() != replicas_ || params->size() != n) {
    return absl::InvalidArgumentError("gossip round: a graph of " + std::to_string(graph.nodes()) +
                                      " nodes and " + std::to_string(params->size()) +
                                      " parameter arrays for " + std::to_string(n) + " replicas");
  }
  for (size_t j = 0; j < n; ++j) {
    if ((*params)[j].size() != parameters_) {
      return absl::InvalidArgumentError("gossip round: replica " + std::to_string(j) + " has " +
                                        std::to_string((*params)[j].size()) + " parameters, not " +
                                        std::to_string(parameters_));
    }
    for (int i : graph.out[j]) {
      if (i < 0 || i >= replicas_ || static_cast<size_t>(i) == j) {
        return absl::InvalidArgumentError("gossip round: replica " + std::to_string(j) +
                                          " sends to " + std::to_string(i) + " of " +
                                          std::to_string(n) + " replicas");
      }
    }
  }
  std::vector<double> share(n);
  for (size_t j = 0; j < n; ++j) share[j] = 1.0 / (1.0 + static_cast<double>(graph.out[j].size()));
  // Tracking: each replica's drift since its last round, and its decoded frame of it.
  std::vector<std::vector<float>> drift, sent_drift;
  if (tracking_) {
    drift.assign(n, std::vector<float>(parameters_));
    sent_drift.assign(n, std::vector<float>(parameters_));
    for (size_t j = 0; j < n; ++j) {
      const double inv = lr_sum_[j] > 0 ? 1.0 / lr_sum_[j] : 0.0;
      for (size_t p = 0; p < parameters_; ++p) {
        drift[j][p] =
            static_cast<float>((static_cast<double>(anchor_[j][p]) - (*params)[j][p]) * inv);
      }
      lr_sum_[j] = 0;
    }
  }
  // Every send first, from the round's start: each link's copy moves by its decoded frame.
  uint64_t bytes = 0;
  for (size_t j = 0; j < n; ++j) {
    if (graph.out[j].empty()) continue;
    const std::vector<float>& x = (*params)[j];
    for (const SyncSlice& s : slices_) {
      const size_t at = static_cast<size_t>(s.offset), size = static_cast<size_t>(s.size);
      // Stochastic rounding (q4:sr) draws apart on every frame: the round, the sender, the
      // slice, and the receiver (the drift's frame: receiver n).
      const uint64_t base =
          ((rounds_ * n + j) * slices_.size() + static_cast<uint64_t>(s.index)) * (n + 1);
      scratch_.resize(size);
      uint64_t drift_bytes = 0;
      if (tracking_) {
        ASSIGN_OR_RETURN(drift_bytes,
                         Send(std::span<const float>(drift[j]).subspan(at, size), base + n,
                              std::span<float>(sent_drift[j]).subspan(at, size)));
      }
      for (int i : graph.out[j]) {
        std::vector<float>& copy = copies_[Index(static_cast<int>(j), i)];
        delta_.resize(size);
        for (size_t c = 0; c < size; ++c) delta_[c] = x[at + c] - copy[at + c];
        ASSIGN_OR_RETURN(const uint64_t b, Send(delta_, base + static_cast<uint64_t>(i), scratch_));
        for (size_t c = 0; c < size; ++c) copy[at + c] += scratch_[c];
        bytes += b + drift_bytes + kLinkFrameOverhead;
      }
    }
  }
  // Then every replica's mix, per slice: what it keeps, less the shares its links' copies
  // carried out, plus the shares its in-links' copies carried in, in sender order.
  std::vector<std::vector<float>> mixed(n);
  std::vector<std::vector<double>> next = weights_;
  for (size_t i = 0; i < n; ++i) {
    const std::vector<int> from = graph.In(static_cast<int>(i));
    const std::vector<int>& to = graph.out[i];
    mixed[i].resize(parameters_);
    for (size_t k = 0; k < slices_.size(); ++k) {
      const SyncSlice& s = slices_[k];
      const size_t at = static_cast<size_t>(s.offset), size = static_cast<size_t>(s.size);
      const double w = weights_[i][k];
      double weight = share[i] * w;  // share 1 without out-links: it keeps everything
      for (int j : from)
        weight += share[static_cast<size_t>(j)] * weights_[static_cast<size_t>(j)][k];
      next[i][k] = weight;
      for (size_t c = 0; c < size; ++c) {
        double value = w * (*params)[i][at + c];
        for (int q : to) value -= share[i] * w * copies_[Index(static_cast<int>(i), q)][at + c];
        for (int j : from) {
          value += share[static_cast<size_t>(j)] * weights_[static_cast<size_t>(j)][k] *
                   copies_[Index(j, static_cast<int>(i))][at + c];
        }
        mixed[i][at + c] = static_cast<float>(value / weight);
      }
      if (tracking_) {
        std::vector<float>& cs = correction_[i];
        for (size_t c = 0; c < size; ++c) {
          double z = drift[i][at + c];
          z -= static_cast<double>(to.size()) * share[i] * sent_drift[i][at + c];
          for (int j : from)
            z += share[static_cast<size_t>(j)] * sent_drift[static_cast<size_t>(j)][at + c];
          cs[at + c] = static_cast<float>(cs[at + c] + (z - drift[i][at + c]));
        }
      }
    }
  }
  weights_ = std::move(next);  // every mix formed from the round's start first
  for (size_t i = 0; i < n; ++i) {
    (*params)[i] = std::move(mixed[i]);
    if (tracking_) anchor_[i] = (*params)[i];
  }
  ++rounds_;
  return bytes;
}

Status LinkGossipMixer::Average(std::vector<std::vector<float>>* params) {
  const size_t n = static_cast<size_t>(replicas_);
  std::vector<float> mean(parameters_);
  for (size_t k = 0; k < slices_.size(); ++k) {
    const SyncSlice& s = slices_[k];
    const size_t at = static_cast<size_t>(s.offset), size = static_cast<size_t>(s.size);
    double total = 0;
    for (size_t r = 0; r < n; ++r) total += weights_[r][k];
    for (size_t c = 0; c < size; ++c) {
      double v = 0;
      for (size_t r = 0; r < n; ++r) v += weights_[r][k] * (*params)[r][at + c];
      mean[at + c] = static_cast<float>(v / total);
    }
  }
  for (size_t r = 0; r < n; ++r) {
    (*params)[r] = mean;
    std::fill(weights_[r].begin(), weights_[r].end(), 1.0);
  }
  return absl::OkStatus();
}

}  // namespace longhaul::fleet
