// CodecSpec: the parsed and validated description of one codec pipeline, such as
// "topk:0.01+q8+zstd". A pipeline has at most three stages, always in this order:
//   1. an optional sparsifier:  topk:<fraction>[,approx]
//   2. exactly one value codec: fp32 | fp16 | bf16 | q8 | q4 | q2 [:block=N][,asym][,sr]
//      (fp32 is implied when no value codec is named)
//   3. an optional byte stage:  zstd[:level=N]
// The same spec has three equivalent spellings: a string (configs, logs, CLI), a list of
// (name, numeric params) stages (as a structured config or status would list them), and the
// binary fields of the frame header (frame.h). All three go through Validate().
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace longhaul::compression {

// Wire values: these numbers are part of the frame format and must never change.
enum class ValueFormat : uint8_t {
  kFp32 = 1,
  kFp16 = 2,
  kBf16 = 3,
  kQ8 = 4,
  kQ4 = 5,
  kQ2 = 6,
};

inline constexpr uint32_t kDefaultBlock = 64;
inline constexpr uint32_t kMinBlock = 8;
inline constexpr uint32_t kMaxBlock = 65536;
inline constexpr int kDefaultZstdLevel = 3;
inline constexpr int kMinZstdLevel = -7;
inline constexpr int kMaxZstdLevel = 19;

// The dense value codec applied to every value (or to the values top-k kept).
struct ValueSpec {
  ValueFormat format = ValueFormat::kFp32;
  // Quantized formats only. Values per scale; a power of two in [kMinBlock, kMaxBlock].
  uint32_t block = kDefaultBlock;
  // Quantized formats only: store a per-block midpoint (asymmetric range) as well.
  bool asymmetric = false;
  // Quantized formats only: round stochastically (unbiased) instead of to nearest.
  bool stochastic = false;

  int bits() const;        // 32, 16, 16, 8, 4, 2
  bool quantized() const;  // q8, q4, q2
  bool operator==(const ValueSpec&) const = default;
};

struct TopKSpec {
  bool enabled = false;
  double fraction = 0;       // in (0, 1]: keep round(fraction * n) values, at least one
  bool approximate = false;  // threshold-based selection (see topk.h for its tolerance)
  bool operator==(const TopKSpec&) const = default;
};

struct ZstdSpec {
  bool enabled = false;
  int level = kDefaultZstdLevel;  // in [kMinZstdLevel, kMaxZstdLevel]
  bool operator==(const ZstdSpec&) const = default;
};

struct CodecSpec {
  TopKSpec topk;
  ValueSpec value;
  ZstdSpec zstd;

  // OK when every field is in range and no flag is set on a stage it does not apply to.
  Status Validate() const;
  // Canonical spelling; ParseCodecSpec(ToString()) == *this for every valid spec.
  std::string ToString() const;
  // True when decode(encode(x)) == x bit for bit (fp32 with or without zstd).
  bool lossless() const;
  bool operator==(const CodecSpec&) const = default;
};

// Parses "stage[+stage...]", each stage "name[:arg[,arg...]]", each arg "key=value", a bare
// flag ("asym", "sr", "approx") or a bare number for the stage's main parameter (topk's
// fraction, q*'s block, zstd's level). Errors name the offending stage and argument.
StatusOr<CodecSpec> ParseCodecSpec(std::string_view text);

// One stage as a list of stages spells it: a name and numeric params (flags are 0 or 1).
struct StageDescription {
  std::string name;
  std::vector<std::pair<std::string, double>> params;
};

// Spec -> stages, in pipeline order, with every parameter present.
std::vector<StageDescription> ToStages(const CodecSpec& spec);
// Stages -> spec; missing parameters take their defaults. The inverse of ToStages.
StatusOr<CodecSpec> FromStages(const std::vector<StageDescription>& stages);

// Number of values top-k keeps out of n: round(fraction * n), clamped to [min(1, n), n].
uint64_t TopKCount(const TopKSpec& topk, uint64_t n);

// Name of a value format as it appears in spec strings ("q8").
std::string_view ValueFormatName(ValueFormat format);

}  // namespace longhaul::compression
