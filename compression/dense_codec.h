// Dense value codecs: every value of a float tensor encoded as fp32, fp16, bf16 or block
// quantized q8/q4/q2 (see kernels.h for the quantized layout). The encoded size depends only
// on the spec and the value count, so a decoder knows exactly how many bytes to expect.
// NaN and infinity are rejected on encode and on decode, and so are values a format cannot
// hold within its error bound (|x| >= 65520 for fp16); see docs/compression.md.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"
#include "compression/codec_spec.h"
#include "compression/kernels.h"

namespace longhaul::compression {

// Bytes EncodeDense writes for n values.
uint64_t DenseEncodedSize(const ValueSpec& spec, uint64_t n);

// Encodes `in` into exactly DenseEncodedSize(spec, in.size()) bytes at `out`.
// `seed` drives stochastic rounding (ignored otherwise). Errors name the bad value's index.
Status EncodeDense(const ValueSpec& spec, std::span<const float> in, uint64_t seed, uint8_t* out);

// The error EncodeDense gives for `value` at `index` (device encoders report the same).
Status DenseValueError(const ValueSpec& spec, float value, int64_t index);

// Decodes out.size() values. REQUIRES nothing of `in`: its size must equal
// DenseEncodedSize(spec, out.size()) or an error is returned. The output is finite.
Status DecodeDense(const ValueSpec& spec, std::span<const uint8_t> in, std::span<float> out);

// DecodeDense's check of its input's size: `bytes` must be DenseEncodedSize(spec, n).
Status CheckDenseEncodedSize(const ValueSpec& spec, uint64_t bytes, uint64_t n);

// The error DecodeDense gives when the decode kernel reports `index` (an encoded value for
// fp32/fp16/bf16, a block for the quantizers); device decoders report the same.
Status DenseDecodeError(const ValueSpec& spec, int64_t index);

// The quantization kernels' parameters for a quantized spec (kernels.h); `seed` drives
// stochastic rounding when encoding and does not matter to decoding.
kernels::QuantParams QuantFor(const ValueSpec& spec, uint64_t seed);

}  // namespace longhaul::compression
