// Host-side launchers of the CUDA backend's own kernels (one .cu file per op family: attention,
// embedding, layernorm, llama, loss, optimizer, pointwise): everything in
// kernels/ops.h that is not a cuBLAS matrix product. cuda_ops.cc strings them together with
// cuBLAS. Every launcher queues its kernel on `stream` and checks the launch (check.h); all
// pointers are device memory, sizes as in ops.h. No launcher uses floating-point atomics:
// every reduction runs in an order fixed by the shapes alone, so results are bitwise
// reproducible on a given GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace longhaul::kernels::cuda {

// ---- embedding ------------------------------------------------------------------------------
// out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; tokens on the device.
void EmbeddingForward(cudaStream_t stream, float* out, const int32_t* tokens, const float* wte,
                      const float* wpe, int B, int T, int C);
// dwte[token,:] += dout[p,:] for each position p holding `token`, in ascending p: the positions
// come bucketed by token (built on the host, which has the token ids): bucket i is token
// bucket_tokens[i] with positions[bucket_starts[i] .. bucket_starts[i+1]). Same additions in
// the same order as the reference, so the same bits.
void EmbeddingBackwardWte(cudaStream_t stream, float* dwte, const float* dout,
                          const int32_t* bucket_tokens, const int32_t* bucket_starts,
                          const int32_t* positions, int num_buckets, int C);
// dwpe[t,:] += dout[b,t,:] for b = 0, 1, ... in order.
void EmbeddingBackwardWpe(cudaStream_t stream, float* dwpe, const float* dout, int B, int T, int C);

// ---- layernorm ----------------------------------------------------------------------------
void LayerNormForward(cudaStream_t stream, float* out, float* mean, float* rstd, const float* inp,
                      const float* weight, const float* bias, int N, int C);
// dinp += ...; one warp per row.
void LayerNormBackwardInput(cudaStream_t stream, float* dinp, const float* dout, const float* inp,
                            const float* weight, const float* mean, const float* rstd, int N,
                            int C);
// dweight += sum over rows of norm * dout, dbias += sum of dout: rows summed in fixed chunks
// into `scratch` (LayerNormParamsScratch floats), then the chunks in order.
size_t LayerNormParamsScratch(int N, int C);
void LayerNormBackwardParams(cudaStream_t stream, float* dweight, float* dbias, float* scratch,
                             const float* dout, const float* inp, const float* mean,
                             const float* rstd, int N, int C);

// ---- matmul helpers -----------------------------------------------------------------------
// out[n,:] = row[:] for n < N (bias broadcast before a gemm with beta = 1).
void BroadcastRows(cudaStream_t stream, float* out, const float* row, int N, int C);
// out[c] += sum over n of in[n,c], in the same fixed chunking as LayerNormBackwardParams.
size_t ColumnSumScratch(int N, int C);
void ColumnSumAccumulate(cudaStream_t stream, float* out, float* scratch, const float* in, int N,
                         int C);
// Its second pass alone, for a first pass of the caller's own into `scratch` (one row of C per
// chunk of kRowsPerChunk of N rows: RMSNorm's dweight): out[c] += the chunks, in order.
void ColumnChunksAccumulate(cudaStream_t stream, float* out, const float* scratch, int N, int C);

// ---- attention ----------------------------------------------------------------------------
// qkv (B,T,3,NH,hs) -> q, k, v each (B,NH,T,hs).
void SplitQkv(cudaStream_t stream, float* q, float* k, float* v, const float* qkv, int B, int T,
              int C, int NH);
// dqkv (B,T,3,NH,hs) += dq, dk, dv (each (B,NH,T,hs)).
void AccumulateQkv(cudaStream_t stream, float* dqkv, const float* dq, const float* dk,
                   const float* dv, int B, int T, int C, int NH);
// (B,NH,T,hs) -> (B,T,C) and back.
void MergeHeads(cudaStream_t stream, float* out, const float* heads, int B, int T, int C, int NH);
void SplitHeads(cudaStream_t stream, float* heads, const float* in, int B, int T, int C, int NH);
// rows = B*NH*T rows of T scores (already scaled); row r is causal up to r % T. att gets the
// softmax over the causal window and zeros past it.
void CausalSoftmaxForward(cudaStream_t stream, float* att, const float* preatt, size_t rows, int T);
// dpreatt = att * (datt - sum(att * datt)) * scale inside the causal window, 0 past it.
void CausalSoftmaxBackward(cudaStream_t stream, float* dpreatt, const float* datt, const float* att,
                           size_t rows, int T, float scale);

// ---- llama family (llama.cu) ---------------------------------------------------------------
void RmsNormForward(cudaStream_t stream, float* out, float* rstd, const float* inp,
                    const float* weight, int N, int C, float eps);
// dinp += ...; dweight += sum over rows of dout * inp * rstd, in fixed chunks of rows into
// `scratch` (ColumnSumScratch(N, C) floats), then the chunks in order (ColumnChunksAccumulate).
void RmsNormBackward(cudaStream_t stream, float* dinp, float* dweight, float* scratch,
                     const float* dout, const float* inp, const float* weight, const float* rstd,
                     int N, int C);
// The rotary embedding on the NH + NKV query and key heads of qkv (B,T,(NH+2*NKV)*HD), in
// place: by +angle (sign 1, RopeForward) or -angle (sign -1, RopeBackward).
void Rotate(cudaStream_t stream, float* qkv, const float* cos, const float* sin, int B, int T,
            int NH, int NKV, int HD, float sign);
void SwiGluForward(cudaStream_t stream, float* out, const float* inp, int N, int I);
void SwiGluBackward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, int N,
                    int I);
// H heads of HD, columns [first, first + H*HD) of rows (B,T,width) <-> heads (B,H,T,HD):
// gathered, or scattered (written, or added when `accumulate`).
void GatherHeads(cudaStream_t stream, float* heads, const float* rows, int B, int T, int H, int HD,
                 size_t width, size_t first);
void ScatterHeads(cudaStream_t stream, float* rows, const float* heads, int B, int T, int H, int HD,
                  size_t width, size_t first, bool accumulate);

// ---- pointwise ----------------------------------------------------------------------------
// gelu_scale is sqrt(2/pi) computed on the host exactly as the reference does.
void GeluForward(cudaStream_t stream, float* out, const float* inp, size_t n, float gelu_scale);
void GeluBackward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, size_t n,
                  float gelu_scale);
void ResidualForward(cudaStream_t stream, float* out, const float* a, const float* b, size_t n);
void ResidualBackward(cudaStream_t stream, float* da, float* db, const float* dout, size_t n);

// ---- loss ---------------------------------------------------------------------------------
// BT rows; targets on the device.
void SoftmaxCrossEntropyForward(cudaStream_t stream, float* probs, float* losses,
                                const float* logits, const int32_t* targets, int BT, int V, int Vp);
void SoftmaxCrossEntropyBackward(cudaStream_t stream, float* dlogits, const float* probs,
                                 const int32_t* targets, float dloss, int BT, int V, int Vp);

// ---- optimizer ----------------------------------------------------------------------------
// beta1_correction = 1 - beta1^t and beta2_correction likewise, computed on the host.
void AdamW(cudaStream_t stream, float* params, const float* grads, float* m, float* v, size_t n,
           float lr, float beta1, float beta2, float beta1_correction, float beta2_correction,
           float eps, float weight_decay, float grad_scale);
// Sum of squares in double: fixed chunks of kSumSquaresChunk elements into `partials`
// (SumSquaresPartials(n) doubles), then the partials in order into *result (device).
inline constexpr size_t kSumSquaresChunk = 16384;
size_t SumSquaresPartials(size_t n);
void SumSquares(cudaStream_t stream, double* result, double* partials, const float* x, size_t n);

}  // namespace longhaul::kernels::cuda
