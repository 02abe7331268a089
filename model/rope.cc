// Rotary tables (rope.h). Frequencies in double, rounded once to fp32 as Hugging Face holds
// them; angles and their cos/sin in fp32, as Hugging Face computes them at run time.
#include "model/rope.h"

#include <cmath>

namespace longhaul::model {

std::vector<float> RopeInverseFrequencies(const ModelConfig& c) {
  const int half = c.head_dim / 2;
  std::vector<float> inv(half);
  for (int j = 0; j < half; ++j) {
    const float exponent = float(2 * j) / float(c.head_dim);
    inv[j] = float(1.0 / std::pow(c.rope_theta, double(exponent)));
  }
  const RopeScaling& r = c.rope_scaling;
  if (r.factor <= 0.0) return inv;
  // llama3: long wavelengths divided by the factor, short ones kept, the band between
  // interpolated smoothly by where the wavelength falls against the original context.
  const double low_wavelen = r.original_context / r.low_freq_factor;
  const double high_wavelen = r.original_context / r.high_freq_factor;
  for (float& f : inv) {
    const double wavelen = 2.0 * M_PI / f;
    if (wavelen < high_wavelen) continue;
    if (wavelen > low_wavelen) {
      f = float(f / r.factor);
      continue;
    }
    const double smooth = (r.original_context / wavelen - r.low_freq_factor) /
                          (r.high_freq_factor - r.low_freq_factor);
    f = float((1.0 - smooth) * f / r.factor + smooth * f);
  }
  return inv;
}

RopeTables MakeRopeTables(const ModelConfig& c, int T) {
  const std::vector<float> inv = RopeInverseFrequencies(c);
  const size_t half = inv.size();
  RopeTables tables;
  tables.cos.resize(size_t(T) * half);
  tables.sin.resize(size_t(T) * half);
  for (int t = 0; t < T; ++t) {
    for (size_t j = 0; j < half; ++j) {
      const float angle = float(t) * inv[j];
      tables.cos[t * half + j] = std::cos(angle);
      tables.sin[t * half + j] = std::sin(angle);
    }
  }
  return tables;
}

}  // namespace longhaul::model
