#!/usr/bin/env bash
# Builds the Debian package longhaul_VERSION_amd64.deb: what an operator installs on a site.
#
#   tools/package.sh [--out DIR] [--version VERSION] [--no-build] [--no-cuda] [-- BAZEL_ARGS...]
#
#   --out DIR          where the .deb goes (default: out/, which git ignores)
#   --version VERSION  the package version; default: the release in common/version.h
#                      (what `longhauld --version` prints), as is when HEAD carries the tag
#                      v<release>, else <release>+git<commits>.<hash> so that later builds
#                      sort newer (dpkg --compare-versions)
#   --no-build         package the binaries Bazel built last instead of building
#   --no-cuda          leave the CUDA backend out even where nvcc is installed
#   BAZEL_ARGS         passed on to `bazel build`, for example -- --jobs=1
#
# The package holds longhauld and longhaul in /usr/bin (built by tools/build.sh in the
# configuration the tests use, -O2 from .bazelrc, so the package ships the binaries the suite
# ran and CI builds nothing twice; then stripped); where the CUDA toolkit is installed
# (/usr/local/cuda/bin/nvcc, or $LONGHAUL_NVCC: as tools/test.sh decides) also the CUDA backend,
# /usr/lib/longhaul/libcuda_backend.so (`bazel build --config=cuda`, stripped, RUNPATH
# /usr/local/cuda/lib64), which longhauld loads only for a site with `devices: [cuda:N]`
# (kernels/cuda_backend.h), so one package serves CPU and GPU sites; it prints on stderr whether
# the package carries it. /lib/systemd/system/longhauld.service (generated
# here from configs/longhauld.service, the one source of the unit: /usr/bin paths and the
# package's system user `longhaul` instead of DynamicUser=), the commented config template
# packaging/site.yaml as the conffile /etc/longhaul/site.yaml, the state directory
# /var/lib/longhaul, and the maintainer scripts in packaging/debian/ (the user, a random
# control token, no automatic start; purge deletes /etc/longhaul and /var/lib/longhaul).
# Depends is computed from the binaries' shared libraries with dpkg-shlibdeps (dpkg-dev); not
# from the CUDA backend's, whose NVIDIA libraries (CUDA runtime, cuBLAS, NCCL) are no Debian
# packages: a GPU site installs them with the driver (README, "Deploying a site").
# Prints the path of the .deb on stdout; tools/package_test.sh installs, upgrades and purges it.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
  echo "package: $*" >&2
  exit 1
}

usage() {
  sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
}

out_dir=out
version=
build=1
cuda=auto
bazel_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help)
      usage
      exit 0
      ;;
    --out)
      [ $# -ge 2 ] || die "--out needs a directory"
      out_dir=$2
      shift 2
      ;;
    --version)
      [ $# -ge 2 ] || die "--version needs a version"
      version=$2
      shift 2
      ;;
    --no-build)
      build=0
      shift
      ;;
    --no-cuda)
      cuda=0
      shift
      ;;
    --)
      shift
      bazel_args=("$@")
      break
      ;;
    *)
      usage >&2
      die "unknown argument '$1'"
      ;;
  esac
done

for tool in dpkg-deb dpkg-shlibdeps strip; do
  command -v "$tool" >/dev/null ||
    die "$tool not found (apt-get install dpkg-dev binutils; tools/setup.sh installs both)"
done
[ "$(dpkg --print-architecture)" = amd64 ] ||
  die "builds amd64 packages only; this machine is $(dpkg --print-architecture)"

# The CUDA backend: where nvcc is (the same test as tools/test.sh's), unless --no-cuda.
nvcc=${LONGHAUL_NVCC:-/usr/local/cuda/bin/nvcc}
if [ "$cuda" = auto ]; then
  if [ -x "$nvcc" ]; then cuda=1; else cuda=0; fi
  no_cuda_why="no nvcc at $nvcc"
else
  no_cuda_why="--no-cuda"
fi
if [ "$cuda" = 1 ]; then
  for tool in patchelf readelf; do
    command -v "$tool" >/dev/null ||
      die "$tool not found (apt-get install patchelf binutils; or --no-cuda)"
  done
fi

# The version: the release from common/version.h, plus the commit unless HEAD is its tag.
release=$(sed -n 's/.*kBuildVersion = "\([^"]*\)".*/\1/p' common/version.h)
[ -n "$release" ] || die "cannot read kBuildVersion from common/version.h"
if [ -z "$version" ]; then
  version=$release
  if git rev-parse --git-dir >/dev/null 2>&1 &&
    [ "$(git describe --tags --exact-match 2>/dev/null)" != "v$release" ]; then
    version="$release+git$(git rev-list --count HEAD).$(git rev-parse --short HEAD)"
  fi
fi
[[ "$version" =~ ^[0-9][A-Za-z0-9.+~]*$ ]] ||
  die "'$version' is not a Debian version (a digit, then letters, digits, '.', '+', '~')"

# The binaries, as the tests build them: .bazelrc compiles every configuration with -O2 and
# nothing of ours reads NDEBUG, so -c opt would add only section garbage collection, and a second
# full build of everything.
if [ "$build" = 1 ]; then
  echo "package: building longhauld and longhaul" >&2
  tools/build.sh //tools/linkem:linkem "${bazel_args[@]}" ||
    die "the build failed (run tools/build.sh to see why)"
  if [ "$cuda" = 1 ]; then
    echo "package: building the CUDA backend (bazel --config=cuda)" >&2
    bazel build --config=cuda --noshow_progress \
      --ui_event_filters=-info,-stdout,-stderr //kernels/cuda:libcuda_backend.so \
      "${bazel_args[@]}" ||
      die "the CUDA backend's build failed (run bazel build --config=cuda" \
        "//kernels/cuda:libcuda_backend.so to see why; --no-cuda packages without it)"
  fi
fi
bin_dir=$(bazel info bazel-bin 2>/dev/null) || die "bazel info failed"
for b in daemon/longhauld tools/cli/longhaul tools/linkem/linkem; do
  [ -x "$bin_dir/$b" ] || die "$bin_dir/$b is missing: build it (drop --no-build)"
done
backend="$bin_dir/kernels/cuda/libcuda_backend.so"
if [ "$cuda" = 1 ] && [ ! -f "$backend" ]; then
  die "$backend is missing: build it (drop --no-build) or pass --no-cuda"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/longhaul-package.XXXXXX")
trap 'rm -rf "$work"' EXIT
# dpkg-shlibdeps expects debian/control and the package tree at debian/<package>.
pkg="$work/debian/longhaul"
mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin" "$pkg/lib/systemd/system" "$pkg/etc/longhaul" \
  "$pkg/var/lib/longhaul" "$pkg/usr/share/doc/longhaul/examples"
chmod 0750 "$pkg/var/lib/longhaul"

install -m 0755 "$bin_dir/daemon/longhauld" "$pkg/usr/bin/longhauld"
install -m 0755 "$bin_dir/tools/cli/longhaul" "$pkg/usr/bin/longhaul"
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
  "$pkg/usr/bin/longhauld" "$pkg/usr/bin/longhaul"

# The CUDA backend, where longhauld looks for it (<its folder>/../lib/longhaul). Bazel's RUNPATH
# ($ORIGIN/../../_solib_k8/..., the build tree) becomes /usr/local/cuda/lib64, where NVIDIA's
# toolkit puts the libraries; ldconfig's folders serve as well. Its NVIDIA libraries must be
# the ones the loader's messages name (kernels/cuda_backend.h), and every other library it
# needs one that longhauld needs too, so that Depends (longhauld's) covers it.
if [ "$cuda" = 1 ]; then
  mkdir -p "$pkg/usr/lib/longhaul"
  lib="$pkg/usr/lib/longhaul/libcuda_backend.so"
  install -m 0644 "$backend" "$lib"
  strip --strip-unneeded --remove-section=.comment --remove-section=.note "$lib"
  patchelf --set-rpath /usr/local/cuda/lib64 "$lib" || die "patchelf --set-rpath failed on $lib"
  needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
  [ "$(readelf -d "$lib" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')" = /usr/local/cuda/lib64 ] ||
    die "$lib: RUNPATH is not /usr/local/cuda/lib64 after patchelf"
  daemon_needs=$(needed "$pkg/usr/bin/longhauld")
  nvidia_libs=()
  while read -r so; do
    case $so in
      libcu*.so* | libnccl*.so* | libnv*.so*)
        grep -qF "$so" kernels/cuda_backend.h ||
          die "the CUDA backend needs $so, which kernels/cuda_backend.h's kCudaBackendLibraries does not name"
        nvidia_libs+=("$so")
        ;;
      *)
        grep -qxF "$so" <<<"$daemon_needs" ||
          die "the CUDA backend needs $so, which longhauld does not (Depends would miss it)"
        ;;
    esac
  done < <(needed "$lib")
  [ ${#nvidia_libs[@]} -gt 0 ] || die "$lib needs no NVIDIA library: not the CUDA backend?"
  mapfile -t nvidia_libs < <(printf '%s\n' "${nvidia_libs[@]}" | sort)
  libs=$(printf '%s, ' "${nvidia_libs[@]}")
  libs=${libs%, }
  echo "package: with the CUDA backend: /usr/lib/longhaul/libcuda_backend.so" \
    "($(du -h "$lib" | cut -f1); built with" \
    "$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p'); a GPU site needs" \
    "the NVIDIA driver and $libs)" >&2
  cuda_description=" .
$(fmt -w 76 <<DESC | sed 's/^/ /'
GPU sites (devices: [cuda:N]): longhauld loads its CUDA backend,
/usr/lib/longhaul/libcuda_backend.so, for them only. It needs the NVIDIA driver
(libcuda.so.1) and $libs (NVIDIA's CUDA runtime, cuBLAS and NCCL, which are not
Debian packages and not among the dependencies) in ldconfig's folders or
/usr/local/cuda/lib64. longhauld --check names what is missing.
DESC
)"
else
  echo "package: WITHOUT the CUDA backend ($no_cuda_why): a site with devices: [cuda:N]" \
    "cannot use this package; CPU sites can" >&2
  cuda_description=" .
 This package has no CUDA backend (built without the CUDA toolkit): it serves
 CPU sites only; a site with devices: [cuda:N] fails longhauld --check."
fi

# The unit: configs/longhauld.service with the package's paths and user.
unit="$pkg/lib/systemd/system/longhauld.service"
{
  echo "# longhauld.service as installed by the longhaul Debian package. Generated by"
  echo "# tools/package.sh from configs/longhauld.service: /usr/bin paths, and the package's"
  echo "# system user longhaul instead of DynamicUser=, so that the files site.yaml names"
  echo "# (token, TLS key: chmod 600) can belong to the user the daemon runs as."
  echo "# First fill in /etc/longhaul/site.yaml, then: systemctl enable --now longhauld"
  sed -n '/^\[Unit\]/,$p' configs/longhauld.service |
    sed -e 's|/usr/local/bin/|/usr/bin/|g' -e 's|^DynamicUser=yes$|User=longhaul\nGroup=longhaul|'
} >"$unit"
chmod 0644 "$unit"
if ! grep -q '^ExecStart=/usr/bin/longhauld --config /etc/longhaul/site.yaml$' "$unit" ||
  ! grep -q '^User=longhaul$' "$unit" || grep -q -e '/usr/local' -e '^DynamicUser=' "$unit"; then
  die "configs/longhauld.service changed shape: update the sed lines in $0"
fi

# The demo, runnable from the package without Bazel or a checkout: its scripts and job under
# /usr/share/longhaul/demo (demo.sh runs the installed binaries there) and the WAN emulator
# it needs in /usr/lib/longhaul.
mkdir -p "$pkg/usr/lib/longhaul" "$pkg/usr/share/longhaul/demo/tools" \
  "$pkg/usr/share/longhaul/demo/configs"
install -m 0755 "$bin_dir/tools/linkem/linkem" "$pkg/usr/lib/longhaul/linkem"
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
  "$pkg/usr/lib/longhaul/linkem"
install -m 0755 tools/demo.sh tools/make-certs.sh "$pkg/usr/share/longhaul/demo/tools/"
install -m 0644 tools/wan_sites.sh tools/free_ports.py "$pkg/usr/share/longhaul/demo/tools/"
install -m 0644 configs/demo-job.yaml "$pkg/usr/share/longhaul/demo/configs/"

install -m 0644 packaging/site.yaml "$pkg/etc/longhaul/site.yaml"
install -m 0644 README.md "$pkg/usr/share/doc/longhaul/README.md"
install -m 0644 configs/site.example.yaml configs/job.example.yaml configs/llama-job.example.yaml \
  "$pkg/usr/share/doc/longhaul/examples/"
for script in postinst prerm postrm; do
  install -m 0755 "packaging/debian/$script" "$pkg/DEBIAN/$script"
done
install -m 0644 packaging/debian/conffiles "$pkg/DEBIAN/conffiles"

# Depends: the Debian packages of every shared library the binaries load, plus passwd for the
# useradd in postinst. dpkg-shlibdeps's "useless dependency" warnings are about how Bazel
# links (the whole gRPC/abseil list), not about the package; other warnings are shown.
printf 'Source: longhaul\n\nPackage: longhaul\nArchitecture: amd64\n' >"$work/debian/control"
shlibs=$(cd "$work" && dpkg-shlibdeps -O debian/longhaul/usr/bin/longhauld \
  debian/longhaul/usr/bin/longhaul debian/longhaul/usr/lib/longhaul/linkem \
  2> >(grep -v 'useless dependency' >&2)) ||
  die "dpkg-shlibdeps failed"
shlibs=${shlibs#shlibs:Depends=}
[ -n "$shlibs" ] || die "dpkg-shlibdeps found no dependencies"
depends="$shlibs, passwd"

installed_size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
maintainer="${DEBFULLNAME:-longhaul maintainers} <${DEBEMAIL:-longhaul@localhost}>"
control=$(sed -e "s|@VERSION@|$version|" -e "s|@MAINTAINER@|$maintainer|" \
  -e "s|@INSTALLED_SIZE@|$installed_size|" -e "s|@DEPENDS@|$depends|" packaging/debian/control.in)
printf '%s\n' "${control//@CUDA_DESCRIPTION@/$cuda_description}" >"$pkg/DEBIAN/control"
! grep -q '@[A-Z_]*@' "$pkg/DEBIAN/control" || die "unfilled field in DEBIAN/control"
(cd "$pkg" && find usr lib -type f -print0 | sort -z | xargs -0 md5sum) >"$pkg/DEBIAN/md5sums"

mkdir -p "$out_dir"
deb="$(cd "$out_dir" && pwd)/longhaul_${version}_amd64.deb"
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null || die "dpkg-deb failed"
echo "package: $(du -h "$deb" | cut -f1) $deb" >&2
echo "$deb"
