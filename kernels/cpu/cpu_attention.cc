// "cpu" backend causal attention, grouped-query in general (GPT-2's has as many key/value
// heads as query heads), per (batch, head) with OpenBLAS sgemm:
//   forward:  att = softmax_causal(scale * Q K^T);  out = att V
//   backward: dV += att^T dout;  datt = dout V^T;  dpre = scale * att * (datt - rowdot);
//             dQ += dpre K;  dK += dpre^T Q
// Rows are taken in blocks of kRowBlock so that each block's products stop at the causal
// edge (about half the flops of full T x T products). Scores are written straight into `att`
// and the softmax runs in place, so `preatt` is never touched; `datt` holds dpre in place.
// (b, h) pairs (backward: (b, key/value head)) are tasks on the backend's pool, each with
// single-threaded sgemm; the tasks write disjoint parts of out / dqkv, so nothing depends on
// timing or the thread count.
#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_ops_internal.h"
#include "kernels/cpu/vec_math.h"

namespace longhaul::kernels {
namespace {

constexpr int kRowBlock = 64;

}  // namespace

void CpuOps::AttentionForward(float* out, float* preatt, float* att, const float* qkv, int B, int T,
                              int C, int NH) {
  if (NH == 0) return;
  GroupedAttentionForward(out, preatt, att, qkv, B, T, NH, NH, C / NH);
}

void CpuOps::AttentionBackward(float* dqkv, float* dpreatt, float* datt, const float* dout,
                               const float* qkv, const float* att, int B, int T, int C, int NH) {
  if (NH == 0) return;
  GroupedAttentionBackward(dqkv, dpreatt, datt, dout, qkv, att, B, T, NH, NH, C / NH);
}

void CpuOps::GroupedAttentionForward(float* out, float* /*preatt*/, float* att, const float* qkv,
                                     int B, int T, int NH, int NKV, int HD) {
  if (B == 0 || T == 0 || NH == 0 || HD == 0) return;
  const int W = (NH + 2 * NKV) * HD, OW = NH * HD, group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const size_t TT = static_cast<size_t>(T) * T;
  pool_.ParallelFor(size_t{1} * B * NH, [&](size_t bh) {
    const int b = bh / NH, h = bh % NH;
    const float* row0 = qkv + static_cast<size_t>(b) * T * W;
    const float* q = row0 + h * HD;
    const float* k = row0 + (NH + h / group) * HD;
    const float* v = row0 + (NH + NKV + h / group) * HD;
    float* a = att + bh * TT;
    float* o = out + static_cast<size_t>(b) * T * OW + h * HD;
    for (int r0 = 0; r0 < T; r0 += kRowBlock) {
      const int r1 = std::min(T, r0 + kRowBlock), rows = r1 - r0;
      float* a_blk = a + static_cast<size_t>(r0) * T;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, HD, scale,
                  q + static_cast<size_t>(r0) * W, W, k, W, 0.0f, a_blk, T);
      for (int t = r0; t < r1; t++) {
        float* row = a + static_cast<size_t>(t) * T;
        float maxval = vec::Max(row, t + 1);
        float sum = vec::ExpShiftSum(row, row, maxval, t + 1);
        vec::Scale(row, 1.0f / sum, t + 1);
        std::fill(row + t + 1, row + T, 0.0f);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HD, r1, 1.0f, a_blk, T, v, W,
                  0.0f, o + static_cast<size_t>(r0) * OW, OW);
    }
  });
}

// Tasks are (batch, key/value head) pairs: the query heads of a group add into the same dK
// and dV, so one task runs them one after another, in head order.
void CpuOps::GroupedAttentionBackward(float* dqkv, float* /*dpreatt*/, float* datt,
                                      const float* dout, const float* qkv, const float* att, int B,
                                      int T, int NH, int NKV, int HD) {
  if (B == 0 || T == 0 || NH == 0 || HD == 0) return;
  const int W = (NH + 2 * NKV) * HD, OW = NH * HD, group = NH / NKV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const size_t TT = static_cast<size_t>(T) * T;
  pool_.ParallelFor(size_t{1} * B * NKV, [&](size_t bg) {
    const int b = bg / NKV, g = bg % NKV;
    const size_t row0 = static_cast<size_t>(b) * T * W;
    const float *k = qkv + row0 + (NH + g) * HD, *v = qkv + row0 + (NH + NKV + g) * HD;
    float *dk = dqkv + row0 + (NH + g) * HD, *dv = dqkv + row0 + (NH + NKV + g) * HD;
    for (int h = g * group; h < (g + 1) * group; h++) {
      const size_t bh = static_cast<size_t>(b) * NH + h;
      const float* q = qkv + row0 + h * HD;
      float* dq = dqkv + row0 + h * HD;
      const float* a = att + bh * TT;
      float* d = datt + bh * TT;
      const float* dout_h = dout + static_cast<size_t>(b) * T * OW + h * HD;
      for (int r0 = 0; r0 < T; r0 += kRowBlock) {
        const int r1 = std::min(T, r0 + kRowBlock), rows = r1 - r0;
        const float* a_blk = a + static_cast<size_t>(r0) * T;
        float* d_blk = d + static_cast<size_t>(r0) * T;
        const float* dout_blk = dout_h + static_cast<size_t>(r0) * OW;
        // dV[0:r1] += att[r0:r1, 0:r1]^T dout[r0:r1]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, HD, rows, 1.0f, a_blk, T, dout_blk,
                    OW, 1.0f, dv, W);
        // datt[r0:r1, 0:r1] = dout[r0:r1] V[0:r1]^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1, HD, 1.0f, dout_blk, OW, v, W,
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
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, HD, r1, 1.0f, d_blk, T, k, W,
                    1.0f, dq + static_cast<size_t>(r0) * W, W);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, HD, rows, 1.0f, d_blk, T,
                    q + static_cast<size_t>(r0) * W, W, 1.0f, dk, W);
      }
    }
  });
}

}  // namespace longhaul::kernels
