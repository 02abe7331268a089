#!/usr/bin/env bash
# longhauld speaks systemd's notify protocol: READY=1 once it serves, STOPPING=1 on SIGTERM,
# and it exits 0 after finishing in-flight work. A Python listener plays systemd's part.
set -euo pipefail

LONGHAULD=daemon/longhauld
work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/notify.XXXXXX")
echo "sd-notify-token-0123456789" >"$work/token"
chmod 600 "$work/token"
cat >"$work/site.yaml" <<YAML
site: alpha
listen: {peer: "127.0.0.1:0", control: "127.0.0.1:0", status: "127.0.0.1:0"}
data_dir: data
auth: {token_file: token}
YAML

/usr/bin/python3 - "$LONGHAULD" "$work" <<'PY'
import os, signal, socket, subprocess, sys, time
daemon, work = sys.argv[1], sys.argv[2]
import tempfile
path = os.path.join(tempfile.mkdtemp(prefix="lhn", dir="/tmp"), "n.sock")  # AF_UNIX paths are short
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(path)
sock.settimeout(20)
env = dict(os.environ, NOTIFY_SOCKET=path)
proc = subprocess.Popen([daemon, "--config", os.path.join(work, "site.yaml"), "--log-level", "warn"], env=env)
def expect(word):
    while True:
        msg = sock.recv(4096).decode()
        print("notify:", msg.replace("\n", " | "))
        if word in msg.split("\n"):
            return
expect("READY=1")
proc.send_signal(signal.SIGTERM)
expect("STOPPING=1")
rc = proc.wait(timeout=20)
assert rc == 0, f"longhauld exited {rc} after SIGTERM"
print("PASS")
PY
