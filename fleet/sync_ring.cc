// A ring reduction of one sync slice, one member's side and all members in one process (see
// sync_ring.h).
#include "fleet/sync_ring.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "compression/frame.h"

namespace longhaul::fleet {
namespace {

int Mod(int a, int m) { return ((a % m) + m) % m; }

}  // namespace

RingChunk RingChunkOf(int64_t n, int members, int chunk) {
  return {n * chunk / members, n * (chunk + 1) / members};
}

int RingHops(int members) { return 2 * (members - 1); }

int RingSendChunk(int members, int position, int hop) {
  // Reduce-scatter: the partial sum of chunk p - h; all-gather: the owned chunk p + 1 first,
  // then each one received in the hop before.
  return hop < members - 1 ? Mod(position - hop, members)
                           : Mod(position + 1 - (hop - (members - 1)), members);
}

int RingReceiveChunk(int members, int position, int hop) {
  return RingSendChunk(members, Mod(position - 1, members), hop);
}

RingMember::RingMember(int members, int position, std::span<const float> values, float weight,
                       compression::FeedbackEncoder* encoder, uint64_t seed, std::span<float> out)
    : members_(members),
      position_(position),
      values_(values),
      weight_(weight),
      encoder_(encoder),
      seed_(seed),
      out_(out) {}

RingChunk RingMember::ReceiveChunk(int hop) const {
  return RingChunkOf(static_cast<int64_t>(values_.size()), members_,
                     RingReceiveChunk(members_, position_, hop));
}

Status RingMember::EncodeChunk(int chunk, std::span<const float> partial,
                               std::vector<uint8_t>* frame) {
  const RingChunk c = RingChunkOf(static_cast<int64_t>(values_.size()), members_, chunk);
  std::vector<float> sum(static_cast<size_t>(c.size()));
  for (size_t j = 0; j < sum.size(); ++j) {
    sum[j] =
        (partial.empty() ? 0.0f : partial[j]) + weight_ * values_[static_cast<size_t>(c.begin) + j];
  }
  // Each chunk its own rounding stream.
  const uint64_t seed = seed_ ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(chunk + 1));
  return encoder_->EncodePart(sum, static_cast<size_t>(c.begin), values_.size(), seed, frame);
}

Status RingMember::Decode(int hop, std::span<const uint8_t> frame, std::span<float> into) const {
  compression::FrameLimits limits;
  limits.max_elements = std::max<uint64_t>(into.size(), 1);
  auto header = compression::ParseFrameHeader(frame, limits);
  if (!header.ok() || header->element_count != into.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring hop ", hop, " of ", RingHops(members_), " (member ", position_, " of ", members_,
        "): ",
        header.ok() ? absl::StrCat(header->element_count, " values, the chunk has ", into.size())
                    : std::string(header.status().message())));
  }
  return Annotate(compression::DecodeFrameValues(*header, frame, into),
                  absl::StrCat("ring hop ", hop, " (member ", position_, ")"));
}

Status RingMember::Begin(std::vector<uint8_t>* frame) {
  frame->clear();
  next_hop_ = 0;
  if (members_ == 1) {  // the whole slice is its one chunk, owned here
    RETURN_IF_ERROR(EncodeChunk(0, {}, frame));
    RETURN_IF_ERROR(Decode(-1, *frame, out_));
    frame->clear();
    return absl::OkStatus();
  }
  return EncodeChunk(position_, {}, frame);
}

Status RingMember::Take(int hop, std::span<const uint8_t> frame, std::vector<uint8_t>* next) {
  next->clear();
  if (hop != next_hop_ || done()) {
    return absl::InvalidArgumentError(absl::StrCat("ring: the frame of hop ", hop, ", member ",
                                                   position_, " waits for hop ", next_hop_, " of ",
                                                   RingHops(members_)));
  }
  const int chunk = RingReceiveChunk(members_, position_, hop);
  const RingChunk c = ReceiveChunk(hop);
  const std::span<float> into =
      out_.subspan(static_cast<size_t>(c.begin), static_cast<size_t>(c.size()));
  ++next_hop_;
  if (hop < members_ - 1) {
    std::vector<float> partial(static_cast<size_t>(c.size()));
    RETURN_IF_ERROR(Decode(hop, frame, partial));
    RETURN_IF_ERROR(EncodeChunk(chunk, partial, next));
    // The last reduce-scatter hop ends at the chunk's owner: its frame is the sum everyone
    // applies, this member first.
    if (hop == members_ - 2) RETURN_IF_ERROR(Decode(hop, *next, into));
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(Decode(hop, frame, into));
  if (!done()) next->assign(frame.begin(), frame.end());  // on around the ring
  return absl::OkStatus();
}

Status RingReduce(const std::vector<std::span<const float>>& values, std::span<const float> weights,
                  const std::vector<compression::FeedbackEncoder*>& encoders,
                  std::span<const uint64_t> seeds, std::span<float> out, uint64_t* wire_bytes) {
  const size_t L = values.size();
  if (L == 0 || weights.size() != L || encoders.size() != L || seeds.size() != L) {
    return absl::InvalidArgumentError(absl::StrCat("ring: ", L, " contributions, ", weights.size(),
                                                   " weights, ", encoders.size(), " encoders, ",
                                                   seeds.size(), " seeds"));
  }
  const int members = static_cast<int>(L);
  std::vector<std::vector<float>> outs(L, std::vector<float>(out.size()));
  std::vector<RingMember> ring;
  std::vector<std::vector<uint8_t>> sending(L), next(L);
  for (size_t p = 0; p < L; ++p) {
    if (values[p].size() != out.size()) {
      return absl::InvalidArgumentError(absl::StrCat("ring: member ", p, " has ", values[p].size(),
                                                     " values, the slice ", out.size()));
    }
    ring.emplace_back(members, static_cast<int>(p), values[p], weights[p], encoders[p], seeds[p],
                      std::span<float>(outs[p]));
    RETURN_IF_ERROR(ring[p].Begin(&sending[p]));
  }
  for (int hop = 0; hop < RingHops(members); ++hop) {
    for (size_t p = 0; p < L; ++p) *wire_bytes += sending[p].size();
    for (size_t p = 0; p < L; ++p) {
      RETURN_IF_ERROR(ring[p].Take(hop, sending[(p + L - 1) % L], &next[p]));
    }
    sending.swap(next);
  }
  std::copy(outs[0].begin(), outs[0].end(), out.begin());
  for (size_t p = 1; p < L; ++p) {
    if (outs[p] != outs[0])
      return absl::InternalError(absl::StrCat("ring: member ", p, " differs"));
  }
  return absl::OkStatus();
}

}  // namespace longhaul::fleet
