// Encodings of the sorted positions top-k keeps: delta + LEB128 varint (small when k is a
// small fraction of n) or a bitmap of n bits (small when k is a large fraction). The encoder
// takes whichever is smaller for the actual indices; the decoder checks everything, so
// hostile bytes give an error, never an out-of-range or unsorted index.
#pragma once

#include <cstdint>
#include <span>

#include "common/status.h"

namespace longhaul::compression {

// Wire values; part of the sparse payload format.
enum class IndexEncoding : uint8_t { kDeltaVarint = 0, kBitmap = 1 };

// Bytes of the delta-varint form of strictly increasing `indices` (first index, then each
// gap minus one).
uint64_t DeltaVarintSize(std::span<const uint32_t> indices);
inline uint64_t BitmapSize(uint64_t n) { return (n + 7) / 8; }

// The smaller encoding for these indices out of n positions (delta-varint on a tie).
IndexEncoding ChooseIndexEncoding(std::span<const uint32_t> indices, uint64_t n);
uint64_t EncodedIndexSize(IndexEncoding encoding, std::span<const uint32_t> indices, uint64_t n);

// Writes EncodedIndexSize(...) bytes at `out`.
// REQUIRES: indices strictly increasing and < n.
void EncodeIndices(IndexEncoding encoding, std::span<const uint32_t> indices, uint64_t n,
                   uint8_t* out);

// Decodes exactly out.size() strictly increasing indices < n, consuming all of `in`.
Status DecodeIndices(IndexEncoding encoding, std::span<const uint8_t> in, uint64_t n,
                     std::span<uint32_t> out);

}  // namespace longhaul::compression
