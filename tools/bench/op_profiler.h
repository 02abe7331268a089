// A kernels::Ops that forwards every call to another backend and adds up the wall time
// spent in each op, so a benchmark can say where a training step's time goes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"

namespace longhaul::bench {

class OpProfiler : public kernels::Ops {
 public:
  explicit OpProfiler(kernels::Ops* inner) : inner_(inner) {}
  std::string name() const override { return inner_->name(); }
  void Reset() { totals_.clear(); }
  // Prints each op's share of the time, largest first.
  void Print(double step_seconds, int steps) const {
    std::vector<std::pair<double, std::string>> rows;
    double sum = 0;
    for (const auto& [op, s] : totals_) {
      rows.push_back({s / steps, op});
      sum += s / steps;
    }
    std::sort(rows.rbegin(), rows.rend());
    std::printf("  time per step by op (%.3f s in ops of %.3f s):\n", sum, step_seconds);
    for (const auto& [s, op] : rows) {
      std::printf("    %-28s %8.1f ms %5.1f%%\n", op.c_str(), s * 1e3, 100 * s / step_seconds);
    }
  }

  float* Alloc(size_t n) override { return inner_->Alloc(n); }
  void Free(float* p) override { inner_->Free(p); }
  void Upload(float* d, const float* s, size_t n) override {
    Time("Upload", [&] { inner_->Upload(d, s, n); });
  }
  void Download(float* d, const float* s, size_t n) override {
    Time("Download", [&] { inner_->Download(d, s, n); });
  }
  void Copy(float* d, const float* s, size_t n) override {
    Time("Copy", [&] { inner_->Copy(d, s, n); });
  }
  void Zero(float* p, size_t n) override {
    Time("Zero", [&] { inner_->Zero(p, n); });
  }
  // Forwarded like the rest (Ops' default is a no-op, which would skip a CUDA backend's wait);
  // on such a backend its time is the queued kernels' that the ops above only launched.
  void Synchronize() override {
    Time("Synchronize", [&] { inner_->Synchronize(); });
  }
  void EmbeddingForward(float* o, const int32_t* t, const float* wte, const float* wpe, int B,
                        int T, int C) override {
    Time("EmbeddingForward", [&] { inner_->EmbeddingForward(o, t, wte, wpe, B, T, C); });
  }
  void EmbeddingBackward(float* dwte, float* dwpe, const float* d, const int32_t* t, int B, int T,
                         int C) override {
    Time("EmbeddingBackward", [&] { inner_->EmbeddingBackward(dwte, dwpe, d, t, B, T, C); });
  }
  void LayerNormForward(float* o, float* m, float* r, const float* i, const float* w,
                        const float* b, int N, int C) override {
    Time("LayerNormForward", [&] { inner_->LayerNormForward(o, m, r, i, w, b, N, C); });
  }
  void LayerNormBackward(float* di, float* dw, float* db, const float* d, const float* i,
                         const float* w, const float* m, const float* r, int N, int C) override {
    Time("LayerNormBackward", [&] { inner_->LayerNormBackward(di, dw, db, d, i, w, m, r, N, C); });
  }
  void MatmulForward(float* o, const float* i, const float* w, const float* b, int N, int C,
                     int OC) override {
    Time(OC > 8 * C ? "MatmulForward (head)" : "MatmulForward",
         [&] { inner_->MatmulForward(o, i, w, b, N, C, OC); });
  }
  void MatmulBackward(float* di, float* dw, float* db, const float* d, const float* i,
                      const float* w, int N, int C, int OC) override {
    Time(OC > 8 * C ? "MatmulBackward (head)" : "MatmulBackward",
         [&] { inner_->MatmulBackward(di, dw, db, d, i, w, N, C, OC); });
  }
  void MatmulBackwardInto(float* di, float* dw, float* db, const float* d, const float* i,
                          const float* w, int N, int C, int OC) override {
    Time(OC > 8 * C ? "MatmulBackward (head)" : "MatmulBackward",
         [&] { inner_->MatmulBackwardInto(di, dw, db, d, i, w, N, C, OC); });
  }
  void AttentionForward(float* o, float* p, float* a, const float* q, int B, int T, int C,
                        int NH) override {
    Time("AttentionForward", [&] { inner_->AttentionForward(o, p, a, q, B, T, C, NH); });
  }
  void AttentionBackward(float* dq, float* dp, float* da, const float* d, const float* q,
                         const float* a, int B, int T, int C, int NH) override {
    Time("AttentionBackward", [&] { inner_->AttentionBackward(dq, dp, da, d, q, a, B, T, C, NH); });
  }
  void GeluForward(float* o, const float* i, size_t n) override {
    Time("GeluForward", [&] { inner_->GeluForward(o, i, n); });
  }
  void GeluBackward(float* di, const float* i, const float* d, size_t n) override {
    Time("GeluBackward", [&] { inner_->GeluBackward(di, i, d, n); });
  }
  void ResidualForward(float* o, const float* a, const float* b, size_t n) override {
    Time("ResidualForward", [&] { inner_->ResidualForward(o, a, b, n); });
  }
  void ResidualBackward(float* da, float* db, const float* d, size_t n) override {
    Time("ResidualBackward", [&] { inner_->ResidualBackward(da, db, d, n); });
  }
  void SoftmaxCrossEntropyForward(float* p, float* l, const float* lg, const int32_t* t, int B,
                                  int T, int V, int Vp) override {
    Time("SoftmaxCrossEntropyForward",
         [&] { inner_->SoftmaxCrossEntropyForward(p, l, lg, t, B, T, V, Vp); });
  }
  void SoftmaxCrossEntropyBackward(float* dl, const float* p, const int32_t* t, float dloss, int B,
                                   int T, int V, int Vp) override {
    Time("SoftmaxCrossEntropyBackward",
         [&] { inner_->SoftmaxCrossEntropyBackward(dl, p, t, dloss, B, T, V, Vp); });
  }
  void SoftmaxCrossEntropyBackwardInto(float* dl, const float* p, const int32_t* t, float dloss,
                                       int B, int T, int V, int Vp) override {
    Time("SoftmaxCrossEntropyBackward",
         [&] { inner_->SoftmaxCrossEntropyBackwardInto(dl, p, t, dloss, B, T, V, Vp); });
  }
  void AdamW(float* p, const float* g, float* m, float* v, size_t n, float lr, float b1, float b2,
             float eps, float wd, float scale, int t) override {
    Time("AdamW", [&] { inner_->AdamW(p, g, m, v, n, lr, b1, b2, eps, wd, scale, t); });
  }
  double SumSquares(const float* x, size_t n) override {
    double r = 0;
    Time("SumSquares", [&] { r = inner_->SumSquares(x, n); });
    return r;
  }

  // Llama-family ops (train_bench --family llama).
  bool HasLlamaOps() const override { return inner_->HasLlamaOps(); }
  void RmsNormForward(float* o, float* r, const float* i, const float* w, int N, int C,
                      float eps) override {
    Time("RmsNormForward", [&] { inner_->RmsNormForward(o, r, i, w, N, C, eps); });
  }
  void RmsNormBackward(float* di, float* dw, const float* d, const float* i, const float* w,
                       const float* r, int N, int C) override {
    Time("RmsNormBackward", [&] { inner_->RmsNormBackward(di, dw, d, i, w, r, N, C); });
  }
  void RopeForward(float* qkv, const float* c, const float* s, int B, int T, int NH, int NKV,
                   int HD) override {
    Time("RopeForward", [&] { inner_->RopeForward(qkv, c, s, B, T, NH, NKV, HD); });
  }
  void RopeBackward(float* dqkv, const float* c, const float* s, int B, int T, int NH, int NKV,
                    int HD) override {
    Time("RopeBackward", [&] { inner_->RopeBackward(dqkv, c, s, B, T, NH, NKV, HD); });
  }
  void SwiGluForward(float* o, const float* i, int N, int I) override {
    Time("SwiGluForward", [&] { inner_->SwiGluForward(o, i, N, I); });
  }
  void SwiGluBackward(float* di, const float* i, const float* d, int N, int I) override {
    Time("SwiGluBackward", [&] { inner_->SwiGluBackward(di, i, d, N, I); });
  }
  void GroupedAttentionForward(float* o, float* p, float* a, const float* q, int B, int T, int NH,
                               int NKV, int HD) override {
    Time("GroupedAttentionForward",
         [&] { inner_->GroupedAttentionForward(o, p, a, q, B, T, NH, NKV, HD); });
  }
  void GroupedAttentionBackward(float* dq, float* dp, float* da, const float* d, const float* q,
                                const float* a, int B, int T, int NH, int NKV, int HD) override {
    Time("GroupedAttentionBackward",
         [&] { inner_->GroupedAttentionBackward(dq, dp, da, d, q, a, B, T, NH, NKV, HD); });
  }

 private:
  template <typename F>
  void Time(const char* op, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    totals_[op] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  kernels::Ops* inner_;
  std::map<std::string, double> totals_;
};

}  // namespace longhaul::bench
