// Exact top-k by magnitude on the GPU (device_codec.h): TopKOnDevice, with TopKExact's result.
// The algorithm, its state and building blocks are described in topk_common.cuh.
#include "compression/cuda/codec_common.cuh"
#include "compression/cuda/device_codec.h"
#include "compression/cuda/topk_common.cuh"

namespace longhaul::compression::cuda {
namespace {

__global__ void TopKInitKernel(TopKState* s, uint32_t k) {
  for (uint32_t i = threadIdx.x; i < kTopBins; i += blockDim.x) s->hist[i] = 0;
  if (threadIdx.x == 0) {
    s->bad = kNoError;
    s->candidates = 0;
    s->needed = 0;
    s->found = 0;
    s->bottom = s->top = 0;
    s->bottom_rank = s->top_rank = 0;
    s->prefix = 0;
    s->remaining = k;
  }
}

// The exact histogram of every digit (the fallback's extra pass), and the first non-finite value
// (k == 0 runs only this).
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    TopKTopHistogramKernel(const float* __restrict__ x, uint64_t n, TopKState* s) {
  __shared__ uint32_t hist[kTopBins];
  for (uint32_t i = threadIdx.x; i < kTopBins; i += kThreads) hist[i] = 0;
  __syncthreads();
  unsigned long long first_bad = kNoError;
  const uint64_t stride = 4 * static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = 4 * (static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x); i < n;
       i += stride) {
    uint32_t m[4];
    LoadMagnitudes<kVec>(x, i, n, m);
#pragma unroll
    for (int j = 0; j < 4; j++) {
      if (i + j < n) {
        if (m[j] >= kExpMask && first_bad == kNoError) first_bad = i + j;
        atomicAdd(&hist[m[j] >> kTopShift], 1u);
      }
    }
  }
  if (first_bad != kNoError) atomicMin(&s->bad, first_bad);
  FlushHistogram(hist, kTopBins, s->hist);
}

// A histogram of the sample: values (blockIdx.x * kThreads + t + j * gridDim.x * kThreads) *
// stride, for j < kSampleItems, of those below `samples`. First step: of their digits. Second
// (`refine`): of the next 10 bits of those in digit s->top (bins 0 to 1023) and in digit
// s->bottom (bins 1024 to 2047).
__global__ void __launch_bounds__(kThreads)
    TopKSampleKernel(const float* __restrict__ x, uint64_t stride, uint32_t samples, bool refine,
                     TopKState* s) {
  __shared__ uint32_t hist[kTopBins];
  for (uint32_t i = threadIdx.x; i < kTopBins; i += kThreads) hist[i] = 0;
  __syncthreads();
  const uint32_t top = s->top, bottom = s->bottom;
  constexpr uint32_t kLowMask = (1u << kLowBits) - 1;
  uint32_t m[kSampleItems];
#pragma unroll
  for (int j = 0; j < kSampleItems; j++) {
    const uint32_t i = blockIdx.x * kThreads + threadIdx.x + j * gridDim.x * kThreads;
    m[j] = i < samples ? Magnitude(x[i * stride]) : kAbsMask + 1;
  }
#pragma unroll
  for (int j = 0; j < kSampleItems; j++) {
    if (m[j] > kAbsMask) continue;
    const uint32_t d = m[j] >> kTopShift;
    if (!refine) {
      atomicAdd(&hist[d], 1u);
      continue;
    }
    const uint32_t low = (m[j] >> kBucketShift) & kLowMask;
    if (d == top) atomicAdd(&hist[low], 1u);
    if (d == bottom) atomicAdd(&hist[(1u << kLowBits) + low], 1u);
  }
  FlushHistogram(hist, kTopBins, s->hist);
}

// The sample's range: `top` holds its rank_top-th largest, `bottom` its rank_bottom-th. First
// step: the digits, from the histogram of digits; second (`refine`): the buckets, from the
// histograms of the next 10 bits in those two digits. One CTA of kScanThreads threads.
__global__ void __launch_bounds__(kScanThreads)
    TopKSampleRangeKernel(TopKState* s, uint32_t rank_top, uint32_t rank_bottom, bool refine) {
  uint32_t above_top, above_bottom;
  if (!refine) {
    const uint32_t top = CtaFindDigit(s->hist, kTopBins, rank_top, &above_top);
    const uint32_t bottom = CtaFindDigit(s->hist, kTopBins, rank_bottom, &above_bottom);
    ClearHistogram(s->hist, kTopBins);
    if (threadIdx.x == 0) {
      s->top = top;
      s->bottom = bottom;
      s->top_rank = rank_top - above_top;
      s->bottom_rank = rank_bottom - above_bottom;
    }
    return;
  }
  constexpr uint32_t kBins = 1u << kLowBits;
  const uint32_t top = CtaFindDigit(s->hist, kBins, s->top_rank, &above_top);
  const uint32_t bottom = CtaFindDigit(s->hist + kBins, kBins, s->bottom_rank, &above_bottom);
  ClearHistogram(s->hist, kTopBins);
  if (threadIdx.x == 0) {
    s->top = (s->top << kLowBits) | top;
    s->bottom = (s->bottom << kLowBits) | bottom;
  }
}

// Picks, among `bins` digits at `shift` (s->hist), the one that holds the remaining-th largest
// of the values matching s->prefix, and clears the histogram. With `sets_range` (the fallback's
// exact histogram), that digit's buckets are the range [bottom, top] of pass 1. Does nothing once
// the check has failed. One CTA of kScanThreads threads.
__global__ void __launch_bounds__(kScanThreads)
    TopKChooseKernel(TopKState* s, int shift, uint32_t bins, bool sets_range) {
  if (s->candidates == ~0u) return;
  const uint32_t remaining = s->remaining;
  uint32_t above;
  const uint32_t d = CtaFindDigit(s->hist, bins, remaining, &above);
  ClearHistogram(s->hist, bins);
  if (threadIdx.x == 0) {
    s->prefix |= d << shift;
    s->remaining = remaining - above;
    if (sets_range) {
      s->bottom = d << kLowBits;
      s->top = s->bottom | ((1u << kLowBits) - 1);
    }
  }
}

// Pass 1: per tile, the values in buckets above s->top into tile_counts, and those in
// [s->bottom, s->top] appended to the candidates (the first `capacity` of them); also the first
// non-finite value. Thread t owns values kTopKItems * t to kTopKItems * (t + 1) - 1 of the tile.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    TopKPartitionKernel(const float* __restrict__ x, uint64_t n, TopKState* s, Counts* tile_counts,
                        uint32_t* cand_index, uint32_t* cand_mag, uint32_t capacity) {
  const uint32_t bottom = s->bottom, top = s->top;
  const uint64_t base = static_cast<uint64_t>(blockIdx.x) * kTopKTile + threadIdx.x * kTopKItems;
  uint32_t m[kTopKItems];
#pragma unroll
  for (int q = 0; q < kTopKItems / 4; q++) LoadMagnitudes<kVec>(x, base + 4 * q, n, m + 4 * q);
  uint32_t above = 0, mine = 0, bad = 0;
#pragma unroll
  for (int j = 0; j < kTopKItems; j++) {
    const bool exists = base + j < n;
    const uint32_t b = m[j] >> kBucketShift;
    above += exists && b > top;
    mine += exists && b >= bottom && b <= top;
    bad |= exists && m[j] >= kExpMask;
  }
  if (bad) {
    for (int j = 0; j < kTopKItems; j++) {
      if (base + j < n && m[j] >= kExpMask) {
        atomicMin(&s->bad, static_cast<unsigned long long>(base + j));
        break;
      }
    }
  }
  // One atomic per CTA counts the tile's values above the range and reserves its candidates.
  Counts total;
  const Counts before = CtaExclusiveScan(Counts{above, mine}, &total);
  __shared__ uint32_t first;
  if (threadIdx.x == 0) {
    const unsigned long long add = (static_cast<unsigned long long>(total.gt) << 32) | total.eq;
    first = static_cast<uint32_t>(atomicAdd(&s->found, add));
    tile_counts[blockIdx.x] = {total.gt, 0};
  }
  __syncthreads();
  uint32_t slot = first + before.eq;
#pragma unroll
  for (int j = 0; j < kTopKItems; j++) {
    const uint32_t b = m[j] >> kBucketShift;
    if (base + j < n && b >= bottom && b <= top) {
      if (slot < capacity) {
        cand_index[slot] = static_cast<uint32_t>(base + j);
        cand_mag[slot] = m[j];
      }
      slot++;
    }
  }
}

// After pass 1: T is among the candidates if fewer than k values lie above the range and at least
// k from its bottom up, and they all fit. Then the candidates' selection starts afresh (prefix 0,
// k minus those above); else s->candidates = ~0u turns the kernels after this one off.
__global__ void TopKCheckKernel(TopKState* s, uint32_t k, uint32_t capacity) {
  const uint32_t above = static_cast<uint32_t>(s->found >> 32);
  const uint32_t count = static_cast<uint32_t>(s->found);
  const bool ok = above < k && k - above <= count && count <= capacity;
  s->needed = count;
  s->candidates = ok ? count : ~0u;
  s->prefix = 0;
  s->remaining = ok ? k - above : 0;
}

// The histogram of the candidates' bits [shift, shift + bits) among those matching s->prefix
// above them.
__global__ void __launch_bounds__(kThreads)
    TopKCandidateHistogramKernel(const uint32_t* __restrict__ cand_mag, int shift, int bits,
                                 TopKState* s) {
  const uint32_t count = s->candidates;
  if (count == ~0u) return;
  __shared__ uint32_t hist[kTopBins];
  const uint32_t bins = 1u << bits;
  for (uint32_t i = threadIdx.x; i < bins; i += kThreads) hist[i] = 0;
  __syncthreads();
  const uint32_t mask = shift + bits >= 32 ? 0u : ~0u << (shift + bits);
  const uint32_t prefix = s->prefix;
  for (uint64_t i = blockIdx.x * kThreads + threadIdx.x; i < count; i += gridDim.x * kThreads) {
    const uint32_t m = cand_mag[i];
    if ((m & mask) == prefix) atomicAdd(&hist[(m >> shift) & (bins - 1)], 1u);
  }
  FlushHistogram(hist, bins, s->hist);
}

// Adds each candidate above or equal to the threshold T = s->prefix to its tile's counts.
__global__ void __launch_bounds__(kThreads)
    TopKCandidateCountKernel(const uint32_t* __restrict__ cand_index,
                             const uint32_t* __restrict__ cand_mag, TopKState* s,
                             Counts* tile_counts) {
  const uint32_t count = s->candidates;
  if (count == ~0u) return;
  const uint32_t t = s->prefix;
  for (uint64_t i = blockIdx.x * kThreads + threadIdx.x; i < count; i += gridDim.x * kThreads) {
    const uint32_t m = cand_mag[i];
    Counts* c = &tile_counts[cand_index[i] / kTopKTile];
    if (m > t) {
      atomicAdd(&c->gt, 1u);
    } else if (m == t) {
      atomicAdd(&c->eq, 1u);
    }
  }
}

// Exclusive prefix sums of the tile counts in runs of kScanThreads tiles, in place, one CTA per
// run; each run's total goes to run_sums. Launched again on run_sums (one run: there are at most
// 2^32 / kTopKTile / kScanThreads = 1024 of them) with run_sums null.
__global__ void __launch_bounds__(kScanThreads)
    TopKScanKernel(const TopKState* s, Counts* tile_counts, uint64_t tiles, Counts* run_sums) {
  if (s->candidates == ~0u) return;
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * kScanThreads + threadIdx.x;
  const Counts c = i < tiles ? tile_counts[i] : Counts{0, 0};
  Counts total;
  const Counts before = CtaExclusiveScan(c, &total);
  if (i < tiles) tile_counts[i] = before;
  if (run_sums != nullptr && threadIdx.x == 0) run_sums[blockIdx.x] = total;
}

// Pass 2: writes the kept indices of each tile; thread t owns values kTopKItems * t to
// kTopKItems * (t + 1) - 1 of the tile, so that the ranks follow index order.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    TopKWriteKernel(const float* __restrict__ x, uint64_t n, const TopKState* s,
                    const Counts* tile_counts, const Counts* run_sums, uint32_t* indices) {
  if (s->candidates == ~0u) return;
  const uint32_t t = s->prefix, ties = s->remaining;
  const uint64_t base = static_cast<uint64_t>(blockIdx.x) * kTopKTile + threadIdx.x * kTopKItems;
  uint32_t m[kTopKItems];
#pragma unroll
  for (int q = 0; q < kTopKItems / 4; q++) LoadMagnitudes<kVec>(x, base + 4 * q, n, m + 4 * q);
  Counts c = {0, 0};
#pragma unroll
  for (int j = 0; j < kTopKItems; j++) {
    c.gt += base + j < n && m[j] > t;
    c.eq += base + j < n && m[j] == t;
  }
  Counts total;
  // Above and equal to the threshold before this thread's first value, in the whole tensor.
  c = run_sums[blockIdx.x / kScanThreads] + tile_counts[blockIdx.x] + CtaExclusiveScan(c, &total);
#pragma unroll
  for (int j = 0; j < kTopKItems; j++) {
    if (base + j >= n) break;
    if (m[j] > t) {
      indices[c.gt + min(c.eq, ties)] = static_cast<uint32_t>(base + j);
      c.gt++;
    } else if (m[j] == t) {
      if (c.eq < ties) indices[c.gt + c.eq] = static_cast<uint32_t>(base + j);
      c.eq++;
    }
  }
}

}  // namespace

int64_t TopKOnDevice(const float* x, uint64_t n, uint64_t k, uint32_t* indices,
                     cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  if (n >= (uint64_t{1} << 32)) {  // indices are uint32 (as TopKExact's)
    std::fprintf(stderr, "TopKOnDevice: %llu values; at most 2^32 - 1\n",
                 static_cast<unsigned long long>(n));
    std::abort();
  }
  KeepScratchMemory();
  k = k < n ? k : n;
  const bool vec = Aligned16(x);
  // One allocation: the state, the tile counts and their runs' sums, and room for the
  // candidates: an eighth of n (a sampled range holds a few percent of n; only values crowded
  // into few digits, as with many ties, need more, and then get a second try).
  const uint64_t tiles = (n + kTopKTile - 1) / kTopKTile;
  const uint64_t runs = (tiles + kScanThreads - 1) / kScanThreads;
  const auto capacity =
      static_cast<uint32_t>(std::min<uint64_t>(n, std::max<uint64_t>(n / 8, 4096)));
  const uint64_t head = sizeof(TopKState) + (tiles + runs) * sizeof(Counts);
  char* mem = nullptr;
  LONGHAUL_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&mem),
                                      head + (k > 0 ? 8 * uint64_t{capacity} : 0), stream));
  auto* state = reinterpret_cast<TopKState*>(mem);
  auto* tile_counts = reinterpret_cast<Counts*>(state + 1);
  auto* run_sums = tile_counts + tiles;
  auto* cand = reinterpret_cast<uint32_t*>(mem + head);
  const unsigned grid = static_cast<unsigned>(tiles);
  int sms = 0;
  int device = 0;
  LONGHAUL_CUDA_CHECK(cudaGetDevice(&device));
  LONGHAUL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const unsigned cand_grid = std::max(1u, std::min<unsigned>(Grid(capacity, kThreads), 2 * sms));
  auto exact_histogram = [&] {
    const unsigned hist_grid = std::min<unsigned>(Grid(n, 4 * kThreads * 4), 2048);
    if (vec) {
      TopKTopHistogramKernel<true><<<hist_grid, kThreads, 0, stream>>>(x, n, state);
    } else {
      TopKTopHistogramKernel<false><<<hist_grid, kThreads, 0, stream>>>(x, n, state);
    }
  };
  // Pass 1 over the range [s->bottom, s->top], the check, the candidates' digits and pass 2.
  auto select = [&](uint32_t* cand, uint32_t capacity) {
    uint32_t* cand_mag = cand + capacity;
    LONGHAUL_CUDA_CHECK(cudaMemsetAsync(&state->found, 0, sizeof(state->found), stream));
    if (vec) {
      TopKPartitionKernel<true>
          <<<grid, kThreads, 0, stream>>>(x, n, state, tile_counts, cand, cand_mag, capacity);
    } else {
      TopKPartitionKernel<false>
          <<<grid, kThreads, 0, stream>>>(x, n, state, tile_counts, cand, cand_mag, capacity);
    }
    TopKCheckKernel<<<1, 1, 0, stream>>>(state, static_cast<uint32_t>(k), capacity);
    for (int shift = kTopShift; shift >= 0; shift -= kLowBits) {
      const int bits = shift == kTopShift ? kTopBits : kLowBits;
      TopKCandidateHistogramKernel<<<cand_grid, kThreads, 0, stream>>>(cand_mag, shift, bits,
                                                                       state);
      TopKChooseKernel<<<1, kScanThreads, 0, stream>>>(state, shift, 1u << bits, false);
    }
    TopKCandidateCountKernel<<<cand_grid, kThreads, 0, stream>>>(cand, cand_mag, state,
                                                                 tile_counts);
    TopKScanKernel<<<static_cast<unsigned>(runs), kScanThreads, 0, stream>>>(state, tile_counts,
                                                                             tiles, run_sums);
    TopKScanKernel<<<1, kScanThreads, 0, stream>>>(state, run_sums, runs, nullptr);
    if (vec) {
      TopKWriteKernel<true>
          <<<grid, kThreads, 0, stream>>>(x, n, state, tile_counts, run_sums, indices);
    } else {
      TopKWriteKernel<false>
          <<<grid, kThreads, 0, stream>>>(x, n, state, tile_counts, run_sums, indices);
    }
  };
  struct {
    unsigned long long bad;
    uint32_t candidates, needed;
  } result = {kNoError, 0, 0};
  static_assert(offsetof(TopKState, needed) == sizeof(result) - sizeof(uint32_t));
  auto read_result = [&] {
    LONGHAUL_CUDA_CHECK_LAUNCH();
    LONGHAUL_CUDA_CHECK(
        cudaMemcpyAsync(&result, state, sizeof(result), cudaMemcpyDeviceToHost, stream));
    LONGHAUL_CUDA_CHECK(cudaStreamSynchronize(stream));
  };

  TopKInitKernel<<<1, 256, 0, stream>>>(state, static_cast<uint32_t>(k));
  if (k == 0) {  // only the check of the values
    exact_histogram();
    read_result();
  } else {
    if (k < n) {
      // The sample's range: its ranks k * samples / n, less and more a margin.
      const uint32_t samples = static_cast<uint32_t>(std::min<uint64_t>(n, kTopKSample));
      const double rank = static_cast<double>(k) * samples / static_cast<double>(n);
      const double margin = 4 * std::sqrt(rank) + 16;
      const auto rank_top = static_cast<uint32_t>(std::max(1.0, std::floor(rank - margin)));
      const auto rank_bottom =
          static_cast<uint32_t>(std::min<double>(samples, std::ceil(rank + margin)));
      for (const bool refine : {false, true}) {
        TopKSampleKernel<<<Grid(samples, kThreads * kSampleItems), kThreads, 0, stream>>>(
            x, n / samples, samples, refine, state);
        TopKSampleRangeKernel<<<1, kScanThreads, 0, stream>>>(state, rank_top, rank_bottom, refine);
      }
      select(cand, capacity);
      read_result();
    }
    if (result.bad == kNoError && (k == n || result.candidates == ~0u)) {
      // No sample (k == n), or it missed: the exact histogram's digit holding T is the range.
      TopKInitKernel<<<1, 256, 0, stream>>>(state, static_cast<uint32_t>(k));
      exact_histogram();
      TopKChooseKernel<<<1, kScanThreads, 0, stream>>>(state, kTopShift, kTopBins, true);
      select(cand, capacity);
      read_result();
      if (result.bad == kNoError && result.candidates == ~0u) {
        // Too many values share that digit: again, with room for all of them.
        uint32_t* more = nullptr;
        LONGHAUL_CUDA_CHECK(
            cudaMallocAsync(reinterpret_cast<void**>(&more), 8 * uint64_t{result.needed}, stream));
        TopKInitKernel<<<1, 256, 0, stream>>>(state, static_cast<uint32_t>(k));
        exact_histogram();
        TopKChooseKernel<<<1, kScanThreads, 0, stream>>>(state, kTopShift, kTopBins, true);
        select(more, result.needed);
        read_result();
        LONGHAUL_CUDA_CHECK(cudaFreeAsync(more, stream));
      }
    }
  }
  LONGHAUL_CUDA_CHECK(cudaFreeAsync(mem, stream));
  LONGHAUL_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result.bad == kNoError ? kernels::kNone : static_cast<int64_t>(result.bad);
}

}  // namespace longhaul::compression::cuda
