// Shared helpers for the compression tests: input generators for the value classes every
// codec is checked on (random, zero, constant, denormal, huge, mixed magnitudes) and the
// per-value error bounds that docs/compression.md states for each codec.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "compression/codec_spec.h"

namespace longhaul::compression::testing {

enum class InputKind { kGaussian, kZero, kConstant, kDenormal, kHuge, kMixed, kSkewed };

inline std::vector<InputKind> AllInputKinds() {
  return {InputKind::kGaussian, InputKind::kZero,  InputKind::kConstant, InputKind::kDenormal,
          InputKind::kHuge,     InputKind::kMixed, InputKind::kSkewed};
}

inline std::string KindName(InputKind kind) {
  switch (kind) {
    case InputKind::kGaussian:
      return "gaussian";
    case InputKind::kZero:
      return "zero";
    case InputKind::kConstant:
      return "constant";
    case InputKind::kDenormal:
      return "denormal";
    case InputKind::kHuge:
      return "huge";
    case InputKind::kMixed:
      return "mixed";
    case InputKind::kSkewed:
      return "skewed";
  }
  return "?";
}

inline std::vector<float> MakeInput(InputKind kind, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case InputKind::kGaussian:
        x[i] = normal(rng);
        break;
      case InputKind::kZero:
        x[i] = (i % 3 == 0) ? -0.0f : 0.0f;
        break;
      case InputKind::kConstant:
        x[i] = -3.25f;
        break;
      case InputKind::kDenormal:
        x[i] = unit(rng) * FLT_MIN * 0.5f;  // subnormal floats (and a few zeros)
        break;
      case InputKind::kHuge:
        x[i] = unit(rng) * FLT_MAX;
        if (i % 7 == 0) x[i] = (i % 2 ? -FLT_MAX : FLT_MAX);
        break;
      case InputKind::kMixed: {
        std::uniform_real_distribution<float> exponent(-30.0f, 30.0f);
        x[i] = unit(rng) * std::pow(10.0f, exponent(rng));
        break;
      }
      case InputKind::kSkewed:  // GELU-like activations: mostly small positive, long tail
        x[i] = std::max(-0.17f, normal(rng)) * 3.0f + 10.0f;
        break;
    }
  }
  return x;
}

// The largest |x[i] - x_hat[i]| docs/compression.md allows a dense codec, for every i.
// Quantized formats: (1/2 + 2^-12) steps (one step with stochastic rounding) plus float
// rounding, where a step is max|x| / (2^(bits-1) - 1) over the element's block (symmetric) or
// (max - min) / (2^bits - 1) (asymmetric).
inline std::vector<double> DenseBounds(const ValueSpec& spec, std::span<const float> x) {
  std::vector<double> bounds(x.size());
  for (size_t start = 0; start < x.size(); start += spec.quantized() ? spec.block : x.size()) {
    const size_t end = spec.quantized() ? std::min(x.size(), start + spec.block) : x.size();
    double lo = x[start], hi = x[start], m = 0;
    for (size_t j = start; j < end; ++j) {
      lo = std::min(lo, static_cast<double>(x[j]));
      hi = std::max(hi, static_cast<double>(x[j]));
      m = std::max(m, std::fabs(static_cast<double>(x[j])));
    }
    const int bits = spec.bits();
    const double step = spec.asymmetric ? (hi - lo) / (std::ldexp(1.0, bits) - 1)
                                        : m / (std::ldexp(1.0, bits - 1) - 1);
    const double rounding = spec.stochastic ? 1.0 : 0.5;
    for (size_t j = start; j < end; ++j) {
      const double v = std::fabs(static_cast<double>(x[j]));
      switch (spec.format) {
        case ValueFormat::kFp32:
          bounds[j] = 0;
          break;
        case ValueFormat::kBf16:
          bounds[j] = v * 0x1p-8 + 0x1p-134;
          break;
        case ValueFormat::kFp16:
          bounds[j] = v * 0x1p-11 + 0x1p-25;
          break;
        default:
          bounds[j] = step * (rounding + 0x1p-12) + m * 0x1p-20 + 0x1p-140;
          break;
      }
    }
  }
  return bounds;
}

}  // namespace longhaul::compression::testing
