// "cpu": the fast CPU backend. Matmuls and attention go through OpenBLAS sgemm, the other
// ops are vectorized (AVX2) loops; all of it runs on one ThreadPool of the backend's own.
// Every partition of work depends only on the shapes, so results depend only on the inputs:
// not on timing, and not even on the thread count.
#pragma once

#include <memory>

#include "kernels/ops.h"

namespace longhaul::kernels {

// `threads` <= 0 means every core this process may use. Side effect: sets OpenBLAS to one
// thread, process-wide (this backend runs single-threaded sgemm tiles on its own pool;
// OpenBLAS's threads would only compete with it).
std::unique_ptr<Ops> NewCpuOps(int threads);

}  // namespace longhaul::kernels
