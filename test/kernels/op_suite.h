// The op suite's backends and tolerances. Every op test of the suite (dense_ops_test,
// pointwise_ops_test, attention_test, optimizer_test, determinism_test) runs the same cases
// over each backend under test against "cpu-ref", gloo's conformance style: one set of cases,
// one runner, every backend. Built plain, the backends under test are "cpu" with all, 1 and 3
// threads; built as the `_cuda` targets (--config=cuda, tag gpu, LONGHAUL_OPS_SUITE_CUDA
// defined), "cuda" and "cuda-bf16". Shapes marked large (GPT-2-small sizes) run on the device
// backends only: on "cpu" x 3 thread counts against the scalar reference they would add
// minutes and no new code path.
//
// Tolerances. fp32 backends share llm.c's check |a - ref| <= abs_tol + |ref| * rel_tol with
// the per-op values of each case. bf16 ("cuda-bf16") rounds a product's inputs to 8
// significant bits, so an output's error grows with the square root of the inner dimension K:
// emulating that rounding (PyTorch, inputs rounded to bf16, fp32 sums) over these shapes needs
// abs_tol = 2.8e-3 sqrt(K) at rel_tol = 1/64 (matmul, K = 768 forward); the suite allows
// 8e-3 sqrt(K). Ops without products compute in fp32 in both modes.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "test/kernels/test_util.h"

namespace longhaul::kernels::testing {

struct SuiteBackend {
  std::string name;
  int threads = 0;      // "cpu" only: 0 = all cores
  bool device = false;  // a GPU backend: runs the large shapes too

  std::unique_ptr<Ops> Make() const { return Backend(name, threads); }
  std::string Label() const {
    return device ? name
                  : name + " (" + (threads == 0 ? "all" : std::to_string(threads)) + " threads)";
  }
};

inline std::vector<SuiteBackend> SuiteBackends() {
#ifdef LONGHAUL_OPS_SUITE_CUDA
  return {{"cuda", 0, true}, {"cuda-bf16", 0, true}};
#else
  return {{"cpu", 0, false}, {"cpu", 1, false}, {"cpu", 3, false}};
#endif
}

// A shape of a case; `large` ones run on device backends only.
struct Dims {
  std::vector<int> d;
  bool large = false;
  int operator[](size_t i) const { return d[i]; }
};

inline bool Runs(const SuiteBackend& b, bool large) { return b.device || !large; }

inline bool IsBf16(const Ops& ops) { return ops.name().rfind("cuda-bf16", 0) == 0; }

// The tolerance of a product over inner dimension K on `ops`.
inline Tolerance ProductTol(const Ops& ops, int K, Tolerance fp32) {
  if (!IsBf16(ops)) return fp32;
  return {8e-3f * std::sqrt(static_cast<float>(std::max(K, 1))), 1.0f / 64};
}

}  // namespace longhaul::kernels::testing
