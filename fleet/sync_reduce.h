// One tensor reduced over the members of a sync group (the pipeline replicas' stages that hold
// the same layers): each member encodes its contribution (a gradient, or a pseudo-gradient)
// into a frame (compression/frame.h) with error feedback, every frame goes to every other
// member, and every member sums the decoded frames, its own included, in member order with the
// same weights. Every member thus computes the same bits from the same bytes: replicas that
// start identical stay identical whatever the codec drops, and what it drops is carried in the
// sender's residual into its next contribution (Stich et al.; SparseLoCo keeps one per
// replica and tensor the same way).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "compression/codec.h"
#include "compression/error_feedback.h"

namespace longhaul::fleet {

// A replica's encoder of its contributions to one sync slice: a FeedbackEncoder of a fixed
// sync codec, frames of shape {n}.
class ContributionEncoder : public compression::FeedbackEncoder {
 public:
  // A fixed sync codec (sync_options.h: "exact", "q4", "topk:0.01+q4", ...).
  static StatusOr<std::unique_ptr<ContributionEncoder>> Create(std::string_view codec);

  using FeedbackEncoder::Encode;
  // Encode of a frame of shape {values.size()}.
  Status Encode(std::span<const float> values, uint64_t seed, std::vector<uint8_t>* frame);

 private:
  using FeedbackEncoder::FeedbackEncoder;
};

// Local mode's weights of the replicas' pseudo-gradients: each live replica's share of the
// tokens the live replicas trained since the last sync, microbatches[r] / (their sum); 0 for
// a replica not live. Equal counts give every live replica exactly 1 / (live replicas).
// REQUIRES: live empty (all live) or as long as microbatches.
std::vector<float> TokenWeights(const std::vector<int>& microbatches,
                                const std::vector<bool>& live = {});

// out += weight x values, element by element: the one step of every replica-ordered sum
// (SumContributions here, a daemon's gathered sync in daemon/job/sync/sync_exchange.cc), so that
// both add the same floats in the same order and agree bit for bit.
void AddWeighted(float weight, std::span<const float> values, std::span<float> out);

// out = sum over i of weights[i] * decode(frames[i]), the terms added in index (member) order
// starting from zero. Every frame must decode (checksum, header, codec) to exactly out.size()
// values; errors name the member and the sizes. REQUIRES: frames.size() == weights.size().
Status SumContributions(const std::vector<std::span<const uint8_t>>& frames,
                        std::span<const float> weights, std::span<float> out);

}  // namespace longhaul::fleet
