#!/usr/bin/env python3
"""Just enough of the memcached ASCII protocol for the benchmark's own
bookkeeping: `set` in pipelined batches and `stats [SUB]`, on loopback only.

Why not a client library: the benchmark runs under Debian's python3 (which
has matplotlib) without a venv, and needs only these two commands; the
conformance tests use pymemcache from their own venv.

CLI (bench-engine.sh, W3):
    mcstats.py --port PORT [--settle SECS] [--json OUT]
        waits (at most SECS, default 0) until the server's hash table is not
        expanding (`hash_is_expanding` 0: while both tables exist, hash_bytes
        and RSS count the old one too), then writes {"stats": ..., "slabs": ...}.
"""
import argparse
import json
import socket
import sys
import time


class Client:
    def __init__(self, port, host="127.0.0.1", timeout=30.0):
        if not host.startswith("127."):
            raise ValueError(f"refusing {host}: only 127.0.0.0/8")
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line.decode(errors="replace")

    def set_many(self, pairs, batch=256):
        """Stores every (key, value) pair, pipelined `batch` at a time, in
        order. Returns the count of each reply line (STORED, or the server's
        error text)."""
        replies = {}
        for start in range(0, len(pairs), batch):
            chunk = pairs[start:start + batch]
            req = b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k.encode(), len(v.encode()), v.encode()) for k, v in chunk)
            self.sock.sendall(req)
            for _ in chunk:
                line = self._line()
                replies[line] = replies.get(line, 0) + 1
        return replies

    def stats(self, sub=""):
        self.sock.sendall(f"stats {sub}".strip().encode() + b"\r\n")
        out = {}
        while True:
            line = self._line()
            if line == "END":
                return out
            parts = line.split(" ", 2)
            if len(parts) != 3 or parts[0] != "STAT":
                raise ValueError(f"unexpected stats line {line!r}")
            out[parts[1]] = int(parts[2]) if parts[2].lstrip("-").isdigit() else parts[2]


def slab_classes(slabs):
    """Per class id: chunk_size, used_chunks, total_pages, total_chunks."""
    classes = {}
    for name, value in slabs.items():
        cls, sep, field = name.partition(":")
        if sep and cls.isdigit() and field in ("chunk_size", "used_chunks", "total_pages", "total_chunks"):
            classes.setdefault(int(cls), {})[field] = value
    return dict(sorted(classes.items()))


def memcached_vv_ladder(lines):
    """Chunk sizes of the slab classes memcached -vv prints at start, from
    its stderr lines: what comes before the first class line (a warning, a
    note on the settings) is skipped, and the first other line after them
    ends the ladder, so a caller reading a live stderr stops there.

    >>> memcached_vv_ladder(["WARNING: something first",
    ...     "slab class   1: chunk size        96 perslab   10922",
    ...     "slab class   2: chunk size       120 perslab    8738",
    ...     "<26 server listening (auto-negotiate)",
    ...     "slab class   9: chunk size       999 perslab       1"])
    [96, 120]
    >>> memcached_vv_ladder(["slab class   1: chunk"])
    []
    """
    sizes = []
    for line in lines:
        words = line.split()
        if words[:2] == ["slab", "class"] and len(words) > 5 and words[5].isdigit():
            sizes.append(int(words[5]))
        elif sizes:
            break
    return sizes


def settled_stats(port, settle_seconds=0.0):
    """`stats` once the hash table is not expanding (polled every 50 ms, at
    most settle_seconds), and `stats slabs`."""
    deadline = time.monotonic() + settle_seconds
    with Client(port) as c:
        while True:
            st = c.stats()
            if not st.get("hash_is_expanding") or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        return {"stats": st, "slabs": c.stats("slabs"), "settled": not st.get("hash_is_expanding")}


def main(argv=None):
    ap = argparse.ArgumentParser(description="stats and stats slabs of a server on loopback")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--settle", type=float, default=0.0, help="wait at most this long for hash_is_expanding 0")
    ap.add_argument("--json", help="write here instead of stdout")
    a = ap.parse_args(argv)
    r = settled_stats(a.port, a.settle)
    text = json.dumps(r, indent=2)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    if not r["settled"]:
        print(f"mcstats: the hash table of the server on {a.port} was still expanding after {a.settle} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
