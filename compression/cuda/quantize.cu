// Block quantization on the GPU (device_codec.h): QuantizeOnDevice and, with error feedback,
// QuantizeWithFeedbackOnDevice. Each quantization block gets a group of lanes (one lane for 8
// floats up to a warp for 256 and more) that keeps the block in registers (re-reading only
// blocks of more than 1024 floats), reduces its absolute maximum (as bits, exactly), minimum
// and maximum with shuffles inside the group, and stores each float4's codes packed into one
// 4-, 2- or 1-byte word; it loads float4s when the float pointers are aligned to 16 bytes,
// four floats otherwise. Encoded-side accesses are words where the encoded pointer's
// alignment allows and bytes elsewhere. A block's codes start on a byte boundary (block * bits
// is a multiple of 8), so no two lanes ever share a byte, and nothing needs atomics except the
// error index, an integer minimum. Error feedback into a second residual buffer is the
// quantizer reading x + residual and writing the new residual beside the codes, in one pass;
// in place, it is the quantizer, then an elementwise kernel that updates the residual from the
// bytes just written, unless the error index says the quantizer failed.
#include "compression/cuda/codec_common.cuh"
#include "compression/cuda/device_codec.h"

namespace longhaul::compression::cuda {
namespace {

// ---- quantization, vectorized ----------------------------------------------------------------

// Elements [e, e + 4) of a block at xb of which the first `len` exist, each plus rb's element
// when rb is not null (error feedback); elements past `len` read as 0. With `vec` (xb and rb
// 16-byte aligned) a whole quad is one float4 load each, else four float loads.
__device__ __forceinline__ float4 LoadQuad(const float* __restrict__ xb,
                                           const float* __restrict__ rb, uint32_t e, uint32_t len,
                                           bool vec) {
  if (vec && e + 4 <= len) {
    float4 v = *reinterpret_cast<const float4*>(xb + e);
    if (rb != nullptr) {
      const float4 r = *reinterpret_cast<const float4*>(rb + e);
      v = make_float4(__fadd_rn(v.x, r.x), __fadd_rn(v.y, r.y), __fadd_rn(v.z, r.z),
                      __fadd_rn(v.w, r.w));
    }
    return v;
  }
  float t[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
  for (int j = 0; j < 4; j++) {
    if (e + j < len) t[j] = rb != nullptr ? __fadd_rn(xb[e + j], rb[e + j]) : xb[e + j];
  }
  return make_float4(t[0], t[1], t[2], t[3]);
}

// Each quantization block belongs to a group of 2^group_log2 consecutive lanes; lane `sub` of
// the group holds the float4s at element offsets c * chunk + k * step + 4 * sub (k < kVec) of
// the block, for each of its chunks c (one, unless the block is longer than a group's kVec
// float4s per lane: then the values are re-read for the second pass). With kAligned the encoded
// pointer `out` is 4-byte aligned: scales are stored as floats and each float4's codes as one
// word (4 bytes for q8, 2 for q4; q2's are 1 byte anyway); else byte by byte.
// kFeedback (error feedback fused into the quantizer): r is not null, and each element's new
// residual, (x + r) - decoded code, goes to `next` (16-byte aligned, distinct from x and r).
template <int kBits, int kVec, bool kAligned, bool kFeedback>
__global__ void __launch_bounds__(kThreads, 2)
    QuantizeVecKernel(DeviceQuantParams p, int group_log2, const float* __restrict__ x,
                      const float* __restrict__ r, uint8_t* __restrict__ out,
                      float* __restrict__ next, unsigned long long* bad) {
  const uint32_t group = 1u << group_log2;
  const uint32_t sub = threadIdx.x & (group - 1);
  const uint64_t block = (static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x) >> group_log2;
  // A group is active or not as a whole; inactive lanes still take part in the shuffles.
  const bool active = block < p.blocks;
  const uint64_t start = active ? block * p.block : 0;
  const uint32_t len =
      active ? static_cast<uint32_t>(min(static_cast<uint64_t>(p.block), p.n - start)) : 0;
  const float* xb = x + start;
  const float* rb = r != nullptr ? r + start : nullptr;
  const uint32_t step = 4 * group;
  const uint32_t chunk = kVec * step;
  const uint32_t chunks = p.block / chunk;  // >= 1: the host picks group and kVec to fit

  float4 v[kVec];
  uint32_t absmax = 0;
  float lo = INFINITY, hi = -INFINITY;
  for (uint32_t c = 0; c < chunks; c++) {
#pragma unroll
    for (int k = 0; k < kVec; k++)
      v[k] = LoadQuad(xb, rb, c * chunk + k * step + 4 * sub, len, p.vec_floats);
#pragma unroll
    for (int k = 0; k < kVec; k++) {
      const uint32_t count = QuadCount(c * chunk + k * step + 4 * sub, len);
      const float f[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
#pragma unroll
      for (int j = 0; j < 4; j++) {
        // Missing elements are 0, which leaves the absolute maximum as it is.
        absmax = max(absmax, Magnitude(f[j]));
        if (p.asymmetric && j < count) {
          lo = fminf(lo, f[j]);
          hi = fmaxf(hi, f[j]);
        }
      }
    }
  }
  for (uint32_t o = group / 2; o > 0; o /= 2) {
    absmax = max(absmax, __shfl_xor_sync(kFull, absmax, o));
    if (p.asymmetric) {
      lo = fminf(lo, __shfl_xor_sync(kFull, lo, o));
      hi = fmaxf(hi, __shfl_xor_sync(kFull, hi, o));
    }
  }
  if (!active) return;

  if (absmax >= kExpMask) {  // a NaN or infinity: each lane reports its first one
    for (uint32_t c = 0; c < chunks; c++) {
#pragma unroll
      for (int k = 0; k < kVec; k++) {
        const uint32_t e = c * chunk + k * step + 4 * sub;
        const float4 q = chunks == 1 ? v[k] : LoadQuad(xb, rb, e, len, p.vec_floats);
        const float f[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
          if (Magnitude(f[j]) >= kExpMask) {
            atomicMin(bad, static_cast<unsigned long long>(start + e + j));
            return;
          }
        }
      }
    }
    return;
  }

  const BlockScale b =
      p.asymmetric ? AsymmetricScale(lo, hi, kBits) : SymmetricScale(absmax, kBits);
  if (sub == 0) {
    StoreFloatAt<kAligned>(out, block, b.scale);
    if (p.asymmetric) StoreFloatAt<kAligned>(out, p.blocks + block, b.mid);
  }
  uint8_t* codes = out + 4 * p.blocks * (p.asymmetric ? 2 : 1) + start * kBits / 8;
  const uint32_t index = static_cast<uint32_t>(start);  // the noise's index, mod 2^32
  constexpr int kCodeAlign = kAligned ? 4 : 1;
  const float center = CodeCenter(p);
  for (uint32_t c = 0; c < chunks; c++) {
    if (chunks > 1) {
#pragma unroll
      for (int k = 0; k < kVec; k++)
        v[k] = LoadQuad(xb, rb, c * chunk + k * step + 4 * sub, len, p.vec_floats);
    }
#pragma unroll
    for (int k = 0; k < kVec; k++) {
      const uint32_t e = c * chunk + k * step + 4 * sub;
      const uint32_t count = QuadCount(e, len);
      const float f[4] = {v[k].x, v[k].y, v[k].z, v[k].w};
      uint32_t packed = 0;
      float left[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // kFeedback: what the codes lose
#pragma unroll
      for (int j = 0; j < 4; j++) {
        if (j < count) {
          const uint32_t code = QuantizeOne(f[j], b, p.stochastic, p.key, index + e + j);
          packed |= code << (j * kBits);
          if constexpr (kFeedback) {
            left[j] = __fsub_rn(f[j], DequantizeOne(code, b.scale, b.mid, center, p.asymmetric));
          }
        }
      }
      if constexpr (kFeedback) {
        float* nb = next + start + e;
        if (count == 4) {
          *reinterpret_cast<float4*>(nb) = make_float4(left[0], left[1], left[2], left[3]);
        } else {
          for (uint32_t j = 0; j < count; j++) nb[j] = left[j];
        }
      }
      uint8_t* dst = codes + (e / 4) * (kBits / 2);
      if (count == 4) {
        StoreLe<kBits / 2, kCodeAlign>(dst, packed);
      } else {
        for (uint32_t i = 0; i < (count * kBits + 7) / 8; i++) {
          dst[i] = static_cast<uint8_t>(packed >> (8 * i));
        }
      }
    }
  }
}

// ---- error feedback: the residual update after quantizing x + residual into `enc` ------------

// next = (x + residual) - decode(enc), elementwise, unless the quantizer failed (then `next` is
// left as it was); next may be residual. kVec: x, residual and next are 16-byte aligned and enc
// 4-byte aligned.
template <int kBits, bool kVec>
__global__ void __launch_bounds__(kThreads)
    FeedbackKernel(DeviceQuantParams p, const float* __restrict__ x, const float* residual,
                   float* next, const uint8_t* __restrict__ enc, const unsigned long long* bad) {
  if (*bad != kNoError) return;
  const uint64_t quads = (p.n + 3) / 4;
  const uint64_t first =
      static_cast<uint64_t>(blockIdx.x) * (kThreads * kQuadsPerThread) + threadIdx.x;
  const uint8_t* codes = enc + 4 * p.blocks * (p.asymmetric ? 2 : 1);
  const float c = CodeCenter(p);
  constexpr uint32_t kMask = (1u << kBits) - 1;
#pragma unroll
  for (int k = 0; k < kQuadsPerThread; k++) {
    const uint64_t q = first + k * kThreads;
    if (q >= quads) continue;
    const uint64_t block = (4 * q) >> p.block_log2;
    const float scale = LoadFloatAt<kVec>(enc, block);
    const float mid = p.asymmetric ? LoadFloatAt<kVec>(enc, p.blocks + block) : 0.0f;
    const uint32_t word = QuadCodes<kBits, kVec>(codes, q, p.n);
    const bool whole = 4 * q + 4 <= p.n;
    float4 xv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), rv = xv;
    if (kVec && whole) {
      xv = *reinterpret_cast<const float4*>(x + 4 * q);
      rv = *reinterpret_cast<const float4*>(residual + 4 * q);
    } else {
      float xs[4] = {0.0f, 0.0f, 0.0f, 0.0f}, rs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int j = 0; j < 4; j++) {
        if (4 * q + j < p.n) {
          xs[j] = x[4 * q + j];
          rs[j] = residual[4 * q + j];
        }
      }
      xv = make_float4(xs[0], xs[1], xs[2], xs[3]);
      rv = make_float4(rs[0], rs[1], rs[2], rs[3]);
    }
    const float xs[4] = {xv.x, xv.y, xv.z, xv.w}, rs[4] = {rv.x, rv.y, rv.z, rv.w};
    float d[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
      const float sent = DequantizeOne((word >> (j * kBits)) & kMask, scale, mid, c, p.asymmetric);
      d[j] = __fsub_rn(__fadd_rn(xs[j], rs[j]), sent);
    }
    if (kVec && whole) {
      *reinterpret_cast<float4*>(next + 4 * q) = make_float4(d[0], d[1], d[2], d[3]);
    } else {
#pragma unroll
      for (int j = 0; j < 4; j++) {
        if (4 * q + j < p.n) next[4 * q + j] = d[j];
      }
    }
  }
}

template <int kBits, int kVec, bool kFeedback>
void LaunchQuantizeVec(const DeviceQuantParams& dp, int group_log2, const float* in, const float* r,
                       uint8_t* out, float* next, unsigned long long* bad, cudaStream_t stream) {
  const unsigned grid = Grid(dp.blocks << group_log2, kThreads);
  if (AlignmentOf(out, 4) == 4) {
    QuantizeVecKernel<kBits, kVec, true, kFeedback>
        <<<grid, kThreads, 0, stream>>>(dp, group_log2, in, r, out, next, bad);
  } else {
    QuantizeVecKernel<kBits, kVec, false, kFeedback>
        <<<grid, kThreads, 0, stream>>>(dp, group_log2, in, r, out, next, bad);
  }
}

// Blocks of up to 256 floats: 2 float4s per lane, block / 8 lanes per block; 512: a warp with
// 4 float4s per lane; 1024 and more: a warp with 8 (re-reading blocks above 1024 floats).
template <int kBits, bool kFeedback>
void QuantizeVec(const DeviceQuantParams& dp, const float* in, const float* r, uint8_t* out,
                 float* next, unsigned long long* bad, cudaStream_t stream) {
  if (dp.block <= 256) {
    LaunchQuantizeVec<kBits, 2, kFeedback>(dp, dp.block_log2 - 3, in, r, out, next, bad, stream);
  } else if (dp.block == 512) {
    LaunchQuantizeVec<kBits, 4, kFeedback>(dp, 5, in, r, out, next, bad, stream);
  } else {
    LaunchQuantizeVec<kBits, 8, kFeedback>(dp, 5, in, r, out, next, bad, stream);
  }
}

template <bool kFeedback>
void QuantizeVecBits(const DeviceQuantParams& dp, const float* in, const float* r, uint8_t* out,
                     float* next, unsigned long long* bad, cudaStream_t stream) {
  switch (dp.bits) {
    case 8:
      QuantizeVec<8, kFeedback>(dp, in, r, out, next, bad, stream);
      break;
    case 4:
      QuantizeVec<4, kFeedback>(dp, in, r, out, next, bad, stream);
      break;
    default:
      QuantizeVec<2, kFeedback>(dp, in, r, out, next, bad, stream);
      break;
  }
}

// Queues the quantizer of (in + r, or in when r is null) on the stream.
void LaunchQuantize(DeviceQuantParams dp, const float* in, const float* r, uint8_t* out,
                    unsigned long long* bad, cudaStream_t stream) {
  dp.vec_floats = Aligned16(in) && (r == nullptr || Aligned16(r));
  QuantizeVecBits<false>(dp, in, r, out, nullptr, bad, stream);
  LONGHAUL_CUDA_CHECK_LAUNCH();
}

template <int kBits>
void LaunchFeedback(const DeviceQuantParams& dp, const float* in, const float* residual,
                    float* next, const uint8_t* enc, const unsigned long long* bad,
                    cudaStream_t stream) {
  const unsigned grid = Grid((dp.n + 3) / 4, kThreads * kQuadsPerThread);
  if (Aligned16(in) && Aligned16(residual) && Aligned16(next) && AlignmentOf(enc, 4) == 4) {
    FeedbackKernel<kBits, true><<<grid, kThreads, 0, stream>>>(dp, in, residual, next, enc, bad);
  } else {
    FeedbackKernel<kBits, false><<<grid, kThreads, 0, stream>>>(dp, in, residual, next, enc, bad);
  }
}

}  // namespace

int64_t QuantizeOnDevice(const kernels::QuantParams& p, const float* in, uint64_t n, uint8_t* out,
                         cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  const DeviceQuantParams dp = ToDevice(p, n);
  ErrorIndex bad(stream);
  LaunchQuantize(dp, in, nullptr, out, bad.get(), stream);
  return bad.Read();
}

int64_t QuantizeWithFeedbackOnDevice(const kernels::QuantParams& p, const float* in, uint64_t n,
                                     const float* residual, float* next_residual, uint8_t* out,
                                     cudaStream_t stream) {
  if (n == 0) return kernels::kNone;
  const DeviceQuantParams dp = ToDevice(p, n);
  ErrorIndex bad(stream);
  if (next_residual != residual && Aligned16(in) && Aligned16(residual) &&
      Aligned16(next_residual)) {
    // One pass: x and the residual read once, the codes and the new residual written once.
    DeviceQuantParams fused = dp;
    fused.vec_floats = true;
    QuantizeVecBits<true>(fused, in, residual, out, next_residual, bad.get(), stream);
  } else {
    // In place (or unaligned): the residual may change only once the whole quantizer succeeded.
    LaunchQuantize(dp, in, residual, out, bad.get(), stream);
    switch (dp.bits) {
      case 8:
        LaunchFeedback<8>(dp, in, residual, next_residual, out, bad.get(), stream);
        break;
      case 4:
        LaunchFeedback<4>(dp, in, residual, next_residual, out, bad.get(), stream);
        break;
      default:
        LaunchFeedback<2>(dp, in, residual, next_residual, out, bad.get(), stream);
        break;
    }
  }
  LONGHAUL_CUDA_CHECK_LAUNCH();
  return bad.Read();
}

}  // namespace longhaul::compression::cuda
