// "cpu" backend causal attention, per (batch, head) with OpenBLAS sgemm:
//   forward:  att = softmax_causal(scale * Q K^T);  out = att V
//   backward: dV += att^T dout;  datt = dout V^T;  dpre = scale * att * (datt - rowdot);
//             dQ += dpre K;  dK += dpre^T Q
// Rows are taken in blocks of kRowBlock so that each block's products stop at the causal
// edge (about half the flops of full T x T products). Scores are written straight into `att`
// and the softmax runs in place, so `preatt` is never touched; `datt` holds dpre in place.
// (b, h) pairs are tasks on the backend's pool, each with single-threaded sgemm; the pairs
// write disjoint parts of out / dqkv, so nothing depends on timing or the thread count.
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops_internal.h"
#include "kernels/cpu/vec_math.h"

namespace longhaul::kernels {
namespace {

constexpr int kRowBlock = 64;

}  // namespace

void CpuOps::AttentionForward(float* out, float* /*preatt*/, float* att, const float* qkv, int B,
                              int T, int C, int NH) {
  if (B == 0 || T == 0 || C == 0) return;
  const int C3 = 3 * C, hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const size_t TT = static_cast<size_t>(T) * T;
  pool_.ParallelFor(size_t{1} * B * NH, [&](size_t bh) {
    const int b = bh / NH, h = bh % NH;
    const float* q = qkv + static_cast<size_t>(b) * T * C3 + h * hs;
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* a = att + bh * TT;
    float* o = out + static_cast<size_t>(b) * T * C + h * hs;
    for (int r0 = 0; r0 < T; r0 += kRowBlock) {
      const int r1 = std::min(T, r0 + kRowBlock), rows = r1 - r0;
      float* a_blk = a + static_cast<size_t>(r0) * T;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, scale,
                  q + static_cast<size_t>(r0) * C3, C3, k, C3, 0.0f, a_blk, T);
      for (int t = r0; t < r1; t++) {
        float* row = a + static_cast<size_t>(t) * T;
        float maxval = vec::Max(row, t + 1);
        float sum = vec::ExpShiftSum(row, row, maxval, t + 1);
        vec::Scale(row, 1.0f / sum, t + 1);
        std::fill(row + t + 1, row + T, 0.0f);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f, a_blk, T, v, C3,
                  0.0f, o + static_cast<size_t>(r0) * C, C);
    }
  });
}

void CpuOps::AttentionBackward(float* dqkv, float* /*dpreatt*/, float* datt, const float* dout,
                               const float* qkv, const float* att, int B, int T, int C, int NH) {
  if (B == 0 || T == 0 || C == 0) return;
  const int C3 = 3 * C, hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const size_t TT = static_cast<size_t>(T) * T;
  pool_.ParallelFor(size_t{1} * B * NH, [&](size_t bh) {
    const int b = bh / NH, h = bh % NH;
    const size_t off = static_cast<size_t>(b) * T * C3 + h * hs;
    const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
    float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
    const float* a = att + bh * TT;
    float* d = datt + bh * TT;
    const float* dout_h = dout + static_cast<size_t>(b) * T * C + h * hs;
    for (int r0 = 0; r0 < T; r0 += kRowBlock) {
      const int r1 = std::min(T, r0 + kRowBlock), rows = r1 - r0;
      const float* a_blk = a + static_cast<size_t>(r0) * T;
      float* d_blk = d + static_cast<size_t>(r0) * T;
      const float* dout_blk = dout_h + static_cast<size_t>(r0) * C;
      // dV[0:r1] += att[r0:r1, 0:r1]^T dout[r0:r1]
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.0f, a_blk, T, dout_blk,
                  C, 1.0f, dv, C3);
      // datt[r0:r1, 0:r1] = dout[r0:r1] V[0:r1]^T
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, hs, 1.0f, dout_blk, C, v, C3,
                  0.0f, d_blk, T);
      // Softmax backward in place, with the score scale folded in; zero past the causal edge.
      for (int t = r0; t < r1; t++) {
        const float* ar = a + static_cast<size_t>(t) * T;
        float* dr = d + static_cast<size_t>(t) * T;
        const float dot = vec::Dot(ar, dr, t + 1);
        for (int t2 = 0; t2 <= t; t2++) dr[t2] = scale * ar[t2] * (dr[t2] - dot);
        std::fill(dr + t + 1, dr + r1, 0.0f);
      }
      // dQ[r0:r1] += dpre[r0:r1, 0:r1] K[0:r1];  dK[0:r1] += dpre[r0:r1, 0:r1]^T Q[r0:r1]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, r1, 1.0f, d_blk, T, k, C3,
                  1.0f, dq + static_cast<size_t>(r0) * C3, C3);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, rows, 1.0f, d_blk, T,
                  q + static_cast<size_t>(r0) * C3, C3, 1.0f, dk, C3);
    }
  });
}

}  // namespace longhaul::kernels
