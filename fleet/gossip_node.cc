// One replica's side of a sparse push-sum round (gossip_node.h): picks, frames, and the round's
// end.
#include "fleet/gossip_node.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace longhaul::fleet {
namespace {

constexpr uint8_t kMagic[4] = {'L', 'H', 'G', 'S'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kDense = 1;
constexpr uint8_t kTracked = 2;

void Put32(std::vector<uint8_t>* out, uint32_t v) {
  const size_t at = out->size();
  out->resize(at + 4);
  std::memcpy(out->data() + at, &v, 4);
}

uint32_t Get32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

std::string SliceName(uint32_t slice) { return "gossip frame of slice " + std::to_string(slice); }

// A checkpoint's two per-parameter arrays (of equal size) finite, or DataLoss naming `what`
// and the first parameter that is not, with both its values.
Status CheckFinite(const char* what, const char* a_name, const std::vector<float>& a,
                   const char* b_name, const std::vector<float>& b) {
  for (size_t c = 0; c < a.size(); ++c) {
    if (!std::isfinite(a[c]) || !std::isfinite(b[c])) {
      return absl::DataLossError(std::string(what) + ": parameter " + std::to_string(c) + " has " +
                                 a_name + " " + std::to_string(a[c]) + " and " + b_name + " " +
                                 std::to_string(b[c]) + " (finite)");
    }
  }
  return absl::OkStatus();
}

}  // namespace

size_t GossipPicked(double keep, size_t size) {
  if (keep >= 1.0) return size;
  return std::clamp<size_t>(static_cast<size_t>(std::ceil(keep * static_cast<double>(size))), 1,
                            size);
}

uint64_t GossipFrameBytes(uint64_t count, uint64_t slice_size, bool tracked) {
  // Dense frames carry no indices; tracked ones a drift per coordinate.
  const uint64_t per = (count == slice_size ? 8 : 12) + (tracked ? 4 : 0);
  return kGossipHeaderBytes + count * per + kGossipChecksumBytes;
}

std::vector<uint8_t> EncodeGossipFrame(uint32_t slice, std::span<const uint32_t> picked,
                                       std::span<const float> x, std::span<const float> w,
                                       std::span<const float> z) {
  const bool dense = picked.size() == x.size(), tracked = !z.empty();
  std::vector<uint8_t> out;
  out.reserve(GossipFrameBytes(picked.size(), x.size(), tracked));
  out.insert(out.end(), kMagic, kMagic + 4);
  out.push_back(kVersion);
  out.push_back(static_cast<uint8_t>((dense ? kDense : 0) | (tracked ? kTracked : 0)));
  out.push_back(0);
  out.push_back(0);
  Put32(&out, slice);
  Put32(&out, static_cast<uint32_t>(picked.size()));
  if (!dense) {
    for (uint32_t i : picked) Put32(&out, i);
  }
  auto put_floats = [&](std::span<const float> v) {
    for (uint32_t i : picked) {
      uint32_t bits;
      std::memcpy(&bits, &v[i], 4);
      Put32(&out, bits);
    }
  };
  put_floats(x);
  put_floats(w);
  if (tracked) put_floats(z);
  const uint64_t sum = XXH64(out.data(), out.size(), 0);
  Put32(&out, static_cast<uint32_t>(sum));
  Put32(&out, static_cast<uint32_t>(sum >> 32));
  return out;
}

Status CheckGossipFrameHeader(std::span<const uint8_t> prefix, uint32_t slice, uint64_t slice_size,
                              uint64_t frame_bytes, bool tracked) {
  const std::string what = SliceName(slice);
  if (prefix.size() < kGossipHeaderBytes) {
    return absl::InvalidArgumentError(what + ": " + std::to_string(prefix.size()) +
                                      " bytes, shorter than its 16-byte header");
  }
  if (std::memcmp(prefix.data(), kMagic, 4) != 0 || prefix[4] != kVersion ||
      (prefix[5] & ~(kDense | kTracked)) != 0 || prefix[6] != 0 || prefix[7] != 0) {
    return absl::InvalidArgumentError(what +
                                      ": not a version-1 gossip frame (magic, version or "
                                      "flags)");
  }
  const uint32_t got_slice = Get32(prefix.data() + 8);
  const uint64_t count = Get32(prefix.data() + 12);
  const bool dense = (prefix[5] & kDense) != 0;
  if (((prefix[5] & kTracked) != 0) != tracked) {
    return absl::InvalidArgumentError(what + (tracked ? ": no drifts in a frame of a tracked job"
                                                      : ": drifts in a frame of an untracked job"));
  }
  if (got_slice != slice) {
    return absl::InvalidArgumentError(what + ": the frame names slice " +
                                      std::to_string(got_slice));
  }
  if (count == 0 || count > slice_size || dense != (count == slice_size)) {
    return absl::InvalidArgumentError(what + ": " + std::to_string(count) + " coordinates" +
                                      (dense ? " (dense)" : "") + " of a slice of " +
                                      std::to_string(slice_size));
  }
  if (GossipFrameBytes(count, slice_size, tracked) != frame_bytes) {
    return absl::InvalidArgumentError(what + ": " + std::to_string(frame_bytes) + " bytes for " +
                                      std::to_string(count) + " coordinates (expected " +
                                      std::to_string(GossipFrameBytes(count, slice_size, tracked)) +
                                      ")");
  }
  return absl::OkStatus();
}

StatusOr<GossipFrame> DecodeGossipFrame(std::span<const uint8_t> bytes, uint32_t slice,
                                        uint64_t slice_size, bool tracked) {
  RETURN_IF_ERROR(CheckGossipFrameHeader(bytes, slice, slice_size, bytes.size(), tracked));
  const std::string what = SliceName(slice);
  const size_t body = bytes.size() - kGossipChecksumBytes;
  const uint64_t sum = Get32(bytes.data() + body) | uint64_t{Get32(bytes.data() + body + 4)} << 32;
  if (sum != XXH64(bytes.data(), body, 0)) {
    return absl::DataLossError(what + ": checksum mismatch (corrupt)");
  }
  GossipFrame f;
  f.slice = slice;
  f.dense = (bytes[5] & kDense) != 0;
  const size_t count = Get32(bytes.data() + 12);
  const uint8_t* p = bytes.data() + kGossipHeaderBytes;
  if (!f.dense) {
    f.index.resize(count);
    for (size_t n = 0; n < count; ++n, p += 4) {
      f.index[n] = Get32(p);
      if (f.index[n] >= slice_size || (n > 0 && f.index[n] <= f.index[n - 1])) {
        return absl::InvalidArgumentError(
            what + ": index " + std::to_string(n) + " is " + std::to_string(f.index[n]) +
            " (indices ascend inside a slice of " + std::to_string(slice_size) + ")");
      }
    }
  }
  f.x.resize(count);
  f.w.resize(count);
  std::memcpy(f.x.data(), p, count * 4);
  std::memcpy(f.w.data(), p + count * 4, count * 4);
  if (tracked) {
    f.z.resize(count);
    std::memcpy(f.z.data(), p + count * 8, count * 4);
  }
  for (size_t n = 0; n < count; ++n) {
    if (tracked && !std::isfinite(f.z[n])) {
      return absl::InvalidArgumentError(what + ": coordinate " + std::to_string(f.at(n)) +
                                        " has drift " + std::to_string(f.z[n]) +
                                        " (drifts finite)");
    }
    if (!std::isfinite(f.x[n]) || !std::isfinite(f.w[n]) || !(f.w[n] > 0)) {
      return absl::InvalidArgumentError(what + ": coordinate " + std::to_string(f.at(n)) +
                                        " has value " + std::to_string(f.x[n]) + " and weight " +
                                        std::to_string(f.w[n]) +
                                        " (values finite, weights positive and finite)");
    }
  }
  return f;
}

GossipNode::GossipNode(std::vector<SyncSlice> slices, size_t parameters, double keep, bool tracking,
                       const OuterOptions& outer)
    : slices_(std::move(slices)),
      parameters_(parameters),
      keep_(std::clamp(keep, 1e-9, 1.0)),
      tracking_(tracking),
      outer_(outer),
      weights_(parameters, 1.0f),
      refs_(parameters, 0.0f) {
  if (tracking_) {
    correction_.assign(parameters, 0.0f);
    anchor_.assign(parameters, 0.0f);
    drift_.assign(parameters, 0.0f);
  }
}

void GossipNode::Reset(std::span<const float> params) {
  std::copy(params.begin(), params.end(), refs_.begin());
  std::fill(weights_.begin(), weights_.end(), 1.0f);
  if (outer_step()) outer_state_.Reset(params);
  if (tracking_) {
    std::copy(params.begin(), params.end(), anchor_.begin());
    std::fill(correction_.begin(), correction_.end(), 0.0f);
    std::fill(drift_.begin(), drift_.end(), 0.0f);
    lr_sum_ = 0;
  }
}

Status GossipNode::RestoreTracking(std::vector<float> corrections, std::vector<float> anchor,
                                   double lr_sum) {
  if (!tracking_) return absl::FailedPreconditionError("gossip state: a node that does not track");
  if (corrections.size() != parameters_ || anchor.size() != parameters_ || !std::isfinite(lr_sum) ||
      lr_sum < 0) {
    return absl::DataLossError("gossip tracking state: " + std::to_string(corrections.size()) +
                               " corrections, an anchor of " + std::to_string(anchor.size()) +
                               " and a learning-rate sum of " + std::to_string(lr_sum) + " for " +
                               std::to_string(parameters_) + " parameters");
  }
  RETURN_IF_ERROR(
      CheckFinite("gossip tracking state", "correction", corrections, "anchor", anchor));
  correction_ = std::move(corrections);
  anchor_ = std::move(anchor);
  lr_sum_ = lr_sum;
  return absl::OkStatus();
}

void GossipNode::Correct(std::span<float> x, double lr) {
  if (!tracking_) return;
  const float step = static_cast<float>(lr);
  for (size_t c = 0; c < parameters_; ++c) x[c] -= step * correction_[c];
  lr_sum_ += lr;
}

void GossipNode::BeginRound(std::span<float> x) {
  if (tracking_) {
    // No local step since the last round (two rounds in a row): no drift.
    const double inv = lr_sum_ > 0 ? 1.0 / lr_sum_ : 0.0;
    for (size_t c = 0; c < parameters_; ++c) {
      drift_[c] = static_cast<float>((static_cast<double>(anchor_[c]) - x[c]) * inv);
    }
    lr_sum_ = 0;
  }
  if (outer_step()) outer_state_.StepOwn(outer_, x, &outer_delta_);
}

Status GossipNode::RestoreOuter(std::vector<float> anchor, std::vector<float> momentum) {
  if (!outer_step()) return absl::FailedPreconditionError("gossip state: no outer step");
  if (anchor.size() != parameters_ || momentum.size() != parameters_) {
    return absl::DataLossError("gossip outer state: an anchor of " + std::to_string(anchor.size()) +
                               " and a momentum of " + std::to_string(momentum.size()) + " for " +
                               std::to_string(parameters_) + " parameters");
  }
  RETURN_IF_ERROR(CheckFinite("gossip outer state", "anchor", anchor, "momentum", momentum));
  return outer_state_.Restore(std::move(anchor), std::move(momentum));
}

Status GossipNode::Restore(std::vector<float> weights, std::vector<float> refs) {
  if (weights.size() != parameters_ || refs.size() != parameters_) {
    return absl::DataLossError("gossip state: " + std::to_string(weights.size()) + " weights and " +
                               std::to_string(refs.size()) + " references for " +
                               std::to_string(parameters_) + " parameters");
  }
  for (size_t c = 0; c < parameters_; ++c) {
    if (!(weights[c] > 0) || !std::isfinite(weights[c])) {
      return absl::DataLossError("gossip state: weight " + std::to_string(c) + " is " +
                                 std::to_string(weights[c]) + " (push-sum weights are positive)");
    }
  }
  weights_ = std::move(weights);
  refs_ = std::move(refs);
  return absl::OkStatus();
}

std::vector<uint32_t> GossipNode::Pick(size_t k, std::span<const float> x, uint64_t round) const {
  const SyncSlice& s = slices_[k];
  const size_t size = static_cast<size_t>(s.size), want = Picked(size);
  std::vector<uint32_t> order;
  order.reserve(want);
  if (want == size) {
    for (size_t i = 0; i < size; ++i) order.push_back(static_cast<uint32_t>(i));
    return order;
  }
  // Half the budget a window that turns with the rounds (the same on every replica), so every
  // coordinate is sent every size / window rounds however little it moves; the other half the
  // largest moves outside it, equal moves by index.
  const size_t window = (want + 1) / 2, first = (round * window) % size;
  std::vector<uint8_t> in_window(size, 0);
  for (size_t i = 0; i < window; ++i) in_window[(first + i) % size] = 1;
  std::vector<uint32_t> rest;
  rest.reserve(size - window);
  for (size_t i = 0; i < size; ++i) {
    (in_window[i] != 0 ? order : rest).push_back(static_cast<uint32_t>(i));
  }
  const float* xs = x.data() + s.offset;
  const float* ref = refs_.data() + s.offset;
  auto larger = [&](uint32_t a, uint32_t b) {
    const float da = std::fabs(xs[a] - ref[a]), db = std::fabs(xs[b] - ref[b]);
    return da != db ? da > db : a < b;
  };
  const size_t top = want - window;
  std::nth_element(rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(top), rest.end(),
                   larger);
  order.insert(order.end(), rest.begin(), rest.begin() + static_cast<std::ptrdiff_t>(top));
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<uint8_t> GossipNode::Frame(size_t k, std::span<const uint32_t> picked,
                                       std::span<const float> x) const {
  return Encode(k, picked, x, tracking_);
}

std::vector<uint8_t> GossipNode::DenseFrame(size_t k, std::span<const float> x) const {
  std::vector<uint32_t> all(static_cast<size_t>(slices_[k].size));
  for (size_t c = 0; c < all.size(); ++c) all[c] = static_cast<uint32_t>(c);
  return Encode(k, all, x, /*drifts=*/false);
}

std::vector<uint8_t> GossipNode::Encode(size_t k, std::span<const uint32_t> picked,
                                        std::span<const float> x, bool drifts) const {
  const SyncSlice& s = slices_[k];
  const size_t at = static_cast<size_t>(s.offset), size = static_cast<size_t>(s.size);
  return EncodeGossipFrame(
      static_cast<uint32_t>(s.index), picked, x.subspan(at, size),
      std::span<const float>(weights_).subspan(at, size),
      drifts ? std::span<const float>(drift_).subspan(at, size) : std::span<const float>());
}

void GossipNode::Apply(size_t k, std::span<const uint32_t> picked, double own_share,
                       std::span<const Received> received, std::span<float> x) {
  const SyncSlice& s = slices_[k];
  const size_t at = static_cast<size_t>(s.offset), size = static_cast<size_t>(s.size);
  float* xs = x.data() + at;
  float* ws = weights_.data() + at;
  float* zs = tracking_ ? drift_.data() + at : nullptr;
  std::vector<double> value(size), weight(size), drift(tracking_ ? size : 0);
  for (size_t c = 0; c < size; ++c) {
    weight[c] = ws[c];
    value[c] = static_cast<double>(ws[c]) * xs[c];
    if (zs != nullptr) drift[c] = zs[c];
  }
  for (uint32_t c : picked) {  // sent coordinates: it keeps one share
    weight[c] *= own_share;
    value[c] *= own_share;
    if (zs != nullptr) drift[c] *= own_share;
  }
  for (const Received& r : received) {
    const GossipFrame& f = *r.frame;
    for (size_t n = 0; n < f.count(); ++n) {
      const uint32_t c = f.at(n);
      const double sw = r.share * static_cast<double>(f.w[n]);
      weight[c] += sw;
      value[c] += sw * f.x[n];
      if (zs != nullptr) drift[c] += r.share * f.z[n];
    }
  }
  // Where nothing moved, w x / w is x again: the product of two floats is exact in a double.
  // A coordinate neither sent nor taken keeps its drift whole: its correction moves by 0.
  for (size_t c = 0; c < size; ++c) {
    ws[c] = static_cast<float>(weight[c]);
    xs[c] = static_cast<float>(value[c] / weight[c]);
  }
  for (uint32_t c : picked) refs_[at + c] = xs[c];
  if (outer_step()) outer_state_.MoveAnchorPart(at, std::span<const float>(xs, size));
  if (zs != nullptr) {
    float* cs = correction_.data() + at;
    for (size_t c = 0; c < size; ++c) {
      cs[c] = static_cast<float>(cs[c] + (drift[c] - zs[c]));
      anchor_[at + c] = xs[c];
    }
  }
}

Status GossipNode::Average(size_t k, std::span<const GossipFrame* const> replicas,
                           std::span<float> x) {
  const SyncSlice& s = slices_[k];
  const size_t at = static_cast<size_t>(s.offset), size = static_cast<size_t>(s.size);
  for (size_t r = 0; r < replicas.size(); ++r) {
    const GossipFrame* f = replicas[r];
    if (f->slice != static_cast<uint32_t>(s.index) || !f->dense || f->count() != size) {
      return absl::InvalidArgumentError(
          "gossip average of slice " + std::to_string(s.index) + ": the frame at " +
          std::to_string(r) + " carries " + std::to_string(f->count()) + " coordinates of slice " +
          std::to_string(f->slice) + (f->dense ? "" : " (not dense)") + ", not all " +
          std::to_string(size));
    }
  }
  for (size_t c = 0; c < size; ++c) {
    double v = 0, w = 0;
    for (const GossipFrame* f : replicas) {
      v += static_cast<double>(f->w[c]) * f->x[c];
      w += f->w[c];
    }
    x[at + c] = static_cast<float>(v / w);
    weights_[at + c] = 1.0f;
    refs_[at + c] = x[at + c];
  }
  if (outer_step()) outer_state_.MoveAnchorPart(at, x.subspan(at, size));
  return absl::OkStatus();
}

void GossipNode::RestartOuter(size_t k, std::span<const float> x) {
  if (!outer_step()) return;
  const SyncSlice& s = slices_[k];
  outer_state_.RestartPart(static_cast<size_t>(s.offset),
                           x.subspan(static_cast<size_t>(s.offset), static_cast<size_t>(s.size)));
}

}  // namespace longhaul::fleet
