// The grad-sums frame: how the stages of one gossip replica pass their gradient sums along
// their pipeline (TENSOR_KIND_GRAD_SUMS toward the first stage, TENSOR_KIND_GRAD_TOTAL back),
// so that every stage computes the replica's clipping scale without the coordinator
// (stage_runner.h). Little-endian: magic "LHGN", version u32 (1), count u32, count float64
// sums (one per parameter slice, ParameterLayout::num_slices), then the XXH64 of everything
// before it. A frame from a peer is hostile: its size, magic, version, count (against the
// model's slices), checksum and every value (not negative: each is a sum of squares; NaN and
// +inf pass, as a diverged gradient's sums, which clip as the coordinator would clip them)
// are checked.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"

namespace longhaul::daemon {

inline constexpr size_t kGradSumsHeaderBytes = 12;

std::vector<uint8_t> EncodeGradSums(std::span<const double> sums);
// The frame's size for `count` sums.
inline size_t GradSumsFrameBytes(size_t count) { return kGradSumsHeaderBytes + 8 * count + 8; }
// REQUIRES nothing of `bytes`; fails (InvalidArgument or DataLoss) naming what is wrong,
// including a count other than `slices`.
StatusOr<std::vector<double>> DecodeGradSums(std::span<const uint8_t> bytes, size_t slices);

}  // namespace longhaul::daemon
