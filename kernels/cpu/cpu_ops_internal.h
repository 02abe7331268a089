// The "cpu" backend's class, shared by the files that implement its op groups:
// cpu_ops.cc (pointwise, layernorm, embedding, loss, optimizer), cpu_llama.cc (RMSNorm,
// rotary embedding, SwiGLU), cpu_matmul.cc and cpu_attention.cc (OpenBLAS). Not part of the
// interface; use MakeOps("cpu").
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>

#include "kernels/cpu/host_ops.h"
#include "kernels/cpu/thread_pool.h"

namespace longhaul::kernels {

class CpuOps final : public HostOps {
 public:
  explicit CpuOps(int threads);
  std::string name() const override { return "cpu"; }
  int threads() const { return pool_.threads(); }

  // Split across the pool: one core's memset is half the machine's write bandwidth.
  void Zero(float* p, size_t count) override;

  void EmbeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                        int B, int T, int C) override;
  void EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                         int T, int C) override;
  void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C) override;
  void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, const float* mean,
                         const float* rstd, int N, int C) override;
  void MatmulForward(float* out, const float* inp, const float* weight, const float* bias, int N,
                     int C, int OC) override;
  void MatmulBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                      const float* inp, const float* weight, int N, int C, int OC) override;
  void MatmulBackwardInto(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int N, int C, int OC) override;
  void AttentionForward(float* out, float* preatt, float* att, const float* qkv, int B, int T,
                        int C, int NH) override;
  void AttentionBackward(float* dqkv, float* dpreatt, float* datt, const float* dout,
                         const float* qkv, const float* att, int B, int T, int C, int NH) override;
  void GeluForward(float* out, const float* inp, size_t n) override;
  void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) override;
  void ResidualForward(float* out, const float* a, const float* b, size_t n) override;
  void ResidualBackward(float* da, float* db, const float* dout, size_t n) override;
  void SoftmaxCrossEntropyForward(float* probs, float* losses, const float* logits,
                                  const int32_t* targets, int B, int T, int V, int Vp) override;
  void SoftmaxCrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                   float dloss, int B, int T, int V, int Vp) override;
  void SoftmaxCrossEntropyBackwardInto(float* dlogits, const float* probs, const int32_t* targets,
                                       float dloss, int B, int T, int V, int Vp) override;
  void AdamW(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
             float beta2, float eps, float weight_decay, float grad_scale, int t) override;
  double SumSquares(const float* x, size_t n) override;

  // Llama-family ops (cpu_llama.cc; attention in cpu_attention.cc).
  bool HasLlamaOps() const override { return true; }
  void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                      float eps) override;
  void RmsNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                       const float* weight, const float* rstd, int N, int C) override;
  void RopeForward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int HD) override;
  void RopeBackward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                    int HD) override;
  void SwiGluForward(float* out, const float* inp, int N, int I) override;
  void SwiGluBackward(float* dinp, const float* inp, const float* dout, int N, int I) override;
  void GroupedAttentionForward(float* out, float* preatt, float* att, const float* qkv, int B,
                               int T, int NH, int NKV, int HD) override;
  void GroupedAttentionBackward(float* dqkv, float* dpreatt, float* datt, const float* dout,
                                const float* qkv, const float* att, int B, int T, int NH, int NKV,
                                int HD) override;

 private:
  // Runs fn(begin, end) over [0, n) split into blocks of whole items, each block about
  // kGrain units of work (`item_cost` units per item), on the pool. The blocks depend only on
  // n and item_cost, never on the thread count.
  void ParallelRange(size_t n, size_t item_cost, const std::function<void(size_t, size_t)>& fn);

  // c (M,N) = op(a) (M,K) x op(b) (K,N) + beta * c, row-major, as tiles on the pool, each a
  // single-threaded sgemm over all of K (cpu_matmul.cc).
  void Gemm(bool trans_a, bool trans_b, int M, int N, int K, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc);
  // MatmulBackward with dinp scaled by dinp_beta before the product is added (1: accumulate;
  // 0: write).
  void MatmulBackwardBeta(float* dinp, float dinp_beta, float* dweight, float* dbias,
                          const float* dout, const float* inp, const float* weight, int N, int C,
                          int OC);

  // Work units (about one flop or float touched each) per parallel block: ~10-50 us.
  static constexpr size_t kGrain = size_t{1} << 16;

  ThreadPool pool_;
};

}  // namespace longhaul::kernels
