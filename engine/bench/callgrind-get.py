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

CALLGRIND_JSON=PATH also writes the figures there (make bench-engine TLS=1
reads them).

CALLGRIND_WORKER=1 counts only the thread that serves the GETs (the one
whose count grows most from the first run to the second): a server's other
threads (memcached's LRU maintainer, cachetd's clock and cleaner) do work
that grows with the run's length and its timing, not with its GETs, and
moved memcached's whole-process figure by up to ~15% between identical runs.

CALLGRIND_MISS=1 asks for keys never stored instead: what a plain miss costs
(the lookup finds nothing), the path a dead item's miss leaves alone.

CALLGRIND_TLS=CERT,KEY serves -Z with that certificate and talks TLS (Python
`ssl`; a batch is one sendall, so one record of requests, as the bench's
generator sends). The binary may also be memcached (1.6.45's TLS build for
CALLGRIND_TLS): it gets memcached's flags, and its parts are not reported.
Every run also splits the instructions per GET by where they ran: inside
libcrypto and libssl (the TLS work both servers share) or elsewhere (the
engine, libc; the kernel is never counted), which is how docs/benchmarks.md
("W1 over TLS") separates the crypto floor from an engine's own cost.
"""
import json
import os
import re
import resource
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

KEYS = 1000
VALUE_SIZE = int(os.environ.get("CALLGRIND_VALUE_SIZE", "100"))  # W1 (seed 000) stores 64
BATCH = int(os.environ.get("CALLGRIND_BATCH", "100"))  # 1: one GET per turn, unpipelined
PARTS = ("storage_get_hashed", "parse_request", "get_keys")
PORT = int(os.environ.get("CALLGRIND_PORT", "21987"))  # loopback, inside the test port range
TLS = os.environ.get("CALLGRIND_TLS", "")  # CERT,KEY: serve -Z and speak TLS
MISS = os.environ.get("CALLGRIND_MISS") == "1"  # GETs of keys never stored
WORKER = os.environ.get("CALLGRIND_WORKER") == "1"  # count the serving thread only
TLS_OBJECTS = ("libcrypto", "libssl")


def server_args(binary):
    if "memcached" in os.path.basename(binary):
        # memcached sets the descriptor limit (soft and hard) to -c, and valgrind
        # allows only its own hard limit: the real one less the 12 it keeps
        fds = resource.getrlimit(resource.RLIMIT_NOFILE)[1] - 12
        args = [binary, "-p", str(PORT), "-l", "127.0.0.1", "-t", "1", "-U", "0", "-c", str(fds)]
        if os.geteuid() == 0:
            args += ["-u", "root"]
    else:
        args = [binary, "-p", str(PORT), "-l", "127.0.0.1", "-t", "1", "-o", "cpus=none"]
    if TLS:
        cert, key = TLS.split(",")
        args += ["-Z", "-o", f"ssl_chain_cert={cert},ssl_key={key}"]
    return args


def connect():
    s = socket.create_connection(("127.0.0.1", PORT), timeout=30)
    if not TLS:
        return s
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx.wrap_socket(s)


def wait_ready(proc):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "cachetd exited under valgrind"
        try:
            return connect()
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
    threads = ["--separate-threads=yes"] if WORKER else []
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + threads
                            + server_args(binary), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        s = wait_ready(proc)
        value = b"v" * VALUE_SIZE
        s.sendall(b"".join(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value) for i in range(KEYS)))
        s.sendall(b"mn\r\n")
        read_until(s, b"", b"MN\r\n", 1)
        for start in range(0, gets, BATCH):
            prefix = b"m" if MISS else b"k"
            s.sendall(b"".join(b"get %s%d\r\n" % (prefix, (start + i) % KEYS) for i in range(BATCH)))
            buf = read_until(s, b"", b"END\r\n", BATCH)
            assert buf.count(b"VALUE ") == (0 if MISS else BATCH), "a GET missed" if not MISS else "a GET hit"
        s.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    if WORKER:
        # one profile per thread (out-01, out-02, ...): each thread's figures
        return {f[len(os.path.basename(out)) + 1:]: figures(os.path.join(os.path.dirname(out), f))
                for f in os.listdir(os.path.dirname(out)) if f.startswith(os.path.basename(out) + "-")}
    return figures(out)


def figures(out):
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", out], capture_output=True,
                          text=True, check=True).stdout
    total = int(re.search(r"^([\d,]+).*PROGRAM TOTALS", text, re.M).group(1).replace(",", ""))
    parts = {fn: inclusive(text, fn) for fn in PARTS}
    parts["tls_libraries"] = in_objects(out, TLS_OBJECTS)
    return total, parts


def in_objects(out, names):
    """Self cost of every function whose object file is one of names."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", out], capture_output=True,
                          text=True, check=True).stdout
    total = 0
    for m in re.finditer(r"^\s*([\d,]+)\s.*\[([^\]]+)\]\s*$", text, re.M):
        if any(n in os.path.basename(m.group(2)) for n in names):
            total += int(m.group(1).replace(",", ""))
    return total


def inclusive(text, fn):
    m = re.search(r"^\s*([\d,]+)\s.*\b%s\b" % fn, text, re.M)
    return int(m.group(1).replace(",", "")) if m else 0


def main():
    binary = os.path.abspath(sys.argv[1])
    gets = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    with tempfile.TemporaryDirectory() as d:
        os.mkdir(os.path.join(d, "one"))
        os.mkdir(os.path.join(d, "two"))
        r1 = run(binary, gets, os.path.join(d, "one", "out"))
        r2 = run(binary, 2 * gets, os.path.join(d, "two", "out"))
    if WORKER:
        # the thread whose count grew most with the GETs is the one serving
        # them; the others' (a clock, an LRU maintainer) grows with the run's
        # length, not with its GETs, and moves with timing
        worker = max((t for t in r2 if t in r1), key=lambda t: r2[t][0] - r1[t][0])
        r1, r2 = r1[worker], r2[worker]
    (t1, s1), (t2, s2) = r1, r2
    whole, tls = (t2 - t1) / gets, (s2["tls_libraries"] - s1["tls_libraries"]) / gets
    print(f"{binary}: {whole:.1f} instructions per GET{' (misses)' if MISS else ''} "
          f"({'the serving thread' if WORKER else 'whole process'}), "
          + ", ".join(f"{(s2[fn] - s1[fn]) / gets:.1f} in {fn}" for fn in PARTS if s2[fn] or s1[fn])
          + f"; {tls:.1f} in libcrypto+libssl, {whole - tls:.1f} elsewhere"
          + (" (TLS)" if TLS else ""))
    if os.environ.get("CALLGRIND_JSON"):
        with open(os.environ["CALLGRIND_JSON"], "w") as f:
            json.dump({"binary": binary, "gets": gets, "batch": BATCH, "value_size": VALUE_SIZE, "tls": bool(TLS),
                       "worker_thread_only": WORKER, "instructions_per_get": whole, "in_tls_libraries": tls,
                       "elsewhere": whole - tls}, f, indent=2)


if __name__ == "__main__":
    main()
