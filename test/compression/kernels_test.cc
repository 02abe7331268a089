// Every kernel table against the reference: identical bytes for quantize and conversions,
// identical floats for decoding, identical positions for bad values and identical selections
// (the llm.c habit: sizes 0, 1, odd and block multiples, on every input class).
#include "compression/kernels.h"

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "compression/kernels_internal.h"
#include "test/compression/test_util.h"

namespace longhaul::compression::kernels {
namespace {

using testing::AllInputKinds;
using testing::InputKind;
using testing::KindName;
using testing::MakeInput;

const std::vector<size_t> kSizes = {0,  1,  2,   7,   31,   32,   33,       63,
                                    64, 65, 100, 255, 1000, 4099, 65536 + 5};

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

// Whether this CPU can run the avx2 table (the condition Avx2Kernels() checks).
bool CpuHasAvx2AndF16c() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return (ecx & bit_F16C) != 0 && __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

// Every case below runs each table of AllKernels() against the reference. With the reference
// alone (a CPU without AVX2 or F16C, where the codecs run on the reference too) they compare
// the reference with itself and check nothing: that is said, as a counted skip
// ("SKIPPED: ..." lines are listed by tools/test.sh), rather than passed silently. Not a
// failure: such CPUs are supported (the table is picked at run time so that one binary runs
// everywhere), and the suite must pass on them. Returns the skip line, or "" when a fast
// table is under test.
std::string UntestedTablesNote(const std::vector<const KernelTable*>& tables) {
  for (const KernelTable* t : tables) {
    if (t != &ReferenceKernels()) return "";
  }
  return "SKIPPED: kernels_test: no fast codec kernel table on this CPU (no AVX2 or F16C): the "
         "cases compare the reference table with itself";
}

TEST_CASE("the reference table is always present; avx2 when the CPU has AVX2 and F16C") {
  auto tables = AllKernels();
  REQUIRE(tables.size() >= 1);
  CHECK(std::string(tables[0]->name) == "reference");
  if (CpuHasAvx2AndF16c()) {
    REQUIRE(tables.size() == 2);
    CHECK(std::string(tables[1]->name) == "avx2");
    CHECK(&Kernels() == tables[1]);
  }
  const std::string note = UntestedTablesNote(tables);
  CHECK(note.empty() == CpuHasAvx2AndF16c());
  if (!note.empty()) {
    std::printf("%s\n", note.c_str());
    std::fflush(stdout);
    WARN(note);
  }
}

TEST_CASE("with the reference table alone, the tests say they test no fast table") {
  // The path of a CPU without AVX2 or F16C, whichever CPU runs the test.
  CHECK_THAT(UntestedTablesNote({&ReferenceKernels()}), Catch::StartsWith("SKIPPED: "));
  if (const KernelTable* avx2 = Avx2Kernels()) {
    CHECK(UntestedTablesNote({&ReferenceKernels(), avx2}).empty());
  }
}

TEST_CASE("quantize and dequantize match the reference bit for bit") {
  const KernelTable& ref = ReferenceKernels();
  for (const KernelTable* k : AllKernels()) {
    for (int bits : {8, 4, 2}) {
      for (uint32_t block : {8u, 16u, 32u, 64u, 256u}) {
        for (int mode = 0; mode < 4; ++mode) {
          QuantParams p;
          p.bits = bits;
          p.block = block;
          p.asymmetric = mode & 1;
          p.stochastic = mode & 2;
          p.seed = 1234 + mode;
          for (InputKind kind : AllInputKinds()) {
            for (size_t n : {size_t{0}, size_t{1}, size_t{33}, size_t{1000}, size_t{4099}}) {
              INFO(k->name << " bits=" << bits << " block=" << block << " mode=" << mode
                           << " kind=" << KindName(kind) << " n=" << n);
              auto x = MakeInput(kind, n, n * 31 + bits);
              std::vector<uint8_t> a(QuantizedSize(p, n), 0xAA), b(QuantizedSize(p, n), 0x55);
              REQUIRE(ref.quantize(p, x.data(), n, a.data()) == kNone);
              REQUIRE(k->quantize(p, x.data(), n, b.data()) == kNone);
              REQUIRE(a == b);
              std::vector<float> ya(n), yb(n);
              REQUIRE(ref.dequantize(p, a.data(), n, ya.data()) == kNone);
              REQUIRE(k->dequantize(p, a.data(), n, yb.data()) == kNone);
              REQUIRE(SameBits(ya, yb));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("quantize reports the first non-finite value; dequantize the first bad block") {
  for (const KernelTable* k : AllKernels()) {
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      for (bool asym : {false, true}) {
        for (size_t n : {size_t{300}, size_t{5000}}) {  // 5000: groups of eight blocks
          QuantParams p;
          p.block = 64;
          p.asymmetric = asym;
          auto x = MakeInput(InputKind::kGaussian, n, 5);
          x[n - 100] = bad;
          x[n - 50] = bad;
          std::vector<uint8_t> out(QuantizedSize(p, x.size()));
          CHECK(k->quantize(p, x.data(), x.size(), out.data()) == static_cast<int64_t>(n - 100));
        }
      }
    }
    QuantParams p;
    p.block = 32;
    p.asymmetric = true;
    const size_t n = 128;
    auto x = MakeInput(InputKind::kGaussian, n, 6);
    std::vector<uint8_t> enc(QuantizedSize(p, n));
    REQUIRE(k->quantize(p, x.data(), n, enc.data()) == kNone);
    std::vector<float> y(n);
    for (float poison :
         {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      auto scale_bad = enc;
      std::memcpy(scale_bad.data() + 4 * 2, &poison, 4);  // scale of block 2
      CHECK(k->dequantize(p, scale_bad.data(), n, y.data()) == 2);
      if (poison != -1.0f) {
        auto mid_bad = enc;
        std::memcpy(mid_bad.data() + 4 * 4 + 4 * 3, &poison, 4);  // mid of block 3
        CHECK(k->dequantize(p, mid_bad.data(), n, y.data()) == 3);
      }
    }
  }
}

TEST_CASE("hostile scales and codes still decode to finite values") {
  for (const KernelTable* k : AllKernels()) {
    for (bool asym : {false, true}) {
      QuantParams p;
      p.bits = 8;
      p.block = 32;
      p.asymmetric = asym;
      const size_t n = 64;
      std::vector<uint8_t> enc(QuantizedSize(p, n), 0xff);  // every code 255
      const float big = FLT_MAX;
      for (size_t b = 0; b < 2; ++b) std::memcpy(enc.data() + 4 * b, &big, 4);
      if (asym) {
        for (size_t b = 0; b < 2; ++b) std::memcpy(enc.data() + 8 + 4 * b, &big, 4);
      }
      std::vector<float> y(n);
      REQUIRE(k->dequantize(p, enc.data(), n, y.data()) == kNone);
      for (float v : y) REQUIRE(std::isfinite(v));
    }
  }
}

TEST_CASE("half conversions match the reference and IEEE rounding") {
  const KernelTable& ref = ReferenceKernels();
  // Every half bit pattern decodes the same way (or is rejected at the same place).
  std::vector<uint16_t> all(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (const KernelTable* k : AllKernels()) {
    for (size_t i = 0; i < all.size(); i += 1) {
      float a = 0, b = 0;
      const auto* p = reinterpret_cast<const uint8_t*>(&all[i]);
      int64_t ra = ref.half_to_floats(p, 1, &a), rb = k->half_to_floats(p, 1, &b);
      REQUIRE(ra == rb);
      if (ra == kNone) REQUIRE(std::memcmp(&a, &b, 4) == 0);
    }
    std::vector<float> decoded(65536);
    CHECK(k->half_to_floats(reinterpret_cast<const uint8_t*>(all.data()), all.size(),
                            decoded.data()) == 0x7c00);
  }
  // Random float bit patterns below the limit encode identically, and round trip within
  // half an ulp of half precision.
  std::mt19937 rng(7);
  std::vector<float> x;
  while (x.size() < 200000) {
    uint32_t bits = rng();
    float f = internal::BitsFloat(bits);
    if (std::isfinite(f) && std::fabs(f) < 65520.0f) x.push_back(f);
    if (x.size() % 3 == 0) x.push_back(std::ldexp(static_cast<float>(rng() % 4096), -36));
  }
  std::vector<uint8_t> a(2 * x.size()), b(2 * x.size());
  REQUIRE(ref.floats_to_half(x.data(), x.size(), a.data()) == kNone);
  for (const KernelTable* k : AllKernels()) {
    REQUIRE(k->floats_to_half(x.data(), x.size(), b.data()) == kNone);
    REQUIRE(a == b);
  }
  std::vector<float> y(x.size());
  REQUIRE(ref.half_to_floats(a.data(), x.size(), y.data()) == kNone);
  for (size_t i = 0; i < x.size(); ++i) {
    REQUIRE(std::fabs(y[i] - x[i]) <= std::fabs(x[i]) * 0x1p-11 + 0x1p-25);
  }
  for (const KernelTable* k : AllKernels()) {
    std::vector<float> bad = {1.0f, 65519.0f, -65520.0f, 2.0f};
    CHECK(k->floats_to_half(bad.data(), bad.size(), a.data()) == 2);
  }
}

TEST_CASE("bf16 conversions match the reference, round to nearest even and saturate") {
  const KernelTable& ref = ReferenceKernels();
  std::mt19937 rng(9);
  std::vector<float> x;
  while (x.size() < 200000) {
    float f = internal::BitsFloat(rng());
    if (std::isfinite(f)) x.push_back(f);
  }
  x.push_back(FLT_MAX);
  x.push_back(-FLT_MAX);
  std::vector<uint8_t> a(2 * x.size()), b(2 * x.size());
  REQUIRE(ref.floats_to_bf16(x.data(), x.size(), a.data()) == kNone);
  std::vector<float> ya(x.size()), yb(x.size());
  REQUIRE(ref.bf16_to_floats(a.data(), x.size(), ya.data()) == kNone);
  for (const KernelTable* k : AllKernels()) {
    REQUIRE(k->floats_to_bf16(x.data(), x.size(), b.data()) == kNone);
    REQUIRE(a == b);
    REQUIRE(k->bf16_to_floats(a.data(), x.size(), yb.data()) == kNone);
    REQUIRE(SameBits(ya, yb));
  }
  for (size_t i = 0; i < x.size(); ++i) {
    REQUIRE(std::isfinite(ya[i]));
    REQUIRE(std::fabs(static_cast<double>(ya[i]) - x[i]) <= std::fabs(x[i]) * 0x1p-8 + 0x1p-134);
  }
  CHECK(internal::FloatToBf16(1.0f + 0x1p-8f) == 0x3f80);      // tie to even: down
  CHECK(internal::FloatToBf16(1.0f + 3 * 0x1p-8f) == 0x3f82);  // tie to even: up
}

TEST_CASE("copy_floats copies and stops at the first non-finite value") {
  for (const KernelTable* k : AllKernels()) {
    for (size_t n : kSizes) {
      auto x = MakeInput(InputKind::kMixed, n, n);
      std::vector<float> y(n);
      REQUIRE(k->copy_floats(x.data(), n, y.data()) == kNone);
      REQUIRE(SameBits(x, y));
      if (n > 3) {
        x[n - 2] = std::numeric_limits<float>::infinity();
        CHECK(k->copy_floats(x.data(), n, y.data()) == static_cast<int64_t>(n - 2));
      }
    }
    // Unaligned source and destination.
    std::vector<uint8_t> src(4 * 100 + 1), dst(4 * 100 + 3);
    for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i % 60);
    REQUIRE(k->copy_floats(src.data() + 1, 100, dst.data() + 3) == kNone);
    CHECK(std::memcmp(src.data() + 1, dst.data() + 3, 400) == 0);
  }
}

TEST_CASE("select_at_least matches the reference") {
  const KernelTable& ref = ReferenceKernels();
  for (const KernelTable* k : AllKernels()) {
    for (size_t n : kSizes) {
      auto x = MakeInput(InputKind::kGaussian, n, n + 3);
      for (float t : {0.0f, 0.5f, 2.0f, 2.5f, 100.0f}) {
        uint32_t thr = internal::FloatBits(t);
        std::vector<uint32_t> a(n + 1), b(n + 1);
        uint64_t ca = ref.select_at_least(x.data(), n, thr, a.data());
        uint64_t cb = k->select_at_least(x.data(), n, thr, b.data());
        REQUIRE(ca == cb);
        a.resize(ca);
        b.resize(cb);
        REQUIRE(a == b);
      }
    }
  }
}

}  // namespace
}  // namespace longhaul::compression::kernels
