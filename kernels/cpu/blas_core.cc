// OPENBLAS_CORETYPE from the CPU's features, set before OpenBLAS's constructor (see header).
#include "kernels/cpu/blas_core.h"

#include <cblas.h>
#include <cpuid.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace longhaul::kernels {
namespace {

// OpenBLAS's knob, and the variable set beside it when this hook chose it, so that
// BlasCoreReport can tell it from a user's choice (the restarted process, and any child,
// inherits both).
constexpr std::string_view kCoreVar = "OPENBLAS_CORETYPE";
constexpr std::string_view kMarkerVar = "LONGHAUL_BLAS_CORE_FROM_CPU";

// Runs from .preinit_array, before any shared library's constructor, so it uses only the C
// library and cpuid. Setting the variable here is not enough: the C library's own
// initialisation, which runs next, resets `environ` to the array the kernel passed. So the
// process starts itself again, with the variable added, before anything else has run; if that
// fails (no /proc), it goes on with the library's choice.
void ChooseBlasCore(int /*argc*/, char** argv, char** envp) {
  if (envp == nullptr || argv == nullptr) return;
  size_t n = 0;
  for (; envp[n] != nullptr; n++) {
    if (std::strncmp(envp[n], kCoreVar.data(), kCoreVar.size()) == 0 &&
        envp[n][kCoreVar.size()] == '=') {
      return;
    }
  }
  const std::string_view core = BlasCoreFor(DetectCpuFeatures());
  if (core.empty()) return;
  static char assignment[64];
  std::snprintf(assignment, sizeof(assignment), "%s=%.*s", kCoreVar.data(),
                static_cast<int>(core.size()), core.data());
  static char marker[64];
  std::snprintf(marker, sizeof(marker), "%s=1", kMarkerVar.data());
  char** env = static_cast<char**>(std::malloc((n + 3) * sizeof(char*)));
  if (env == nullptr) return;
  std::memcpy(env, envp, n * sizeof(char*));
  env[n] = assignment;
  env[n + 1] = marker;
  env[n + 2] = nullptr;
  execve("/proc/self/exe", argv, env);
  std::free(env);  // exec failed: run on with the library's own choice
}

// Not const: .preinit_array is a writable section.
__attribute__((section(".preinit_array"),
               used)) void (*choose_blas_core_entry)(int, char**, char**) = &ChooseBlasCore;

bool Bit(unsigned reg, int bit) { return (reg >> bit) & 1u; }

}  // namespace

CpuFeatures DetectCpuFeatures() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return f;
  const unsigned max_leaf = a;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return f;
  f.fma = Bit(c, 12);
  const bool osxsave = Bit(c, 27);
  const bool avx = Bit(c, 28);
  if (!osxsave || !avx || max_leaf < 7) return f;
  // The OS must save the vector state: YMM (XCR0 bits 1-2) for AVX2, and the opmask and
  // ZMM state (bits 5-7) for AVX-512.
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm = (xcr0_lo & 0x6u) == 0x6u;
  const bool zmm = ymm && (xcr0_lo & 0xE0u) == 0xE0u;
  __cpuid_count(7, 0, a, b, c, d);
  f.fma = f.fma && ymm;
  f.avx2 = ymm && Bit(b, 5);
  f.avx512f = zmm && Bit(b, 16);
  f.avx512dq = zmm && Bit(b, 17);
  f.avx512bw = zmm && Bit(b, 30);
  f.avx512vl = zmm && Bit(b, 31);
  return f;
}

std::string_view BlasCoreFor(const CpuFeatures& cpu) {
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512dq && cpu.avx512vl) return "SkylakeX";
  if (cpu.avx2 && cpu.fma) return "Haswell";
  return "";
}

std::string BlasCoreReport() {
  std::string line = "OpenBLAS core ";
  line += openblas_get_corename();
  if (std::getenv(kCoreVar.data()) == nullptr) {
    line += " (the library's own choice)";
  } else if (std::getenv(kMarkerVar.data()) != nullptr) {
    line += " (OPENBLAS_CORETYPE set from CPU features)";
  } else {
    line += " (OPENBLAS_CORETYPE set by the user)";
  }
  return line;
}

}  // namespace longhaul::kernels
