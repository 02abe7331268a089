// The numeric kernels the codecs are built from (float conversions, block quantization,
// magnitude selection for top-k), behind one table of function pointers. There is always a
// plain reference table; a fast AVX2 table exists on x86-64 CPUs that have AVX2 and F16C.
// Codecs call Kernels(), which picks the fastest table at run time (no -march flags, so the
// same binary runs everywhere); tests run every table in AllKernels() against the
// reference and require identical bytes (the fast kernels use no FMA, so they round
// exactly as the reference does).
#pragma once

#include <cstdint>
#include <vector>

namespace longhaul::compression::kernels {

// Returned by kernels that report the position of a bad value when there is none.
inline constexpr int64_t kNone = -1;

// Block quantization of n floats to `bits` bits each.
//
// Layout of a quantized tensor, nb = ceil(n / block) blocks, all little-endian:
//   float scale[nb]                (step between levels; >= 0, finite)
//   float mid[nb]                  (asymmetric only; the block's midpoint, finite)
//   uint8 codes[ceil(n*bits/8)]    (element i at bit offset i*bits, least significant first)
// Decoding: x = clamp((code - c) * scale + mid, -FLT_MAX, FLT_MAX), where
//   symmetric:  mid = 0, c = 2^(bits-1) - 1, codes in [0, 2c], scale = max|x| / c
//   asymmetric: c = (2^bits - 1) / 2, codes in [0, 2^bits - 1], scale = (max - min) / (2c)
// Encoding rounds (x - mid) * (1 / scale) + c to nearest-even (dividing by the scale when its
// reciprocal overflows, for subnormal scales), or with stochastic rounding adds u in [0, 1)
// from a counter-based hash of (seed, element index) and rounds down; codes are clamped to
// the valid range.
struct QuantParams {
  int bits = 8;         // 8, 4 or 2
  uint32_t block = 64;  // a power of two >= 8
  bool asymmetric = false;
  bool stochastic = false;
  uint64_t seed = 0;  // stochastic rounding only
};

uint64_t QuantBlocks(const QuantParams& p, uint64_t n);
uint64_t QuantizedSize(const QuantParams& p, uint64_t n);

struct KernelTable {
  const char* name;
  // Each returns kNone on success, else the index of the first offending input element
  // (or block, for dequantize); the output is then incomplete and must be discarded.

  // Encoded-side pointers (uint8_t*, void*) may be unaligned; float pointers are aligned.

  // Copies n floats; fails on a NaN or infinity.
  int64_t (*copy_floats)(const void* in, uint64_t n, void* out);
  // IEEE half, round to nearest even; fails on NaN, infinity or |x| >= 65520 (which would
  // round to infinity).
  int64_t (*floats_to_half)(const float* in, uint64_t n, uint8_t* out);
  // Fails on a half that is NaN or infinity.
  int64_t (*half_to_floats)(const uint8_t* in, uint64_t n, float* out);
  // bfloat16, round to nearest even; finite values that would round to infinity saturate
  // to the largest bfloat16. Fails on NaN or infinity.
  int64_t (*floats_to_bf16)(const float* in, uint64_t n, uint8_t* out);
  // Fails on a bfloat16 that is NaN or infinity.
  int64_t (*bf16_to_floats)(const uint8_t* in, uint64_t n, float* out);
  // Writes QuantizedSize(p, n) bytes; fails on NaN or infinity (index of the element).
  int64_t (*quantize)(const QuantParams& p, const float* in, uint64_t n, uint8_t* out);
  // Reads QuantizedSize(p, n) bytes; fails on a block whose scale is negative or not finite
  // or whose mid is not finite (index of the block). The output is always finite.
  int64_t (*dequantize)(const QuantParams& p, const uint8_t* in, uint64_t n, float* out);
  // Writes to idx, in ascending order, every i < n whose magnitude bits
  // (bit pattern of x[i] & 0x7fffffff) are >= threshold, and returns how many.
  // REQUIRES: idx has room for n entries; n < 2^32.
  uint64_t (*select_at_least)(const float* x, uint64_t n, uint32_t threshold, uint32_t* idx);
};

const KernelTable& ReferenceKernels();
// nullptr unless this is x86-64 and the CPU has AVX2 and F16C.
const KernelTable* Avx2Kernels();
// The fastest table this CPU supports. The environment variable
// LONGHAUL_CODEC_KERNELS=reference forces the reference table (read once).
const KernelTable& Kernels();
// Every table this CPU can run, reference first.
std::vector<const KernelTable*> AllKernels();

}  // namespace longhaul::compression::kernels
