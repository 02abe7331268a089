// "cpu" backend matmuls: each product is cut into output tiles of up to 1024 rows by 4096
// columns (at least 8 tiles where the shape allows), and each tile is one single-threaded
// OpenBLAS sgemm over the whole inner dimension, run as a task on the backend's pool. Each
// tile packs its rows of one operand and its columns of the other, so larger tiles pack less
// twice: 256 x 2048 tiles spent 6-10% more on a Llama step's matmuls. Tiles depend only on
// the shape, and each output element is one sgemm's dot product, so results do not depend on
// the thread count; and a core taken by another process slows the op instead of stalling it
// (see thread_pool.h). The bias gradient is a column-split loop with rows summed in order.
#include <cblas.h>

#include <algorithm>

#include "kernels/cpu/cpu_ops_internal.h"

namespace longhaul::kernels {
namespace {

constexpr int kMaxTileRows = 1024;
constexpr int kMaxTileCols = 4096;
constexpr int kMinTileRows = 128;
constexpr int kMinTileCols = 256;
// Enough tiles to balance a few threads (and to absorb a descheduled one).
constexpr int kTargetTiles = 8;

int CeilDiv(int a, int b) { return (a + b - 1) / b; }

// Splits `extent` into equal parts of at most `max_part`, rounded up to a multiple of 16.
int PartSize(int extent, int max_part) {
  int parts = CeilDiv(extent, max_part);
  return std::min(extent, CeilDiv(CeilDiv(extent, parts), 16) * 16);
}

}  // namespace

void CpuOps::Gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* a, int lda,
                  const float* b, int ldb, float beta, float* c, int ldc) {
  if (M == 0 || N == 0) return;
  int rt = PartSize(M, kMaxTileRows), ct = PartSize(N, kMaxTileCols);
  while (CeilDiv(M, rt) * CeilDiv(N, ct) < kTargetTiles) {
    if (ct >= 2 * kMinTileCols && ct >= rt) {
      ct = PartSize(N, ct / 2);
    } else if (rt >= 2 * kMinTileRows) {
      rt = PartSize(M, rt / 2);
    } else {
      break;
    }
  }
  const int row_tiles = CeilDiv(M, rt), col_tiles = CeilDiv(N, ct);
  pool_.ParallelFor(size_t{1} * row_tiles * col_tiles, [&](size_t tile) {
    const int r0 = static_cast<int>(tile / col_tiles) * rt;
    const int c0 = static_cast<int>(tile % col_tiles) * ct;
    const int m = std::min(rt, M - r0), n = std::min(ct, N - c0);
    const float* a_tile = trans_a ? a + r0 : a + static_cast<size_t>(r0) * lda;
    const float* b_tile = trans_b ? b + static_cast<size_t>(c0) * ldb : b + c0;
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, m, n, K, 1.0f, a_tile, lda, b_tile, ldb, beta,
                c + static_cast<size_t>(r0) * ldc + c0, ldc);
  });
}

void CpuOps::MatmulForward(float* out, const float* inp, const float* weight, const float* bias,
                           int N, int C, int OC) {
  if (N == 0 || OC == 0) return;
  float beta = 0.0f;
  if (bias != nullptr) {
    // out starts as the bias in every row, then the product is added onto it.
    ParallelRange(N, OC, [&](size_t begin, size_t end) {
      for (size_t n = begin; n < end; n++) std::copy(bias, bias + OC, out + n * OC);
    });
    beta = 1.0f;
  }
  if (C == 0) {
    if (bias == nullptr) std::fill(out, out + static_cast<size_t>(N) * OC, 0.0f);
    return;
  }
  // out (N,OC) = inp (N,C) x weight (OC,C)^T
  Gemm(false, true, N, OC, C, inp, C, weight, C, beta, out, OC);
}

void CpuOps::MatmulBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int N, int C, int OC) {
  MatmulBackwardBeta(dinp, 1.0f, dweight, dbias, dout, inp, weight, N, C, OC);
}

void CpuOps::MatmulBackwardInto(float* dinp, float* dweight, float* dbias, const float* dout,
                                const float* inp, const float* weight, int N, int C, int OC) {
  // OpenBLAS with beta 0 sets each tile of dinp to zero before adding the product, as the
  // accumulating form does after a Zero: the same bits, without a pass of its own.
  if (OC == 0) {
    if (N > 0 && C > 0) Zero(dinp, static_cast<size_t>(N) * C);
    return;
  }
  MatmulBackwardBeta(dinp, 0.0f, dweight, dbias, dout, inp, weight, N, C, OC);
}

void CpuOps::MatmulBackwardBeta(float* dinp, float dinp_beta, float* dweight, float* dbias,
                                const float* dout, const float* inp, const float* weight, int N,
                                int C, int OC) {
  if (N == 0 || OC == 0) return;
  if (C > 0) {
    // dinp (N,C) = dinp_beta dinp + dout (N,OC) x weight (OC,C)
    if (dinp != nullptr) Gemm(false, false, N, C, OC, dout, OC, weight, C, dinp_beta, dinp, C);
    // dweight (OC,C) += dout^T (OC,N) x inp (N,C)
    Gemm(true, false, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
  }
  if (dbias != nullptr) {
    constexpr int kCols = 64;
    ParallelRange(CeilDiv(OC, kCols), size_t{1} * N * kCols, [&](size_t begin, size_t end) {
      const int o0 = static_cast<int>(begin) * kCols;
      const int o1 = std::min(OC, static_cast<int>(end) * kCols);
      for (int n = 0; n < N; n++) {
        const float* d = dout + static_cast<size_t>(n) * OC;
        for (int o = o0; o < o1; o++) dbias[o] += d[o];
      }
    });
  }
}

}  // namespace longhaul::kernels
