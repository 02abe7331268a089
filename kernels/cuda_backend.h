// Finding the CUDA backend (cuda_backend_entry.h) at run time, so that one longhauld serves CPU
// and GPU sites: MakeOps("cuda"), the NCCL reducer and the device codecs reach the backend only
// through CudaBackend(), and a site's `devices: [cuda:N]` is checked with it.
//
// A --config=cuda build links the backend: CudaBackend() returns its table and nothing is
// loaded. Any other build dlopen()s //kernels/cuda:libcuda_backend.so on first use, from the
// first of:
//   1. $LONGHAUL_CUDA_BACKEND, a file path (tests; only it is tried when it is set), or
//   2. <folder of this program>/../lib/longhaul/libcuda_backend.so: the package's layout,
//      /usr/bin/longhauld and /usr/lib/longhaul/libcuda_backend.so (tools/package.sh).
// It needs the CUDA runtime, cuBLAS and NCCL (kCudaBackendLibraries) where the dynamic loader
// finds them; without a GPU it still loads, and its device_count says why there is none.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/cuda_backend_entry.h"

namespace longhaul::kernels {

// The NVIDIA libraries the backend needs beside the driver, for messages (tools/package.sh
// checks that they are the ones the built library needs).
inline constexpr const char* kCudaBackendLibraries =
    "libcudart.so.13, libcublas.so.13 and libcublasLt.so.13 (the CUDA 13 runtime and cuBLAS) and "
    "libnccl.so.2 (NCCL)";

// The backend, loaded once (thread-safe; the result, an error included, is kept for the
// process's lifetime). FailedPrecondition errors say which of these it is:
//   - none installed: "this longhauld has no CUDA backend: looked for PATH; ..."
//   - it does not load: "the CUDA backend PATH does not load: <dlerror> (it needs ...)"
//   - not a backend of this build: "the CUDA backend PATH is from longhaul V (table layout A),
//     this longhauld is W (A'): ..."
StatusOr<const CudaBackendEntry*> CudaBackend();

// The backend if CudaBackend() has already returned it, else nullptr; never loads anything.
// For code that needs the backend only for objects the backend made (a CUDA Ops exists only
// once the backend is loaded): the reducer and the device codecs.
const CudaBackendEntry* CudaBackendIfLoaded();

// Where CudaBackend()'s table comes from, for messages: the file it loaded (or tried first),
// or "(linked into this --config=cuda build)". Calls CudaBackend() first.
std::string CudaBackendSource();

// The files a build without the linked backend tries, in order (1. and 2. above).
std::vector<std::string> CudaBackendCandidates();

// What CudaBackend() does in such a build, with the same checks and messages, but each time
// (not cached; a library that passes stays loaded, one that fails is unloaded): loads the first
// of `candidates` that exists. *loaded, when given, is set to that file. For tests.
StatusOr<const CudaBackendEntry*> LoadCudaBackend(const std::vector<std::string>& candidates,
                                                  std::string* loaded = nullptr);

}  // namespace longhaul::kernels
