// Top-k selection by magnitude, the sparsifier's kernel. Exact selection estimates a
// magnitude threshold from a random sample, keeps every value at or above it with one
// vectorized pass (kernels.h select_at_least), then selects exactly k among those candidates;
// the approximate variant stops after the pass when the candidate count is already within a
// stated tolerance of k. Results are ascending indices, ready for index_coding.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace longhaul::compression {

// The default tolerance of TopKApprox: it returns between 0.9k and 1.1k values.
inline constexpr double kApproxTopKTolerance = 0.1;

// The k indices of the largest |x[i]|, ties going to the lower index, in ascending order.
// k is clamped to x.size(). Fails on NaN or infinity anywhere in x, naming the first one.
// REQUIRES: x.size() < 2^32.
Status TopKExact(std::span<const float> x, uint64_t k, std::vector<uint32_t>* indices);

// The same result, computed the plain way (sorting all indices); the tests' reference.
Status TopKExactReference(std::span<const float> x, uint64_t k, std::vector<uint32_t>* indices);

// Between ceil((1 - tolerance) * k) and floor((1 + tolerance) * k) indices (k when that range
// is empty), such that every kept |x| is >= every dropped |x|, in ascending order. The bound
// is guaranteed, not statistical: when the sampled threshold misses it, the selection is
// trimmed (or redone) exactly. Fails on NaN or infinity. REQUIRES: 0 <= tolerance < 1.
Status TopKApprox(std::span<const float> x, uint64_t k, std::vector<uint32_t>* indices,
                  double tolerance = kApproxTopKTolerance);

}  // namespace longhaul::compression
