#!/usr/bin/python3
"""Prints N distinct free TCP ports on 127.0.0.1, separated by spaces: the one free-port
helper of every shell test, the demo and gpu-check (the C++ tests' FreePort follows the same
rule, test/daemon/test_util.cc).

Ports come from below the kernel's ephemeral range: a port from bind(0) is an ephemeral one,
and before the test listens on it the kernel can hand it out as the source port of some
daemon's outgoing connection ("cannot listen on 127.0.0.1:PORT"). The search starts at a
place drawn from the process id and the clock, so tests running side by side rarely try the
same ports, and every port is checked by binding it, all of them held open together so none
is printed twice.

Usage: tools/free_ports.py [N]     (N defaults to 1)
"""
import os
import socket
import sys
import time

LOWEST = 10000


def ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def main():
    try:
        n = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    except ValueError:
        sys.exit("free_ports.py: N must be a number, got %r" % sys.argv[1])
    if n < 1 or n > 1000:
        sys.exit("free_ports.py: N must be 1..1000, got %d" % n)
    span = max(1000, ephemeral_low() - LOWEST)
    start = (os.getpid() * 7919 + time.monotonic_ns() // 1000) % span
    held, ports = [], []
    for i in range(span):
        port = LOWEST + (start + i) % span
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        held.append(s)
        ports.append(port)
        if len(ports) == n:
            break
    for s in held:
        s.close()
    if len(ports) < n:
        sys.exit("free_ports.py: found only %d free ports below %d" % (len(ports), LOWEST + span))
    print(" ".join(str(p) for p in ports))


if __name__ == "__main__":
    main()
