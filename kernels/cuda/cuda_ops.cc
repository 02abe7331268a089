// The "cuda" / "cuda-bf16" backend (see cuda_ops.h): device memory, the cuBLAS products for the
// linear layers and attention, and the launchers of its own kernels (cuda_kernels.h), all on
// one stream.
//
// Row-major (out, in) matrices seen by column-major cuBLAS are their transposes, so each
// product below is written for the transposed problem; the comment above each call gives the
// row-major meaning.
#include "kernels/cuda/cuda_ops.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "kernels/cuda/check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/embedding_buckets.h"
#include "kernels/cuda/status_check.h"

namespace longhaul::kernels::cuda {
namespace {

// cuBLAS workspace: set explicitly so that results do not depend on which stream or how much
// memory cuBLAS finds at run time (cuBLAS reproducibility notes); 32 MiB suits Hopper.
constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;

class CudaOps final : public Ops {
 public:
  explicit CudaOps(const CudaOpsOptions& options)
      : device_(options.device),
        name_(options.name),
        compute_(options.bf16_compute ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F) {}

  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  // Errors are ignored here: a destructor cannot report them, and after a failed kernel the
  // context is gone anyway.
  ~CudaOps() override {
    if (cudaSetDevice(device_) != cudaSuccess) return;
    if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
    if (blas_ != nullptr) (void)cublasDestroy(blas_);
    for (void* p : {static_cast<void*>(scratch_), static_cast<void*>(doubles_),
                    static_cast<void*>(ints_), blas_workspace_}) {
      if (p != nullptr) (void)cudaFree(p);
    }
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
  }

  Status Init() {
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    LONGHAUL_CUBLAS_RETURN_IF_ERROR(cublasCreate(&blas_));
    LONGHAUL_CUBLAS_RETURN_IF_ERROR(cublasSetStream(blas_, stream_));
    LONGHAUL_CUDA_RETURN_IF_ERROR(cudaMalloc(&blas_workspace_, kCublasWorkspaceBytes));
    LONGHAUL_CUBLAS_RETURN_IF_ERROR(
        cublasSetWorkspace(blas_, blas_workspace_, kCublasWorkspaceBytes));
    LONGHAUL_CUBLAS_RETURN_IF_ERROR(cublasSetAtomicsMode(blas_, CUBLAS_ATOMICS_NOT_ALLOWED));
    // No TF32 for fp32 products; the bf16 mode asks for bf16 per call (compute_).
    LONGHAUL_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    return absl::OkStatus();
  }

  std::string name() const override { return name_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  // ---- memory ----------------------------------------------------------------------------

  float* Alloc(size_t count) override {
    if (count == 0) return nullptr;
    Use();
    const size_t bytes = count * sizeof(float);
    if (bytes / sizeof(float) != count) {
      std::fprintf(stderr, "longhaul kernels (%s): allocation of %zu floats overflows\n",
                   name_.c_str(), count);
      std::abort();
    }
    void* p = nullptr;
    if (cudaError_t err = cudaMalloc(&p, bytes); err != cudaSuccess) {
      std::fprintf(stderr,
                   "longhaul kernels (%s): out of memory allocating %zu bytes on device %d: %s\n",
                   name_.c_str(), bytes, device_,
                   CudaErrorText(err, "cudaMalloc", __FILE__, __LINE__).c_str());
      std::abort();
    }
    LONGHAUL_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
    return static_cast<float*>(p);
  }

  void Free(float* p) override {
    if (p == nullptr) return;
    Use();
    LONGHAUL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    LONGHAUL_CUDA_CHECK(cudaFree(p));
  }

  // Both copies to and from the host wait for completion, so host buffers may be reused or
  // read as soon as the call returns.
  void Upload(float* dst, const float* host_src, size_t count) override {
    if (count == 0) return;
    Use();
    LONGHAUL_CUDA_CHECK(
        cudaMemcpyAsync(dst, host_src, count * sizeof(float), cudaMemcpyHostToDevice, stream_));
    LONGHAUL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void Download(float* host_dst, const float* src, size_t count) override {
    if (count == 0) return;
    Use();
    LONGHAUL_CUDA_CHECK(
        cudaMemcpyAsync(host_dst, src, count * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    LONGHAUL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void Copy(float* dst, const float* src, size_t count) override {
    if (count == 0 || dst == src) return;
    Use();
    const size_t bytes = count * sizeof(float);
    if (dst < src + count && src < dst + count) {  // overlapping: memmove through scratch
      float* tmp = Scratch(count);
      LONGHAUL_CUDA_CHECK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, stream_));
      src = tmp;
    }
    LONGHAUL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }

  void Zero(float* p, size_t count) override {
    if (count == 0) return;
    Use();
    LONGHAUL_CUDA_CHECK(cudaMemsetAsync(p, 0, count * sizeof(float), stream_));
  }

  void Synchronize() override {
    Use();
    LONGHAUL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // ---- embedding -------------------------------------------------------------------------

  void EmbeddingForward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                        int B, int T, int C) override {
    const size_t BT = static_cast<size_t>(B) * T;
    if (BT == 0 || C == 0) return;
    Use();
    const int32_t* dev_tokens = UploadInts(tokens, BT);
    cuda::EmbeddingForward(stream_, out, dev_tokens, wte, wpe, B, T, C);
  }

  void EmbeddingBackward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                         int T, int C) override {
    const size_t BT = static_cast<size_t>(B) * T;
    if (BT == 0 || C == 0) return;
    Use();
    const EmbeddingBuckets plan = PlanEmbeddingBuckets(tokens, BT);
    const int n = plan.num_buckets;
    const int32_t* dev = UploadInts(plan.packed.data(), plan.packed.size());
    cuda::EmbeddingBackwardWte(stream_, dwte, dout, dev, dev + n, dev + 2 * n + 1, n, C);
    cuda::EmbeddingBackwardWpe(stream_, dwpe, dout, B, T, C);
  }

  // ---- layernorm -------------------------------------------------------------------------

  void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                        const float* bias, int N, int C) override {
    if (N == 0) return;
    Use();
    cuda::LayerNormForward(stream_, out, mean, rstd, inp, weight, bias, N, C);
  }

  void LayerNormBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                         const float* inp, const float* weight, const float* mean,
                         const float* rstd, int N, int C) override {
    if (N == 0 || C == 0) return;
    Use();
    cuda::LayerNormBackwardInput(stream_, dinp, dout, inp, weight, mean, rstd, N, C);
    float* scratch = Scratch(LayerNormParamsScratch(N, C));
    cuda::LayerNormBackwardParams(stream_, dweight, dbias, scratch, dout, inp, mean, rstd, N, C);
  }

  // ---- matmul ----------------------------------------------------------------------------

  void MatmulForward(float* out, const float* inp, const float* weight, const float* bias, int N,
                     int C, int OC) override {
    if (N == 0 || OC == 0) return;
    Use();
    if (bias != nullptr) {
      BroadcastRows(stream_, out, bias, N, OC);
    } else if (C == 0) {
      LONGHAUL_CUDA_CHECK(
          cudaMemsetAsync(out, 0, static_cast<size_t>(N) * OC * sizeof(float), stream_));
    }
    if (C == 0) return;
    // out (N,OC) = inp (N,C) x weight (OC,C)^T [+ out, holding the bias].
    Gemm(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, 1.0f, weight, C, inp, C, bias != nullptr ? 1.0f : 0.0f,
         out, OC);
  }

  void MatmulBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                      const float* inp, const float* weight, int N, int C, int OC) override {
    if (N == 0 || OC == 0) return;
    Use();
    if (C > 0) {
      // dinp (N,C) += dout (N,OC) x weight (OC,C).
      if (dinp != nullptr) {
        Gemm(CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, 1.0f, weight, C, dout, OC, 1.0f, dinp, C);
      }
      // dweight (OC,C) += dout^T (OC,N) x inp (N,C).
      Gemm(CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dweight, C);
    }
    if (dbias != nullptr) {
      ColumnSumAccumulate(stream_, dbias, Scratch(ColumnSumScratch(N, OC)), dout, N, OC);
    }
  }

  // ---- attention -------------------------------------------------------------------------
  // q, k, v are split into (B,NH,T,hs) scratch; per (b, h) the scores are one T x T product
  // (the masked half is computed and then zeroed by the softmax, as in llm.c).

  void AttentionForward(float* out, float* preatt, float* att, const float* qkv, int B, int T,
                        int C, int NH) override {
    if (B == 0 || T == 0 || C == 0) return;
    Use();
    const int hs = C / NH;
    const size_t btc = static_cast<size_t>(B) * T * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    float* q = Scratch(4 * btc);
    float* k = q + btc;
    float* v = k + btc;
    float* vacc = v + btc;
    SplitQkv(stream_, q, k, v, qkv, B, T, C, NH);
    const long long thd = static_cast<long long>(T) * hs, tt = static_cast<long long>(T) * T;
    // preatt[t][t2] = scale * q[t] . k[t2].
    GemmBatched(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, scale, k, hs, thd, q, hs, thd, 0.0f, preatt, T,
                tt, B * NH);
    CausalSoftmaxForward(stream_, att, preatt, static_cast<size_t>(B) * NH * T, T);
    // vacc[t] = sum over t2 of att[t][t2] * v[t2].
    GemmBatched(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, v, hs, thd, att, T, tt, 0.0f, vacc, hs,
                thd, B * NH);
    MergeHeads(stream_, out, vacc, B, T, C, NH);
  }

  void AttentionBackward(float* dqkv, float* dpreatt, float* datt, const float* dout,
                         const float* qkv, const float* att, int B, int T, int C, int NH) override {
    if (B == 0 || T == 0 || C == 0) return;
    Use();
    const int hs = C / NH;
    const size_t btc = static_cast<size_t>(B) * T * C;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
    float* q = Scratch(7 * btc);
    float* k = q + btc;
    float* v = k + btc;
    float* dvacc = v + btc;
    float* dq = dvacc + btc;
    float* dk = dq + btc;
    float* dv = dk + btc;
    SplitQkv(stream_, q, k, v, qkv, B, T, C, NH);
    SplitHeads(stream_, dvacc, dout, B, T, C, NH);
    const long long thd = static_cast<long long>(T) * hs, tt = static_cast<long long>(T) * T;
    // datt[t][t2] = dvacc[t] . v[t2].
    GemmBatched(CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, v, hs, thd, dvacc, hs, thd, 0.0f, datt, T,
                tt, B * NH);
    // dv[t2] = sum over t of att[t][t2] * dvacc[t].
    GemmBatched(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dvacc, hs, thd, att, T, tt, 0.0f, dv, hs,
                thd, B * NH);
    // dpreatt = softmax backward, times the score scale.
    CausalSoftmaxBackward(stream_, dpreatt, datt, att, static_cast<size_t>(B) * NH * T, T, scale);
    // dq[t] = sum over t2 of dpreatt[t][t2] * k[t2];  dk[t2] = sum over t of dpreatt[t][t2] * q[t].
    GemmBatched(CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, k, hs, thd, dpreatt, T, tt, 0.0f, dq, hs,
                thd, B * NH);
    GemmBatched(CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q, hs, thd, dpreatt, T, tt, 0.0f, dk, hs,
                thd, B * NH);
    AccumulateQkv(stream_, dqkv, dq, dk, dv, B, T, C, NH);
  }

  // ---- llama family ----------------------------------------------------------------------

  bool HasLlamaOps() const override { return true; }

  void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                      float eps) override {
    if (N == 0) return;
    Use();
    cuda::RmsNormForward(stream_, out, rstd, inp, weight, N, C, eps);
  }

  void RmsNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                       const float* weight, const float* rstd, int N, int C) override {
    if (N == 0 || C == 0) return;
    Use();
    cuda::RmsNormBackward(stream_, dinp, dweight, Scratch(ColumnSumScratch(N, C)), dout, inp,
                          weight, rstd, N, C);
  }

  void RopeForward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                   int HD) override {
    Use();
    cuda::Rotate(stream_, qkv, cos, sin, B, T, NH, NKV, HD, 1.0f);
  }

  void RopeBackward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                    int HD) override {
    Use();
    cuda::Rotate(stream_, dqkv, cos, sin, B, T, NH, NKV, HD, -1.0f);
  }

  void SwiGluForward(float* out, const float* inp, int N, int I) override {
    Use();
    cuda::SwiGluForward(stream_, out, inp, N, I);
  }

  void SwiGluBackward(float* dinp, const float* inp, const float* dout, int N, int I) override {
    Use();
    cuda::SwiGluBackward(stream_, dinp, inp, dout, N, I);
  }

  // Grouped-query attention as AttentionForward computes ordinary attention, batched per (b,
  // key/value head): the group's g = NH/NKV query heads are adjacent in (B,NH,T,HD), so their
  // g*T rows attend to the one key/value head in one product, and the backward's products over
  // those rows (dk, dv) sum the group's heads.
  void GroupedAttentionForward(float* out, float* preatt, float* att, const float* qkv, int B,
                               int T, int NH, int NKV, int HD) override {
    if (B == 0 || T == 0 || NH == 0 || HD == 0) return;
    Use();
    const Grouped a(B, T, NH, NKV, HD);
    float* q = Scratch(2 * a.nq + 2 * a.nkv);
    float* k = q + a.nq;
    float* v = k + a.nkv;
    float* vacc = v + a.nkv;
    a.Split(stream_, q, k, v, qkv);
    // preatt[t][t2] = scale * q[t] . k[t2], for the group's g*T query rows.
    GemmBatched(CUBLAS_OP_T, CUBLAS_OP_N, T, a.gt, HD, a.scale, k, HD, a.kv_stride, q, HD,
                a.q_stride, 0.0f, preatt, T, a.att_stride, a.batch);
    CausalSoftmaxForward(stream_, att, preatt, static_cast<size_t>(B) * NH * T, T);
    // vacc[t] = sum over t2 of att[t][t2] * v[t2].
    GemmBatched(CUBLAS_OP_N, CUBLAS_OP_N, HD, a.gt, T, 1.0f, v, HD, a.kv_stride, att, T,
                a.att_stride, 0.0f, vacc, HD, a.q_stride, a.batch);
    ScatterHeads(stream_, out, vacc, B, T, NH, HD, static_cast<size_t>(NH) * HD, 0, false);
  }

  void GroupedAttentionBackward(float* dqkv, float* dpreatt, float* datt, const float* dout,
                                const float* qkv, const float* att, int B, int T, int NH, int NKV,
                                int HD) override {
    if (B == 0 || T == 0 || NH == 0 || HD == 0) return;
    Use();
    const Grouped a(B, T, NH, NKV, HD);
    float* q = Scratch(3 * a.nq + 4 * a.nkv);
    float* k = q + a.nq;
    float* v = k + a.nkv;
    float* dvacc = v + a.nkv;
    float* dq = dvacc + a.nq;
    float* dk = dq + a.nq;
    float* dv = dk + a.nkv;
    a.Split(stream_, q, k, v, qkv);
    GatherHeads(stream_, dvacc, dout, B, T, NH, HD, static_cast<size_t>(NH) * HD, 0);
    // datt[t][t2] = dvacc[t] . v[t2].
    GemmBatched(CUBLAS_OP_T, CUBLAS_OP_N, T, a.gt, HD, 1.0f, v, HD, a.kv_stride, dvacc, HD,
                a.q_stride, 0.0f, datt, T, a.att_stride, a.batch);
    // dv[t2] = sum over the group's rows t of att[t][t2] * dvacc[t].
    GemmBatched(CUBLAS_OP_N, CUBLAS_OP_T, HD, T, a.gt, 1.0f, dvacc, HD, a.q_stride, att, T,
                a.att_stride, 0.0f, dv, HD, a.kv_stride, a.batch);
    CausalSoftmaxBackward(stream_, dpreatt, datt, att, static_cast<size_t>(B) * NH * T, T, a.scale);
    // dq[t] = sum over t2 of dpreatt[t][t2] * k[t2];  dk[t2] = sum over the rows t of
    // dpreatt[t][t2] * q[t].
    GemmBatched(CUBLAS_OP_N, CUBLAS_OP_N, HD, a.gt, T, 1.0f, k, HD, a.kv_stride, dpreatt, T,
                a.att_stride, 0.0f, dq, HD, a.q_stride, a.batch);
    GemmBatched(CUBLAS_OP_N, CUBLAS_OP_T, HD, T, a.gt, 1.0f, q, HD, a.q_stride, dpreatt, T,
                a.att_stride, 0.0f, dk, HD, a.kv_stride, a.batch);
    ScatterHeads(stream_, dqkv, dq, B, T, NH, HD, a.width, 0, true);
    ScatterHeads(stream_, dqkv, dk, B, T, NKV, HD, a.width, static_cast<size_t>(NH) * HD, true);
    ScatterHeads(stream_, dqkv, dv, B, T, NKV, HD, a.width, static_cast<size_t>(NH + NKV) * HD,
                 true);
  }

  // ---- pointwise -------------------------------------------------------------------------

  void GeluForward(float* out, const float* inp, size_t n) override {
    if (n == 0) return;
    Use();
    cuda::GeluForward(stream_, out, inp, n, kGeluScale);
  }

  void GeluBackward(float* dinp, const float* inp, const float* dout, size_t n) override {
    if (n == 0) return;
    Use();
    cuda::GeluBackward(stream_, dinp, inp, dout, n, kGeluScale);
  }

  void ResidualForward(float* out, const float* a, const float* b, size_t n) override {
    if (n == 0) return;
    Use();
    cuda::ResidualForward(stream_, out, a, b, n);
  }

  void ResidualBackward(float* da, float* db, const float* dout, size_t n) override {
    if (n == 0) return;
    Use();
    cuda::ResidualBackward(stream_, da, db, dout, n);
  }

  // ---- loss ------------------------------------------------------------------------------

  void SoftmaxCrossEntropyForward(float* probs, float* losses, const float* logits,
                                  const int32_t* targets, int B, int T, int V, int Vp) override {
    const int BT = B * T;
    if (BT == 0) return;
    Use();
    const int32_t* dev_targets = UploadInts(targets, BT);
    cuda::SoftmaxCrossEntropyForward(stream_, probs, losses, logits, dev_targets, BT, V, Vp);
  }

  void SoftmaxCrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                   float dloss, int B, int T, int V, int Vp) override {
    const int BT = B * T;
    if (BT == 0 || V == 0) return;
    Use();
    const int32_t* dev_targets = UploadInts(targets, BT);
    cuda::SoftmaxCrossEntropyBackward(stream_, dlogits, probs, dev_targets, dloss, BT, V, Vp);
  }

  // ---- optimizer -------------------------------------------------------------------------

  void AdamW(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
             float beta2, float eps, float weight_decay, float grad_scale, int t) override {
    if (n == 0) return;
    Use();
    // Bias corrections in float on the host, exactly as the reference computes them.
    const float beta1_correction = 1.0f - std::pow(beta1, static_cast<float>(t));
    const float beta2_correction = 1.0f - std::pow(beta2, static_cast<float>(t));
    cuda::AdamW(stream_, params, grads, m, v, n, lr, beta1, beta2, beta1_correction,
                beta2_correction, eps, weight_decay, grad_scale);
  }

  double SumSquares(const float* x, size_t n) override {
    if (n == 0) return 0.0;
    Use();
    double* buf = Doubles(SumSquaresPartials(n) + 1);
    cuda::SumSquares(stream_, buf, buf + 1, x, n);
    double result = 0.0;
    LONGHAUL_CUDA_CHECK(
        cudaMemcpyAsync(&result, buf, sizeof(double), cudaMemcpyDeviceToHost, stream_));
    LONGHAUL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return result;
  }

 private:
  // sqrt(2/pi) exactly as the reference computes it.
  inline static const float kGeluScale = std::sqrt(2.0f / static_cast<float>(M_PI));

  // Grouped attention's shapes: q heads (B,NH,T,HD), k and v heads (B,NKV,T,HD), products
  // batched over the B*NKV (b, key/value head) pairs, each over its group's gt = g*T query rows.
  struct Grouped {
    Grouped(int B, int T, int NH, int NKV, int HD)
        : nq(static_cast<size_t>(B) * NH * T * HD),
          nkv(static_cast<size_t>(B) * NKV * T * HD),
          width(static_cast<size_t>(NH + 2 * NKV) * HD),
          gt(NH / NKV * T),
          batch(B * NKV),
          q_stride(static_cast<long long>(gt) * HD),
          kv_stride(static_cast<long long>(T) * HD),
          att_stride(static_cast<long long>(gt) * T),
          scale(1.0f / std::sqrt(static_cast<float>(HD))),
          B_(B),
          T_(T),
          NH_(NH),
          NKV_(NKV),
          HD_(HD) {}
    void Split(cudaStream_t stream, float* q, float* k, float* v, const float* qkv) const {
      GatherHeads(stream, q, qkv, B_, T_, NH_, HD_, width, 0);
      GatherHeads(stream, k, qkv, B_, T_, NKV_, HD_, width, static_cast<size_t>(NH_) * HD_);
      GatherHeads(stream, v, qkv, B_, T_, NKV_, HD_, width, static_cast<size_t>(NH_ + NKV_) * HD_);
    }
    size_t nq, nkv, width;
    int gt, batch;
    long long q_stride, kv_stride, att_stride;
    float scale;
    int B_, T_, NH_, NKV_, HD_;
  };

  // Makes this backend's device current for the calling thread (cheap when it already is).
  void Use() { LONGHAUL_CUDA_CHECK(cudaSetDevice(device_)); }

  // Grow-only device buffers. Growing frees the old buffer only after the stream has drained,
  // since queued kernels may still read it.
  template <typename T>
  T* Grow(T*& buf, size_t& capacity, size_t count) {
    if (count > capacity) {
      if (buf != nullptr) {
        LONGHAUL_CUDA_CHECK(cudaStreamSynchronize(stream_));
        LONGHAUL_CUDA_CHECK(cudaFree(buf));
        buf = nullptr;
      }
      const size_t grown = std::max(count, capacity + capacity / 2);
      void* p = nullptr;
      LONGHAUL_CUDA_CHECK(cudaMalloc(&p, grown * sizeof(T)));
      buf = static_cast<T*>(p);
      capacity = grown;
    }
    return buf;
  }
  float* Scratch(size_t count) { return Grow(scratch_, scratch_size_, count); }
  double* Doubles(size_t count) { return Grow(doubles_, doubles_size_, count); }

  // Copies n host ints to a device buffer that stays valid until the next UploadInts. Earlier
  // kernels that read the buffer come first on the stream, so overwriting it is safe. Ids live
  // in pageable memory, from which cudaMemcpyAsync has taken its copy when it returns, so the
  // caller may reuse `host` at once (pinned memory would need a wait here).
  const int32_t* UploadInts(const int32_t* host, size_t n) {
    int32_t* dev = Grow(ints_, ints_size_, n);
    LONGHAUL_CUDA_CHECK(
        cudaMemcpyAsync(dev, host, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
    return dev;
  }

  // Column-major C (m x n) = alpha op(A) op(B) + beta C, in this backend's precision.
  void Gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
            const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    LONGHAUL_CUBLAS_CHECK(cublasGemmEx(blas_, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, B,
                                       CUDA_R_32F, ldb, &beta, C, CUDA_R_32F, ldc, compute_,
                                       CUBLAS_GEMM_DEFAULT));
  }

  void GemmBatched(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                   const float* A, int lda, long long stride_a, const float* B, int ldb,
                   long long stride_b, float beta, float* C, int ldc, long long stride_c,
                   int batch) {
    LONGHAUL_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        blas_, ta, tb, m, n, k, &alpha, A, CUDA_R_32F, lda, stride_a, B, CUDA_R_32F, ldb, stride_b,
        &beta, C, CUDA_R_32F, ldc, stride_c, batch, compute_, CUBLAS_GEMM_DEFAULT));
  }

  const int device_;
  const std::string name_;
  const cublasComputeType_t compute_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* blas_workspace_ = nullptr;
  float* scratch_ = nullptr;
  size_t scratch_size_ = 0;
  double* doubles_ = nullptr;
  size_t doubles_size_ = 0;
  int32_t* ints_ = nullptr;
  size_t ints_size_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Ops>> NewCudaOps(const CudaOpsOptions& options) {
  RETURN_IF_ERROR(CheckCudaDevice(options.device));
  auto ops = std::make_unique<CudaOps>(options);
  RETURN_IF_ERROR(Annotate(
      ops->Init(), "setting up the CUDA backend on device " + std::to_string(options.device)));
  return std::unique_ptr<Ops>(std::move(ops));
}

StatusOr<std::unique_ptr<Ops>> NewCudaOpsForMakeOps(const std::string& name, int device,
                                                    bool bf16_compute) {
  CudaOpsOptions options;
  options.device = device;
  options.bf16_compute = bf16_compute;
  options.name = name;
  return NewCudaOps(options);
}

int CudaDeviceOf(const Ops& ops) {
  const auto* cuda = dynamic_cast<const CudaOps*>(&ops);
  return cuda != nullptr ? cuda->device() : -1;
}

cudaStream_t CudaStreamOf(const Ops& ops) {
  const auto* cuda = dynamic_cast<const CudaOps*>(&ops);
  return cuda != nullptr ? cuda->stream() : nullptr;
}

}  // namespace longhaul::kernels::cuda
