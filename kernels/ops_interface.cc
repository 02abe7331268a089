// The Ops interface's default bodies: the Llama-family ops of a backend that lacks them
// (kernels/ops.h). In the interface's own library so that every backend, the CUDA one built as
// a shared library included, links the same definitions.
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
