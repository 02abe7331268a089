// Block dequantization on the GPU (device_codec.h): DequantizeOnDevice. Each thread decodes
// four codes (one word when the codes are 4-byte aligned, else byte by byte) and stores a
// float4, or four floats when the output is not 16-byte aligned; a block whose scale is not
// finite is reported by its index, as the CPU kernel does.
#include "compression/cuda/codec_common.cuh"
#include "compression/cuda/device_codec.h"

namespace longhaul::compression::cuda {
namespace {

// ---- dequantization ----------------------------------------------------------------------------

// Thread t of CTA b decodes the quads b * kThreads * kQuadsPerThread + k * kThreads + t,
// k < kQuadsPerThread, into float4s when `out` is 16-byte aligned (p.vec_floats), else floats;
// kAligned: `in` is 4-byte aligned.
template <int kBits, bool kAligned>
__global__ void __launch_bounds__(kThreads)
    DequantizeVecKernel(DeviceQuantParams p, const uint8_t* __restrict__ in,
                        float* __restrict__ out, unsigned long long* bad) {
  const uint64_t quads = (p.n + 3) / 4;
  const uint64_t first =
      static_cast<uint64_t>(blockIdx.x) * (kThreads * kQuadsPerThread) + threadIdx.x;
  const uint8_t* codes = in + 4 * p.blocks * (p.asymmetric ? 2 : 1);
  float scale[kQuadsPerThread], mid[kQuadsPerThread];
  uint32_t word[kQuadsPerThread];
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; k++) {
    const uint64_t q = first + k * kThreads;
    scale[k] = mid[k] = 0.0f;
    word[k] = 0;
    if (q < quads) {
      const uint64_t block = (4 * q) >> p.block_log2;
      scale[k] = LoadFloatAt<kAligned>(in, block);
      if (p.asymmetric) mid[k] = LoadFloatAt<kAligned>(in, p.blocks + block);
      word[k] = QuadCodes<kBits, kAligned>(codes, q, p.n);
    }
  }
  const float c = CodeCenter(p);
  constexpr uint32_t kMask = (1u << kBits) - 1;
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; k++) {
    const uint64_t q = first + k * kThreads;
    if (q >= quads) continue;
    if (!ValidBlock(scale[k], mid[k])) {
      atomicMin(bad, static_cast<unsigned long long>((4 * q) >> p.block_log2));
      continue;
    }
    float d[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      d[j] = DequantizeOne((word[k] >> (j * kBits)) & kMask, scale[k], mid[k], c, p.asymmetric);
    }
    if (p.vec_floats && 4 * q + 4 <= p.n) {
      *reinterpret_cast<float4*>(out + 4 * q) = make_float4(d[0], d[1], d[2], d[3]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; j++) {
        if (4 * q + j < p.n) out[4 * q + j] = d[j];
      }
    }
  }
}

template <int kBits>
void DequantizeVec(const DeviceQuantParams& dp, const uint8_t* in, float* out,
                   unsigned long long* bad, cudaStream_t stream) {
  const unsigned grid = Grid((dp.n + 3) / 4, kThreads * kQuadsPerThread);
  if (AlignmentOf(in, 4) == 4) {
    DequantizeVecKernel<kBits, true><<<grid, kThreads, 0, stream>>>(dp, in, out, bad);
  } else {
    DequantizeVecKernel<kBits, false><<<grid, kThreads, 0, stream>>>(dp, in, out, bad);
  }
}

}  // namespace

int64_t DequantizeOnDevice(const kernels::QuantParams& p, const uint8_t* in, uint64_t n, float* out,
                           cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  DeviceQuantParams dp = ToDevice(p, n);
  dp.vec_floats = Aligned16(out);
  ErrorIndex bad(stream);
  switch (dp.bits) {
    case 8:
      DequantizeVec<8>(dp, in, out, bad.get(), stream);
      break;
    case 4:
      DequantizeVec<4>(dp, in, out, bad.get(), stream);
      break;
    default:
      DequantizeVec<2>(dp, in, out, bad.get(), stream);
      break;
  }
  LONGHAUL_CUDA_CHECK_LAUNCH();
  return bad.Read();
}

}  // namespace longhaul::compression::cuda
