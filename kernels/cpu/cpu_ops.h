// "cpu": the fast CPU backend. Matmuls and attention go through OpenBLAS sgemm, the other
// ops are vectorized (AVX2) and split across cores with OpenMP. Results depend only on the
// inputs and the thread count, never on timing.
#pragma once

#include <memory>

#include "kernels/ops.h"

namespace longhaul::kernels {

// `threads` <= 0 means every core this process may use. Sets OpenBLAS's thread count to
// match (OpenBLAS's count is process-wide: the last backend made sets it).
std::unique_ptr<Ops> NewCpuOps(int threads);

}  // namespace longhaul::kernels
