// Which OpenBLAS kernel set ("core") the process runs, chosen before OpenBLAS starts.
//
// OpenBLAS picks its kernels once, in its library constructor, from the CPU's model number.
// A CPU newer than the library (Debian 12 ships 0.3.21) is not in its tables, and it falls
// back to its oldest x86-64 kernels (SSE3, "Prescott"): on a 2-core AVX-512 Xeon that is
// 65 GFLOP/s of sgemm instead of 300. The library's own knob, OPENBLAS_CORETYPE, is read in
// that constructor, so it has to be in the environment the process starts with: an entry in
// the executable's .preinit_array (which runs before any shared library's constructor) starts
// the process again with it set from the CPU's feature flags, when the user has not set it.
// Linked into every binary that links the "cpu" backend statically (binaries; tests only with
// linkstatic: a .preinit_array entry in a shared library is ignored).
#pragma once

#include <string>
#include <string_view>

namespace longhaul::kernels {

// The CPU features that decide the kernel set.
struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
};

// This CPU's features (cpuid).
CpuFeatures DetectCpuFeatures();

// The OPENBLAS_CORETYPE for these features: "SkylakeX" with AVX-512 F/BW/DQ/VL, "Haswell"
// with AVX2 and FMA, "" otherwise (leave the library's choice). These are the kernel sets
// OpenBLAS itself picks for the CPUs it knows with those features.
std::string_view BlasCoreFor(const CpuFeatures& cpu);

// One line for logs: the core OpenBLAS runs and where the choice came from, e.g.
// "OpenBLAS core SkylakeX (OPENBLAS_CORETYPE set from CPU features)".
std::string BlasCoreReport();

}  // namespace longhaul::kernels
