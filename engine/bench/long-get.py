#!/usr/bin/env python3
"""One get line of 100,000 and 300,000 keys: values answered and server RSS growth.

Issue 20 part 2: memcached 1.6.45 holds a get line whole before it answers it
(its RSS grows with the line); cachetd answers the keys as the line arrives.
Both servers run side by side in one invocation, same flags (-m 128 -t 2), and
each line goes out while the reply is read. Prints per server the values
answered, the RSS growth while answering (peak VmRSS, polled) and PASS/MISS
against the issue's target: every value, growth under 64 MB.

It is a measurement, not a test (tests/protocol/test_long_get.py asserts it).
Traffic goes to 127.0.0.1 only; every loop is bounded in count and time.

usage: long-get.py [--cachetd PATH] [--memcached PATH] [--port-base N]
"""
import argparse
import os
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from importlib import import_module  # noqa: E402

slow_readers = import_module("slow-readers")
MB = 1024 * 1024


def answer(port, keys, pid, seconds=120):
    """Sends `get <keys>` plus `mn` from a thread while reading; returns
    (values answered, peak RSS in bytes, seconds)."""
    payload = b"get " + b" ".join(keys) + b"\r\nmn\r\n"
    s = socket.create_connection(("127.0.0.1", port), timeout=seconds)
    sender = threading.Thread(target=s.sendall, args=(payload,), daemon=True)
    t0 = time.monotonic()
    sender.start()
    reply, peak = bytearray(), slow_readers.rss_kb(pid) * 1024
    deadline = t0 + seconds
    while not reply.endswith(b"MN\r\n") and time.monotonic() < deadline:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        reply += chunk
        peak = max(peak, slow_readers.rss_kb(pid) * 1024)
    took = time.monotonic() - t0
    sender.join(10)
    s.close()
    return reply.count(b"VALUE "), peak, took


def run(binary, port, counts):
    # a server already on the port would be measured instead (wrong pid)
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            raise SystemExit(f"port {port} is in use: pick another --port-base")
    proc = slow_readers.start(binary, port, ["-m", "128"])
    out = []
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            keys = [b"k%06d" % i for i in range(max(counts))]
            for start in range(0, len(keys), 2000):
                s.sendall(b"".join(b"set %s 0 0 7 noreply\r\n%s\r\n" % (k, k) for k in keys[start:start + 2000]))
            s.sendall(b"mn\r\n")
            assert s.makefile("rb").readline() == b"MN\r\n", "the stores were not all taken"
        for n in counts:
            before = slow_readers.settled_rss_kb(proc.pid) * 1024
            values, peak, took = answer(port, keys[:n], proc.pid)
            out.append((n, values, peak - before, took))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cachetd", default=slow_readers.DEFAULT_CACHETD)
    ap.add_argument("--memcached", default=slow_readers.DEFAULT_MEMCACHED)
    ap.add_argument("--port-base", type=int, default=int(os.environ.get("BENCH_PORT_BASE", "24760")))
    args = ap.parse_args()
    counts = [100_000, 300_000]
    print(f"{'server':18} {'keys':>8} {'values':>8} {'RSS grew':>9} {'seconds':>8}  target")
    for i, (label, binary) in enumerate([("cachetd", os.path.abspath(args.cachetd)),
                                         ("memcached-1.6.45", args.memcached)]):
        for n, values, grew, took in run(binary, args.port_base + i, counts):
            ok = values == n and grew < 64 * MB
            print(f"{label:18} {n:8} {values:8} {grew / MB:7.1f}MB {took:8.2f}  {'PASS' if ok else 'MISS'}",
                  flush=True)


if __name__ == "__main__":
    sys.exit(main())
