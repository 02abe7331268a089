// Run-time choice of the kernel table (see kernels.h) and the quantized layout's sizes.
#include "compression/kernels.h"

#include <cstdlib>
#include <cstring>

namespace longhaul::compression::kernels {

uint64_t QuantBlocks(const QuantParams& p, uint64_t n) { return (n + p.block - 1) / p.block; }

uint64_t QuantizedSize(const QuantParams& p, uint64_t n) {
  const uint64_t scale_bytes = QuantBlocks(p, n) * 4 * (p.asymmetric ? 2 : 1);
  return scale_bytes + (n * static_cast<uint64_t>(p.bits) + 7) / 8;
}

const KernelTable& Kernels() {
  static const KernelTable* const table = [] {
    const char* force = std::getenv("LONGHAUL_CODEC_KERNELS");
    if (force != nullptr && std::strcmp(force, "reference") == 0) return &ReferenceKernels();
    if (const KernelTable* avx2 = Avx2Kernels()) return avx2;
    return &ReferenceKernels();
  }();
  return *table;
}

std::vector<const KernelTable*> AllKernels() {
  std::vector<const KernelTable*> tables = {&ReferenceKernels()};
  if (const KernelTable* avx2 = Avx2Kernels()) tables.push_back(avx2);
  return tables;
}

}  // namespace longhaul::compression::kernels
