// A shared library that is not a CUDA backend: no longhaul_cuda_backend_v1 (cuda_backend_test).
extern "C" int longhaul_fake_backend_without_entry() { return 1; }
