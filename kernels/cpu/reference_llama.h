// The "cpu-ref" backend's Llama-family ops (RMSNorm, rotary embedding, SwiGLU) and its
// causal attention, grouped-query in general (GPT-2's is the case NKV = NH): plain loops
// written from Hugging Face's LlamaForCausalLM equations, the reference the "cpu" backend is
// tested against and the finite-difference tests check. Arguments as in kernels/ops.h.
#pragma once

namespace longhaul::kernels::ref {

void RmsNormForward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                    float eps);
void RmsNormBackward(float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, const float* rstd, int N, int C);
void RopeForward(float* qkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                 int HD);
void RopeBackward(float* dqkv, const float* cos, const float* sin, int B, int T, int NH, int NKV,
                  int HD);
void SwiGluForward(float* out, const float* inp, int N, int I);
void SwiGluBackward(float* dinp, const float* inp, const float* dout, int N, int I);
void GroupedAttentionForward(float* out, float* preatt, float* att, const float* qkv, int B, int T,
                             int NH, int NKV, int HD);
void GroupedAttentionBackward(float* dqkv, float* dpreatt, float* datt, const float* dout,
                              const float* qkv, const float* att, int B, int T, int NH, int NKV,
                              int HD);

}  // namespace longhaul::kernels::ref
