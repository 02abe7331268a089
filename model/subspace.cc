// The subspace-cut variant's fixed basis and token table (see subspace.h).
#include "model/subspace.h"

#include <cmath>
#include <random>

#include "model/init.h"

namespace longhaul::model {

SubspaceTables MakeSubspaceTables(const ModelConfig& config) {
  const int C = config.channels, K = config.residual_subspace, Vp = config.padded_vocab_size;
  // One stream per table, keyed by the shape only (never by the job's seed): every site
  // must build the same tables.
  const uint64_t key = (uint64_t(C) << 40) ^ (uint64_t(K) << 20) ^ uint64_t(Vp);
  SubspaceTables t;
  // U: Gaussian columns, orthonormalised by modified Gram-Schmidt run twice, in double.
  std::vector<float> gauss(size_t(C) * K);
  FillNormalStream(0x5B5C1A7EDull ^ key, 1.0, gauss.data(), int64_t(gauss.size()));
  std::vector<double> q(gauss.begin(), gauss.end());  // (C, K) row-major
  for (int j = 0; j < K; ++j) {
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < j; ++i) {
        double dot = 0.0;
        for (int r = 0; r < C; ++r) dot += q[size_t(r) * K + i] * q[size_t(r) * K + j];
        for (int r = 0; r < C; ++r) q[size_t(r) * K + j] -= dot * q[size_t(r) * K + i];
      }
    }
    double norm = 0.0;
    for (int r = 0; r < C; ++r) norm += q[size_t(r) * K + j] * q[size_t(r) * K + j];
    norm = std::sqrt(norm);
    for (int r = 0; r < C; ++r) q[size_t(r) * K + j] /= norm;
  }
  t.basis.resize(size_t(C) * K);
  t.basis_transposed.resize(size_t(K) * C);
  for (int r = 0; r < C; ++r) {
    for (int j = 0; j < K; ++j) {
      const float v = float(q[size_t(r) * K + j]);
      t.basis[size_t(r) * K + j] = v;
      t.basis_transposed[size_t(j) * C + r] = v;
    }
  }
  t.token_table.assign(size_t(Vp) * C, 0.0f);
  // N(0, 0.06): from a sweep on the tiny model (0, 0.007, 0.02, 0.06, 0.1, 0.2; 0 and
  // 0.007 lose the most, 0.06 the least; docs/BENCHMARKS.md, "Subspace-cut variant").
  const double scale = kTokenTableStd;
  FillNormalStream(0xE3B0C44298FC1C14ull ^ key, scale, t.token_table.data(),
                   int64_t(config.vocab_size) * C);
  return t;
}

}  // namespace longhaul::model
