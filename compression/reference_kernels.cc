// Plain scalar reference kernels: the definition every fast kernel is tested against.
// Written for clarity, one element at a time.
#include <algorithm>

#include "compression/kernels.h"
#include "compression/kernels_internal.h"

namespace longhaul::compression::kernels {
namespace internal {

uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t mag = x & kAbsMask;
  if (mag >= 0x38800000u) {  // >= 2^-14: a normal half
    uint32_t h = (mag - 0x38000000u) >> 13;
    const uint32_t rem = mag & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  if (mag < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to zero
  // A subnormal half, in units of 2^-24.
  const uint32_t e = mag >> 23;
  const uint32_t m = (mag & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;
  uint32_t h = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0) return BitsFloat(sign | FloatBits(static_cast<float>(m) * 0x1p-24f));
  if (e == 31) return BitsFloat(sign | 0x7f800000u | (m << 13));
  return BitsFloat(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t FloatToBf16(float f) {
  const uint32_t x = FloatBits(f);
  uint16_t h = static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
  if ((h & 0x7f80u) == 0x7f80u) h = static_cast<uint16_t>((h & 0x8000u) | 0x7f7fu);
  return h;
}

namespace {

// Pointers into the three regions of a quantized tensor.
struct QuantLayout {
  uint8_t* scales;
  uint8_t* mids;
  uint8_t* codes;
};
QuantLayout Layout(const QuantParams& p, uint64_t n, const uint8_t* base) {
  const uint64_t nb = QuantBlocks(p, n);
  uint8_t* b = const_cast<uint8_t*>(base);
  return {b, b + 4 * nb, b + 4 * nb * (p.asymmetric ? 2 : 1)};
}

void StoreFloat(uint8_t* p, uint64_t i, float v) { std::memcpy(p + 4 * i, &v, 4); }
float LoadFloat(const uint8_t* p, uint64_t i) {
  float v;
  std::memcpy(&v, p + 4 * i, 4);
  return v;
}

}  // namespace

int64_t QuantizeBlockReference(const QuantParams& p, const float* x, uint64_t n, uint64_t block,
                               uint8_t* out) {
  const QuantLayout l = Layout(p, n, out);
  const uint64_t start = block * p.block;
  const uint64_t len = std::min<uint64_t>(p.block, n - start);
  uint32_t absmax = 0;
  float lo = x[start], hi = x[start];
  for (uint64_t i = start; i < start + len; ++i) {
    absmax = std::max(absmax, FloatBits(x[i]) & kAbsMask);
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (absmax >= kExpMask) {
    for (uint64_t i = start; i < start + len; ++i) {
      if ((FloatBits(x[i]) & kAbsMask) >= kExpMask) return static_cast<int64_t>(i);
    }
  }
  const BlockScale b =
      p.asymmetric ? AsymmetricScale(lo, hi, p.bits) : SymmetricScale(absmax, p.bits);
  StoreFloat(l.scales, block, b.scale);
  if (p.asymmetric) StoreFloat(l.mids, block, b.mid);
  const uint32_t key = NoiseKey(p.seed);
  const uint64_t first_byte = start * p.bits / 8;
  const uint64_t last_byte = ((start + len) * p.bits + 7) / 8;
  std::memset(l.codes + first_byte, 0, last_byte - first_byte);
  for (uint64_t i = start; i < start + len; ++i) {
    const uint32_t code = QuantizeOne(x[i], b, p.stochastic, key, i);
    const uint64_t bit = i * p.bits;
    l.codes[bit / 8] |= static_cast<uint8_t>(code << (bit % 8));
  }
  return kNone;
}

bool DequantizeBlockReference(const QuantParams& p, const uint8_t* in, uint64_t n, uint64_t block,
                              float* out) {
  const QuantLayout l = Layout(p, n, in);
  const float scale = LoadFloat(l.scales, block);
  const float mid = p.asymmetric ? LoadFloat(l.mids, block) : 0.0f;
  if (!ValidBlock(scale, mid)) return false;
  const float c = p.asymmetric ? static_cast<float>((1 << p.bits) - 1) / 2
                               : static_cast<float>((1 << (p.bits - 1)) - 1);
  const uint32_t mask = (1u << p.bits) - 1;
  const uint64_t start = block * p.block;
  const uint64_t end = std::min<uint64_t>(start + p.block, n);
  for (uint64_t i = start; i < end; ++i) {
    const uint64_t bit = i * p.bits;
    const uint32_t code = (l.codes[bit / 8] >> (bit % 8)) & mask;
    out[i] = DequantizeOne(code, scale, mid, c, p.asymmetric);
  }
  return true;
}

}  // namespace internal

namespace {

using internal::Bf16ToFloat;
using internal::FloatBits;
using internal::FloatToBf16;
using internal::FloatToHalf;
using internal::HalfToFloat;
using internal::kAbsMask;
using internal::kExpMask;
using internal::kHalfLimitBits;
using internal::LoadU16;
using internal::StoreU16;

int64_t CopyFloatsRef(const void* in, uint64_t n, void* out) {
  const auto* src = static_cast<const uint8_t*>(in);
  auto* dst = static_cast<uint8_t*>(out);
  for (uint64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, src + 4 * i, 4);
    if ((bits & kAbsMask) >= kExpMask) return static_cast<int64_t>(i);
    std::memcpy(dst + 4 * i, &bits, 4);
  }
  return kNone;
}

int64_t FloatsToHalfRef(const float* in, uint64_t n, uint8_t* out) {
  for (uint64_t i = 0; i < n; ++i) {
    if ((FloatBits(in[i]) & kAbsMask) >= kHalfLimitBits) return static_cast<int64_t>(i);
    StoreU16(out, i, FloatToHalf(in[i]));
  }
  return kNone;
}

int64_t HalfToFloatsRef(const uint8_t* in, uint64_t n, float* out) {
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t h = LoadU16(in, i);
    if ((h & 0x7c00u) == 0x7c00u) return static_cast<int64_t>(i);
    out[i] = HalfToFloat(h);
  }
  return kNone;
}

int64_t FloatsToBf16Ref(const float* in, uint64_t n, uint8_t* out) {
  for (uint64_t i = 0; i < n; ++i) {
    if ((FloatBits(in[i]) & kAbsMask) >= kExpMask) return static_cast<int64_t>(i);
    StoreU16(out, i, FloatToBf16(in[i]));
  }
  return kNone;
}

int64_t Bf16ToFloatsRef(const uint8_t* in, uint64_t n, float* out) {
  for (uint64_t i = 0; i < n; ++i) {
    const uint16_t h = LoadU16(in, i);
    if ((h & 0x7f80u) == 0x7f80u) return static_cast<int64_t>(i);
    out[i] = Bf16ToFloat(h);
  }
  return kNone;
}

int64_t QuantizeRef(const QuantParams& p, const float* in, uint64_t n, uint8_t* out) {
  const uint64_t nb = QuantBlocks(p, n);
  for (uint64_t b = 0; b < nb; ++b) {
    int64_t bad = internal::QuantizeBlockReference(p, in, n, b, out);
    if (bad != kNone) return bad;
  }
  return kNone;
}

int64_t DequantizeRef(const QuantParams& p, const uint8_t* in, uint64_t n, float* out) {
  const uint64_t nb = QuantBlocks(p, n);
  for (uint64_t b = 0; b < nb; ++b) {
    if (!internal::DequantizeBlockReference(p, in, n, b, out)) return static_cast<int64_t>(b);
  }
  return kNone;
}

uint64_t SelectAtLeastRef(const float* x, uint64_t n, uint32_t threshold, uint32_t* idx) {
  uint64_t count = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if ((FloatBits(x[i]) & kAbsMask) >= threshold) idx[count++] = static_cast<uint32_t>(i);
  }
  return count;
}

}  // namespace

const KernelTable& ReferenceKernels() {
  static const KernelTable table = {
      "reference",     CopyFloatsRef, FloatsToHalfRef, HalfToFloatsRef,  FloatsToBf16Ref,
      Bf16ToFloatsRef, QuantizeRef,   DequantizeRef,   SelectAtLeastRef,
  };
  return table;
}

}  // namespace longhaul::compression::kernels
