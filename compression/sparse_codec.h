// Top-k sparse payloads: the k largest-magnitude values, coded with any dense value codec,
// plus their positions in the smaller index encoding. Dropped values decode as zero.
//
// Layout (little-endian):
//   u64 k                 values kept (<= n)
//   u8  index encoding    IndexEncoding
//   u64 index bytes       length of the next field
//   ... indices           index_coding.h
//   ... values            DenseEncodedSize(spec.value, k) bytes, dense_codec.h
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "compression/codec_spec.h"

namespace longhaul::compression {

// The largest sparse payload for n values (all kept, bitmap indices).
uint64_t MaxSparseSize(const CodecSpec& spec, uint64_t n);

// Appends the sparse payload of x to *out. REQUIRES: spec.topk.enabled, x.size() < 2^32.
Status EncodeSparse(const CodecSpec& spec, std::span<const float> x, uint64_t seed,
                    std::vector<uint8_t>* out);

// Decodes a sparse payload of exactly out.size() values; every byte of `in` must be used.
Status DecodeSparse(const CodecSpec& spec, std::span<const uint8_t> in, std::span<float> out);

}  // namespace longhaul::compression
