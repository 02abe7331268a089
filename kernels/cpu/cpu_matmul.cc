// "cpu" backend matmuls: OpenBLAS sgemm (threaded by OpenBLAS itself) for the products, and
// a column-split loop for the bias gradient so its sums keep one fixed order.
#include <cblas.h>

#include <algorithm>

#include "kernels/cpu/cpu_ops_internal.h"

namespace longhaul::kernels {

void CpuOps::MatmulForward(float* out, const float* inp, const float* weight, const float* bias,
                           int N, int C, int OC) {
  if (N == 0 || OC == 0) return;
  float beta = 0.0f;
  if (bias != nullptr) {
    // out starts as the bias in every row, then sgemm adds inp x weight^T onto it.
#pragma omp parallel for num_threads(ThreadsFor(size_t{1} * N * OC)) schedule(static)
    for (int n = 0; n < N; n++) std::copy(bias, bias + OC, out + static_cast<size_t>(n) * OC);
    beta = 1.0f;
  }
  if (C == 0) {
    if (bias == nullptr) std::fill(out, out + static_cast<size_t>(N) * OC, 0.0f);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta, out,
              OC);
}

void CpuOps::MatmulBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                            const float* inp, const float* weight, int N, int C, int OC) {
  if (N == 0 || OC == 0) return;
  if (C > 0) {
    // dinp (N,C) += dout (N,OC) x weight (OC,C)
    if (dinp != nullptr) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                  1.0f, dinp, C);
    }
    // dweight (OC,C) += dout^T (OC,N) x inp (N,C)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
                dweight, C);
  }
  if (dbias != nullptr) {
    constexpr int kCols = 64;
    const int chunks = (OC + kCols - 1) / kCols;
#pragma omp parallel for num_threads(ThreadsFor(size_t{1} * N * OC)) schedule(static)
    for (int c = 0; c < chunks; c++) {
      const int o0 = c * kCols, o1 = std::min(OC, o0 + kCols);
      for (int n = 0; n < N; n++) {
        const float* d = dout + static_cast<size_t>(n) * OC;
        for (int o = o0; o < o1; o++) dbias[o] += d[o];
      }
    }
  }
}

}  // namespace longhaul::kernels
