// Codec kernels on the GPU: block quantization (q8/q4/q2, symmetric or asymmetric, nearest or
// stochastic rounding) and bfloat16 conversion of tensors in device memory, so that only the
// compressed bytes cross PCIe; also error feedback for the quantizers and exact top-k selection.
// The bytes are exactly those of the CPU kernels (compression/kernels.h, the wire format): the
// same formulas in the same order, double precision where the CPU uses it, and no FMA
// contraction (built with -fmad=false).
//
// Every function queues its kernels on `stream`, then waits for them (it has to read back the
// error index) and returns kNone, or what the CPU kernel would return: the index of the first
// offending element (quantize, bf16 encode, top-k) or block (dequantize); the output is then
// incomplete and must be discarded. CUDA errors abort with file:line (kernels/cuda/check.h).
// All pointers are device memory. Float pointers must be 4-byte aligned; encoded-side pointers
// may be unaligned. Float pointers aligned to 16 bytes (as cudaMalloc's are) are read and written
// as float4s; others float by float, which is slower but gives the same bytes. The calling
// thread's current device must be the stream's (the functions allocate scratch on it with
// cudaMallocAsync, and raise the release threshold of its default memory pool so that freed
// scratch stays there for the next call instead of being unmapped at each synchronization).
//
// REQUIRES (as for the CPU kernels): p.bits is 8, 4 or 2; p.block is a power of two >= 8.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "compression/kernels.h"

namespace longhaul::compression::cuda {

// Writes QuantizedSize(p, n) bytes.
int64_t QuantizeOnDevice(const kernels::QuantParams& p, const float* in, uint64_t n, uint8_t* out,
                         cudaStream_t stream);
// Reads QuantizedSize(p, n) bytes; the output is always finite.
int64_t DequantizeOnDevice(const kernels::QuantParams& p, const uint8_t* in, uint64_t n, float* out,
                           cudaStream_t stream);
// 2n bytes of bfloat16, round to nearest even, saturating; fails on NaN or infinity.
int64_t FloatsToBf16OnDevice(const float* in, uint64_t n, uint8_t* out, cudaStream_t stream);
// Fails on a bfloat16 NaN or infinity.
int64_t Bf16ToFloatsOnDevice(const uint8_t* in, uint64_t n, float* out, cudaStream_t stream);

// Error feedback (compression/error_feedback.h) for the block quantizers: writes to `out`
// QuantizeOnDevice's bytes for x + residual (a float addition per element), and to
// `next_residual` (x + residual) - decoded, where decoded is what DequantizeOnDevice gives for
// `out`; every operation is the CPU's, in float. Fails as QuantizeOnDevice does on the sum
// (which can overflow to infinity). With next_residual == residual the update is in place and a
// failure leaves the residual unchanged (two passes: the update waits for the whole quantizer);
// with a second buffer (double buffering: swap the two after each success) it is one pass when
// in, residual and next_residual are 16-byte aligned (else two), and on failure next_residual
// is unspecified while residual is unchanged.
// REQUIRES: next_residual is residual or overlaps neither it nor `in`.
int64_t QuantizeWithFeedbackOnDevice(const kernels::QuantParams& p, const float* in, uint64_t n,
                                     const float* residual, float* next_residual, uint8_t* out,
                                     cudaStream_t stream);

// Top-k by magnitude with compression::TopKExact's result (compression/topk.h): writes to
// `indices` (room for min(k, n)) the min(k, n) indices of the largest |x[i]|, compared as
// magnitude bits, ties going to the lower index, in ascending order. Fails on NaN or infinity
// anywhere in x (the index of the first one; `indices` is then unspecified).
// REQUIRES: n < 2^32.
int64_t TopKOnDevice(const float* x, uint64_t n, uint64_t k, uint32_t* indices,
                     cudaStream_t stream);

}  // namespace longhaul::compression::cuda
