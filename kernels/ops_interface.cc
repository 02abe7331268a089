// The Ops interface's default bodies: the writing forms of the accumulating backward ops (zero,
// then accumulate), and the Llama-family ops of a backend that lacks them (kernels/ops.h). In the
// interface's own library so that every backend, the CUDA one built as a shared library included,
// links the same definitions.
#include <cstdio>
#include <cstdlib>

#include "kernels/ops.h"

namespace longhaul::kernels {
namespace {

// A Llama-family op on a backend without them: callers check HasLlamaOps() first (a job that
// needs them is refused before it starts), so reaching this is a bug; it stops the process
// with the op and backend named rather than compute garbage.
[[noreturn]] void NoLlamaOps(const Ops& ops, const char* op) {
  std::fprintf(stderr, "kernel backend %s has no %s (model family llama needs cpu or cpu-ref)\n",
               ops.name().c_str(), op);
  std::abort();
}

}  // namespace

void Ops::MatmulBackwardInto(float* dinp, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* weight, int N, int C, int OC) {
  Zero(dinp, static_cast<size_t>(N) * C);
  MatmulBackward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

void Ops::SoftmaxCrossEntropyBackwardInto(float* dlogits, const float* probs,
                                          const int32_t* targets, float dloss, int B, int T, int V,
                                          int Vp) {
  Zero(dlogits, static_cast<size_t>(B) * T * Vp);
  SoftmaxCrossEntropyBackward(dlogits, probs, targets, dloss, B, T, V, Vp);
}

void Ops::RmsNormForward(float*, float*, const float*, const float*, int, int, float) {
  NoLlamaOps(*this, "RmsNormForward");
}
void Ops::RmsNormBackward(float*, float*, const float*, const float*, const float*, const float*,
                          int, int) {
  NoLlamaOps(*this, "RmsNormBackward");
}
void Ops::RopeForward(float*, const float*, const float*, int, int, int, int, int) {
  NoLlamaOps(*this, "RopeForward");
}
void Ops::RopeBackward(float*, const float*, const float*, int, int, int, int, int) {
  NoLlamaOps(*this, "RopeBackward");
}
void Ops::SwiGluForward(float*, const float*, int, int) { NoLlamaOps(*this, "SwiGluForward"); }
void Ops::SwiGluBackward(float*, const float*, const float*, int, int) {
  NoLlamaOps(*this, "SwiGluBackward");
}
void Ops::GroupedAttentionForward(float*, float*, float*, const float*, int, int, int, int, int) {
  NoLlamaOps(*this, "GroupedAttentionForward");
}
void Ops::GroupedAttentionBackward(float*, float*, float*, const float*, const float*, const float*,
                                   int, int, int, int, int) {
  NoLlamaOps(*this, "GroupedAttentionBackward");
}

}  // namespace longhaul::kernels
