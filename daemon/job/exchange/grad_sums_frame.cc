// The grad-sums frame (grad_sums_frame.h).
#include "daemon/job/exchange/grad_sums_frame.h"

#include <xxhash.h>

#include <cstring>
#include <string>

namespace longhaul::daemon {
namespace {

constexpr uint8_t kMagic[4] = {'L', 'H', 'G', 'N'};
constexpr uint32_t kVersion = 1;

void PutU32(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint32_t GetU32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
void PutU64(std::vector<uint8_t>* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

}  // namespace

std::vector<uint8_t> EncodeGradSums(std::span<const double> sums) {
  std::vector<uint8_t> out(kMagic, kMagic + 4);
  out.reserve(GradSumsFrameBytes(sums.size()));
  PutU32(&out, kVersion);
  PutU32(&out, static_cast<uint32_t>(sums.size()));
  for (double s : sums) {
    uint64_t bits;
    std::memcpy(&bits, &s, sizeof bits);
    PutU64(&out, bits);
  }
  PutU64(&out, XXH64(out.data(), out.size(), 0));
  return out;
}

StatusOr<std::vector<double>> DecodeGradSums(std::span<const uint8_t> bytes, size_t slices) {
  const std::string where = "grad-sums frame of " + std::to_string(bytes.size()) + " bytes: ";
  if (bytes.size() < GradSumsFrameBytes(0)) {
    return absl::InvalidArgumentError(where + "shorter than its header and checksum (" +
                                      std::to_string(GradSumsFrameBytes(0)) + " bytes)");
  }
  if (std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return absl::InvalidArgumentError(where + "not one (bad magic)");
  }
  if (const uint32_t v = GetU32(bytes.data() + 4); v != kVersion) {
    return absl::InvalidArgumentError(where + "version " + std::to_string(v) +
                                      ", this site reads " + std::to_string(kVersion));
  }
  const uint32_t count = GetU32(bytes.data() + 8);
  if (count != slices) {
    return absl::InvalidArgumentError(where + std::to_string(count) + " sums, the model has " +
                                      std::to_string(slices) + " slices");
  }
  if (bytes.size() != GradSumsFrameBytes(count)) {
    return absl::InvalidArgumentError(where + std::to_string(count) + " sums take " +
                                      std::to_string(GradSumsFrameBytes(count)) + " bytes");
  }
  const size_t body = bytes.size() - 8;
  if (GetU64(bytes.data() + body) != XXH64(bytes.data(), body, 0)) {
    return absl::DataLossError(where + "checksum mismatch");
  }
  std::vector<double> sums(count);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t bits = GetU64(bytes.data() + kGradSumsHeaderBytes + 8 * i);
    std::memcpy(&sums[i], &bits, sizeof bits);
    // A diverged gradient's sum is NaN or +inf, and clips as the coordinator's decision
    // would clip it (model::ClipScale); a negative one is no sum of squares.
    if (sums[i] < 0) {
      return absl::InvalidArgumentError(where + "sum " + std::to_string(i) + " is " +
                                        std::to_string(sums[i]) +
                                        " (a sum of squares is not negative)");
    }
  }
  return sums;
}

}  // namespace longhaul::daemon
