// One replica's side of gossip over compressed links (gossip_link_node.h): its links' copies,
// its frames, and the round's end.
#include "fleet/gossip_link_node.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "compression/frame.h"
#include "fleet/sync_options.h"

namespace longhaul::fleet {
namespace {

constexpr uint8_t kMagic[4] = {'L', 'H', 'G', 'L'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kKey = 1, kTracked = 2, kWantKey = 4;
constexpr size_t kChecksumBytes = 8;
// A tracked frame's header is 8 bytes more (the drift's size).
constexpr size_t kHeaderBytes = kLinkFrameFixedBytes - kChecksumBytes;
constexpr uint8_t kStateMagic[4] = {'L', 'H', 'G', 'N'};
// A saved state's fixed part: magic, replica, replicas, slices (u32 each), parameters (u64),
// tracked (u8).
constexpr size_t kStateHeadBytes = 4 + 4 * 3 + 8 + 1;

size_t HeaderBytes(bool tracked) { return kHeaderBytes + (tracked ? 8 : 0); }

template <typename T>
void Put(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}

template <typename T>
T Get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// A key frame's codec: x itself.
const compression::CodecSpec& KeySpec() {
  static const compression::CodecSpec spec = *compression::ParseCodecSpec("fp32");
  return spec;
}

std::string Where(uint32_t slice) { return "gossip link frame of slice " + std::to_string(slice); }

// A seed for stochastic rounding, distinct per round, sender, receiver and slice.
uint64_t Seed(uint64_t round, int from, int to, uint32_t slice) {
  uint64_t h = XXH64(&round, sizeof round, static_cast<uint64_t>(from) + 1);
  const uint64_t rest[2] = {static_cast<uint64_t>(to), slice};
  return XXH64(rest, sizeof rest, h);
}

// One compression frame of `size` values at `bytes`, in `spec`, decoded into `out`.
Status DecodePart(std::span<const uint8_t> bytes, uint64_t size, const compression::CodecSpec& spec,
                  const std::string& what, std::vector<float>* out) {
  compression::FrameLimits limits;
  limits.max_elements = size;
  auto header = compression::ParseFrameHeader(bytes, limits);
  if (!header.ok()) return Annotate(header.status(), what);
  if (header->element_count != size || header->shape.size() != 1) {
    return absl::InvalidArgumentError(what + ": " + std::to_string(header->element_count) +
                                      " values, the slice has " + std::to_string(size));
  }
  if (!(header->spec == spec)) {
    return absl::InvalidArgumentError(what + ": sent in " + header->spec.ToString() +
                                      ", the job's links send " + spec.ToString());
  }
  out->resize(size);
  RETURN_IF_ERROR(Annotate(compression::DecodeFrameValues(*header, bytes, *out), what));
  for (size_t c = 0; c < size; ++c) {
    if (!std::isfinite((*out)[c])) {
      return absl::InvalidArgumentError(what + ": value " + std::to_string(c) + " is not finite");
    }
  }
  return absl::OkStatus();
}

}  // namespace

Status CheckLinkFrameHeader(std::span<const uint8_t> prefix, uint32_t slice, uint64_t size,
                            bool tracked) {
  const std::string what = Where(slice);
  if (prefix.size() < HeaderBytes(tracked)) {
    return absl::InvalidArgumentError(what + ": " + std::to_string(prefix.size()) +
                                      " bytes, shorter than its " +
                                      std::to_string(HeaderBytes(tracked)) + "-byte header");
  }
  const uint8_t flags = prefix[5];
  if (std::memcmp(prefix.data(), kMagic, 4) != 0 || prefix[4] != kVersion ||
      (flags & ~(kKey | kTracked | kWantKey)) != 0 || prefix[6] != 0 || prefix[7] != 0) {
    return absl::InvalidArgumentError(what +
                                      ": not a version-1 gossip link frame (magic, version or "
                                      "flags)");
  }
  if (((flags & kTracked) != 0) != tracked) {
    return absl::InvalidArgumentError(what + (tracked
                                                  ? ": no drift in a frame of a tracked job"
                                                  : ": a drift in a frame of an untracked job"));
  }
  const uint32_t got_slice = Get<uint32_t>(prefix.data() + 8);
  const uint64_t count = Get<uint32_t>(prefix.data() + 12);
  if (got_slice != slice || count != size) {
    return absl::InvalidArgumentError(what + ": the frame names slice " +
                                      std::to_string(got_slice) + " of " + std::to_string(count) +
                                      " coordinates, the slice has " + std::to_string(size));
  }
  const uint64_t base = Get<uint64_t>(prefix.data() + 16);
  if ((flags & kKey) != 0 && base != 0) {
    return absl::InvalidArgumentError(what + ": a key frame that names a copy to build on");
  }
  const double weight = Get<double>(prefix.data() + 24);
  if (!(weight > 0) || !(weight <= kMaxLinkWeight)) {
    return absl::InvalidArgumentError(what + ": push-sum weight " + std::to_string(weight) +
                                      " (positive, at most 1e6)");
  }
  return absl::OkStatus();
}

StatusOr<uint64_t> MaxLinkFrameBytes(const compression::CodecSpec& codec, uint64_t size,
                                     bool tracked) {
  ASSIGN_OR_RETURN(auto c, compression::MakeCodec(codec));
  ASSIGN_OR_RETURN(auto key, compression::MakeCodec(KeySpec()));
  const uint64_t part = compression::FrameHeaderSize(1);
  return HeaderBytes(tracked) + part +
         std::max(c->MaxEncodedSize(size), key->MaxEncodedSize(size)) +
         (tracked ? part + c->MaxEncodedSize(size) : 0) + kChecksumBytes;
}

StatusOr<LinkFrame> DecodeLinkFrame(std::span<const uint8_t> bytes, uint32_t slice, uint64_t size,
                                    const compression::CodecSpec& codec, bool tracked) {
  RETURN_IF_ERROR(CheckLinkFrameHeader(bytes, slice, size, tracked));
  const std::string what = Where(slice);
  const size_t head = HeaderBytes(tracked);
  const uint64_t values_bytes = Get<uint64_t>(bytes.data() + 32);
  const uint64_t drift_bytes = tracked ? Get<uint64_t>(bytes.data() + 40) : 0;
  const uint64_t room =
      bytes.size() >= head + kChecksumBytes ? bytes.size() - head - kChecksumBytes : 0;
  if (values_bytes > room || drift_bytes > room - values_bytes ||
      values_bytes + drift_bytes != room) {
    return absl::InvalidArgumentError(what + ": " + std::to_string(bytes.size()) +
                                      " bytes, its header describes " +
                                      std::to_string(values_bytes) + " of values and " +
                                      std::to_string(drift_bytes) + " of drift");
  }
  const uint64_t sum = XXH64(bytes.data(), bytes.size() - kChecksumBytes, 0);
  if (Get<uint64_t>(bytes.data() + bytes.size() - kChecksumBytes) != sum) {
    return absl::InvalidArgumentError(what + ": checksum mismatch");
  }
  LinkFrame f;
  f.slice = slice;
  const uint8_t flags = bytes[5];
  f.key = (flags & kKey) != 0;
  f.want_key = (flags & kWantKey) != 0;
  f.base = Get<uint64_t>(bytes.data() + 16);
  f.weight = Get<double>(bytes.data() + 24);
  RETURN_IF_ERROR(DecodePart(bytes.subspan(head, values_bytes), size, f.key ? KeySpec() : codec,
                             what + (f.key ? ", key values" : ", difference"), &f.values));
  if (tracked) {
    RETURN_IF_ERROR(DecodePart(bytes.subspan(head + values_bytes, drift_bytes), size, codec,
                               what + ", drift", &f.drift));
  }
  return f;
}

StatusOr<std::unique_ptr<LinkGossipNode>> LinkGossipNode::Create(
    int replica, int replicas, std::vector<SyncSlice> slices, size_t parameters,
    std::string_view codec, bool tracking, const OuterOptions& outer) {
  ASSIGN_OR_RETURN(const compression::CodecSpec spec, GossipLinkCodec(codec));
  RETURN_IF_ERROR(ValidateOuterOptions(outer));
  if (replicas < 1 || replica < 0 || replica >= replicas) {
    return absl::InvalidArgumentError("gossip over compressed links: replica " +
                                      std::to_string(replica) + " of " + std::to_string(replicas));
  }
  for (const SyncSlice& s : slices) {
    if (s.offset < 0 || s.size <= 0 || static_cast<size_t>(s.offset + s.size) > parameters ||
        s.size > int64_t{UINT32_MAX}) {
      return absl::InvalidArgumentError("gossip over compressed links: slice " +
                                        std::to_string(s.index) + " at " +
                                        std::to_string(s.offset) + " of " + std::to_string(s.size) +
                                        " in " + std::to_string(parameters) + " parameters");
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<compression::Codec> c, compression::MakeCodec(spec));
  ASSIGN_OR_RETURN(std::unique_ptr<compression::Codec> key, compression::MakeCodec(KeySpec()));
  return std::unique_ptr<LinkGossipNode>(new LinkGossipNode(replica, replicas, std::move(slices),
                                                            parameters, std::move(c),
                                                            std::move(key), tracking, outer));
}

LinkGossipNode::LinkGossipNode(int replica, int replicas, std::vector<SyncSlice> slices,
                               size_t parameters, std::unique_ptr<compression::Codec> codec,
                               std::unique_ptr<compression::Codec> key_codec, bool tracking,
                               const OuterOptions& outer)
    : replica_(replica),
      replicas_(replicas),
      slices_(std::move(slices)),
      parameters_(parameters),
      codec_(std::move(codec)),
      key_codec_(std::move(key_codec)),
      tracking_(tracking),
      weights_(slices_.size(), 1.0),
      outer_(outer) {
  const Copy none = std::make_shared<std::vector<float>>();
  out_.assign(static_cast<size_t>(replicas), none);
  in_.assign(static_cast<size_t>(replicas), none);
  const size_t flags = static_cast<size_t>(replicas) * slices_.size();
  out_hash_.assign(flags, 0);
  in_hash_.assign(flags, 0);
  key_owed_.assign(flags, 0);
  key_asked_.assign(flags, 0);
  key_wanted_.assign(flags, 0);
  since_key_.assign(flags, UINT32_MAX);
  uncounted_.assign(slices_.size(), 0);
  if (tracking_) {
    correction_.assign(parameters, 0.0f);
    anchor_.assign(parameters, 0.0f);
    drift_.assign(parameters, 0.0f);
    sent_drift_.assign(parameters, 0.0f);
    drift_bytes_.resize(slices_.size());
    drift_round_.assign(slices_.size(), UINT64_MAX);
  }
}

uint64_t LinkGossipNode::Hash(const std::vector<float>& copy, size_t k) const {
  const SyncSlice& s = slices_[k];
  return XXH64(copy.data() + s.offset, static_cast<size_t>(s.size) * sizeof(float), 0);
}

std::vector<float>& LinkGossipNode::Own(Copy& copy) {
  if (copy.use_count() > 1) copy = std::make_shared<std::vector<float>>(*copy);
  return *copy;
}

size_t LinkGossipNode::CopyBytes() const {
  std::set<const std::vector<float>*> arrays;
  for (const auto* links : {&out_, &in_}) {
    for (const Copy& c : *links) arrays.insert(c.get());
  }
  size_t bytes = 0;
  for (const auto* a : arrays) bytes += a->size() * sizeof(float);
  return bytes;
}

void LinkGossipNode::Rehash() {
  // Each array hashed once, however many links share it.
  std::map<const std::vector<float>*, std::vector<uint64_t>> hashes;
  auto of = [&](const Copy& c) -> const std::vector<uint64_t>& {
    auto [it, fresh] = hashes.try_emplace(c.get());
    if (fresh) {
      for (size_t k = 0; k < slices_.size(); ++k) it->second.push_back(Hash(*c, k));
    }
    return it->second;
  };
  for (int q = 0; q < replicas_; ++q) {
    if (q == replica_) continue;
    const std::vector<uint64_t>& out = of(out_[static_cast<size_t>(q)]);
    const std::vector<uint64_t>& in = of(in_[static_cast<size_t>(q)]);
    for (size_t k = 0; k < slices_.size(); ++k) {
      out_hash_[Flag(q, k)] = out[k];
      in_hash_[Flag(q, k)] = in[k];
    }
  }
}

void LinkGossipNode::Reset(std::span<const float> params) {
  std::fill(weights_.begin(), weights_.end(), 1.0);
  // Every link's copy the one array of `params` until the link carries a frame.
  const Copy start = std::make_shared<std::vector<float>>(params.begin(), params.end());
  for (int q = 0; q < replicas_; ++q) {
    if (q == replica_) continue;
    out_[static_cast<size_t>(q)] = start;
    in_[static_cast<size_t>(q)] = start;
  }
  Rehash();
  std::fill(key_owed_.begin(), key_owed_.end(), 0);
  std::fill(key_asked_.begin(), key_asked_.end(), 0);
  std::fill(key_wanted_.begin(), key_wanted_.end(), 0);
  std::fill(since_key_.begin(), since_key_.end(), UINT32_MAX);
  if (tracking_) {
    std::fill(correction_.begin(), correction_.end(), 0.0f);
    anchor_.assign(params.begin(), params.end());
    lr_sum_ = 0;
    std::fill(drift_round_.begin(), drift_round_.end(), UINT64_MAX);
  }
  if (outer_step()) outer_state_.Reset(params);
}

void LinkGossipNode::Averaged(std::span<const float> x) {
  std::fill(weights_.begin(), weights_.end(), 1.0);
  if (outer_step()) outer_state_.MoveAnchorPart(0, x.first(parameters_));
}

void LinkGossipNode::ResyncAll() {
  for (int q = 0; q < replicas_; ++q) ResyncWith(q);
}

void LinkGossipNode::ResyncWith(int q) {
  if (q < 0 || q >= replicas_ || q == replica_) return;
  for (size_t k = 0; k < slices_.size(); ++k) key_owed_[Flag(q, k)] = key_wanted_[Flag(q, k)] = 1;
}

void LinkGossipNode::ZeroCorrections() { std::fill(correction_.begin(), correction_.end(), 0.0f); }

std::vector<uint8_t> LinkGossipNode::Save() const {
  std::vector<uint8_t> out;
  out.insert(out.end(), kStateMagic, kStateMagic + 4);
  Put<uint32_t>(&out, static_cast<uint32_t>(replica_));
  Put<uint32_t>(&out, static_cast<uint32_t>(replicas_));
  Put<uint32_t>(&out, static_cast<uint32_t>(slices_.size()));
  Put<uint64_t>(&out, parameters_);
  Put<uint8_t>(&out, StateFlags());
  for (double w : weights_) Put<double>(&out, w);
  for (size_t f = 0; f < key_owed_.size(); ++f) {
    Put<uint8_t>(&out,
                 static_cast<uint8_t>(key_owed_[f] | (key_wanted_[f] << 1) | (key_asked_[f] << 2)));
  }
  auto floats = [&](const std::vector<float>& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(float));
  };
  for (int q = 0; q < replicas_; ++q) {
    if (q == replica_) continue;
    floats(*out_[static_cast<size_t>(q)]);
    floats(*in_[static_cast<size_t>(q)]);
  }
  if (tracking_) {
    floats(correction_);
    floats(anchor_);
    Put<double>(&out, lr_sum_);
  }
  if (outer_step()) {
    floats(outer_state_.anchor());
    floats(outer_state_.momentum());
  }
  return out;
}

size_t LinkGossipNode::StateBytes() const {
  const size_t n = parameters_, others = static_cast<size_t>(replicas_ - 1);
  return kStateHeadBytes + weights_.size() * 8 + key_owed_.size() + 2 * others * n * sizeof(float) +
         (tracking_ ? 2 * n * sizeof(float) + 8 : 0) + (outer_step() ? 2 * n * sizeof(float) : 0);
}

Status LinkGossipNode::Restore(std::span<const uint8_t> state) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError("gossip link state of replica " + std::to_string(replica_) + ": " +
                               why);
  };
  const size_t head = kStateHeadBytes;
  const size_t n = parameters_;
  const size_t want = StateBytes();
  if (state.size() < head || std::memcmp(state.data(), kStateMagic, 4) != 0) {
    return bad("not a link state (magic)");
  }
  const uint32_t replica = Get<uint32_t>(state.data() + 4);
  const uint32_t replicas = Get<uint32_t>(state.data() + 8);
  const uint32_t slices = Get<uint32_t>(state.data() + 12);
  const uint64_t parameters = Get<uint64_t>(state.data() + 16);
  const uint8_t tracked = state[24];
  if (replica != static_cast<uint32_t>(replica_) || replicas != static_cast<uint32_t>(replicas_) ||
      slices != slices_.size() || parameters != n || tracked != StateFlags() ||
      state.size() != want) {
    return bad("replica " + std::to_string(replica) + " of " + std::to_string(replicas) + ", " +
               std::to_string(slices) + " slices of " + std::to_string(parameters) +
               " parameters, flags " + std::to_string(tracked) + " (1 tracked, 2 outer step), " +
               std::to_string(state.size()) + " bytes; this node is replica " +
               std::to_string(replica_) + " of " + std::to_string(replicas_) + ", " +
               std::to_string(slices_.size()) + " slices of " + std::to_string(n) +
               " parameters, flags " + std::to_string(StateFlags()) + " (" + std::to_string(want) +
               " bytes)");
  }
  size_t at = head;
  std::vector<double> weights(weights_.size());
  for (double& w : weights) {
    w = Get<double>(state.data() + at);
    at += 8;
    if (!(w > 0) || !(w <= kMaxLinkWeight)) {
      return bad("a push-sum weight of " + std::to_string(w));
    }
  }
  std::vector<uint8_t> owed(key_owed_.size()), wanted(key_owed_.size()), asked(key_owed_.size());
  for (size_t f = 0; f < owed.size(); ++f) {
    const uint8_t b = state[at++];
    if (b > 7) return bad("key flags " + std::to_string(b));
    owed[f] = b & 1;
    wanted[f] = (b >> 1) & 1;
    asked[f] = (b >> 2) & 1;
  }
  auto floats = [&](std::vector<float>* v, const char* what) -> Status {
    v->resize(n);
    if (n > 0) std::memcpy(v->data(), state.data() + at, n * sizeof(float));
    at += n * sizeof(float);
    for (size_t c = 0; c < n; ++c) {
      if (!std::isfinite((*v)[c])) {
        return bad(std::string(what) + ": parameter " + std::to_string(c) + " is not finite");
      }
    }
    return absl::OkStatus();
  };
  // The copies, each array that holds the same bits as one read before shared with it (so a
  // restored node holds what the saved one did, not 2 (N - 1) arrays).
  std::vector<Copy> out(static_cast<size_t>(replicas_)), in(static_cast<size_t>(replicas_));
  std::vector<std::pair<uint64_t, Copy>> arrays;  // by the XXH64 of their bits
  std::vector<float> read;
  auto copy = [&](Copy* c, const char* what) -> Status {
    RETURN_IF_ERROR(floats(&read, what));
    const uint64_t h = XXH64(read.data(), read.size() * sizeof(float), 0);
    for (const auto& [hash, a] : arrays) {
      if (hash == h && std::memcmp(a->data(), read.data(), read.size() * sizeof(float)) == 0) {
        *c = a;
        return absl::OkStatus();
      }
    }
    *c = std::make_shared<std::vector<float>>(read);
    arrays.emplace_back(h, *c);
    return absl::OkStatus();
  };
  for (int q = 0; q < replicas_; ++q) {
    if (q == replica_) {
      out[static_cast<size_t>(q)] = in[static_cast<size_t>(q)] = out_[static_cast<size_t>(q)];
      continue;
    }
    RETURN_IF_ERROR(copy(&out[static_cast<size_t>(q)], "an out-link's copy"));
    RETURN_IF_ERROR(copy(&in[static_cast<size_t>(q)], "an in-link's copy"));
  }
  std::vector<float> correction, anchor;
  double lr_sum = 0;
  if (tracking_) {
    RETURN_IF_ERROR(floats(&correction, "a correction"));
    RETURN_IF_ERROR(floats(&anchor, "the drift's anchor"));
    lr_sum = Get<double>(state.data() + at);
    at += 8;
    if (!(lr_sum >= 0) || !std::isfinite(lr_sum)) {
      return bad("a learning-rate sum of " + std::to_string(lr_sum));
    }
  }
  std::vector<float> outer_anchor, outer_momentum;
  if (outer_step()) {
    RETURN_IF_ERROR(floats(&outer_anchor, "the outer step's anchor"));
    RETURN_IF_ERROR(floats(&outer_momentum, "the outer step's momentum"));
  }
  weights_ = std::move(weights);
  key_owed_ = std::move(owed);
  key_wanted_ = std::move(wanted);
  key_asked_ = std::move(asked);
  std::fill(since_key_.begin(), since_key_.end(), UINT32_MAX);
  out_ = std::move(out);
  in_ = std::move(in);
  Rehash();
  if (tracking_) {
    correction_ = std::move(correction);
    anchor_ = std::move(anchor);
    lr_sum_ = lr_sum;
    std::fill(drift_round_.begin(), drift_round_.end(), UINT64_MAX);
  }
  if (outer_step()) {
    RETURN_IF_ERROR(outer_state_.Restore(std::move(outer_anchor), std::move(outer_momentum)));
  }
  return absl::OkStatus();
}

void LinkGossipNode::Correct(std::span<float> x, double lr) {
  if (!tracking_) return;
  const float step = static_cast<float>(lr);
  for (size_t p = 0; p < parameters_; ++p) x[p] -= step * correction_[p];
  lr_sum_ += lr;
}

void LinkGossipNode::BeginRound(std::span<float> x) {
  if (tracking_) {
    const double inv = lr_sum_ > 0 ? 1.0 / lr_sum_ : 0.0;
    for (size_t p = 0; p < parameters_; ++p) {
      drift_[p] = static_cast<float>((static_cast<double>(anchor_[p]) - x[p]) * inv);
    }
    lr_sum_ = 0;
  }
  if (outer_step()) outer_state_.StepOwn(outer_, x, &outer_delta_);
}

Status LinkGossipNode::Encode(const compression::Codec& codec, std::span<const float> values,
                              uint64_t seed, std::vector<uint8_t>* out,
                              std::span<float> decoded) const {
  std::vector<uint8_t> frame;
  const int64_t shape[1] = {static_cast<int64_t>(values.size())};
  compression::EncodeOptions eo;
  eo.seed = seed;
  RETURN_IF_ERROR(compression::EncodeFrame(codec, values, shape, eo, &frame));
  // What the receiver does with the bytes (DecodeLinkFrame's part): so both ends hold the same.
  ASSIGN_OR_RETURN(const compression::FrameHeader header, compression::ParseFrameHeader(frame));
  RETURN_IF_ERROR(compression::DecodeFrameValues(header, frame, decoded));
  *out = std::move(frame);
  return absl::OkStatus();
}

StatusOr<std::vector<uint8_t>> LinkGossipNode::Frame(size_t k, int to, uint64_t round,
                                                     std::span<const float> x) {
  if (k >= slices_.size() || to < 0 || to >= replicas_ || to == replica_ ||
      x.size() != parameters_) {
    return absl::InvalidArgumentError(
        "gossip link frame: slice " + std::to_string(k) + " of " + std::to_string(slices_.size()) +
        " from replica " + std::to_string(replica_) + " to " + std::to_string(to) + " of " +
        std::to_string(replicas_) + ", " + std::to_string(x.size()) + " parameters of " +
        std::to_string(parameters_));
  }
  const SyncSlice& s = slices_[k];
  const size_t at = static_cast<size_t>(s.offset), size = static_cast<size_t>(s.size);
  const uint32_t index = static_cast<uint32_t>(s.index);
  if (tracking_ && drift_round_[k] != round) {
    // The drift goes once a round, the same bytes on every out-link.
    drift_bytes_[k].clear();
    RETURN_IF_ERROR(Encode(*codec_, std::span<const float>(drift_).subspan(at, size),
                           Seed(round, replica_, replicas_, index), &drift_bytes_[k],
                           std::span<float>(sent_drift_).subspan(at, size)));
    drift_round_[k] = round;
  }
  const size_t f = Flag(to, k);
  const bool key = key_owed_[f] != 0 || (key_asked_[f] != 0 && since_key_[f] >= kKeyRequestFrames);
  std::vector<float>& copy = Own(out_[static_cast<size_t>(to)]);
  scratch_.resize(size);
  const std::span<const float> xs = x.subspan(at, size);
  std::vector<uint8_t> values;
  if (key) {
    RETURN_IF_ERROR(Encode(*key_codec_, xs, 0, &values, scratch_));
    std::copy(scratch_.begin(), scratch_.end(), copy.begin() + static_cast<ptrdiff_t>(at));
    key_owed_[f] = key_asked_[f] = 0;
    since_key_[f] = 0;
  } else {
    std::vector<float> delta(size);
    for (size_t c = 0; c < size; ++c) delta[c] = xs[c] - copy[at + c];
    RETURN_IF_ERROR(Encode(*codec_, delta, Seed(round, replica_, to, index), &values, scratch_));
    for (size_t c = 0; c < size; ++c) copy[at + c] += scratch_[c];
    if (since_key_[f] < UINT32_MAX) ++since_key_[f];
  }
  const uint64_t base = key ? 0 : out_hash_[f];
  out_hash_[f] = Hash(copy, k);
  std::vector<uint8_t> out;
  out.reserve(HeaderBytes(tracking_) + values.size() + (tracking_ ? drift_bytes_[k].size() : 0) +
              kChecksumBytes);
  out.insert(out.end(), kMagic, kMagic + 4);
  Put<uint8_t>(&out, kVersion);
  Put<uint8_t>(&out, static_cast<uint8_t>((key ? kKey : 0) | (tracking_ ? kTracked : 0) |
                                          (key_wanted_[f] ? kWantKey : 0)));
  Put<uint16_t>(&out, 0);
  Put<uint32_t>(&out, index);
  Put<uint32_t>(&out, static_cast<uint32_t>(size));
  Put<uint64_t>(&out, base);
  Put<double>(&out, weights_[k]);
  Put<uint64_t>(&out, values.size());
  if (tracking_) Put<uint64_t>(&out, drift_bytes_[k].size());
  out.insert(out.end(), values.begin(), values.end());
  if (tracking_) out.insert(out.end(), drift_bytes_[k].begin(), drift_bytes_[k].end());
  Put<uint64_t>(&out, XXH64(out.data(), out.size(), 0));
  return out;
}

void LinkGossipNode::Apply(size_t k, std::span<const int> sent, std::span<const int> unsent,
                           std::span<const Received> received, std::span<float> x) {
  const SyncSlice& s = slices_[k];
  const size_t at = static_cast<size_t>(s.offset), size = static_cast<size_t>(s.size);
  for (int q : unsent) key_owed_[Flag(q, k)] = 1;  // its copy moved, the receiver's did not
  // Key frames that went: this round's frame on each link that went (every out-neighbour's was
  // built) is a key frame when none has followed it.
  for (int q : sent) key_frames_ += since_key_[Flag(q, k)] == 0 && !uncounted_[k] ? 1 : 0;
  // The in-links' copies move by what came; a frame whose copy differs is left out whole.
  std::vector<const Received*> usable;
  for (const Received& r : received) {
    const size_t f = Flag(r.from, k);
    // A request in a frame built before this node's key frame on the link arrived (the last
    // frame on it was that key frame) asks for what it has: not counted.
    if (r.frame->want_key && since_key_[f] != 0) key_asked_[f] = 1;
    // The copy as it is (maybe shared), written only once the frame is taken.
    const std::vector<float>& seen = *in_[static_cast<size_t>(r.from)];
    if (r.frame->key) {
      std::vector<float>& copy = Own(in_[static_cast<size_t>(r.from)]);
      std::copy(r.frame->values.begin(), r.frame->values.end(),
                copy.begin() + static_cast<ptrdiff_t>(at));
      key_wanted_[f] = 0;
    } else {
      // A difference on another copy than this end's, or one that takes the copy past fp32's
      // range (no honest sender's: its own copy moved by the same sum), is left out whole.
      bool fits = r.frame->base == in_hash_[f];
      for (size_t c = 0; fits && c < size; ++c) {
        fits = std::isfinite(seen[at + c] + r.frame->values[c]);
      }
      if (!fits) {
        key_wanted_[f] = 1;
        stale_ += uncounted_[k] ? 0 : 1;
        continue;
      }
      std::vector<float>& copy = Own(in_[static_cast<size_t>(r.from)]);
      for (size_t c = 0; c < size; ++c) copy[at + c] += r.frame->values[c];
    }
    in_hash_[f] = Hash(*in_[static_cast<size_t>(r.from)], k);
    usable.push_back(&r);
  }
  const double share = 1.0 / (1.0 + static_cast<double>(sent.size() + unsent.size()));
  const double w = weights_[k];
  double weight = share * w * (1.0 + static_cast<double>(unsent.size()));
  for (const Received* r : usable) weight += r->share * r->frame->weight;
  for (size_t c = 0; c < size; ++c) {
    double value = w * x[at + c];
    for (int q : sent) value -= share * w * (*out_[static_cast<size_t>(q)])[at + c];
    for (const Received* r : usable) {
      value += r->share * r->frame->weight * (*in_[static_cast<size_t>(r->from)])[at + c];
    }
    x[at + c] = static_cast<float>(value / weight);
  }
  weights_[k] = weight;
  if (tracking_) {
    for (size_t c = 0; c < size; ++c) {
      double z = drift_[at + c];
      if (!sent.empty()) z -= static_cast<double>(sent.size()) * share * sent_drift_[at + c];
      // Every frame's drift that came, a skipped one's too: a drift is sent whole (no copy),
      // and its sender has taken its share off already, so the corrections' sum stays 0.
      for (const Received& r : received) z += r.share * r.frame->drift[c];
      correction_[at + c] = static_cast<float>(correction_[at + c] + (z - drift_[at + c]));
      anchor_[at + c] = x[at + c];
    }
  }
  if (outer_step()) outer_state_.MoveAnchorPart(at, x.subspan(at, size));
}

void AverageLinkSlice(std::span<const double> w, std::span<const std::span<const float>> x,
                      std::span<float> out) {
  double total = 0;
  for (double v : w) total += static_cast<double>(static_cast<float>(v));
  for (size_t c = 0; c < out.size(); ++c) {
    double v = 0;
    for (size_t r = 0; r < w.size(); ++r) {
      v += static_cast<double>(static_cast<float>(w[r])) * x[r][c];
    }
    out[c] = static_cast<float>(v / total);
  }
}

void LinkGossipNode::RestartOuter(size_t k, std::span<const float> x) {
  if (!outer_step()) return;
  const SyncSlice& s = slices_[k];
  outer_state_.RestartPart(static_cast<size_t>(s.offset),
                           x.subspan(static_cast<size_t>(s.offset), static_cast<size_t>(s.size)));
}

}  // namespace longhaul::fleet
