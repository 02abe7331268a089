"""cuda_library: compiles .cu files with nvcc (through a genrule) into a cc_library.

Bazel 4 has no CUDA rules, and rules_cuda needs the network; this macro is the small
offline substitute. Each .cu file becomes one object, compiled with -fPIC and listed as a
plain `.o`, which Bazel links both into binaries and into the shared libraries of tests. The
resulting cc_library links cudart and cuBLAS (//third_party/cuda:cudart_cublas); code that
uses NCCL adds //third_party/cuda:nccl itself.

Every target the macro makes is compatible only with a --config=cuda build: elsewhere it is
skipped by wildcards (`bazel build //...`) and never touches @cuda, so the default build
needs no CUDA toolkit. Use cuda_only() the same way on plain cc_library/cc_test targets that
include CUDA headers, and give those CUDA_COPTS (the toolkit's include path, which is not
exported so that it reaches only the targets that name it; see third_party/cuda/BUILD).
"""

# For host C++ targets that include CUDA headers (nvcc finds them itself).
CUDA_COPTS = [
    "-isystem",
    "external/cuda/include",
]

NVCC = "/usr/local/cuda/bin/nvcc"

# Ampere (A100) and Hopper (H100/H200) machine code, plus compute_90 PTX so newer GPUs can
# JIT-compile the kernels instead of failing to load them.
NVCC_FLAGS = [
    "-O3",
    "-std=c++20",
    "-Xcompiler",
    "-fPIC",
    "-gencode",
    "arch=compute_80,code=sm_80",
    "-gencode",
    "arch=compute_90,code=sm_90",
    "-gencode",
    "arch=compute_90,code=compute_90",
]

def cuda_only():
    """target_compatible_with value: compatible only when --config=cuda is set."""
    return select({
        "//:cuda_enabled": [],
        "//conditions:default": ["//third_party/cuda:requires_cuda_config"],
    })

def cuda_deps(deps = []):
    """`deps` plus cudart and cuBLAS under --config=cuda; nothing at all otherwise."""
    return select({
        "//:cuda_enabled": deps + ["//third_party/cuda:cudart_cublas"],
        "//conditions:default": [],
    })

def cuda_library(name, srcs, hdrs = [], nvcc_hdrs = [], nvcc_flags = [], deps = [], **kwargs):
    """A cc_library whose sources are CUDA files compiled by nvcc.

    Args:
      name: the cc_library's name.
      srcs: .cu files, one object each.
      hdrs: public headers of the library (also visible to nvcc).
      nvcc_hdrs: other headers the .cu files include (from this or other packages); nvcc runs
        in the execution root with -I., so includes are workspace-relative as everywhere.
      nvcc_flags: extra nvcc flags for these files (for example -fmad=false).
      deps: cc_library dependencies of the host code that links the objects.
      **kwargs: passed on to the cc_library (visibility, tags, ...).
    """
    objs = []
    for src in srcs:
        if not src.endswith(".cu"):
            fail("cuda_library srcs must be .cu files, got " + src)
        stem = "_objs/%s/%s" % (name, src[:-len(".cu")])
        obj = stem + ".o"
        native.genrule(
            name = "%s_%s_nvcc" % (name, src[:-len(".cu")].replace("/", "_")),
            srcs = [src] + hdrs + nvcc_hdrs,
            outs = [obj],
            # nvcc names its temporary files after its process id, and every sandboxed
            # action runs as pid 2: each action gets a temporary directory of its own, or
            # two nvcc actions at once collide ("cannot open module id file").
            cmd = "tmp=$$(mktemp -d) && " + " ".join(
                ["TMPDIR=$$tmp", NVCC] + NVCC_FLAGS + nvcc_flags + [
                    "-I.",
                    "-c",
                    "$(location %s)" % src,
                    "-o",
                    "$(location %s)" % obj,
                ],
            ) + "; rc=$$?; rm -rf $$tmp; exit $$rc",
            message = "nvcc " + src,
            target_compatible_with = cuda_only(),
            visibility = ["//visibility:private"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        deps = cuda_deps(deps),
        target_compatible_with = cuda_only(),
        **kwargs
    )
