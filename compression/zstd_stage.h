// The zstd byte stage, applicable after any value codec. Its payload is the inner payload's
// size followed by one zstd frame; decoding checks the declared size against a caller-given
// cap before allocating, and that the frame fills exactly that size with nothing after it.
//
// Layout: u64 inner size, then one zstd frame holding exactly that many bytes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace longhaul::compression {

// Upper bound of the stage's output for `inner_size` input bytes.
uint64_t ZstdMaxSize(uint64_t inner_size);

// Appends the compressed form of `in` to *out. REQUIRES: level in zstd's range.
Status ZstdCompress(std::span<const uint8_t> in, int level, std::vector<uint8_t>* out);

// Replaces *inner with the decompressed bytes. Fails, before allocating, when the declared
// size exceeds max_inner_size.
Status ZstdDecompress(std::span<const uint8_t> in, uint64_t max_inner_size,
                      std::vector<uint8_t>* inner);

}  // namespace longhaul::compression
