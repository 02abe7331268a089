// Helpers for the kernel tests: backend construction, buffers that live in a backend's memory
// (uploaded from and downloaded to host vectors, so the same tests serve device backends),
// seeded random data, and llm.c's closeness check |a - ref| <= abs_tol + |ref| * rel_tol.
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/ops.h"

namespace longhaul::kernels::testing {

inline std::unique_ptr<Ops> Backend(const std::string& name, int threads = 0) {
  auto ops = MakeOps(name, threads);
  REQUIRE(ops.ok());
  return std::move(ops).value();
}

// A buffer in `ops`'s memory, freed on destruction.
class DeviceVec {
 public:
  DeviceVec(Ops& ops, const std::vector<float>& host) : ops_(ops), n_(host.size()) {
    p_ = ops_.Alloc(n_);
    ops_.Upload(p_, host.data(), n_);
  }
  DeviceVec(Ops& ops, size_t n) : ops_(ops), n_(n) { p_ = ops_.Alloc(n_); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  ~DeviceVec() { ops_.Free(p_); }

  float* get() { return p_; }
  std::vector<float> ToHost() {
    std::vector<float> host(n_);
    ops_.Download(host.data(), p_, n_);
    ops_.Synchronize();
    return host;
  }

 private:
  Ops& ops_;
  size_t n_;
  float* p_;
};

inline std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline std::vector<int32_t> RandomTokens(size_t n, int32_t limit, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, limit - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng);
  return v;
}

struct Tolerance {
  float abs_tol;
  float rel_tol;
};

// Whether two buffers hold the same floats bit for bit (NaNs and signed zeros included).
inline bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Checks every element; reports the count of mismatches and the worst few.
inline void ExpectClose(const std::vector<float>& got, const std::vector<float>& ref, Tolerance tol,
                        const std::string& what) {
  INFO(what);
  REQUIRE(got.size() == ref.size());
  size_t bad = 0;
  std::string examples;
  for (size_t i = 0; i < got.size(); i++) {
    bool ok = std::fabs(got[i] - ref[i]) <= tol.abs_tol + std::fabs(ref[i]) * tol.rel_tol;
    if (!ok || std::isnan(got[i]) != std::isnan(ref[i])) {
      if (bad++ < 5) {
        examples += "[" + std::to_string(i) + "] got " + std::to_string(got[i]) + " ref " +
                    std::to_string(ref[i]) + "; ";
      }
    }
  }
  INFO(bad << " of " << got.size() << " out of tolerance: " << examples);
  CHECK(bad == 0);
}

// a[i] + b[i].
inline std::vector<float> Add(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> r(a.size());
  for (size_t i = 0; i < a.size(); i++) r[i] = a[i] + b[i];
  return r;
}

// The starting value of gradient output `which` (n floats) in accumulation checks.
inline std::vector<float> Prefill(size_t which, size_t n) {
  return Random(n, 1000 + static_cast<uint32_t>(which), -0.5f, 0.5f);
}

// A backward op under test: runs it on `ops` and returns its gradient outputs, in the order
// of `names`. With `prefill`, gradient output k starts at Prefill(k, size), otherwise at 0.
using GradRun = std::function<std::vector<std::vector<float>>(Ops& ops, bool prefill)>;

// Checks `fast` against "cpu-ref" (both accumulating onto a prefill), and that both really
// accumulate: result with prefill == prefill + result from zero.
inline void CheckBackward(const GradRun& run, Ops& fast, Tolerance tol,
                          const std::vector<std::string>& names) {
  auto ref_ops = Backend("cpu-ref");
  auto ref_pre = run(*ref_ops, true);
  auto ref_zero = run(*ref_ops, false);
  auto fast_pre = run(fast, true);
  auto fast_zero = run(fast, false);
  REQUIRE(ref_pre.size() == names.size());
  REQUIRE(fast_pre.size() == names.size());
  for (size_t k = 0; k < names.size(); k++) {
    ExpectClose(fast_pre[k], ref_pre[k], tol, names[k] + " (" + fast.name() + " vs cpu-ref)");
    auto prefill = Prefill(k, ref_zero[k].size());
    ExpectClose(ref_pre[k], Add(ref_zero[k], prefill), tol, names[k] + " accumulates (cpu-ref)");
    ExpectClose(fast_pre[k], Add(fast_zero[k], prefill), tol,
                names[k] + " accumulates (" + fast.name() + ")");
  }
}

// Gradient buffer k of size n for a GradRun.
inline std::vector<float> GradInit(size_t which, size_t n, bool prefill) {
  return prefill ? Prefill(which, n) : std::vector<float>(n, 0.0f);
}

}  // namespace longhaul::kernels::testing
