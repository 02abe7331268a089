// Contributions encoded with error feedback and summed in member order (see sync_reduce.h).
#include "fleet/sync_reduce.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "compression/frame.h"
#include "fleet/sync_options.h"

namespace longhaul::fleet {

StatusOr<std::unique_ptr<ContributionEncoder>> ContributionEncoder::Create(std::string_view codec) {
  ASSIGN_OR_RETURN(const compression::CodecSpec spec, FixedSyncCodec(codec));
  ASSIGN_OR_RETURN(auto c, compression::MakeCodec(spec));
  return std::unique_ptr<ContributionEncoder>(new ContributionEncoder(std::move(c)));
}

Status ContributionEncoder::Encode(std::span<const float> values, uint64_t seed,
                                   std::vector<uint8_t>* frame) {
  const int64_t shape[1] = {static_cast<int64_t>(values.size())};
  return FeedbackEncoder::Encode(values, shape, seed, frame);
}

std::vector<float> TokenWeights(const std::vector<int>& microbatches,
                                const std::vector<bool>& live) {
  int64_t total = 0;
  for (size_t r = 0; r < microbatches.size(); ++r) {
    if (live.empty() || live[r]) total += microbatches[r];
  }
  std::vector<float> weights(microbatches.size(), 0.0f);
  for (size_t r = 0; r < microbatches.size(); ++r) {
    if ((live.empty() || live[r]) && total > 0) {
      weights[r] = static_cast<float>(microbatches[r]) / static_cast<float>(total);
    }
  }
  return weights;
}

void AddWeighted(float weight, std::span<const float> values, std::span<float> out) {
  for (size_t j = 0; j < out.size(); ++j) out[j] += weight * values[j];
}

Status SumContributions(const std::vector<std::span<const uint8_t>>& frames,
                        std::span<const float> weights, std::span<float> out) {
  if (frames.size() != weights.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync: ", frames.size(), " contributions and ", weights.size(), " weights"));
  }
  std::fill(out.begin(), out.end(), 0.0f);
  compression::FrameLimits limits;
  limits.max_elements = std::max<uint64_t>(out.size(), 1);
  std::vector<float> decoded(out.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    auto header = compression::ParseFrameHeader(frames[i], limits);
    if (!header.ok()) {
      return Annotate(header.status(), absl::StrCat("sync contribution of member ", i));
    }
    if (header->element_count != out.size()) {
      return absl::InvalidArgumentError(absl::StrCat("sync contribution of member ", i, " has ",
                                                     header->element_count, " values, the tensor ",
                                                     out.size()));
    }
    RETURN_IF_ERROR(Annotate(compression::DecodeFrameValues(*header, frames[i], decoded),
                             absl::StrCat("sync contribution of member ", i)));
    AddWeighted(weights[i], decoded, out);
  }
  return absl::OkStatus();
}

}  // namespace longhaul::fleet
