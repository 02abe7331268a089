#!/usr/bin/env bash
# `systemd-analyze verify` on configs/longhauld.service, in a scratch root that holds the
# built longhauld where the unit expects it. Any warning about the unit fails the test, and
# a deliberately broken copy must draw one (so the check itself can fail).
set -euo pipefail

root=$(mktemp -d "${TEST_TMPDIR:-/tmp}/sysroot.XXXXXX")
mkdir -p "$root/usr/local/bin" "$root/etc/systemd/system" "$root/usr/lib/systemd"
cp daemon/longhauld "$root/usr/local/bin/longhauld"
cp -r /usr/lib/systemd/system "$root/usr/lib/systemd/"
cp configs/longhauld.service "$root/etc/systemd/system/longhauld.service"

verify() {  # unit -> prints systemd-analyze's complaints about it; returns its status
  systemd-analyze verify --root="$root" "$1" 2>&1 | grep -F "$1" || true
  return "${PIPESTATUS[0]}"
}

set +e
out=$(verify longhauld.service)
rc=$?
set -e
if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
  echo "FAIL: systemd-analyze verify longhauld.service (rc $rc):" >&2
  echo "$out" >&2
  exit 1
fi
grep -q '^Type=notify' configs/longhauld.service || { echo "FAIL: unit is not Type=notify" >&2; exit 1; }
for opt in NoNewPrivileges=yes ProtectSystem=strict; do
  grep -q "^$opt" configs/longhauld.service || { echo "FAIL: unit lacks $opt" >&2; exit 1; }
done

sed 's/^Restart=on-failure/Restart=sometimes-maybe/' configs/longhauld.service \
  >"$root/etc/systemd/system/broken.service"
out=$(verify broken.service)
if [ -z "$out" ]; then
  echo "FAIL: a broken unit drew no complaint; the check is not working" >&2
  exit 1
fi
echo "PASS: systemd-analyze verify configs/longhauld.service"
