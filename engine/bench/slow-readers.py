#!/usr/bin/env python3
"""Memory a server takes from clients that send requests and never read the replies.

The three reproducers of the engine issue, run against cachetd and memcached 1.6.45
side by side in one invocation (same machine state, same flags), printing each
server's RSS growth and the ratio:

  R1  one client, SO_RCVBUF 4096, sends `get` + ` a` x 2000 (a = 1,000,000 bytes)
      100 times without reading
  R2  one client sends `get` + ` b` x 5000 (b = 16 KB, a 10 KB request line) 4 times
  R3  50 clients each send `get c` x 200 (c = 100 KB) and stop reading

It is a measurement, not a test (tests/protocol/test_limits.py asserts the bounds).
Traffic goes to 127.0.0.1 only; every loop is bounded in count and time.

usage: slow-readers.py [--cachetd PATH] [--memcached PATH] [--port-base N] [--only R1,R2,R3]
"""
import argparse
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_CACHETD = os.path.join(HERE, "..", "build", "cachetd")
DEFAULT_MEMCACHED = os.path.expanduser("~/.cache/cachet/peers/memcached-1.6.45/memcached")


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def settled_rss_kb(pid, seconds=8.0):
    """RSS once it stops growing (two reads 0.5 s apart within 64 KB), bounded in time."""
    deadline = time.monotonic() + seconds
    last = rss_kb(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_kb(pid)
        if abs(now - last) < 64:
            return now
        last = now
    return last


def start(binary, port, extra):
    argv = [binary, "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-m", "256", "-t", "2"] + extra
    if os.path.basename(binary) == "memcached" and os.geteuid() == 0:
        argv += ["-u", "root"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"version\r\n")
                if s.recv(100).startswith(b"VERSION"):
                    return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"{binary} did not start on port {port}")


def store(port, key, size):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        value = (key.encode() * size)[:size]
        s.sendall(f"set {key} 0 0 {size}\r\n".encode() + value + b"\r\n")
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = s.recv(100)
            if not chunk:
                break
            reply += chunk
        assert reply == b"STORED\r\n", reply


def stalled_client(port, payload, repeats):
    """A client with a tiny receive buffer that sends and never reads. Returns the socket."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.settimeout(2)
    sent = 0
    for _ in range(repeats):
        try:
            s.sendall(payload)
            sent += 1
        except (socket.timeout, OSError):
            break  # the server stopped reading us: that is the back-pressure we want
    return s


SCENARIOS = {
    "R1": ("1 client, 100 x get a*2000 (1 MB value)", [("a", 1_000_000)],
           lambda port: [stalled_client(port, b"get" + b" a" * 2000 + b"\r\n", 100)]),
    "R2": ("1 client, 4 x get b*5000 (16 KB value)", [("b", 16 * 1024)],
           lambda port: [stalled_client(port, b"get" + b" b" * 5000 + b"\r\n", 4)]),
    "R3": ("50 clients, 200 x get c (100 KB value) each", [("c", 100_000)],
           lambda port: [stalled_client(port, b"get c\r\n" * 200, 1) for _ in range(50)]),
}


def run(binary, port, name, extra):
    title, items, clients = SCENARIOS[name]
    proc = start(binary, port, extra)
    try:
        for key, size in items:
            store(port, key, size)
        base = settled_rss_kb(proc.pid)
        socks = clients(port)
        peak = settled_rss_kb(proc.pid)
        alive = proc.poll() is None
        for s in socks:
            s.close()
        return base, peak, alive, proc.returncode
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cachetd", default=DEFAULT_CACHETD)
    ap.add_argument("--cachetd-label", default="cachetd")
    ap.add_argument("--extra-cachetd", default="", help="more cachetd flags, space separated")
    ap.add_argument("--memcached", default=DEFAULT_MEMCACHED)
    ap.add_argument("--port-base", type=int, default=24700)
    ap.add_argument("--only", default="R1,R2,R3")
    args = ap.parse_args()
    servers = [(args.cachetd_label, os.path.abspath(args.cachetd), args.extra_cachetd.split()),
               ("memcached-1.6.45", args.memcached, [])]
    port = args.port_base
    print(f"{'scenario':4} {'server':18} {'RSS before':>11} {'RSS after':>10} {'grew':>9}")
    for name in args.only.split(","):
        grew = {}
        for label, binary, extra in servers:
            port += 1
            base, peak, alive, rc = run(binary, port, name, extra)
            grew[label] = peak - base
            state = "" if alive else f"  DIED (exit {rc})"
            print(f"{name:4} {label:18} {base / 1024:9.1f}MB {peak / 1024:8.1f}MB {(peak - base) / 1024:7.1f}MB{state}",
                  flush=True)
        a, b = grew[servers[0][0]], grew[servers[1][0]]
        print(f"{name:4} {SCENARIOS[name][0]}: growth ratio {servers[0][0]}/memcached = "
              f"{(a / b) if b > 0 else float('inf'):.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
