// GPU codec kernels (see device_codec.h). Each formula is the CPU reference's
// (compression/kernels_internal.h), in the same order and precision; multiplications and
// additions use the __f*_rn intrinsics, which are never fused into FMAs, and the file is
// built with -fmad=false besides, so every byte equals the CPU kernels' bytes.
//
// Quantization runs one warp per quantization block: the lanes reduce the block's absolute
// maximum (as bits, exactly), minimum, maximum and first non-finite index, every lane derives
// the same scale, and each lane then writes whole output bytes (a block's codes start on a
// byte boundary because block * bits is a multiple of 8), so no two lanes share a byte and
// nothing needs atomics except the error index, an integer minimum.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "compression/cuda/device_codec.h"
#include "compression/kernels.h"
#include "compression/kernels_internal.h"
#include "kernels/cuda/check.h"

namespace longhaul::compression::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
constexpr unsigned kFull = 0xffffffffu;
constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kExpMask = 0x7f800000u;
constexpr unsigned long long kNoError = ~0ull;

struct DeviceQuantParams {
  int bits;
  uint32_t block;
  bool asymmetric;
  bool stochastic;
  uint32_t key;  // NoiseKey(seed), computed on the host
  uint64_t n;
  uint64_t blocks;  // QuantBlocks(p, n)
};

// ---- scalar pieces, mirroring kernels_internal.h --------------------------------------------

__device__ void StoreFloatBytes(uint8_t* p, float v) {
  const uint32_t u = __float_as_uint(v);
  p[0] = static_cast<uint8_t>(u);
  p[1] = static_cast<uint8_t>(u >> 8);
  p[2] = static_cast<uint8_t>(u >> 16);
  p[3] = static_cast<uint8_t>(u >> 24);
}

__device__ float LoadFloatBytes(const uint8_t* p) {
  return __uint_as_float(static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24));
}

__device__ float Noise(uint32_t key, uint64_t index) {
  uint32_t x = key ^ static_cast<uint32_t>(index);
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  return __fmul_rn(static_cast<float>(x >> 8), 0x1p-24f);
}

struct BlockScale {
  float scale, mid, c, qhi, divisor, inv;
  bool divide;
};

__device__ BlockScale MakeBlockScale(float scale, float mid, float c, float qhi) {
  const float divisor = scale > 0 ? scale : 1.0f;
  const float inv = __fdiv_rn(1.0f, divisor);
  return {scale, mid, c, qhi, divisor, inv, !(inv <= FLT_MAX)};
}

__device__ BlockScale SymmetricScale(uint32_t absmax_bits, int bits) {
  const double cmax = static_cast<double>((1 << (bits - 1)) - 1);
  const float scale =
      static_cast<float>(__ddiv_rn(static_cast<double>(__uint_as_float(absmax_bits)), cmax));
  return MakeBlockScale(scale, 0.0f, static_cast<float>(cmax), static_cast<float>(2 * cmax));
}

// lo and hi are the block's minimum and maximum. The reference keeps the first occurrence of
// each; the two can differ from ours only in the sign of a zero, which matters only when
// lo == hi (then the reference's hi - lo is x - x = +0, so we use +0 there).
__device__ BlockScale AsymmetricScale(float lo, float hi, int bits) {
  const double levels = static_cast<double>((1 << bits) - 1);
  const double range = lo == hi ? 0.0 : __dsub_rn(static_cast<double>(hi), static_cast<double>(lo));
  const float scale = static_cast<float>(__ddiv_rn(range, levels));
  float mid = static_cast<float>(
      __dmul_rn(0.5, __dadd_rn(static_cast<double>(lo), static_cast<double>(hi))));
  if (mid == 0) mid = 0.0f;
  return MakeBlockScale(scale, mid, static_cast<float>(levels / 2), static_cast<float>(levels));
}

__device__ uint32_t QuantizeOne(float x, const BlockScale& b, bool stochastic, uint32_t key,
                                uint64_t index) {
  const float d = __fsub_rn(x, b.mid);
  const float y = __fadd_rn(b.divide ? __fdiv_rn(d, b.divisor) : __fmul_rn(d, b.inv), b.c);
  float r = stochastic ? floorf(__fadd_rn(y, Noise(key, index))) : rintf(y);
  r = r < 0.0f ? 0.0f : r;
  r = r > b.qhi ? b.qhi : r;
  return static_cast<uint32_t>(r);
}

__device__ float DequantizeOne(uint32_t code, float scale, float mid, float c, bool asymmetric) {
  float v = __fmul_rn(__fsub_rn(static_cast<float>(code), c), scale);
  if (asymmetric) v = __fadd_rn(v, mid);
  v = v < -FLT_MAX ? -FLT_MAX : v;
  v = v > FLT_MAX ? FLT_MAX : v;
  return v;
}

__device__ bool ValidBlock(float scale, float mid) {
  return scale >= 0.0f && scale <= FLT_MAX && mid >= -FLT_MAX && mid <= FLT_MAX;
}

// ---- kernels --------------------------------------------------------------------------------

__global__ void QuantizeKernel(DeviceQuantParams p, const float* x, uint8_t* out,
                               unsigned long long* bad) {
  const uint64_t block = static_cast<uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (block >= p.blocks) return;  // the whole warp leaves together
  const uint64_t start = block * p.block;
  const uint64_t len = min(static_cast<uint64_t>(p.block), p.n - start);

  uint32_t absmax = 0;
  float lo = INFINITY, hi = -INFINITY;
  unsigned long long first_bad = kNoError;
  for (uint64_t i = lane; i < len; i += kWarp) {
    const float v = x[start + i];
    const uint32_t mag = __float_as_uint(v) & kAbsMask;
    absmax = max(absmax, mag);
    if (mag >= kExpMask && first_bad == kNoError) first_bad = start + i;
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
  }
  absmax = __reduce_max_sync(kFull, absmax);
  for (int o = kWarp / 2; o > 0; o /= 2) {
    first_bad = min(first_bad, __shfl_xor_sync(kFull, first_bad, o));
    lo = fminf(lo, __shfl_xor_sync(kFull, lo, o));
    hi = fmaxf(hi, __shfl_xor_sync(kFull, hi, o));
  }
  if (first_bad != kNoError) {
    if (lane == 0) atomicMin(bad, first_bad);
    return;
  }

  const BlockScale b =
      p.asymmetric ? AsymmetricScale(lo, hi, p.bits) : SymmetricScale(absmax, p.bits);
  uint8_t* codes = out + 4 * p.blocks * (p.asymmetric ? 2 : 1);
  if (lane == 0) {
    StoreFloatBytes(out + 4 * block, b.scale);
    if (p.asymmetric) StoreFloatBytes(out + 4 * p.blocks + 4 * block, b.mid);
  }
  const int per_byte = 8 / p.bits;
  const uint64_t end = start + len;
  const uint64_t first_byte = start * p.bits / 8;
  const uint64_t last_byte = (end * p.bits + 7) / 8;
  for (uint64_t byte = first_byte + lane; byte < last_byte; byte += kWarp) {
    uint32_t packed = 0;
    for (int e = 0; e < per_byte; e++) {
      const uint64_t i = byte * per_byte + e;
      if (i < end) packed |= QuantizeOne(x[i], b, p.stochastic, p.key, i) << (e * p.bits);
    }
    codes[byte] = static_cast<uint8_t>(packed);
  }
}

__global__ void DequantizeKernel(DeviceQuantParams p, const uint8_t* in, float* out,
                                 unsigned long long* bad) {
  const uint64_t block = static_cast<uint64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (block >= p.blocks) return;
  const float scale = LoadFloatBytes(in + 4 * block);
  const float mid = p.asymmetric ? LoadFloatBytes(in + 4 * p.blocks + 4 * block) : 0.0f;
  if (!ValidBlock(scale, mid)) {
    if (lane == 0) atomicMin(bad, static_cast<unsigned long long>(block));
    return;
  }
  const float c = p.asymmetric ? static_cast<float>((1 << p.bits) - 1) / 2
                               : static_cast<float>((1 << (p.bits - 1)) - 1);
  const uint32_t mask = (1u << p.bits) - 1;
  const uint8_t* codes = in + 4 * p.blocks * (p.asymmetric ? 2 : 1);
  const uint64_t start = block * p.block;
  const uint64_t end = min(start + p.block, p.n);
  for (uint64_t i = start + lane; i < end; i += kWarp) {
    const uint64_t bit = i * p.bits;
    const uint32_t code = (codes[bit / 8] >> (bit % 8)) & mask;
    out[i] = DequantizeOne(code, scale, mid, c, p.asymmetric);
  }
}

__global__ void FloatsToBf16Kernel(const float* in, uint64_t n, uint8_t* out,
                                   unsigned long long* bad) {
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t x = __float_as_uint(in[i]);
  if ((x & kAbsMask) >= kExpMask) {
    atomicMin(bad, static_cast<unsigned long long>(i));
    return;
  }
  uint32_t h = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  if ((h & 0x7f80u) == 0x7f80u) h = (h & 0x8000u) | 0x7f7fu;
  out[2 * i] = static_cast<uint8_t>(h);
  out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
}

__global__ void Bf16ToFloatsKernel(const uint8_t* in, uint64_t n, float* out,
                                   unsigned long long* bad) {
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const uint32_t h = static_cast<uint32_t>(in[2 * i]) | (static_cast<uint32_t>(in[2 * i + 1]) << 8);
  if ((h & 0x7f80u) == 0x7f80u) {
    atomicMin(bad, static_cast<unsigned long long>(i));
    return;
  }
  out[i] = __uint_as_float(h << 16);
}

// The error index of one call: set to "none" before its kernel, read back after it.
class ErrorIndex {
 public:
  explicit ErrorIndex(cudaStream_t stream) : stream_(stream) {
    LONGHAUL_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&dev_), sizeof(*dev_), stream_));
    LONGHAUL_CUDA_CHECK(cudaMemsetAsync(dev_, 0xff, sizeof(*dev_), stream_));
  }
  ~ErrorIndex() { (void)cudaFreeAsync(dev_, stream_); }
  ErrorIndex(const ErrorIndex&) = delete;
  ErrorIndex& operator=(const ErrorIndex&) = delete;

  unsigned long long* get() { return dev_; }

  // Waits for the stream; kernels::kNone or the index.
  int64_t Read() {
    unsigned long long host = kNoError;
    LONGHAUL_CUDA_CHECK(
        cudaMemcpyAsync(&host, dev_, sizeof(host), cudaMemcpyDeviceToHost, stream_));
    LONGHAUL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return host == kNoError ? kernels::kNone : static_cast<int64_t>(host);
  }

 private:
  cudaStream_t stream_;
  unsigned long long* dev_ = nullptr;
};

DeviceQuantParams ToDevice(const kernels::QuantParams& p, uint64_t n) {
  return {p.bits,
          p.block,
          p.asymmetric,
          p.stochastic,
          kernels::internal::NoiseKey(p.seed),
          n,
          kernels::QuantBlocks(p, n)};
}

unsigned Grid(uint64_t work, uint64_t per_block) {
  return static_cast<unsigned>((work + per_block - 1) / per_block);
}

}  // namespace

int64_t QuantizeOnDevice(const kernels::QuantParams& p, const float* in, uint64_t n, uint8_t* out,
                         cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  const DeviceQuantParams dp = ToDevice(p, n);
  ErrorIndex bad(stream);
  QuantizeKernel<<<Grid(dp.blocks, kWarpsPerBlock), kWarpsPerBlock * kWarp, 0, stream>>>(
      dp, in, out, bad.get());
  LONGHAUL_CUDA_CHECK_LAUNCH();
  return bad.Read();
}

int64_t DequantizeOnDevice(const kernels::QuantParams& p, const uint8_t* in, uint64_t n, float* out,
                           cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  const DeviceQuantParams dp = ToDevice(p, n);
  ErrorIndex bad(stream);
  DequantizeKernel<<<Grid(dp.blocks, kWarpsPerBlock), kWarpsPerBlock * kWarp, 0, stream>>>(
      dp, in, out, bad.get());
  LONGHAUL_CUDA_CHECK_LAUNCH();
  return bad.Read();
}

int64_t FloatsToBf16OnDevice(const float* in, uint64_t n, uint8_t* out, cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  ErrorIndex bad(stream);
  FloatsToBf16Kernel<<<Grid(n, 256), 256, 0, stream>>>(in, n, out, bad.get());
  LONGHAUL_CUDA_CHECK_LAUNCH();
  return bad.Read();
}

int64_t Bf16ToFloatsOnDevice(const uint8_t* in, uint64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  ErrorIndex bad(stream);
  Bf16ToFloatsKernel<<<Grid(n, 256), 256, 0, stream>>>(in, n, out, bad.get());
  LONGHAUL_CUDA_CHECK_LAUNCH();
  return bad.Read();
}

}  // namespace longhaul::compression::cuda
