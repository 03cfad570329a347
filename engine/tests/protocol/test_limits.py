"""Limits a server must hold under pressure: -c connections and -m memory.

Each test starts its own server with the limit under test, because the
counters (rejected_connections, evictions, bytes) must start from zero.
"""
import socket
import time

import pytest

ONE_MB = 1024 * 1024


def open_and_probe(port, n):
    """Open n connections; return (accepted, rejected) lists of sockets."""
    accepted, rejected = [], []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        try:
            s.sendall(b"version\r\n")
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = s.recv(256)
                if not chunk:
                    break
                reply += chunk
        except ConnectionResetError:
            reply = b""
        except socket.timeout:
            pytest.fail("a connection over the limit was neither served nor refused within 5 s")
        if reply.startswith(b"VERSION "):
            accepted.append(s)
        else:
            assert reply == b"" or reply.startswith((b"ERROR", b"SERVER_ERROR")), \
                f"unclear refusal: {reply!r}"
            rejected.append((s, reply))
    return accepted, rejected


@pytest.mark.parametrize("backend", [
    [], pytest.param(["-o", "no_io_uring"], marks=pytest.mark.cachetd_only(reason="memcached has one backend"))],
    ids=["default", "epoll"])
def test_more_connections_than_c_are_refused_cleanly(start_server, backend):
    max_conns = 32
    srv = start_server("-c", str(max_conns), "-t", "2", *backend)
    with srv.conn() as c:
        assert c.store("set", "keep", "me") == b"STORED"
        assert int(c.stats()["max_connections"]) == max_conns
    accepted, rejected = open_and_probe(srv.port, 2 * max_conns)
    try:
        assert 1 <= len(accepted) <= max_conns
        assert len(rejected) >= max_conns, f"only {len(rejected)} of {2 * max_conns} refused"
        for s, reply in rejected:  # a refused connection is closed, not left hanging
            s.settimeout(5)
            try:
                rest = s.recv(100)
            except ConnectionResetError:
                rest = b""
            assert rest == b"", f"refused connection stayed open: {rest!r}"
        # connections accepted before the limit keep working while it is hit
        for s in accepted[:5]:
            s.sendall(b"get keep\r\n")
            data = b""
            while not data.endswith(b"END\r\n"):
                chunk = s.recv(4096)
                assert chunk, "an accepted connection was closed"
                data += chunk
            assert data == b"VALUE keep 0 2\r\nme\r\nEND\r\n"
    finally:
        for s in accepted:
            s.close()
        for s, _ in rejected:
            s.close()
    deadline = time.monotonic() + 10
    # Closing is asynchronous on the server side: poll, bounded. A poll that
    # arrives before the server has seen the closes is itself refused and
    # counted, so the counter may exceed len(rejected) by those polls, no more.
    refused_polls = 0
    while True:
        try:
            with srv.conn() as c:
                if c.cmd("version").startswith(b"VERSION "):
                    stats = c.stats()
                    counted = int(stats["rejected_connections"])
                    assert len(rejected) <= counted <= len(rejected) + refused_polls, \
                        f"rejected_connections {counted}: {len(rejected)} refused, {refused_polls} refused polls"
                    assert c.values("get keep") == {"keep": (0, b"me", None)}
                    break
                refused_polls += 1
        except (ConnectionError, OSError):
            refused_polls += 1
        assert time.monotonic() < deadline, "server did not accept again after the others closed"
        time.sleep(0.1)


def fill(c, prefix, count, size, batch=200):
    """Pipelined sets; returns how many were STORED. Other replies must be a clear refusal."""
    stored = 0
    value = (prefix.encode() + b"-") * (size // (len(prefix) + 1) + 1)
    value = value[:size]
    for start in range(0, count, batch):
        n = min(batch, count - start)
        c.send(b"".join(f"set {prefix}:{i} 0 0 {size}\r\n".encode() + value + b"\r\n"
                        for i in range(start, start + n)))
        for _ in range(n):
            line = c.line()
            if line == b"STORED":
                stored += 1
            else:
                assert line == b"SERVER_ERROR out of memory storing object", line
    return stored


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def under_asan(pid):
    # ASan's shadow memory and free quarantine make RSS say nothing about -m.
    with open(f"/proc/{pid}/maps") as f:
        return "libasan" in f.read()


# What a server may add to its RSS beyond -m while being filled: the hash table
# (a few MB at this item count), connection buffers, thread stacks touched.
RSS_ALLOWANCE = 16 * ONE_MB


def test_memory_never_exceeds_m(start_server):
    srv = start_server("-m", "16")
    limit = 16 * ONE_MB
    rss_before = rss_bytes(srv.proc.pid)
    with srv.conn(timeout=30) as c:
        assert int(c.stats()["limit_maxbytes"]) == limit
        written = 0
        for prefix, count, size in (("small", 40000, 400), ("mid", 8000, 4000), ("big", 300, 100000),
                                    ("small2", 40000, 300)):
            assert fill(c, prefix, count, size) > 0
            written += count * size
            s = c.stats()
            assert int(s["bytes"]) <= limit, f"bytes {s['bytes']} > limit_maxbytes {limit} after {prefix}"
        assert written > 5 * limit
        s = c.stats()
        assert int(s["evictions"]) > 0, "filling 5x past -m must evict"
        assert int(s["bytes"]) <= int(s["limit_maxbytes"])
        assert int(s["curr_items"]) > 0
        # the newest writes are readable and intact
        got = c.values("get small2:39999 small2:39998")
        assert len(got) == 2 and all(v[1].startswith(b"small2-") and len(v[1]) == 300 for v in got.values())
        slabs = c.stats("slabs")
        assert int(slabs.get("total_malloced", 0)) <= limit, f"total_malloced {slabs.get('total_malloced')}"
    # The counters above come from the code under test; the kernel's view of the
    # process is an outside check that item memory really stayed within -m.
    if not under_asan(srv.proc.pid):
        grown = rss_bytes(srv.proc.pid) - rss_before
        assert grown <= limit + RSS_ALLOWANCE, \
            f"RSS grew {grown / ONE_MB:.1f} MB filling 5x past -m 16 (allowed {(limit + RSS_ALLOWANCE) / ONE_MB:.0f} MB)"


def wait_for_stat(c, name, want, seconds=10):
    deadline = time.monotonic() + seconds
    while True:
        got = int(c.stats()[name])
        if got == want:
            return
        assert time.monotonic() < deadline, f"{name} is {got}, expected {want}"
        time.sleep(0.05)


def settled_stat(c, name, seconds=5):
    """A counter once two reads 0.3 s apart agree (bounded): connections closed
    just before, such as the harness's readiness probe, are still being counted
    down by another worker thread for a moment."""
    deadline = time.monotonic() + seconds
    got = int(c.stats()[name])
    while time.monotonic() < deadline:
        time.sleep(0.3)
        again = int(c.stats()[name])
        if again == got:
            return got
        got = again
    return got


def test_connection_counters(start_server):
    srv = start_server()
    with srv.conn() as c:
        base = settled_stat(c, "curr_connections")
        total = int(c.stats()["total_connections"])
        extra = [srv.conn() for _ in range(5)]
        for e in extra:
            assert e.cmd("version").startswith(b"VERSION ")
        wait_for_stat(c, "curr_connections", base + 5)
        assert int(c.stats()["total_connections"]) >= total + 5
        for e in extra:
            e.close()
        wait_for_stat(c, "curr_connections", base)


def test_hash_table_grows_online(start_server):
    """From 2^13 buckets, 14000 items must grow the table while every item stays readable."""
    srv = start_server("-o", "hashpower=13")
    with srv.conn(timeout=30) as c:
        assert c.stats()["hash_power_level"] == "13"
        keys = [f"grow-{i}" for i in range(14000)]
        for start in range(0, len(keys), 500):
            batch = keys[start:start + 500]
            c.send(b"".join(f"set {k} 0 0 {len(k)}\r\n{k}\r\n".encode() for k in batch))
            for _ in batch:
                assert c.line() == b"STORED"
            got = c.values("get " + " ".join(keys[max(0, start - 250):start + 500]))
            assert all(got[k][1] == k.encode() for k in got) and len(got) == len(keys[max(0, start - 250):start + 500]), \
                "an item went missing while the table grew"
        deadline = time.monotonic() + 20
        while int(c.stats()["hash_power_level"]) <= 13 or c.stats()["hash_is_expanding"] != "0":
            assert time.monotonic() < deadline, f"hash table did not finish growing: {c.stats()['hash_power_level']}"
            time.sleep(0.1)
        got = {}
        for start in range(0, len(keys), 500):
            got.update(c.values("get " + " ".join(keys[start:start + 500])))
        assert len(got) == len(keys) and all(got[k][1] == k.encode() for k in keys)


@pytest.mark.cachetd_only(reason="conn_buffer_limit is cachetd's (memcached has no cap across connections)")
def test_slow_readers_are_bounded_by_conn_buffer_limit(start_server):
    """8 clients queue 40 GETs of a 200 KB value each and read nothing: buffer memory
    stays near -o conn_buffer_limit, others are still served, and every reply arrives whole."""
    limit = 1024 * 1024
    srv = start_server("-o", f"conn_buffer_limit={limit}")
    value = bytes(range(256)) * 800  # 204800 bytes
    unit = b"VALUE big 0 204800\r\n" + value + b"\r\nEND\r\n"
    with srv.conn() as c:
        assert c.store("set", "big", value) == b"STORED"
        assert int(c.stats("settings")["conn_buffer_limit"]) == limit
    slow = [srv.conn(timeout=30) for _ in range(8)]
    try:
        for s in slow:
            s.send(b"get big\r\n" * 40)
        time.sleep(1)  # let the server fill what it will
        with srv.conn() as c:
            peak = max(int(c.stats()["conn_buffer_bytes"]) for _ in range(5))
            assert c.values("get big")["big"][1] == value, "a fresh client must be served meanwhile"
        # The README promises "over by at most about one reply per connection"; seen:
        # up to 2.8 MB here (1 MB + 8 x 205 KB = 2.7 MB), 34.5 MB without the limit.
        # Two replies per connection leaves room for "about" and still catches no cap.
        assert peak <= limit + 2 * 8 * len(unit), f"conn_buffer_bytes {peak} with limit {limit}"
        for s in slow:
            for _ in range(40):
                assert s.exact(len(unit)) == unit
    finally:
        for s in slow:
            s.close()
