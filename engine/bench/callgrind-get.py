#!/usr/bin/env python3
"""Instructions per GET, counted by callgrind: deterministic on a busy machine,
where wall-clock throughput is not (docs/benchmarks.md, "Test machinery and the
GET path").

Runs CACHETD (one worker, -t 1) under `valgrind --tool=callgrind` twice: each
run stores KEYS keys, then sends GETS (once, then twice as many) pipelined
single-key GETs, 100 per batch, all hits, and stops the server with SIGTERM.
The difference of the two runs' totals over GETS is what one more GET costs the
whole process (parsing, storage, reply; startup and the stores cancel out);
the inclusive costs of storage_get_hashed (storage), parse_request (the line)
and get_keys (lookups and reply) are taken the same way.

    bench/callgrind-get.py build/cachetd [GETS]

CALLGRIND_PORT (default 21987) moves the server's port, so that runs in
parallel (a before/after pair, or several worktrees) do not collide;
CALLGRIND_BATCH (default 100) is the GETs per batch, 1 for an unpipelined
client (each GET then pays a whole loop turn: epoll_wait, read, send).
"""
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

KEYS = 1000
BATCH = int(os.environ.get("CALLGRIND_BATCH", "100"))  # 1: one GET per turn, unpipelined
PARTS = ("storage_get_hashed", "parse_request", "get_keys")
PORT = int(os.environ.get("CALLGRIND_PORT", "21987"))  # loopback, inside the test port range


def wait_ready(proc):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "cachetd exited under valgrind"
        try:
            return socket.create_connection(("127.0.0.1", PORT), timeout=30)
        except OSError:
            time.sleep(0.2)
    raise SystemExit("cachetd did not start under valgrind in 60 s")


def read_until(sock, buf, marker, count):
    while buf.count(marker) < count:
        chunk = sock.recv(1 << 20)
        assert chunk, "server closed the connection"
        buf += chunk
    return buf


def run(binary, gets, out):
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                             binary, "-p", str(PORT), "-l", "127.0.0.1", "-t", "1", "-o", "cpus=none"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        s = wait_ready(proc)
        value = b"v" * 100
        s.sendall(b"".join(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value) for i in range(KEYS)))
        s.sendall(b"mn\r\n")
        read_until(s, b"", b"MN\r\n", 1)
        for start in range(0, gets, BATCH):
            s.sendall(b"".join(b"get k%d\r\n" % ((start + i) % KEYS) for i in range(BATCH)))
            buf = read_until(s, b"", b"END\r\n", BATCH)
            assert buf.count(b"VALUE ") == BATCH, "a GET missed"
        s.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", out], capture_output=True,
                          text=True, check=True).stdout
    total = int(re.search(r"^([\d,]+).*PROGRAM TOTALS", text, re.M).group(1).replace(",", ""))
    return total, {fn: inclusive(text, fn) for fn in PARTS}


def inclusive(text, fn):
    m = re.search(r"^\s*([\d,]+)\s.*\b%s\b" % fn, text, re.M)
    return int(m.group(1).replace(",", "")) if m else 0


def main():
    binary = os.path.abspath(sys.argv[1])
    gets = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    with tempfile.TemporaryDirectory() as d:
        t1, s1 = run(binary, gets, os.path.join(d, "one.out"))
        t2, s2 = run(binary, 2 * gets, os.path.join(d, "two.out"))
    print(f"{binary}: {(t2 - t1) / gets:.1f} instructions per GET (whole process), "
          + ", ".join(f"{(s2[fn] - s1[fn]) / gets:.1f} in {fn}" for fn in PARTS))


if __name__ == "__main__":
    main()
