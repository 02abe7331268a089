// The kernel backend: every numeric op one training step of a GPT-2 or Llama model needs,
// forward and backward, behind one interface. A backend owns its memory (host memory for CPU
// backends, device memory for GPU ones): every float* argument points into memory from that
// backend's Alloc(). Token ids and targets are always host arrays.
//
// Backends: "cpu-ref" (plain loops, the reference every other backend is tested against),
// "cpu" (OpenBLAS matmuls, vectorized and multi-threaded loops), "cuda" and "cuda-bf16"
// (kernels/cuda, only in a --config=cuda build: fp32, and bf16 matrix products with all else
// fp32). Shapes follow llm.c: B batch, T time, C channels, NH heads, V vocabulary, Vp
// vocabulary padded to a multiple of 128 (rows V..Vp-1 of the token embedding are zero and
// never a target). Weights are stored (out, in), row-major.
//
// Conventions: "*Backward" ops ACCUMULATE (+=) into gradient outputs, as llm.c does, so a
// tensor used twice gets the sum; scratch arguments may be overwritten. Every op is
// deterministic: the same inputs on the same backend and thread count give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace longhaul::kernels {

class Ops {
 public:
  virtual ~Ops() = default;
  virtual std::string name() const = 0;

  // ---- memory ------------------------------------------------------------------------
  // `count` floats, zero-filled; nullptr when count == 0. Aborts with a message when out of
  // memory (the model sizes its buffers up front, so this only happens at start-up).
  virtual float* Alloc(size_t count) = 0;
  virtual void Free(float* p) = 0;
  // Bytes this backend holds from Alloc now, and the most it held at once (the cost model's
  // memory predictions are checked against these); -1 where a backend does not count.
  virtual int64_t allocated_bytes() const { return -1; }
  virtual int64_t peak_allocated_bytes() const { return -1; }
  virtual void Upload(float* dst, const float* host_src, size_t count) = 0;
  virtual void Download(float* host_dst, const float* src, size_t count) = 0;
  virtual void Copy(float* dst, const float* src, size_t count) = 0;
  virtual void Zero(float* p, size_t count) = 0;
  // Waits for queued work (a no-op on CPU backends).
  virtual void Synchronize() {}

  // ---- embedding ---------------------------------------------------------------------
  // out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]      out (B,T,C), wte (Vp,C), wpe (maxT,C)
  virtual void EmbeddingForward(float* out, const int32_t* tokens, const float* wte,
                                const float* wpe, int B, int T, int C) = 0;
  // dwte[tokens[b,t],:] += dout[b,t,:]; dwpe[t,:] += dout[b,t,:]
  virtual void EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                 int B, int T, int C) = 0;

  // ---- layernorm (epsilon 1e-5) -------------------------------------------------------
  // N rows of C: out = (inp - mean) * rstd * weight + bias; saves mean[N], rstd[N].
  virtual void LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                                const float* weight, const float* bias, int N, int C) = 0;
  // Accumulates into dinp (N,C), dweight (C), dbias (C).
  virtual void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, const float* mean,
                                 const float* rstd, int N, int C) = 0;

  // ---- matmul ------------------------------------------------------------------------
  // out (N,OC) = inp (N,C) x weight (OC,C)^T + bias (OC); bias may be null.
  virtual void MatmulForward(float* out, const float* inp, const float* weight, const float* bias,
                             int N, int C, int OC) = 0;
  // dinp (N,C) += dout x weight; dweight (OC,C) += dout^T x inp; dbias (OC) += column sums
  // of dout (skipped when dbias is null). dinp may be null (first layer needs none).
  virtual void MatmulBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                              const float* inp, const float* weight, int N, int C, int OC) = 0;
  // As MatmulBackward, except that dinp (not null) is written, not accumulated into: what it
  // held is ignored. The default zeroes it and calls MatmulBackward; a backend overrides it to
  // save that pass over dinp (the "cpu" backend's GEMM writes it directly, the same bits).
  virtual void MatmulBackwardInto(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, int N, int C, int OC);

  // ---- causal multi-head attention ----------------------------------------------------
  // qkv (B,T,3C) holds q, k, v side by side; out (B,T,C). Scores are scaled by
  // 1/sqrt(C/NH) and masked causally. att (B,NH,T,T) receives the softmax probabilities
  // (kept for backward); preatt (B,NH,T,T) is scratch.
  virtual void AttentionForward(float* out, float* preatt, float* att, const float* qkv, int B,
                                int T, int C, int NH) = 0;
  // Accumulates into dqkv (B,T,3C); datt and dpreatt (B,NH,T,T) are scratch.
  virtual void AttentionBackward(float* dqkv, float* dpreatt, float* datt, const float* dout,
                                 const float* qkv, const float* att, int B, int T, int C,
                                 int NH) = 0;

  // ---- pointwise ---------------------------------------------------------------------
  // GELU, tanh approximation.
  virtual void GeluForward(float* out, const float* inp, size_t n) = 0;
  virtual void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) = 0;
  virtual void ResidualForward(float* out, const float* a, const float* b, size_t n) = 0;
  // da += dout; db += dout.
  virtual void ResidualBackward(float* da, float* db, const float* dout, size_t n) = 0;

  // ---- loss --------------------------------------------------------------------------
  // probs (B,T,Vp) = softmax over the first V logits of each row (entries V..Vp-1 are set
  // to 0); losses[b*T+t] = -log probs[b,t,targets[b,t]].
  virtual void SoftmaxCrossEntropyForward(float* probs, float* losses, const float* logits,
                                          const int32_t* targets, int B, int T, int V, int Vp) = 0;
  // dlogits[b,t,v] += (probs[b,t,v] - [v == target]) * dloss for v < V; dloss is the
  // gradient of the mean loss with respect to each position's loss (1 / (B*T) usually).
  virtual void SoftmaxCrossEntropyBackward(float* dlogits, const float* probs,
                                           const int32_t* targets, float dloss, int B, int T, int V,
                                           int Vp) = 0;
  // As SoftmaxCrossEntropyBackward, except that dlogits is written (entries V..Vp-1 set to 0),
  // not accumulated into. The default zeroes it first; a backend overrides it to save that pass.
  virtual void SoftmaxCrossEntropyBackwardInto(float* dlogits, const float* probs,
                                               const int32_t* targets, float dloss, int B, int T,
                                               int V, int Vp);

  // ---- optimizer ---------------------------------------------------------------------
  // AdamW on n parameters, step t >= 1 (bias-corrected moments), gradients multiplied by
  // grad_scale first (global-norm clipping):
  //   g = grad * grad_scale; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2
  //   param -= lr * ((m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps) + weight_decay * param)
  virtual void AdamW(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                     float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                     int t) = 0;
  // Sum of squares of x, accumulated in double in a fixed order (for the global grad norm).
  virtual double SumSquares(const float* x, size_t n) = 0;

  // ---- Llama-family ops (model family "llama": RMSNorm, rotary embeddings, SwiGLU,
  // grouped-query attention). The CPU and CUDA backends implement them; a backend that does
  // not answers false here, aborts if one is called anyway, and a job that needs them is
  // refused before it starts.
  virtual bool HasLlamaOps() const { return false; }

  // N rows of C: out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps); saves rstd[N].
  virtual void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int N,
                              int C, float eps);
  // Accumulates into dinp (N,C) and dweight (C).
  virtual void RmsNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                               const float* weight, const float* rstd, int N, int C);

  // Rotary position embedding in Hugging Face's rotate-half convention, IN PLACE on the
  // query and key heads of qkv (B,T,(NH+2*NKV)*HD) (the value heads are left alone): for each
  // head x at position t and i < HD/2, with c = cos[t,i], s = sin[t,i] (tables (T, HD/2)):
  //   x[i] <- x[i] c - x[i+HD/2] s;   x[i+HD/2] <- x[i+HD/2] c + x[i] s.
  virtual void RopeForward(float* qkv, const float* cos, const float* sin, int B, int T, int NH,
                           int NKV, int HD);
  // The transposed rotation, IN PLACE on the query and key heads of dqkv: a gradient with
  // respect to the rotated heads becomes one with respect to the heads before rotation. (Not
  // an accumulating op: the rotation is applied to what dqkv holds.)
  virtual void RopeBackward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH,
                            int NKV, int HD);

  // SwiGLU: inp (N, 2*I) holds each row's gate then its up projection; out (N,I) =
  // silu(gate) * up, silu(x) = x / (1 + exp(-x)).
  virtual void SwiGluForward(float* out, const float* inp, int N, int I);
  // Accumulates into dinp (N, 2*I).
  virtual void SwiGluBackward(float* dinp, const float* inp, const float* dout, int N, int I);

  // Grouped-query causal attention: qkv (B,T,(NH+2*NKV)*HD) holds NH query heads, then NKV
  // key heads, then NKV value heads, each HD wide; query head h attends with key/value head
  // h / (NH/NKV). Scores scaled by 1/sqrt(HD). out (B,T,NH*HD); att and preatt (B,NH,T,T) as
  // in AttentionForward (which is this op with NKV = NH, HD = C/NH). REQUIRES: NH % NKV == 0.
  virtual void GroupedAttentionForward(float* out, float* preatt, float* att, const float* qkv,
                                       int B, int T, int NH, int NKV, int HD);
  // Accumulates into dqkv (B,T,(NH+2*NKV)*HD); datt and dpreatt (B,NH,T,T) are scratch.
  virtual void GroupedAttentionBackward(float* dqkv, float* dpreatt, float* datt, const float* dout,
                                        const float* qkv, const float* att, int B, int T, int NH,
                                        int NKV, int HD);
};

// The backends this build has: "cpu-ref", "cpu", and in a --config=cuda build "cuda" and
// "cuda-bf16", each optionally ":N" for device N (kernels/cuda/cuda_ops.h). An unknown name,
// "cuda" in a build without it, or "cuda" on a machine without a GPU ("no CUDA device: ...")
// fails with a message saying so. `threads` <= 0 means all cores (CPU backends only).
StatusOr<std::unique_ptr<Ops>> MakeOps(const std::string& name, int threads = 0);

}  // namespace longhaul::kernels
