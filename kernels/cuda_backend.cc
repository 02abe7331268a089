// Finding the CUDA backend; see cuda_backend.h.
#include "kernels/cuda_backend.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/version.h"

namespace longhaul::kernels {
namespace {

constexpr char kEntrySymbol[] = "longhaul_cuda_backend_v1";

std::filesystem::path ProgramPath() {
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : exe;
}

// "longhauld", "longhaul", a test's name: whose backend is missing.
std::string ProgramName() {
  const auto exe = ProgramPath();
  return exe.empty() ? std::string("program") : exe.filename().string();
}

StatusOr<const CudaBackendEntry*> LoadFile(const std::string& path) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA backend ", path, " does not load: ", why != nullptr ? why : "dlopen failed",
        " (it needs ", kCudaBackendLibraries,
        " where the dynamic loader finds them: in ldconfig's folders or /usr/local/cuda/lib64)"));
  }
  using EntryFn = const CudaBackendEntry* (*)();
  auto entry_fn = reinterpret_cast<EntryFn>(dlsym(handle, kEntrySymbol));
  if (entry_fn == nullptr) {
    dlclose(handle);
    return absl::FailedPreconditionError(absl::StrCat(
        "the CUDA backend ", path, " is not a longhaul CUDA backend: it has no ", kEntrySymbol));
  }
  const CudaBackendEntry* entry = entry_fn();
  if (entry == nullptr || entry->abi != kCudaBackendAbi || entry->build_version == nullptr ||
      std::strcmp(entry->build_version, kBuildVersion) != 0) {
    const std::string theirs =
        entry == nullptr
            ? std::string("an unknown release (no table)")
            : absl::StrCat(entry->build_version != nullptr ? entry->build_version : "?",
                           " (entry table ", entry->abi, ")");
    dlclose(handle);
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA backend ", path, " is from longhaul ", theirs, ", this ",
                     ProgramName(), " is ", kBuildVersion, " (entry table ", kCudaBackendAbi,
                     "): install the backend built with it (its package carries it)"));
  }
  return entry;
}

#ifndef LONGHAUL_WITH_CUDA
// Set once CudaBackend() has the table (CudaBackendIfLoaded reads it without loading).
std::atomic<const CudaBackendEntry*> g_loaded{nullptr};

struct Loaded {
  StatusOr<const CudaBackendEntry*> entry;
  std::string source;
};

const Loaded& LoadOnce() {
  static const Loaded loaded = [] {
    const auto candidates = CudaBackendCandidates();
    std::string path;
    auto entry = LoadCudaBackend(candidates, &path);
    if (path.empty() && !candidates.empty()) path = candidates.front();
    if (entry.ok()) g_loaded.store(*entry, std::memory_order_release);
    return Loaded{std::move(entry), path};
  }();
  return loaded;
}
#endif

}  // namespace

std::vector<std::string> CudaBackendCandidates() {
  if (const char* env = std::getenv("LONGHAUL_CUDA_BACKEND"); env != nullptr && *env != '\0') {
    return {env};
  }
  const auto exe = ProgramPath();
  if (exe.empty()) return {};
  // /usr/bin/longhauld -> /usr/lib/longhaul/libcuda_backend.so
  return {(exe.parent_path().parent_path() / "lib/longhaul/libcuda_backend.so").string()};
}

StatusOr<const CudaBackendEntry*> LoadCudaBackend(const std::vector<std::string>& candidates,
                                                  std::string* loaded) {
  for (const auto& path : candidates) {
    if (access(path.c_str(), F_OK) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) continue;
      return absl::FailedPreconditionError(
          absl::StrCat("the CUDA backend ", path, " cannot be read: ", std::strerror(errno)));
    }
    if (loaded != nullptr) *loaded = path;
    return LoadFile(path);
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "this ", ProgramName(), " has no CUDA backend: looked for ",
      candidates.empty() ? std::string("nothing (no /proc/self/exe)")
                         : absl::StrJoin(candidates, ", "),
      "; a CPU-only build or package (tools/package.sh includes the backend where nvcc is "
      "installed; bazel build --config=cuda links it)"));
}

#ifdef LONGHAUL_WITH_CUDA
// The backend is linked (kernels/BUILD): its table, and nothing to load.
StatusOr<const CudaBackendEntry*> CudaBackend() { return longhaul_cuda_backend_v1(); }
const CudaBackendEntry* CudaBackendIfLoaded() { return longhaul_cuda_backend_v1(); }
std::string CudaBackendSource() { return "(linked into this --config=cuda build)"; }
#else
StatusOr<const CudaBackendEntry*> CudaBackend() { return LoadOnce().entry; }
const CudaBackendEntry* CudaBackendIfLoaded() { return g_loaded.load(std::memory_order_acquire); }
std::string CudaBackendSource() { return LoadOnce().source; }
#endif

}  // namespace longhaul::kernels
