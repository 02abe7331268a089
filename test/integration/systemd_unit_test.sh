#!/usr/bin/env bash
# `systemd-analyze verify` on configs/longhauld.service, in a scratch root that holds the
# built longhauld where the unit expects it. A unit systemd rejects (a non-zero exit status)
# or any warning that names the unit fails the test, and two deliberately broken copies must
# each draw a failure (so the check itself can fail): one that draws only a warning, and one
# that systemd refuses with messages that name another unit (the unit file is a link to it),
# which only the exit status reports.
set -euo pipefail

root=$(mktemp -d "${TEST_TMPDIR:-/tmp}/sysroot.XXXXXX")
mkdir -p "$root/usr/local/bin" "$root/etc/systemd/system" "$root/usr/lib/systemd"
cp daemon/longhauld "$root/usr/local/bin/longhauld"
cp -r /usr/lib/systemd/system "$root/usr/lib/systemd/"
cp configs/longhauld.service "$root/etc/systemd/system/longhauld.service"

# unit -> prints what is wrong with it and returns 1, or prints nothing and returns 0. Wrong:
# systemd-analyze exits non-zero (all of its output is printed then), or warns about the unit.
check_unit() {
  local out rc=0
  out=$(systemd-analyze verify --root="$root" "$1" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "systemd-analyze verify $1 exited $rc:"
    echo "$out"
    return 1
  fi
  if grep -F "$1" <<<"$out"; then return 1; fi
  return 0
}

if ! out=$(check_unit longhauld.service); then
  echo "FAIL: systemd-analyze verify longhauld.service:" >&2
  echo "$out" >&2
  exit 1
fi
grep -q '^Type=notify' configs/longhauld.service || { echo "FAIL: unit is not Type=notify" >&2; exit 1; }
for opt in NoNewPrivileges=yes ProtectSystem=strict; do
  grep -q "^$opt" configs/longhauld.service || { echo "FAIL: unit lacks $opt" >&2; exit 1; }
done

# Negative controls. A setting systemd ignores with a warning:
sed 's/^Restart=on-failure/Restart=sometimes-maybe/' configs/longhauld.service \
  >"$root/etc/systemd/system/broken.service"
if out=$(check_unit broken.service); then
  echo "FAIL: a unit with a bad Restart= drew no complaint; the check is not working" >&2
  exit 1
fi
echo "negative control, a warning: $out"
# A unit systemd refuses (no ExecStart=), installed as a link: its messages name the link's
# target, not the unit verified, so only the exit status says it was refused.
grep -v '^ExecStart=' configs/longhauld.service >"$root/usr/lib/systemd/system/refused-impl.service"
ln -s /usr/lib/systemd/system/refused-impl.service "$root/etc/systemd/system/refused.service"
if out=$(check_unit refused.service); then
  echo "FAIL: a unit systemd refuses passed the check; its exit status is lost" >&2
  exit 1
fi
echo "negative control, a refused unit: $out"
echo "PASS: systemd-analyze verify configs/longhauld.service"
