// Sampled-threshold top-k selection (see topk.h).
#include "compression/topk.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <numeric>
#include <random>

#include "compression/kernels.h"
#include "compression/kernels_internal.h"
#include "compression/strings.h"

namespace longhaul::compression {
namespace {

using kernels::internal::FloatBits;
using kernels::internal::kAbsMask;
using kernels::internal::kExpMask;

constexpr uint64_t kSmallTensor = uint64_t{1} << 15;  // select among all values directly
constexpr uint64_t kSampleSize = uint64_t{1} << 16;

uint32_t Mag(float f) { return FloatBits(f) & kAbsMask; }

Status NonFinite(std::span<const float> x, uint64_t index) {
  return absl::InvalidArgumentError(Cat("topk: value ", x[index], " at index ", index,
                                        " is not finite; NaN and Inf are rejected"));
}

// First non-finite value among the candidate indices, or OK. Every non-finite value of x is a
// candidate when the threshold is finite, so this finds the first one in x.
Status CheckCandidates(std::span<const float> x, std::span<const uint32_t> candidates) {
  for (uint32_t i : candidates) {
    if (Mag(x[i]) >= kExpMask) return NonFinite(x, i);
  }
  return absl::OkStatus();
}

// Keeps exactly k of the ascending candidate indices: the largest magnitudes, ties to the
// lower index, preserving ascending order.
void KeepLargest(std::span<const float> x, uint64_t k, std::vector<uint32_t>* candidates) {
  if (candidates->size() <= k) return;
  if (k == 0) {
    candidates->clear();
    return;
  }
  std::vector<uint32_t> mags(candidates->size());
  for (size_t i = 0; i < mags.size(); ++i) mags[i] = Mag(x[(*candidates)[i]]);
  auto kth = mags.begin() + static_cast<std::ptrdiff_t>(k - 1);
  std::nth_element(mags.begin(), kth, mags.end(), std::greater<>());
  const uint32_t threshold = *kth;
  uint64_t above = 0;
  for (uint32_t m : mags) above += m > threshold;
  uint64_t ties = k - above;
  size_t kept = 0;
  for (uint32_t i : *candidates) {
    const uint32_t m = Mag(x[i]);
    if (m > threshold || (m == threshold && ties > 0)) {
      if (m == threshold) --ties;
      (*candidates)[kept++] = i;
    }
  }
  candidates->resize(kept);
}

// The rank-th largest magnitude (1-based) in a fixed-seed random sample of kSampleSize values.
uint32_t SampleThreshold(std::span<const float> x, uint64_t rank) {
  std::mt19937_64 rng(0x5eed ^ x.size());
  std::vector<uint32_t> sample(kSampleSize);
  for (auto& s : sample) {
    const uint64_t i =
        static_cast<uint64_t>((static_cast<unsigned __int128>(rng()) * x.size()) >> 64);
    s = Mag(x[i]);
  }
  auto nth = sample.begin() + static_cast<std::ptrdiff_t>(rank - 1);
  std::nth_element(sample.begin(), nth, sample.end(), std::greater<>());
  return *nth;
}

// All indices whose magnitude bits are >= threshold, ascending.
std::vector<uint32_t> SelectAtLeast(std::span<const float> x, uint32_t threshold) {
  auto buffer = std::make_unique_for_overwrite<uint32_t[]>(x.size());
  const uint64_t count =
      kernels::Kernels().select_at_least(x.data(), x.size(), threshold, buffer.get());
  return std::vector<uint32_t>(buffer.get(), buffer.get() + count);
}

// Exact top-k for small tensors and k >= n: every index is a candidate.
Status SelectAmongAll(std::span<const float> x, uint64_t k, std::vector<uint32_t>* indices) {
  indices->resize(x.size());
  std::iota(indices->begin(), indices->end(), 0u);
  RETURN_IF_ERROR(CheckCandidates(x, *indices));
  KeepLargest(x, k, indices);
  return absl::OkStatus();
}

// A threshold from the sample, or an error if the sample itself holds a non-finite value.
Status SampledThreshold(std::span<const float> x, uint64_t rank, uint32_t* threshold) {
  *threshold = SampleThreshold(x, rank);
  if (*threshold < kExpMask) return absl::OkStatus();
  for (size_t i = 0; i < x.size(); ++i) {
    if (Mag(x[i]) >= kExpMask) return NonFinite(x, i);
  }
  return absl::InternalError("topk: sampled a non-finite value that is not in the tensor");
}

}  // namespace

Status TopKExact(std::span<const float> x, uint64_t k, std::vector<uint32_t>* indices) {
  const uint64_t n = x.size();
  k = std::min(k, n);
  if (n <= kSmallTensor || k == n) return SelectAmongAll(x, k, indices);
  // A rank comfortably below k's expected rank in the sample, so that at least k values pass
  // the threshold with overwhelming probability; if not, lower the threshold and retry.
  const double expected = static_cast<double>(kSampleSize) * static_cast<double>(k) / n;
  uint64_t rank = static_cast<uint64_t>(std::ceil(expected + 4 * std::sqrt(expected) + 2));
  while (true) {
    rank = std::min(rank, kSampleSize);
    uint32_t threshold = 0;
    RETURN_IF_ERROR(SampledThreshold(x, rank, &threshold));
    if (rank == kSampleSize) threshold = 0;  // last resort: every value is a candidate
    *indices = SelectAtLeast(x, threshold);
    RETURN_IF_ERROR(CheckCandidates(x, *indices));
    if (indices->size() >= k) break;
    rank *= 4;
  }
  KeepLargest(x, k, indices);
  return absl::OkStatus();
}

Status TopKExactReference(std::span<const float> x, uint64_t k, std::vector<uint32_t>* indices) {
  const uint64_t n = x.size();
  k = std::min(k, n);
  for (size_t i = 0; i < n; ++i) {
    if (Mag(x[i]) >= kExpMask) return NonFinite(x, i);
  }
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const uint32_t ma = Mag(x[a]), mb = Mag(x[b]);
    return ma != mb ? ma > mb : a < b;
  });
  order.resize(k);
  std::sort(order.begin(), order.end());
  *indices = std::move(order);
  return absl::OkStatus();
}

Status TopKApprox(std::span<const float> x, uint64_t k, std::vector<uint32_t>* indices,
                  double tolerance) {
  const uint64_t n = x.size();
  k = std::min(k, n);
  if (n <= kSmallTensor || k == n || k == 0) return TopKExact(x, k, indices);
  const uint64_t lo = static_cast<uint64_t>(std::ceil((1 - tolerance) * k));
  const uint64_t hi = std::max(k, static_cast<uint64_t>(std::floor((1 + tolerance) * k)));
  const double expected = static_cast<double>(kSampleSize) * static_cast<double>(k) / n;
  const uint64_t rank =
      std::clamp<uint64_t>(static_cast<uint64_t>(std::llround(expected)), 1, kSampleSize);
  uint32_t threshold = 0;
  RETURN_IF_ERROR(SampledThreshold(x, rank, &threshold));
  *indices = SelectAtLeast(x, threshold);
  RETURN_IF_ERROR(CheckCandidates(x, *indices));
  if (indices->size() > hi) KeepLargest(x, k, indices);
  if (indices->size() < lo) return TopKExact(x, k, indices);
  return absl::OkStatus();
}

}  // namespace longhaul::compression
