"""Limits a server must hold under pressure: -c connections and -m memory.

Each test starts its own server with the limit under test, because the
counters (rejected_connections, evictions, bytes) must start from zero.
"""
import fcntl
import json
import os
import re
import signal
import socket
import struct
import subprocess
import termios
import time
import uuid

import pytest

from conftest import CACHETD, is_memcached_binary, settings_of, wait_until

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


@pytest.mark.cachetd_only(reason="memcached counts its listening sockets against -c")
@pytest.mark.parametrize("threads", [1, 4])
def test_every_one_of_c_connections_is_served(start_server, threads):
    """Exactly -c connections are served at once and the next is refused: the
    workers' event tables (sized from -c, not the open file limit) have a slot
    for every descriptor the process holds, its own eventfds, epolls, io_uring
    rings and listeners included."""
    max_conns = 48
    srv = start_server("-c", str(max_conns), "-t", str(threads))
    with srv.conn() as c:
        wait_for_stat(c, "curr_connections", 1)   # the harness's probe has closed: only c
        accepted, rejected = open_and_probe(srv.port, max_conns - 1)
        try:
            assert len(accepted) == max_conns - 1 and not rejected, \
                f"{len(accepted)} of {max_conns - 1} served with one open already: {[r for _, r in rejected]}"
            assert int(c.stats()["curr_connections"]) == max_conns
            more, refused = open_and_probe(srv.port, 1)
            assert not more and len(refused) == 1, "connection -c + 1 was served"
            for s, _ in refused:
                s.close()
        finally:
            for s in accepted:
                s.close()


def fill(c, prefix, count, size, batch=200, exptime=0):
    """Pipelined sets; returns how many were STORED. Other replies must be a clear refusal."""
    stored = 0
    value = (prefix.encode() + b"-") * (size // (len(prefix) + 1) + 1)
    value = value[:size]
    for start in range(0, count, batch):
        n = min(batch, count - start)
        c.send(b"".join(f"set {prefix}:{i} 0 {exptime} {size}\r\n".encode() + value + b"\r\n"
                        for i in range(start, start + n)))
        for _ in range(n):
            line = c.line()
            if line == b"STORED":
                stored += 1
            else:
                assert line == b"SERVER_ERROR out of memory storing object", line
    return stored


def poll_until(check, seconds):
    """check() until it returns true or `seconds` pass; returns its last answer."""
    end = time.monotonic() + seconds
    while True:
        got = check()
        if got or time.monotonic() > end:
            return got
        time.sleep(0.01)   # a pause between looks, not a wait for the answer


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def under_sanitizer(pid):
    """The sanitizer the server runs under, or None. ASan's shadow memory and free
    quarantine, and TSan's shadow and history, make RSS say nothing about -m."""
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read()
    return next((lib for lib in ("libasan", "libtsan") if lib in maps), None)


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
    if not under_sanitizer(srv.proc.pid):
        grown = rss_bytes(srv.proc.pid) - rss_before
        assert grown <= limit + RSS_ALLOWANCE, \
            f"RSS grew {grown / ONE_MB:.1f} MB filling 5x past -m 16 (allowed {(limit + RSS_ALLOWANCE) / ONE_MB:.0f} MB)"


def test_every_item_dropped_for_space_is_an_eviction(start_server):
    """Items a store drops for space are evictions (stats `evictions`, what the
    operator's young-evictions alert and autoscaler read), whether the LRU
    dropped them or a page move took their page: with nothing deleted or
    expired, curr_items + evictions is every item stored. And chained values
    keep as many items as memcached 1.6.45: 200 values of 530,000 bytes (a
    data chunk and a small last piece) set one by one into -m 64 leave 124
    items there; cachetd kept 74 (a page move took them, none counted)."""
    srv = start_server("-m", "64")
    with srv.conn(timeout=30) as c:
        value = b"v" * 530000
        for i in range(200):
            assert c.cmd(b"set big%d 0 0 %d\r\n%s" % (i, len(value), value)) == b"STORED"
        s = c.stats()
        assert int(s["curr_items"]) + int(s["evictions"]) == 200, s
        assert int(s["curr_items"]) >= 110, s["curr_items"]
        got = c.values(" ".join(["get"] + [f"big{i}" for i in range(190, 200)]))
        assert len(got) == 10 and all(v[1] == value for v in got.values())
        # then other sizes into the full memory: pages change class
        stored = 200
        for prefix, count, size in (("small", 30000, 1000), ("mid", 3000, 20000), ("small2", 30000, 300)):
            assert fill(c, prefix, count, size) == count
            stored += count
        s = c.stats()
        assert int(s["curr_items"]) + int(s["evictions"]) == stored, s
        if not is_memcached_binary(CACHETD):
            assert int(s["slabs_moved"]) > 0, "the mix must move pages (memcached 1.6.45 waits for its mover)"


def test_chained_values_into_memory_full_of_their_heads_class_are_stored(start_server):
    """A value over slab_chunk_max is chained: data chunks of the largest
    class and a head whose class it shares with ordinary items (here the
    70,000-byte ones). With -m 64 full of those, evicting from the head's
    class frees no data chunk; the store must then take a page for the data
    class, not evict item after item and give up. memcached 1.6.45 stores
    all five; cachetd refused 3 of 5, each after evicting ~64 live items."""
    srv = start_server("-m", "64")
    with srv.conn(timeout=30) as c:
        assert fill(c, "fill", 1500, 70000, batch=50) == 1500
        big = b"b" * 600000
        for i in range(5):
            assert c.cmd(b"set big%d 0 0 %d\r\n%s" % (i, len(big), big)) == b"STORED", i
            got = c.values(f"get big{i}")   # a later one may evict it (memcached too)
            assert got[f"big{i}"][1] == big
        s = c.stats()
        assert int(s["curr_items"]) + int(s["evictions"]) == 1505, s


@pytest.mark.parametrize("how", ["expired", "flushed"])
def test_reused_memory_of_expired_and_flushed_items_is_reclaimed(start_server, how):
    """memcached 1.6.45's `reclaimed`: an expired or flushed item whose memory
    a later store takes back, counted in expired_unfetched too when nobody
    read it; a deleted or replaced one is not counted. With nothing deleted,
    every item stored is still there, evicted or reclaimed. (memcached's
    flush_all unlinks the items of its last two seconds at once, uncounted:
    the test lets the server's clock move on first.)"""
    srv = start_server("-m", "8")
    with srv.conn(timeout=30) as c:
        def server_time():
            return int(c.stats()["time"])
        assert fill(c, "old", 10000, 1000, exptime=1 if how == "expired" else 0) == 10000
        start = server_time()
        wait_until(lambda: server_time() >= start + 3, 15, "the server's clock moving on")
        if how == "flushed":
            assert c.cmd("flush_all") == b"OK"
            start = server_time()
            wait_until(lambda: server_time() >= start + 1, 15, "the server's clock moving on")
        assert fill(c, "new", 10000, 1000) == 10000
        s = c.stats()
        # memcached's LRU crawler takes some expired ones too (cachetd's cleaner counts in reclaimed)
        reclaimed = int(s["reclaimed"]) + int(s.get("crawler_reclaimed", 0))
        assert int(s["reclaimed"]) > 1000, s["reclaimed"]
        assert int(s["expired_unfetched"]) == reclaimed, "nothing was read"
        assert int(s["curr_items"]) + int(s["evictions"]) + reclaimed == 20000, s
        # replaced items are not reclaimed ones
        before = int(s["reclaimed"])
        assert fill(c, "new", 2000, 1000) == 2000
        assert int(c.stats()["reclaimed"]) == before


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
    stays within -o conn_buffer_limit, others are still served, and every reply arrives whole."""
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
        # 64 MB of replies for readers that take none: the test holds only once the
        # server is really stuck behind them, every slow socket's receive queue full
        def queued(s):
            return struct.unpack("i", fcntl.ioctl(s.sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
        assert poll_until(lambda: all(queued(s) >= 64 * 1024 for s in slow), 10), \
            f"the server never filled the slow readers' sockets: {[queued(s) for s in slow]}"
        with srv.conn() as c:
            seen = [int(c.stats()["conn_buffer_bytes"]) for _ in range(5)]
            assert c.values("get big")["big"][1] == value, "a fresh client must be served meanwhile"
        # The cap is a hard reservation (src/bufmem.h): never exceeded, not even by
        # one reply per connection (the values are referenced, not copied).
        assert max(seen) <= limit, f"conn_buffer_bytes {max(seen)} with limit {limit}"
        for s in slow:
            for _ in range(40):
                assert s.exact(len(unit)) == unit
    finally:
        for s in slow:
            s.close()


# ---- one request, one slow client: bounded memory ---------------------------------
#
# A client that sends requests and reads nothing is the cheapest attack on a cache
# server. Before the output queue kept item references instead of copies
# (src/outbuf.h), each of these made cachetd grow by hundreds of megabytes (R1:
# 1.67 GB, aborting under `ulimit -v`); memcached 1.6.45 grows by a few MB.

def stalled_client(port, payload, repeats, deadline_s=5.0):
    """A client with a 4 KiB receive buffer that sends payload `repeats` times and
    never reads. Stops sending when the server stops reading it (back-pressure)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    s.settimeout(1.0)
    end = time.monotonic() + deadline_s
    for _ in range(repeats):
        if time.monotonic() > end:
            break
        try:
            s.sendall(payload)
        except (socket.timeout, OSError):
            break
    return s


def peak_rss_while(pid, seconds=2.0):
    """The highest VmRSS seen over `seconds` (polled)."""
    peak = rss_bytes(pid)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        peak = max(peak, rss_bytes(pid))
        time.sleep(0.05)
    return peak


def value_list(c):
    """A retrieval reply up to END as a list of (key, value), duplicates kept."""
    out = []
    while True:
        head = c.line()
        if head == b"END":
            return out
        parts = head.split()
        assert parts[0] == b"VALUE", head
        data = c.exact(int(parts[3]))
        assert c.exact(2) == b"\r\n"
        out.append((parts[1].decode(), data))


def value_of(size, seed):
    return (seed.encode() * (size // len(seed) + 1))[:size]


def one_stalled_client(srv, key, value, payload, repeats, allowed_growth):
    """Stores key, lets one client send payload `repeats` times without reading, and
    checks the server's RSS growth and that everyone else is still served. Returns the
    stalled client's socket (the caller closes it)."""
    with srv.conn() as c:
        assert c.store("set", key, value) == b"STORED"
    base = rss_bytes(srv.proc.pid)
    hog = stalled_client(srv.port, payload, repeats)
    try:
        peak = peak_rss_while(srv.proc.pid)
        if not under_sanitizer(srv.proc.pid):
            assert peak - base <= allowed_growth, f"RSS grew {(peak - base) / ONE_MB:.1f} MB for one slow client"
        with srv.conn() as c:  # everyone else is still served meanwhile
            assert c.values(f"get {key}")[key][1] == value
    except BaseException:
        hog.close()
        raise
    return hog


def test_one_slow_request_for_a_large_value_2000_times_is_bounded(start_server):
    """R1: `get` + ` a` x 2000 (a = 1,000,000 bytes) sent 100 times by a client that does
    not read. The reply is 2 GB per request; the server must hold references, not copies."""
    srv = start_server("-m", "64")
    big = value_of(1_000_000, "abcdefg")
    hog = one_stalled_client(srv, "a", big, b"get" + b" a" * 2000 + b"\r\n", 100, 16 * ONE_MB)
    try:
        # the stalled client's replies are intact when it finally reads some
        hog.settimeout(10)
        got = b""
        unit = b"VALUE a 0 1000000\r\n" + big + b"\r\n"
        while len(got) < 3 * len(unit):
            chunk = hog.recv(1 << 20)
            assert chunk, "server closed the slow client"
            got += chunk
        assert got[:3 * len(unit)] == unit * 3
    finally:
        hog.close()


def test_copied_small_values_are_bounded_per_request(start_server):
    """R2: 5,000 x a 16 KB value from one 10 KB request line, four times, from a client
    that does not read: values are copied only while the output buffer has room."""
    srv = start_server("-m", "64")
    val = value_of(16 * 1024, "0123456789")
    one_stalled_client(srv, "b", val, b"get" + b" b" * 5000 + b"\r\n", 4, 8 * ONE_MB).close()


@pytest.mark.parametrize("backend", [
    [], pytest.param(["-o", "no_io_uring"], marks=pytest.mark.cachetd_only(reason="memcached has one backend"))],
    ids=["default", "epoll"])
def test_huge_multiget_to_a_slow_reader_arrives_whole_and_in_order(start_server, backend):
    """A GET whose reply is far larger than any buffer (here 40 x 300 KB and 6000 x 1000 B
    values, then a pipelined request behind it) waits between keys for the client to read
    and resumes where it stopped: every byte arrives, in order, and nothing is cut off."""
    srv = start_server("-m", "64", *backend)
    big = value_of(300_000, "big")
    small = {f"s{i}": value_of(1000, f"v{i}-") for i in range(200)}
    with srv.conn(timeout=30) as c:
        assert c.store("set", "big", big) == b"STORED"
        for k, v in small.items():
            assert c.store("set", k, v) == b"STORED"
        keys = [f"s{i % 200}" for i in range(6000)]
        c.send(b"get" + b" big" * 40 + b"\r\n" + ("get " + " ".join(keys) + "\r\n").encode() + b"mn\r\n")
        first = value_list(c)
        assert [k for k, _ in first] == ["big"] * 40 and all(v == big for _, v in first)
        second = value_list(c)
        assert [k for k, _ in second] == keys and all(v == small[k] for k, v in second)
        assert c.line() == b"MN"
        s = c.stats()
        assert s["response_obj_oom"] == "0" and int(s["curr_connections"]) >= 1


@pytest.mark.cachetd_only(reason="cachetd's cap on connection buffers is on by default; memcached's is off")
def test_long_replies_and_lines_need_no_buffer_budget(start_server):
    """With (practically) no connection buffer budget, a reply longer than a
    connection's resting output buffer is written in pieces as the client reads
    (`stats conns`, ~25 KB here), and a request line longer than the resting read
    buffer is answered key by key as it arrives: neither is refused
    (response_obj_oom, read_buf_oom stay 0; until issue 20 both were cut off with
    SERVER_ERROR and the connection closed)."""
    srv = start_server("-o", "conn_buffer_limit=1", "-c", "400")
    assert settings_of(srv)["conn_buffer_limit"] == "1"
    idle = [srv.conn() for _ in range(250)]  # `stats conns` lists each: ~25 KB of reply
    try:
        for c in idle:
            assert c.cmd("version").startswith(b"VERSION ")
        with srv.conn() as c:
            conns = c.stats("conns")
            assert len({name.split(":")[0] for name in conns}) >= 251
            assert c.cmd("mn") == b"MN"
        with srv.conn() as c:  # a get line longer than the resting read buffer
            assert c.store("set", "key2999", "v") == b"STORED"
            c.send(("get " + " ".join(f"key{i}" for i in range(3000)) + "\r\nmn\r\n").encode())
            assert c.read_values() == {"key2999": (0, b"v", None)}
            assert c.line() == b"MN"
        with srv.conn() as c:
            s = c.stats()
            assert s["response_obj_oom"] == "0" and s["read_buf_oom"] == "0", s
    finally:
        for c in idle:
            c.close()


def server_socket_memory(port):
    """`ss -tm` for the server's side of established connections on `port`:
    a list of dicts of skmem fields (tb = send buffer size, w = queued bytes)."""
    out = subprocess.run(["ss", "-tmnH", "state", "established", "sport", f"= :{port}"],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return [{k: int(v) for k, v in re.findall(r"([a-z_]+?)(\d+)", m)}
            for m in re.findall(r"skmem:\((.*?)\)", out.stdout)]


@pytest.mark.cachetd_only(reason="-o sock_sndbuf/sock_rcvbuf are cachetd's")
def test_slow_readers_kernel_buffers_are_bounded_by_sock_sndbuf(start_server):
    """10 clients ask for a 1 MB value 40 times and read nothing. Autotuned, each
    server socket's send buffer grows to tcp_wmem's maximum (4 MiB: 40 MB of kernel
    memory, charged to the pod on cgroup v2). With -o sock_sndbuf/sock_rcvbuf every
    accepted socket keeps the fixed size the budget's socket_buffers term counts,
    and the value still arrives whole through the small buffer."""
    if subprocess.run(["which", "ss"], capture_output=True).returncode != 0:
        skip_unless_required("needs ss (iproute2) to read the server's socket memory")
    snd, rcv, conns = 64 * 1024, 16 * 1024, 16
    args = ["-c", str(conns), "-t", "2", "-o", f"sock_sndbuf={snd},sock_rcvbuf={rcv}"]
    term = memory_budget(*args)["terms"]["socket_buffers"]
    srv = start_server(*args)
    big = value_of(1_000_000, "big")
    with srv.conn(timeout=30) as c:
        assert c.store("set", "big", big) == b"STORED"
        assert c.values("get big")["big"][1] == big
    hogs = [stalled_client(srv.port, b"get big\r\n", 40, deadline_s=1.0) for _ in range(10)]
    try:
        # every stalled reader's send queue has filled its buffer
        full = poll_until(lambda: (lambda m: len(m) >= 10 and sum(s.get("w", 0) >= s["tb"] // 2 for s in m) >= 10
                                   and m)(server_socket_memory(srv.port)), 10)
        assert full, f"the slow readers' send queues never filled: {server_socket_memory(srv.port)}"
        for s in full:
            assert s["tb"] <= 2 * snd and s["rb"] <= 2 * rcv, f"socket buffers past sock_sndbuf/rcvbuf: {s}"
        held = sum(s.get("t", 0) + s.get("w", 0) + s.get("r", 0) + s.get("f", 0) for s in full)
        assert held <= term, f"kernel socket memory {held} above the socket_buffers term {term}"
    finally:
        for h in hogs:
            h.close()


# ---- the whole process: cachetd --memory-budget under a memory cgroup -------------

CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_V1_MEMORY = "/sys/fs/cgroup/memory"


def memory_budget(*args):
    """cachetd --memory-budget: the engine's own bound for these arguments
    (src/memory_budget.c), the one definition the operator's limit follows."""
    out = subprocess.run([CACHETD, "--memory-budget", *args], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    budget = json.loads(out.stdout)
    assert budget["bounded"] and budget["total"] == sum(budget["terms"].values()), budget
    return budget


class MemoryCgroup:
    """A memory cgroup of its own, limited to `limit` bytes, on cgroup v2 or v1. The
    server starts inside it (launcher()): charges made before a move would stay behind.

    v2 (the default on current Kubernetes nodes): a child of this process's own
    cgroup, memory.max, memory.swap.max 0; it charges kernel socket buffers to the
    cgroup, as a pod's. Peak: memory.peak where the kernel has it, else the highest
    memory.current seen by sample(). Refusals: memory.events max, oom, oom_kill.

    v1: memory.limit_in_bytes (and memsw); v1 keeps TCP memory out of
    memory.usage_in_bytes and accounts it only once memory.kmem.tcp.limit_in_bytes
    is set, so that is set to the same limit and its peak is added to the cgroup's
    (a sum of peaks: never below the real peak). Refusals: both failcnts.

    available() returns None or the reason neither hierarchy can be used."""

    def __init__(self, limit):
        name = f"cachet-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.version = cgroup_version()
        self.samples = 0
        if self.version == 2:
            parent = v2_parent()
            self.path = os.path.join(parent, name)
            os.mkdir(self.path)
            self.write("memory.max", str(limit))
            if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                self.write("memory.swap.max", "0")
            self.limit = int(self.read("memory.max"))
        else:
            self.path = os.path.join(CGROUP_V1_MEMORY, name)
            os.mkdir(self.path)
            self.write("memory.limit_in_bytes", str(limit))
            self.limit = int(self.read("memory.limit_in_bytes"))
            if os.path.exists(os.path.join(self.path, "memory.memsw.limit_in_bytes")):
                self.write("memory.memsw.limit_in_bytes", str(limit))
            self.tcp = os.path.exists(os.path.join(self.path, "memory.kmem.tcp.limit_in_bytes"))
            if self.tcp:
                self.write("memory.kmem.tcp.limit_in_bytes", str(limit))

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(value)

    def read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read().strip()

    def launcher(self, tmp_path):
        """A cachetd that enters this cgroup before it starts."""
        path = tmp_path / "cachetd-in-cgroup"
        path.write_text(f"#!/bin/sh\necho $$ > {self.path}/cgroup.procs && exec {CACHETD} \"$@\"\n")
        path.chmod(0o755)
        return str(path)

    def counter(self, name):
        return int(self.read(name))

    def sample(self):
        """Note the current usage (v2 without memory.peak has no other peak)."""
        if self.version == 2:
            self.samples = max(self.samples, self.counter("memory.current"))

    def peak(self):
        if self.version == 2:
            self.sample()
            if os.path.exists(os.path.join(self.path, "memory.peak")):
                return self.counter("memory.peak")
            return self.samples
        tcp = self.counter("memory.kmem.tcp.max_usage_in_bytes") if self.tcp else 0
        return self.counter("memory.max_usage_in_bytes") + tcp

    def refusals(self):
        """{counter: count} of every time the kernel had to refuse or reclaim at the limit."""
        if self.version == 2:
            events = dict(line.split() for line in self.read("memory.events").splitlines())
            return {k: int(events.get(k, 0)) for k in ("max", "oom", "oom_kill")}
        got = {"failcnt": self.counter("memory.failcnt")}
        if self.tcp:
            got["kmem.tcp.failcnt"] = self.counter("memory.kmem.tcp.failcnt")
        return got

    def describe(self):
        what = "v2" if self.version == 2 else ("v1 with TCP accounting" if self.tcp else
                                               "v1 (socket memory not visible)")
        return f"cgroup {what}: peak {self.peak()}, limit {self.limit}, refusals {self.refusals()}"

    def remove(self):
        """Remove the cgroup once the server in it has been reaped. The kernel may
        still be finishing its exit, so retry a little; never raises (it runs in
        `finally`, where an exception would hide the test's own)."""
        end = time.monotonic() + 10
        while True:
            try:
                os.rmdir(self.path)
                return
            except OSError as e:
                if time.monotonic() > end:
                    print(f"warning: could not remove {self.path}: {e}")
                    return
                time.sleep(0.05)


def cgroup_version():
    """2 on a unified hierarchy with the memory controller, 1 on a v1 memory
    hierarchy, else None."""
    if os.path.isfile(os.path.join(CGROUP_ROOT, "cgroup.controllers")):
        return 2
    if os.path.isfile(os.path.join(CGROUP_V1_MEMORY, "memory.limit_in_bytes")):
        return 1
    return None


def v2_parent():
    """This process's own v2 cgroup, with memory enabled for its children."""
    with open("/proc/self/cgroup") as f:
        own = next(line.split(":", 2)[2].strip() for line in f if line.startswith("0::"))
    parent = os.path.join(CGROUP_ROOT, own.lstrip("/"))
    with open(os.path.join(parent, "cgroup.subtree_control")) as f:
        enabled = f.read().split()
    if "memory" not in enabled:
        # refused (EBUSY) when this cgroup holds processes and is not a root:
        # cgroup v2's no-internal-process rule
        with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
            f.write("+memory")
    return parent


REQUIRE_CGROUP_ENV = "CACHET_REQUIRE_CGROUP"


def skip_unless_required(why):
    """Skip a memory-bound check that cannot run here, unless CACHET_REQUIRE_CGROUP=1
    (make check's release pass sets it): there a skip would report the memory bound
    as checked when it was not, so it fails instead."""
    if os.environ.get(REQUIRE_CGROUP_ENV) == "1":
        pytest.fail(f"{why} ({REQUIRE_CGROUP_ENV}=1: this pass must check the memory bound)")
    pytest.skip(why)


def test_required_memory_bound_checks_fail_instead_of_skipping(monkeypatch):
    monkeypatch.setenv(REQUIRE_CGROUP_ENV, "1")
    # a skip escaping here would itself report this test skipped: catch it
    try:
        skip_unless_required("no memory cgroup can be made here")
        got = None
    except BaseException as e:  # pytest's outcomes are BaseExceptions
        got = e
    assert isinstance(got, pytest.fail.Exception) and "must check the memory bound" in str(got), \
        f"with {REQUIRE_CGROUP_ENV}=1 a missing cgroup must fail the test, got {got!r}"
    monkeypatch.delenv(REQUIRE_CGROUP_ENV)
    with pytest.raises(pytest.skip.Exception):
        skip_unless_required("no memory cgroup can be made here")


def memory_cgroup_unavailable():
    """None when MemoryCgroup can be made here, else why not."""
    version = cgroup_version()
    if version is None:
        return "no cgroup v2 unified hierarchy and no v1 memory hierarchy under /sys/fs/cgroup"
    if version == 1:
        return None if os.access(CGROUP_V1_MEMORY, os.W_OK) else f"{CGROUP_V1_MEMORY} is not writable (not root)"
    try:
        parent = v2_parent()
    except (OSError, StopIteration) as e:
        return f"cannot enable the memory controller below this process's cgroup v2: {e}"
    return None if os.access(parent, os.W_OK) else f"{parent} is not writable (not root, no delegation)"


@pytest.mark.cachetd_only(reason="the bound is cachetd's (--memory-budget)")
@pytest.mark.parametrize("extstore", [False, True], ids=["ram", "extstore"])
def test_hostile_clients_never_exceed_the_memory_budget_cgroup(start_server, tmp_path, extstore):
    """cachetd runs in a memory cgroup whose limit is exactly its --memory-budget total. The
    cache is filled past -m (evictions; with extstore, values written to disk), then 75
    clients attack at once and read nothing (the 2,000 x 1 MB GET, 5,000 x 16 KB GETs,
    60 KB request lines, deep pipelines, stats) until the connection buffer cap is spent.
    The kernel never had to reclaim or refuse a page (failcnt 0), the cgroup's peak is below
    the limit but above -m (the memory really filled), and the server answers."""
    why = memory_cgroup_unavailable()
    if why:
        skip_unless_required(f"no memory cgroup can be made here: {why}")
    # -m large enough that item memory dominates: a bound that forgot it, or
    # counted half of it, is below what the server touches (checked once)
    m_mb, conns, threads = 64, 80, 2
    args = ["-m", str(m_mb), "-c", str(conns), "-t", str(threads), "-o", "sock_sndbuf=64k,sock_rcvbuf=16k"]
    if extstore:
        # O_DIRECT writes: the file's data is not page cache charged to the cgroup
        args += ["-o", f"ext_path={tmp_path}/ext:48m,ext_page_size=4,ext_wbuf_size=4,ext_item_size=512"]
    budget = memory_budget(*args)
    cg = MemoryCgroup(budget["total"])
    srv = None
    try:
        srv = start_server(*args, binary=cg.launcher(tmp_path))
        sanitizer = under_sanitizer(srv.proc.pid)
        if sanitizer:
            skip_unless_required(f"{sanitizer}'s shadow memory is not the engine's allocations: a cgroup sized "
                        "for the release binary says nothing about it (make check's release pass runs this)")
        assert open(f"/proc/{srv.proc.pid}/cgroup").read().count(os.path.basename(cg.path)) == 1
        with srv.conn(timeout=30) as c:
            cap = int(c.stats("settings")["conn_buffer_limit"])
            # item memory at its worst: full, with the hash table grown for the smallest items
            assert fill(c, "tiny", 120000, 20) > 0
            assert fill(c, "mid", 30000, 4000) > 0   # 120 MB: past -m, and past the disk
            assert c.store("set", "one-mb", value_of(1_000_000, "m")) == b"STORED"
            assert c.store("set", "sixteen", value_of(16 * 1024, "s")) == b"STORED"
            for i in range(300):
                assert c.store("set", f"k{i}", value_of(900, f"k{i}")) == b"STORED"
            s = c.stats()
            if not extstore:
                assert int(s["evictions"]) > 0, "filling past -m must evict"
                assert int(s["bytes"]) > int(s["limit_maxbytes"]) // 2, s
            else:
                # RAM filled and moved values to disk, and the disk filled too
                assert poll_until(lambda: int(c.stats()["extstore_page_evictions"]) > 0, 10), \
                    f"the extstore file never filled: {c.stats()}"
                assert int(c.stats()["extstore_objects_written"]) > 0
        long_line = ("get " + " ".join(f"k{i % 300}" for i in range(9000)))[:60000].rsplit(" ", 1)[0] + "\r\n"
        attacks = [b"get" + b" one-mb" * 2000 + b"\r\n", b"get" + b" sixteen" * 5000 + b"\r\n",
                   long_line.encode(), b"get k1 k2 k3 k4 k5 k6 k7 k8\r\n" * 2000,
                   b"stats\r\nstats settings\r\nstats slabs\r\n" * 200]
        hogs = []
        try:
            for i in range(conns - 5):
                hogs.append(stalled_client(srv.port, attacks[i % len(attacks)], 20, deadline_s=1.0))
            with srv.conn(timeout=30) as c:
                # the attack is real only once the buffer cap is (nearly) spent
                def pressed():
                    cg.sample()
                    got = int(c.stats()["conn_buffer_bytes"])
                    return got >= cap * 3 // 4 and got
                used = poll_until(pressed, 10)
                assert used, f"conn_buffer_bytes never reached 3/4 of the cap {cap}: the clients did not press"
                assert c.stats()["pid"] == str(srv.proc.pid), "a fresh client must be served"
        finally:
            for h in hogs:
                h.close()
        with srv.conn(timeout=30) as c:   # served, and storing, once the attackers are gone
            assert c.store("set", "after", value_of(900, "after")) == b"STORED"
            assert c.values("get after")["after"][1] == value_of(900, "after")
        peak, refusals = cg.peak(), cg.refusals()
        print(f"{cg.describe()} (limit = --memory-budget)")
        assert not any(refusals.values()), f"the cgroup hit its limit: {cg.describe()}: the budget is short"
        assert peak <= cg.limit, cg.describe()
        assert peak > m_mb * ONE_MB, f"cgroup peak {peak} below -m: the cache never filled in the cgroup"
        assert srv.proc.poll() is None, "the server died"
    except (ConnectionError, socket.timeout) as e:
        if srv and srv.proc.poll() is not None:   # the kernel's OOM killer: the budget is short
            raise AssertionError(f"the server died under a --memory-budget limit: {cg.describe()}") from e
        raise
    finally:
        # the server out first: a cgroup with a process in it cannot be removed
        if srv and srv.proc.poll() is None:
            srv.expect_exit = True
            srv.proc.kill()
            try:
                srv.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                print(f"warning: server {srv.proc.pid} not reaped; {cg.path} left behind")
        cg.remove()


@pytest.mark.cachetd_only(reason="memcached exits at once on SIGTERM; cachetd drains (pods stop with SIGTERM)")
def test_sigterm_finishes_a_get_waiting_for_a_slow_reader(start_server):
    """A 12 MB multi-get waits between keys for its slow reader when SIGTERM comes: the
    GET is finished (its reply whole, with END), the request behind it is not started,
    the connection closes and the server exits 0."""
    srv = start_server()
    big = value_of(300_000, "term")
    with srv.conn() as c:
        assert c.store("set", "big", big) == b"STORED"
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", srv.port))
    s.settimeout(10)
    try:
        s.sendall(b"get" + b" big" * 40 + b"\r\nget big\r\n")
        s.recv(1, socket.MSG_PEEK)   # the GET is being answered (and, at 12 MB, waits)
        srv.expect_exit = True
        srv.proc.send_signal(signal.SIGTERM)
        # now read fast: the drain has a deadline of a few seconds
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        got = b""
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            got += chunk
        unit = b"VALUE big 0 300000\r\n" + big + b"\r\n"
        assert len(got) == len(unit) * 40 + 5 and got == unit * 40 + b"END\r\n", f"{len(got)} bytes ({len(got) / len(unit):.3f} units), ends {got[-30:]!r}"
    finally:
        s.close()
    assert srv.proc.wait(timeout=15) == 0
