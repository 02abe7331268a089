// Top-k on the GPU, its shared pieces (topk.cu has the kernels and TopKOnDevice): the
// algorithm, its constants and device state, and the block-wide building blocks it is made of
// (magnitude loads, histogram flushes, warp and CTA scans, finding the digit that holds a rank).
#pragma once

#include "compression/cuda/codec_common.cuh"

namespace longhaul::compression::cuda {

// ---- top-k -------------------------------------------------------------------------------------
//
// A selection of the k-th largest magnitude T (magnitudes are 31-bit integers) among few
// candidates, then a stable compaction: two passes over x when a sample predicts where T lies
// (more when it does not, below).
//  0. A magnitude's top 11 bits are its digit (2048 of them, 1/8 of an octave each), its top 21
//     bits its bucket. A strided sample of kTopKSample values gives a range of buckets
//     [bottom, top] that holds T with high probability: those of the sample's values at ranks
//     around k's, with a margin of 4 standard deviations of a binomial count (a histogram of the
//     sample's digits finds the two digits, a second one of the next 10 bits the buckets).
//  1. Each tile of kTopKTile values counts its magnitudes in buckets above `top` and appends those
//     in the range (index and magnitude) to the candidate list, whose room is `capacity`; it also
//     finds the first non-finite value. A check then confirms that T is among the candidates
//     (fewer than k values above the range, at least k from its bottom up, and room for all).
//  2. Three radix passes over the candidates (11, 10, 10 bits) give T, and `ties`, the number of
//     values equal to T to keep (the lowest indices); each candidate above or equal to T adds one
//     to its tile's counts.
//  3. With GT(i) and EQ(i) the numbers of magnitudes above and equal to T before index i (a scan
//     of the tile counts, then a scan inside the tile), a kept index i goes to position
//     GT(i) + min(EQ(i), ties): ascending order.
// When the check fails (an unlucky sample, or values crowded into few buckets), the selection runs
// again from an exact histogram of every digit, with [bottom, top] the buckets of the one digit
// that holds T: three more passes over x (the histogram, pass 1, pass 2); if its candidates
// overflow, three more with room for all of them.
// Every step treats magnitudes as integers, so NaN bits cannot make it write out of bounds.

constexpr int kTopKItems = 16;  // values per thread in the tile passes
constexpr uint64_t kTopKTile = kThreads * kTopKItems;
constexpr int kScanThreads = 1024;
constexpr int kTopBits = 11;              // the digit: magnitude bits [20, 31)
constexpr int kTopShift = 31 - kTopBits;  // 20
constexpr int kLowBits = 10;              // the candidates' last two digits: [10, 20), [0, 10)
constexpr uint32_t kTopBins = 1u << kTopBits;
constexpr int kBucketShift = kTopShift - kLowBits;  // 10: a bucket is a magnitude's bits [10, 31)
constexpr uint32_t kTopKSample = 65536;
constexpr int kSampleItems = 4;  // sampled values per thread

struct TopKState {
  unsigned long long bad;    // first non-finite index
  uint32_t candidates;       // the candidates, or ~0u when the check failed (all later kernels
                             // then do nothing)
  uint32_t needed;           // the candidates, failed or not (the host reads these three)
  unsigned long long found;  // pass 1: values above the range << 32 | candidates
  uint32_t bottom, top;      // the range of buckets (of digits, after the sample's first step)
  uint32_t bottom_rank, top_rank;  // the sample's ranks inside those digits
  uint32_t prefix;                 // magnitude bits chosen so far
  uint32_t remaining;              // values still to choose among those matching `prefix`
  uint32_t hist[kTopBins];
};

// Magnitudes of the 4 values from index i on (kVec: x + i is 16-byte aligned); those at or past
// n read as 0, and callers test i + j < n.
template <bool kVec>
__device__ __forceinline__ void LoadMagnitudes(const float* __restrict__ x, uint64_t i, uint64_t n,
                                               uint32_t m[4]) {
  if (kVec && i + 4 <= n) {
    const float4 v = *reinterpret_cast<const float4*>(x + i);
    m[0] = Magnitude(v.x);
    m[1] = Magnitude(v.y);
    m[2] = Magnitude(v.z);
    m[3] = Magnitude(v.w);
  } else {
#pragma unroll
    for (int j = 0; j < 4; j++) m[j] = i + j < n ? Magnitude(x[i + j]) : 0u;
  }
}

// Adds a CTA's shared histogram to the global one.
__device__ inline void FlushHistogram(const uint32_t* hist, uint32_t bins, uint32_t* global) {
  __syncthreads();
  for (uint32_t i = threadIdx.x; i < bins; i += blockDim.x) {
    if (hist[i] != 0) atomicAdd(&global[i], hist[i]);
  }
}

// Inclusive prefix sum over the lanes of the warp.
__device__ inline uint32_t WarpInclusiveSum(uint32_t c) {
  const int lane = threadIdx.x % kWarp;
  for (int o = 1; o < kWarp; o *= 2) {
    const uint32_t t = __shfl_up_sync(kFull, c, o);
    if (lane >= o) c += t;
  }
  return c;
}

// How many magnitudes are above the threshold and equal to it.
struct Counts {
  uint32_t gt, eq;
};

__device__ __forceinline__ Counts operator+(Counts a, Counts b) {
  return {a.gt + b.gt, a.eq + b.eq};
}
__device__ __forceinline__ Counts operator-(Counts a, Counts b) {
  return {a.gt - b.gt, a.eq - b.eq};
}

// Inclusive prefix sum over the lanes of the warp.
__device__ inline Counts WarpInclusiveScan(Counts c) {
  return {WarpInclusiveSum(c.gt), WarpInclusiveSum(c.eq)};
}

// Exclusive prefix sum of c over the CTA's threads (blockDim.x a multiple of 32, at most 1024),
// and the CTA's total in *total. Every thread of the CTA must call it.
__device__ inline Counts CtaExclusiveScan(Counts c, Counts* total) {
  __shared__ Counts warp_sums[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  const Counts inclusive = WarpInclusiveScan(c);
  if (lane == kWarp - 1) warp_sums[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {
    const Counts sums = WarpInclusiveScan(lane < warps ? warp_sums[lane] : Counts{0, 0});
    if (lane < warps) warp_sums[lane] = sums;  // now inclusive over the warps
  }
  __syncthreads();
  *total = warp_sums[warps - 1];
  const Counts before = (warp > 0 ? warp_sums[warp - 1] : Counts{0, 0}) + (inclusive - c);
  __syncthreads();  // warp_sums is reused by the next call
  return before;
}

// The digit d of a histogram (`bins` digits, read from the top down) that holds the rank-th
// largest value (rank >= 1): count(above d) < rank <= count(d and above); *above gets
// count(above d). The whole CTA (kScanThreads threads, each owning bins / kScanThreads digits)
// calls it; a rank beyond the total gives digit 0 and *above the total.
__device__ inline uint32_t CtaFindDigit(const uint32_t* hist, uint32_t bins, uint32_t rank,
                                 uint32_t* above_out) {
  __shared__ uint32_t found_digit, found_above;
  const uint32_t per = bins / kScanThreads;       // 1 or 2
  const uint32_t top = bins - per * threadIdx.x;  // this thread's digits: [top - per, top)
  uint32_t h[2] = {0, 0};
  uint32_t sum = 0;
  for (uint32_t j = 0; j < per; j++) {
    h[j] = hist[top - 1 - j];
    sum += h[j];
  }
  if (threadIdx.x == 0) {
    found_digit = 0;
    found_above = 0;
  }
  Counts total;
  const uint32_t above = CtaExclusiveScan(Counts{sum, 0}, &total).gt;  // in higher digits
  if (rank > total.gt && threadIdx.x == 0) found_above = total.gt;
  if (above < rank && rank <= above + sum) {
    uint32_t a = above;
    for (uint32_t j = 0; j < per; j++) {
      if (rank <= a + h[j]) {
        found_digit = top - 1 - j;
        found_above = a;
        break;
      }
      a += h[j];
    }
  }
  __syncthreads();
  *above_out = found_above;
  const uint32_t d = found_digit;
  __syncthreads();  // found_* are reused by the next call
  return d;
}

__device__ inline void ClearHistogram(uint32_t* hist, uint32_t bins) {
  for (uint32_t i = threadIdx.x; i < bins; i += blockDim.x) hist[i] = 0;
}

}  // namespace longhaul::compression::cuda
