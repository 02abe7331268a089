// Dense value codecs on top of the kernel table (see dense_codec.h).
#include "compression/dense_codec.h"

#include <cmath>

#include "compression/kernels.h"
#include "compression/strings.h"

namespace longhaul::compression {

kernels::QuantParams QuantFor(const ValueSpec& spec, uint64_t seed) {
  kernels::QuantParams p;
  p.bits = spec.bits();
  p.block = spec.block;
  p.asymmetric = spec.asymmetric;
  p.stochastic = spec.stochastic;
  p.seed = seed;
  return p;
}

Status DenseValueError(const ValueSpec& spec, float v, int64_t index) {
  const std::string_view name = ValueFormatName(spec.format);
  if (std::isfinite(v)) {
    return absl::OutOfRangeError(Cat(name, ": value ", v, " at index ", index,
                                     " is outside the format's range (|x| < 65520)"));
  }
  return absl::InvalidArgumentError(
      Cat(name, ": value ", v, " at index ", index, " is not finite; NaN and Inf are rejected"));
}

namespace {

Status BadValue(const ValueSpec& spec, std::span<const float> in, int64_t index) {
  return DenseValueError(spec, in[static_cast<size_t>(index)], index);
}

}  // namespace

uint64_t DenseEncodedSize(const ValueSpec& spec, uint64_t n) {
  switch (spec.format) {
    case ValueFormat::kFp32:
      return 4 * n;
    case ValueFormat::kFp16:
    case ValueFormat::kBf16:
      return 2 * n;
    default:
      return kernels::QuantizedSize(QuantFor(spec, 0), n);
  }
}

Status EncodeDense(const ValueSpec& spec, std::span<const float> in, uint64_t seed, uint8_t* out) {
  const kernels::KernelTable& k = kernels::Kernels();
  const uint64_t n = in.size();
  int64_t bad = kernels::kNone;
  switch (spec.format) {
    case ValueFormat::kFp32:
      bad = k.copy_floats(in.data(), n, out);
      break;
    case ValueFormat::kFp16:
      bad = k.floats_to_half(in.data(), n, out);
      break;
    case ValueFormat::kBf16:
      bad = k.floats_to_bf16(in.data(), n, out);
      break;
    default:
      bad = k.quantize(QuantFor(spec, seed), in.data(), n, out);
      break;
  }
  if (bad != kernels::kNone) return BadValue(spec, in, bad);
  return absl::OkStatus();
}

Status DecodeDense(const ValueSpec& spec, std::span<const uint8_t> in, std::span<float> out) {
  const uint64_t n = out.size();
  RETURN_IF_ERROR(CheckDenseEncodedSize(spec, in.size(), n));
  const kernels::KernelTable& k = kernels::Kernels();
  int64_t bad = kernels::kNone;
  switch (spec.format) {
    case ValueFormat::kFp32:
      bad = k.copy_floats(in.data(), n, out.data());
      break;
    case ValueFormat::kFp16:
      bad = k.half_to_floats(in.data(), n, out.data());
      break;
    case ValueFormat::kBf16:
      bad = k.bf16_to_floats(in.data(), n, out.data());
      break;
    default:
      bad = k.dequantize(QuantFor(spec, 0), in.data(), n, out.data());
      break;
  }
  if (bad != kernels::kNone) return DenseDecodeError(spec, bad);
  return absl::OkStatus();
}

Status CheckDenseEncodedSize(const ValueSpec& spec, uint64_t bytes, uint64_t n) {
  if (bytes == DenseEncodedSize(spec, n)) return absl::OkStatus();
  return absl::InvalidArgumentError(Cat(ValueFormatName(spec.format), ": ", bytes, " bytes for ", n,
                                        " values; expected ", DenseEncodedSize(spec, n)));
}

Status DenseDecodeError(const ValueSpec& spec, int64_t index) {
  const std::string_view name = ValueFormatName(spec.format);
  if (spec.quantized()) {
    return absl::InvalidArgumentError(
        Cat(name, ": block ", index, " has a negative or non-finite scale or midpoint"));
  }
  return absl::InvalidArgumentError(
      Cat(name, ": encoded value at index ", index, " is NaN or infinite"));
}

}  // namespace longhaul::compression
