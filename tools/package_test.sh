#!/usr/bin/env bash
# Installs, upgrades, removes and purges the longhaul Debian package on a clean Debian 12 root
# (a debootstrap chroot), as an operator would, and checks each step: a CPU site that serves,
# and a GPU site (devices: [cuda:0]) that --check and the start both refuse, naming what this
# machine lacks (the package's CUDA backend, or the NVIDIA libraries it needs, or with this
# machine's CUDA libraries mounted in, a driver and a GPU).
#
#   tools/package_test.sh [--deb FILE] [-- BAZEL_ARGS...]     (as root)
#
#   --deb FILE   the package to test; default: build one with tools/package.sh (BAZEL_ARGS
#                go to its build, for example -- --jobs=1)
#
# Environment:
#   LONGHAUL_PACKAGE_TEST_CACHE  where the bootstrapped base root (a tar) and downloaded
#                                .debs are kept between runs (default
#                                /var/cache/longhaul-package-test); delete it to start over
#   LONGHAUL_DEBIAN_MIRROR       default http://deb.debian.org/debian
#   LONGHAUL_DEBIAN_SECURITY     default http://deb.debian.org/debian-security
#   KEEP_ROOT=1                  keep the chroot afterwards (its path is printed)
#
# Every run starts from a fresh copy of the base root: debootstrap --variant=minbase plus
# systemd (for systemd-analyze). The package's Depends come from the mirror through
# `apt-get -f install`, which is what proves them complete. The first run needs a few
# minutes (debootstrap); later runs reuse the cache. Ends with "package test: N passed,
# N failed" and exits 1 when any check failed.
# shellcheck disable=SC2317  # cleanup and the check helpers run through trap and check
set -euo pipefail
cd "$(dirname "$0")/.."

passed=0
failed=0
# A failure that stops the test; it still ends with the summary line CI reads.
die() {
  echo "package test: $*" >&2
  echo "package test: $passed passed, $((failed + 1)) failed"
  exit 1
}

deb=
package_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help)
      sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    --deb)
      [ $# -ge 2 ] || die "--deb needs a file"
      deb=$2
      shift 2
      ;;
    --)
      shift
      package_args=(-- "$@")
      break
      ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, chroot and mount need it)"
cache=${LONGHAUL_PACKAGE_TEST_CACHE:-/var/cache/longhaul-package-test}
mirror=${LONGHAUL_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${LONGHAUL_DEBIAN_SECURITY:-http://deb.debian.org/debian-security}
suite=bookworm

work=$(mktemp -d "${TMPDIR:-/var/tmp}/longhaul-package-test.XXXXXX")
root="$work/root"
logs="$work/logs"
mkdir -p "$root" "$logs" "$cache/archives"

# Unmounts everything under the chroot, and deletes it only once nothing is mounted there
# (so that a stuck bind mount never lets rm reach the cache).
cleanup() {
  local m
  for m in usr/local/cuda/lib64 var/cache/apt/archives dev/pts proc; do
    if mountpoint -q "$root/$m" 2>/dev/null; then
      umount "$root/$m" 2>/dev/null || umount -l "$root/$m" || true
    fi
  done
  if [ "${KEEP_ROOT:-0}" = 1 ]; then
    echo "package test: kept the chroot at $root" >&2
  elif grep -q " $work/" /proc/self/mounts; then
    echo "package test: $work still has mounts; not deleting it" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

pass() {
  passed=$((passed + 1))
  echo "ok   $1"
}
fail() {
  failed=$((failed + 1))
  echo "FAIL $1${2:+: $2}"
}
# check NAME COMMAND...: one check; its output goes to the log and is shown when it fails.
check() {
  local name=$1 log
  shift
  log="$logs/$((passed + failed)).log"
  if "$@" >"$log" 2>&1; then
    pass "$name"
  else
    fail "$name"
    sed 's/^/     | /' "$log" | tail -n 20
  fi
}
finish() {
  echo "package test: $passed passed, $failed failed"
  exit $((failed > 0 ? 1 : 0))
}
# A step the rest depends on: on failure, show its log and stop.
must() {
  local name=$1
  shift
  if "$@" >"$logs/step.log" 2>&1; then
    pass "$name"
  else
    fail "$name"
    sed 's/^/     | /' "$logs/step.log" | tail -n 40
    finish
  fi
}
in_root() { chroot "$root" "$@"; }

# --- The package -------------------------------------------------------------------------
if [ -z "$deb" ]; then
  deb=$(tools/package.sh --out "$work/deb" "${package_args[@]}") || die "tools/package.sh failed"
fi
[ -f "$deb" ] || die "no package at '$deb'"
version=$(dpkg-deb --field "$deb" Version)
echo "package test: $deb (version $version)"

# --- A clean Debian 12 root --------------------------------------------------------------
if ! command -v debootstrap >/dev/null; then
  echo "package test: installing debootstrap" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null ||
    die "cannot install debootstrap (apt-get install debootstrap)"
fi
base="$cache/$suite-minbase-systemd.tar"
key="$suite minbase systemd $mirror $security"
(
  flock 9
  if [ ! -f "$base" ] || [ "$(cat "$base.key" 2>/dev/null)" != "$key" ]; then
    echo "package test: bootstrapping Debian $suite into the cache (once; a few minutes)" >&2
    tmp="$cache/bootstrap.tmp"
    rm -rf "$tmp"
    mkdir -p "$tmp" "$cache/debootstrap-debs"
    debootstrap --variant=minbase --include=systemd --cache-dir="$cache/debootstrap-debs" \
      "$suite" "$tmp" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
      die "debootstrap failed; see $cache/debootstrap.log"
    printf 'deb %s %s main\ndeb %s %s-updates main\ndeb %s %s-security main\n' \
      "$mirror" "$suite" "$mirror" "$suite" "$security" "$suite" >"$tmp/etc/apt/sources.list"
    # No service starts inside the chroot, whatever a maintainer script asks for.
    printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
    chmod 755 "$tmp/usr/sbin/policy-rc.d"
    rm -f "$tmp"/var/cache/apt/archives/*.deb
    tar -C "$tmp" --numeric-owner -cf "$base.new" . && mv "$base.new" "$base"
    echo "$key" >"$base.key"
    rm -rf "$tmp"
  fi
) 9>"$cache/lock"
[ -f "$base" ] || die "no base root in $cache"

must "unpack a clean Debian 12 root" tar -C "$root" --numeric-owner -xf "$base"
mount -t proc proc "$root/proc"
mount --bind "$cache/archives" "$root/var/cache/apt/archives"
cp /etc/resolv.conf "$root/etc/resolv.conf"
must "apt-get update in the root" in_root apt-get update -qq
export DEBIAN_FRONTEND=noninteractive

# --- Install -----------------------------------------------------------------------------
cp "$deb" "$root/tmp/longhaul.deb"
# dpkg -i stops at the missing Depends (leaving the package unconfigured); apt-get -f
# install fetches them from the mirror and finishes the configuration.
in_root dpkg -i /tmp/longhaul.deb >"$logs/install.log" 2>&1 || true
must "install: dpkg -i, then apt-get -f install for the Depends" \
  in_root apt-get -f install -y -q -o Dpkg::Use-Pty=0
cat "$logs/step.log" >>"$logs/install.log"

# shellcheck disable=SC2016  # dpkg-query's own ${...} fields
status() { in_root dpkg-query -W -f='${Status} ${Version}' longhaul 2>/dev/null; }
check "installed: $(status)" test "$(status)" = "install ok installed $version"
check "postinst printed the next steps, no automatic start" \
  grep -q "longhauld is NOT enabled or started" "$logs/install.log"
# mode owner group path
# (stat runs in the root, whose passwd names the longhaul user.)
has() { [ "$(chroot "$root" stat -c '%a %U %G' "$4")" = "$1 $2 $3" ]; }
check "/usr/bin/longhauld 755 root" has 755 root root /usr/bin/longhauld
check "/usr/bin/longhaul 755 root" has 755 root root /usr/bin/longhaul
check "binaries are stripped" bash -c "
  for b in longhauld longhaul; do
    readelf -S '$root/usr/bin/'\$b >/dev/null && ! readelf -S '$root/usr/bin/'\$b | grep -q '\.symtab' || exit 1
  done"
check "every shared library resolves in the root (Depends complete)" \
  bash -c "for b in longhauld longhaul; do
    out=\$(chroot '$root' ldd /usr/bin/\$b) && ! grep 'not found' <<<\"\$out\" || exit 1
  done"
check "longhauld --version" bash -c "chroot '$root' longhauld --version | grep -qx 'longhauld .*'"
check "longhaul --help" in_root longhaul --help
# Real data from the package: GPT-2's rank file (written here by the test-only js-tiktoken,
# tools/setup.sh installs it), text and JSON lines tokenized in the root, the shards verified.
if [ -d test/data/npm/node_modules/js-tiktoken ]; then
  check "longhaul data prepare and inspect --verify" bash -c "
    mkdir -p '$root/tmp/data-in' &&
    node test/data/npm/js_tiktoken.mjs ranks '$root/tmp/tok' >/dev/null &&
    printf 'A first document about ships.\\nIt has two lines.\\n' >'$root/tmp/data-in/a.txt' &&
    printf '{\"text\": \"a JSON line\"}\\n{\"text\": broken\\n' >'$root/tmp/data-in/b.jsonl' &&
    chroot '$root' longhaul data prepare /tmp/data-in --tokenizer /tmp/tok/gpt2.tiktoken \
      --out /tmp/data-out --val-fraction 0 -q | grep -q '1 bad documents skipped' &&
    chroot '$root' longhaul data inspect /tmp/data-out --tokenizer /tmp/tok/gpt2.tiktoken --verify |
      grep -q 'sample .*A first document about ships'"
else
  fail "longhaul data prepare and inspect --verify" "js-tiktoken is not installed (tools/setup.sh)"
fi
check "unit /lib/systemd/system/longhauld.service 644 root" \
  has 644 root root /lib/systemd/system/longhauld.service
check "unit runs /usr/bin/longhauld as user longhaul" bash -c "
  u='$root/lib/systemd/system/longhauld.service'
  grep -qx 'ExecStart=/usr/bin/longhauld --config /etc/longhaul/site.yaml' \"\$u\" &&
  grep -qx 'ExecStartPre=/usr/bin/longhauld --config /etc/longhaul/site.yaml --check' \"\$u\" &&
  grep -qx 'User=longhaul' \"\$u\" && ! grep -q /usr/local \"\$u\""
check "systemd-analyze verify /lib/systemd/system/longhauld.service" \
  in_root systemd-analyze verify /lib/systemd/system/longhauld.service
check "the service is not enabled" bash -c "
  [ \"\$(chroot '$root' systemctl is-enabled longhauld.service)\" = disabled ]"
check "/etc/longhaul/site.yaml 644 root, a conffile" bash -c "
  [ \"\$(chroot '$root' stat -c '%a %U' /etc/longhaul/site.yaml)\" = '644 root' ] &&
  chroot '$root' dpkg-query -W -f='\${Conffiles}' longhaul | grep -q ' /etc/longhaul/site.yaml '"
check "system user longhaul (uid < 1000, nologin)" bash -c "
  IFS=: read -r _ _ uid _ _ home shell < <(chroot '$root' getent passwd longhaul) &&
  [ \"\$uid\" -lt 1000 ] && [ \"\$home\" = /var/lib/longhaul ] && [ \"\$shell\" = /usr/sbin/nologin ]"
check "/var/lib/longhaul 750 longhaul" has 750 longhaul longhaul /var/lib/longhaul
check "/etc/longhaul/token 600 longhaul, 16+ bytes" bash -c "
  [ \"\$(chroot '$root' stat -c '%a %U' /etc/longhaul/token)\" = '600 longhaul' ] &&
  [ \"\$(tr -d '[:space:]' < '$root/etc/longhaul/token' | wc -c)\" -ge 16 ]"

# --- The config template -----------------------------------------------------------------
conf=/etc/longhaul/site.yaml
unfilled_rc=0
in_root longhauld --config "$conf" --check >"$logs/unfilled.log" 2>&1 || unfilled_rc=$?
expected="^longhauld: invalid config: $conf:[0-9]*:[0-9]*: site: invalid name 'CHANGE-ME'"
check "--check refuses the unfilled template (exit $unfilled_rc), naming file, line and key" \
  bash -c "[ $unfilled_rc -ne 0 ] && grep -q \"\$1\" '$logs/unfilled.log'" _ "$expected"
sed 's/^/     | /' "$logs/unfilled.log"

# Fill it in as an operator would: the site's name, its peer, the TLS files.
# (tools/make-certs.sh makes a CA and alpha's certificate with the host's openssl.)
must "TLS files for site alpha in /etc/longhaul, the key owned by longhaul" bash -c "
  tools/make-certs.sh '$work/certs' alpha &&
  install -m 644 '$work/certs/ca.pem' '$work/certs/alpha.pem' '$root/etc/longhaul/' &&
  install -m 600 '$work/certs/alpha.key' '$root/etc/longhaul/' &&
  chroot '$root' chown longhaul:longhaul /etc/longhaul/alpha.key"
must "fill in site, peers and TLS paths with sed" sed -i -e 's/^site: CHANGE-ME$/site: alpha/' \
  -e 's/^  - name: CHANGE-ME /  - name: beta /' \
  -e 's/address: CHANGE-ME.example.net:7101/address: beta.example.net:7101/' \
  -e 's|/etc/longhaul/CHANGE-ME\.|/etc/longhaul/alpha.|' "$root$conf"
check "the filled template has no CHANGE-ME left" bash -c "! grep -n '^[^#]*CHANGE-ME' '$root$conf'"
check "longhauld --check passes on the filled template (as root)" \
  in_root longhauld --config "$conf" --check
# The unit's ExecStartPre runs the same check as the daemon's user.
check "longhauld --check passes as user longhaul (what the unit runs)" \
  in_root setpriv --reuid=longhaul --regid=longhaul --init-groups \
  longhauld --config "$conf" --check

# The daemon itself, started as the unit would start it (user longhaul, the filled config),
# in a private network namespace so that its ports cannot meet anything on this machine:
# it must serve, answer the CLI (which reads the package's token as root), write in
# data_dir and exit 0 on SIGTERM. (systemd is not running in a chroot, so the unit's
# sandboxing itself is checked by systemd-analyze only.)
cat >"$work/serve.sh" <<'SERVE'
set -u
root=$1
ip link set lo up || exit 1
chroot "$root" setpriv --reuid=longhaul --regid=longhaul --init-groups \
  longhauld --config /etc/longhaul/site.yaml &
pid=$!
up=0
for _ in $(seq 50); do
  if chroot "$root" longhaul --config /etc/longhaul/site.yaml node status; then up=1; break; fi
  sleep 0.2
done
kill -TERM "$pid"
wait "$pid"
rc=$?
echo "longhauld exited with $rc"
[ "$up" = 1 ] && [ "$rc" = 0 ] &&
  [ -n "$(chroot "$root" find /var/lib/longhaul -mindepth 1 -user longhaul)" ]
SERVE
check "longhauld serves as user longhaul; longhaul node status reaches it; SIGTERM exits 0" \
  timeout 60 unshare --net bash "$work/serve.sh" "$root"

# --- A GPU site --------------------------------------------------------------------------
# The same site with devices: [cuda:0]. This machine has no GPU, and the clean root has none of
# NVIDIA's libraries: --check must fail (exit 2) and the start (exit 1), both naming the same
# cause: no CUDA backend in a package built without it; else the backend's missing libraries.
# Then, with this machine's CUDA libraries mounted where the backend's RUNPATH points
# (/usr/local/cuda/lib64), the backend loads and the cause is the missing driver/GPU.
gpu_conf=/etc/longhaul/gpu.yaml
sed 's/^devices: \[cpu\]/devices: [cuda:0]/' "$root$conf" >"$root$gpu_conf"
backend=/usr/lib/longhaul/libcuda_backend.so
if grep -q " \.$backend\$" <<<"$(dpkg-deb -c "$deb")"; then has_backend=1; else has_backend=0; fi
# gpu_site NAME PATTERN: --check and a start of the GPU site both fail, with the same cause,
# which matches PATTERN (grep -E).
gpu_site() {
  local name=$1 pattern=$2 check_rc=0 start_rc=0 cause
  chroot "$root" setpriv --reuid=longhaul --regid=longhaul --init-groups \
    longhauld --config "$gpu_conf" --check >"$logs/gpu-check.log" 2>&1 || check_rc=$?
  timeout 20 unshare --net chroot "$root" setpriv --reuid=longhaul --regid=longhaul \
    --init-groups longhauld --config "$gpu_conf" >"$logs/gpu-start.log" 2>&1 || start_rc=$?
  sed 's/^/     | /' "$logs/gpu-check.log" "$logs/gpu-start.log"
  cause=$(sed -n "s/^longhauld: invalid config: .*: site 'alpha': \(devices: .*\)/\1/p" \
    "$logs/gpu-check.log")
  check "$name: --check exits 2 naming the cause" \
    bash -c "[ $check_rc = 2 ] && grep -qE \"\$1\" <<<\"\$2\"" _ "$pattern" "$cause"
  check "$name: the start exits 1 with the same cause" bash -c "[ $start_rc = 1 ] &&
    grep -qxF \"longhauld: cannot start: site 'alpha': \$1\" '$logs/gpu-start.log'" _ "$cause"
}
if [ "$has_backend" = 1 ]; then
  check "$backend 644 root" has 644 root root "$backend"
  check "$backend: stripped, RUNPATH /usr/local/cuda/lib64" bash -c "
    ! readelf -S '$root$backend' | grep -q '\.symtab' &&
    readelf -d '$root$backend' | grep -q 'RUNPATH.*\[/usr/local/cuda/lib64\]\$'"
  gpu_site "GPU site, no NVIDIA libraries" \
    "^devices: cuda:0 is not usable here: the CUDA backend $backend does not load: lib(cudart|cublas|cublasLt|nccl)\.so\.[0-9]+: cannot open shared object file: No such file or directory \(it needs libcudart\.so\.13, .*libnccl\.so\.2"
  cuda_libs=$(readlink -f /usr/local/cuda/lib64 2>/dev/null || true)
  if [ -n "$cuda_libs" ] && [ -e "$cuda_libs/libcudart.so.13" ]; then
    mkdir -p "$root/usr/local/cuda/lib64"
    mount --bind -o ro "$cuda_libs" "$root/usr/local/cuda/lib64"
    check "with this machine's CUDA libraries: every library of $backend resolves" \
      bash -c "out=\$(chroot '$root' ldd $backend) && ! grep 'not found' <<<\"\$out\""
    gpu_site "GPU site, NVIDIA libraries but no driver" \
      "^devices: cuda:0 is not usable here: no GPU: the CUDA backend $backend loaded but cudaGetDeviceCount says: .*(no NVIDIA driver: libcuda\.so\.1: cannot open shared object file|no CUDA-capable device)"
    umount "$root/usr/local/cuda/lib64"
  else
    echo "package test: no CUDA libraries at /usr/local/cuda/lib64 here: the GPU site with" \
      "NVIDIA libraries is not checked"
  fi
else
  gpu_site "GPU site, package without the CUDA backend" \
    "^devices: cuda:0 is not usable here: this longhauld has no CUDA backend: looked for $backend; a CPU-only build or package"
fi
rm -f "$root$gpu_conf"

# --- The demo from the package ----------------------------------------------------------
# Three daemons over linkem's emulated links, from /usr/share/longhaul/demo with the installed
# binaries: no Bazel, no checkout. It needs python3 and openssl, which a site may not have.
check "the demo's files are installed" test -x "$root/usr/share/longhaul/demo/tools/demo.sh" \
  -a -x "$root/usr/lib/longhaul/linkem" -a -f "$root/usr/share/longhaul/demo/configs/demo-job.yaml"
if in_root apt-get install -y -q -o Dpkg::Use-Pty=0 python3 openssl >"$logs/demo-deps.log" 2>&1; then
  check "the demo runs from the installed package (no Bazel)" bash -c "
    out=\$(timeout 300 chroot '$root' /usr/share/longhaul/demo/tools/demo.sh 2>&1); rc=\$?
    echo \"\$out\" | tail -n 30
    [ \$rc -eq 0 ] && grep -q '(completed)' <<<\"\$out\" && grep -q '^demo: done' <<<\"\$out\" &&
      ! grep -q 'building longhaul' <<<\"\$out\""
else
  fail "apt-get install python3 openssl in the root (for the demo)"
  tail -n 20 "$logs/demo-deps.log" | sed 's/^/     | /'
fi

# --- Upgrade -----------------------------------------------------------------------------
# The same package with a higher version, as the next release would be.
new_version="$version+upgradetest1"
dpkg --compare-versions "$new_version" gt "$version" || die "$new_version does not sort newer"
dpkg-deb -R "$deb" "$work/upgrade"
sed -i "s/^Version: .*/Version: $new_version/" "$work/upgrade/DEBIAN/control"
dpkg-deb --root-owner-group -Zxz --build "$work/upgrade" "$root/tmp/longhaul-new.deb" >/dev/null
token_before=$(cat "$root/etc/longhaul/token")
in_root install -o longhaul -g longhaul -m 640 /dev/null /var/lib/longhaul/state-marker
must "upgrade: dpkg -i of version $new_version (no conffile prompt)" \
  in_root dpkg -i /tmp/longhaul-new.deb </dev/null
check "upgraded: $(status)" test "$(status)" = "install ok installed $new_version"
check "the edited /etc/longhaul/site.yaml is kept" grep -qx "site: alpha" "$root$conf"
check "no .dpkg-dist/.dpkg-new copies beside it" \
  bash -c "! ls '$root'/etc/longhaul/*.dpkg-* 2>/dev/null | grep -q ."
check "the token is kept" test "$(cat "$root/etc/longhaul/token")" = "$token_before"
check "state in /var/lib/longhaul is kept" test -f "$root/var/lib/longhaul/state-marker"
check "longhauld --check still passes" in_root longhauld --config "$conf" --check

# --- Remove, then purge ------------------------------------------------------------------
must "remove: dpkg --remove longhaul" in_root dpkg --remove longhaul
check "remove deletes the binaries, the CUDA backend and the unit" bash -c "
  [ ! -e '$root/usr/bin/longhauld' ] && [ ! -e '$root/usr/bin/longhaul' ] &&
  [ ! -e '$root/usr/lib/longhaul' ] && [ ! -e '$root/lib/systemd/system/longhauld.service' ]"
check "remove keeps the config and the state" \
  test -f "$root$conf" -a -f "$root/var/lib/longhaul/state-marker"
must "purge: dpkg --purge longhaul" in_root dpkg --purge longhaul
check "purge deletes /etc/longhaul" test ! -e "$root/etc/longhaul"
check "purge deletes /var/lib/longhaul" test ! -e "$root/var/lib/longhaul"
check "dpkg no longer knows the package" bash -c "! chroot '$root' dpkg-query -W longhaul"

finish
