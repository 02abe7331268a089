// Seeded, split-invariant GPT-2 initialisation (see init.h).
#include "model/init.h"

#include <cmath>
#include <random>

namespace longhaul::model {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Fills out[0..n) with N(0, std) by Box-Muller over the stream's uniform doubles.
void FillNormal(std::mt19937_64& rng, double std, float* out, int64_t n) {
  constexpr double kTwoPi = 6.283185307179586476925;
  for (int64_t i = 0; i < n; i += 2) {
    // Uniforms in (0, 1] and [0, 1) from the top 53 bits.
    const double u1 = double((rng() >> 11) + 1) * 0x1.0p-53;
    const double u2 = double(rng() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = float(std * r * std::cos(kTwoPi * u2));
    if (i + 1 < n) out[i + 1] = float(std * r * std::sin(kTwoPi * u2));
  }
}

}  // namespace

void FillNormalStream(uint64_t seed, double std, float* out, int64_t n) {
  std::mt19937_64 rng(SplitMix64(seed));
  FillNormal(rng, std, out, n);
}

void InitSlice(const ParameterLayout& layout, uint64_t seed, Tensor t, int layer, float* out) {
  const ModelConfig& c = layout.config();
  const int64_t n = layout.slice_size(t, layer);
  if (!IsPerLayer(t)) layer = 0;
  switch (t) {
    case Tensor::kLn1w:
    case Tensor::kLn2w:
    case Tensor::kLnfw:
      for (int64_t i = 0; i < n; ++i) out[i] = 1.0f;
      return;
    case Tensor::kLn1b:
    case Tensor::kLn2b:
    case Tensor::kLnfb:
    case Tensor::kQkvb:
    case Tensor::kAttprojb:
    case Tensor::kFcb:
    case Tensor::kFcprojb:
      for (int64_t i = 0; i < n; ++i) out[i] = 0.0f;
      return;
    default:
      break;
  }
  uint64_t s = SplitMix64(seed);
  s = SplitMix64(s ^ (uint64_t(int(t)) + 1) * 0xD1B54A32D192ED03ull);
  s = SplitMix64(s ^ (uint64_t(layer) + 1) * 0xABC98388FB8FAC03ull);
  std::mt19937_64 rng(s);
  double std = 0.02;
  if (t == Tensor::kWpe) std = 0.01;
  if (IsResidualProjection(t)) std = 0.02 / std::sqrt(2.0 * c.num_layers);
  int64_t filled = n;
  if (t == Tensor::kWte || t == Tensor::kHead) {  // padded rows stay 0
    filled = int64_t(c.vocab_size) * (n / c.padded_vocab_size);
  }
  FillNormal(rng, std, out, filled);
  for (int64_t i = filled; i < n; ++i) out[i] = 0.0f;
}

void InitFragment(const FragmentLayout& layout, uint64_t seed, float* out) {
  const ParameterLayout& model = layout.model();
  for (int i = 0; i < kNumTensors; ++i) {
    const Tensor t = Tensor(i);
    if (!layout.has(t)) continue;
    if (!IsPerLayer(t)) {
      InitSlice(model, seed, t, 0, out + layout.offset(t));
      continue;
    }
    for (int l = layout.begin(); l < layout.end(); ++l) {
      InitSlice(model, seed, t, l, out + layout.offset(t, l));
    }
  }
}

}  // namespace longhaul::model
