"""Get lines of any length, and long stats replies, in bounded memory.

memcached serves an ASCII get line of any length by holding the whole line;
cachetd answers such a line key by key as it arrives (net_conn.c get_stream),
so its read buffer never grows and its replies wait under the connection
buffer budget while the client reads. Long stats listings are written in
pieces the same way.
"""
import select
import socket
import threading
import time

import pytest

from conftest import IS_MEMCACHED, stat, wait_until
from test_limits import peak_rss_while, rss_bytes, under_sanitizer

ONE_MB = 1024 * 1024
BACKENDS = pytest.mark.parametrize("backend", [
    [], pytest.param(["-o", "no_io_uring"], marks=pytest.mark.cachetd_only(reason="memcached has one backend"))],
    ids=["default", "epoll"])


def populate(c, keys, size=0):
    """Sets each key to its own name (padded with dots to `size` bytes),
    pipelined, then waits for the last reply."""
    for start in range(0, len(keys), 2000):
        c.send(b"".join(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, len(v), v)
                        for k, v in ((k, k.ljust(size, b".")) for k in keys[start:start + 2000])))
    assert c.cmd("mn") == b"MN"


def exchange(port, payload, tail, half_close=False, seconds=120, watch_pid=None):
    """Sends payload from a second thread while reading, until the reply ends
    with `tail`. Returns (reply bytes, peak server RSS seen while it ran)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=seconds)
    sent_error = []

    def sender():
        try:
            s.sendall(payload)
            if half_close:
                s.shutdown(socket.SHUT_WR)
        except OSError as e:
            sent_error.append(e)

    t = threading.Thread(target=sender, daemon=True)
    t.start()
    chunks, size, tail_seen = [], 0, b""
    peak = rss_bytes(watch_pid) if watch_pid else 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            tail_seen = (tail_seen + chunk)[-len(tail):]
            if watch_pid and len(chunks) % 16 == 0:
                peak = max(peak, rss_bytes(watch_pid))
            if tail_seen == tail:
                break
    finally:
        t.join(10)
        s.close()
    assert not sent_error, sent_error
    return b"".join(chunks), peak


def parse_values(reply):
    """A stream of retrieval replies: a list of (key, data) per END."""
    out, cur, pos = [], [], 0
    while pos < len(reply):
        eol = reply.index(b"\r\n", pos)
        head = reply[pos:eol]
        pos = eol + 2
        if head == b"END":
            out.append(cur)
            cur = []
            continue
        parts = head.split(b" ")
        assert parts[0] == b"VALUE", head[:100]
        n = int(parts[3])
        out_data = reply[pos:pos + n]
        assert reply[pos + n:pos + n + 2] == b"\r\n"
        pos += n + 2
        cur.append((parts[1], out_data))
    assert not cur, "reply cut short before END"
    return out


@BACKENDS
def test_get_line_of_200_kb_is_answered_whole_with_requests_behind_it(start_server, backend):
    """memcached's own tests send one get of 18,000 keys; here 20,000 keys
    (200 KB, hits and misses) with requests pipelined behind the line."""
    srv = start_server(*backend)
    hits = [b"lg%05d" % i for i in range(0, 20000, 2)]
    keys = [b"lg%05d" % i for i in range(20000)]
    with srv.conn(timeout=60) as c:
        populate(c, hits)
    payload = b"get " + b" ".join(keys) + b"\r\nget lg00000\r\nmn\r\n"
    reply, _ = exchange(srv.port, payload, b"END\r\nMN\r\n")
    assert reply.endswith(b"END\r\nMN\r\n")
    first, second = parse_values(reply[:-len(b"MN\r\n")])
    assert [k for k, _ in first] == hits and all(k == v for k, v in first)
    assert second == [(b"lg00000", b"lg00000")]


@BACKENDS
def test_get_line_of_300000_keys_gets_every_value_in_bounded_memory(start_server, backend):
    """A 2.4 MB get line of 300,000 keys gets all its values, in order, all hits
    and then half hits, with the server's RSS growing less than 64 MB; a
    request pipelined behind it is answered after it; a client that
    half-closes after sending the line still gets the whole reply."""
    srv = start_server("-m", "128", *backend)
    keys = [b"k%06d" % i for i in range(300000)]
    with srv.conn(timeout=120) as c:
        populate(c, keys)
    pid = srv.proc.pid
    sanitizer = under_sanitizer(pid)
    before = rss_bytes(pid)

    payload = b"get " + b" ".join(keys) + b"\r\nmn\r\n"
    reply, peak = exchange(srv.port, payload, b"END\r\nMN\r\n", watch_pid=pid)
    assert reply.endswith(b"END\r\nMN\r\n"), reply[-200:]
    (got,) = parse_values(reply[:-len(b"MN\r\n")])
    assert len(got) == len(keys)
    assert [k for k, _ in got] == keys and all(k == v for k, v in got)

    mixed = [k for i, k in enumerate(keys) if i % 2 == 0]
    line_keys = [k if i % 2 == 0 else b"miss%06d" % i for i, k in enumerate(keys)]
    payload = b"gets " + b" ".join(line_keys) + b"\r\nget k000001\r\n"
    reply, peak2 = exchange(srv.port, payload, b"END\r\nVALUE k000001 0 7\r\nk000001\r\nEND\r\n",
                            half_close=True, watch_pid=pid)
    got = [v[:2] for v in (h.split(b" ") for h in reply.split(b"\r\n") if h.startswith(b"VALUE"))]
    assert [k for _, k in got[:-1]] == mixed
    assert got[-1] == [b"VALUE", b"k000001"]
    # memcached 1.6.45 holds the whole line: its RSS grew by 121 MB at 100,000
    # keys and 363 MB at 300,000 here (issue 20 saw it answer 59,999 of
    # 100,000), so only cachetd is held to the bound
    if not sanitizer and not IS_MEMCACHED:
        growth = max(peak, peak2) - before
        assert growth < 64 * ONE_MB, f"RSS grew by {growth / ONE_MB:.1f} MB answering 300,000 keys"
    if not IS_MEMCACHED:
        with srv.conn() as c:
            s = c.stats()
            assert s["response_obj_oom"] == "0" and s["read_buf_oom"] == "0", s


@pytest.mark.cachetd_only(reason="memcached 1.6.45 reads the whole line into memory before it answers "
                                 "(its RSS grew by 363 MB for 300,000 keys here)")
@BACKENDS
def test_long_get_line_to_a_client_that_does_not_read_is_held_back(start_server, backend):
    """300,000 keys of 100-byte values (a 38 MB reply) to a client that reads
    nothing at first: once its replies fill the output queue the server stops
    reading the line (back-pressure), its RSS grows by less than 64 MB, and when
    the client reads it gets every value in order. The connection stays open."""
    srv = start_server("-m", "128", *backend)
    keys = [b"b%06d" % i for i in range(300000)]
    with srv.conn(timeout=120) as c:
        populate(c, keys, size=100)
        read_before = stat(c, "bytes_read")
    pid = srv.proc.pid
    before = rss_bytes(pid)
    payload = b"get " + b" ".join(keys) + b"\r\n"
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=120)
    sender = threading.Thread(target=s.sendall, args=(payload,), daemon=True)
    sender.start()
    try:
        with srv.conn() as c:
            wait_until(lambda: stat(c, "bytes_written") >= 64 * 1024, 60, "the first replies written")
            peak = peak_rss_while(pid, 1.0)
            line_read = stat(c, "bytes_read") - read_before
        assert line_read < len(payload) // 2, \
            f"the server read {line_read} of the line's {len(payload)} bytes while its client read nothing"
        if not under_sanitizer(pid):
            assert peak - before < 64 * ONE_MB, f"RSS grew by {(peak - before) / ONE_MB:.1f} MB"
        reply = bytearray()
        while not reply.endswith(b"END\r\n"):
            chunk = s.recv(1 << 20)
            assert chunk, "connection closed before END"
            reply += chunk
        sender.join(60)
        (got,) = parse_values(bytes(reply))
        assert [k for k, _ in got] == keys and all(v == k.ljust(100, b".") for k, v in got)
    finally:
        s.close()


@BACKENDS
def test_key_over_250_bytes_in_a_long_get_line_refuses_the_line(start_server, backend):
    """memcached refuses a get line with a key over 250 bytes with CLIENT_ERROR
    and an empty line, wherever the key is, and goes on with the next request.
    The keys before it miss, so the two servers' replies are the same bytes
    (cachetd may have sent earlier keys' values already)."""
    srv = start_server(*backend)
    with srv.conn(timeout=30) as c:
        assert c.store("set", "after", "v") == b"STORED"
        misses = b" ".join(b"nokey%05d" % i for i in range(8000))   # 80 KB
        # the bad key in the middle, at the end, and one that arrives in pieces
        c.send(b"get " + misses + b" " + b"k" * 251 + b" " + misses + b"\r\nget after\r\n")
        assert (c.line(), c.line()) == (b"CLIENT_ERROR bad command line format", b"")
        assert c.read_values() == {"after": (0, b"v", None)}
        c.send(b"get " + misses + b" " + b"k" * 300 + b"\r\nget after\r\n")
        assert (c.line(), c.line()) == (b"CLIENT_ERROR bad command line format", b"")
        assert c.read_values() == {"after": (0, b"v", None)}
        c.send(b"get " + misses + b" " + b"k" * 20000)
        time.sleep(0.2)   # not a wait for an answer: the rest comes later on purpose
        c.send(b"k" * 20000 + b" " + misses + b"\r\nget after\r\n")
        assert (c.line(), c.line()) == (b"CLIENT_ERROR bad command line format", b"")
        assert c.read_values() == {"after": (0, b"v", None)}


@pytest.mark.cachetd_only(reason="memcached 1.6.45 lets only get and gets lines pass 2048 bytes "
                                 "before their end; a long gat line is closed")
@BACKENDS
def test_long_gat_and_gats_lines_stream_too(start_server, backend):
    srv = start_server(*backend)
    with srv.conn(timeout=30) as c:
        assert c.store("set", "t1", "v1") == b"STORED"
        misses = b" ".join(b"nokey%05d" % i for i in range(8000))
        c.send(b"gat 100 " + misses + b" t1\r\ngats 0 " + misses + b" t1 " + misses + b"\r\n")
        assert c.read_values() == {"t1": (0, b"v1", None)}
        got = c.read_values()
        assert list(got) == ["t1"] and got["t1"][2] is not None
        c.send(b"gat notanumber " + misses + b"\r\nmn\r\n")
        assert c.line() == b"CLIENT_ERROR invalid exptime argument"
        assert c.line() == b"MN"


@pytest.mark.parametrize("backend", [[], ["-o", "no_io_uring"]], ids=["default", "epoll"])
def test_3000_connections_each_with_a_32_kib_get_line_all_get_full_replies(start_server, backend):
    """At -m 8 each of 3,000 connections sends a 32 KiB get line (hits and
    misses) before any reads; every one gets its whole reply and no
    connection is refused or closed for memory."""
    if IS_MEMCACHED and backend:
        pytest.skip("memcached has one backend")
    srv = start_server("-m", "8", "-c", "4000", *backend)
    hits = [b"h%d" % i for i in range(20)]
    with srv.conn() as c:
        populate(c, hits)
    misses = b" ".join(b"missing-key-%05d" % i for i in range(1850))      # 32 KiB
    line = b"get " + hits[0] + b" " + misses + b" " + b" ".join(hits) + b"\r\n"
    assert 32 * 1024 <= len(line) < 40 * 1024
    expect = b"".join(b"VALUE %s 0 %d\r\n%s\r\n" % (k, len(k), k) for k in [hits[0]] + hits) + b"END\r\n"
    socks = []
    try:
        for _ in range(3000):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            s.setblocking(False)
            socks.append(s)
        pending = {s.fileno(): [s, line, b""] for s in socks}
        done = 0
        deadline = time.monotonic() + 240
        while done < len(socks) and time.monotonic() < deadline:
            wr = [fd for fd, st in pending.items() if st[1]]
            rd = [fd for fd, st in pending.items() if len(st[2]) < len(expect)]
            poller = select.poll()
            for fd in rd:
                poller.register(fd, select.POLLIN | (select.POLLOUT if fd in wr else 0))
            for fd, ev in poller.poll(1000):
                st = pending[fd]
                if ev & select.POLLOUT and st[1]:
                    n = st[0].send(st[1])
                    st[1] = st[1][n:]
                if ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    chunk = st[0].recv(65536)
                    assert chunk, f"connection closed with {st[2][:120]!r} read"
                    st[2] += chunk
                    if len(st[2]) >= len(expect):
                        assert st[2] == expect, st[2][:200]
                        done += 1
        assert done == len(socks), f"only {done} of {len(socks)} connections got their reply"
    finally:
        for s in socks:
            s.close()
    with srv.conn() as c:
        s = c.stats()
        assert int(s["rejected_connections"]) == 0
        if not IS_MEMCACHED:
            assert s["read_buf_oom"] == "0" and s["response_obj_oom"] == "0", s


def stats_listing(c, sub):
    c.send(f"stats {sub}\r\n".encode())
    lines = []
    while True:
        line = c.line()
        if line == b"END":
            return lines
        assert line.startswith(b"STAT "), line[:200]
        lines.append(line)


@pytest.mark.parametrize("budget", [[], ["-o", "conn_buffer_limit=1"]], ids=["default", "tiny-budget"])
def test_stats_conns_at_6000_connections_is_answered_whole(start_server, budget):
    """`stats conns` at 6,000 connections is about 600 KB, more than a
    connection's output buffer may hold: it is written in pieces as the
    client reads, even with (practically) no connection buffer budget."""
    if IS_MEMCACHED and budget:
        pytest.skip("conn_buffer_limit is cachetd's")
    srv = start_server("-c", "6500", *budget)
    socks = []
    try:
        for _ in range(6000):
            socks.append(socket.create_connection(("127.0.0.1", srv.port), timeout=30))
        with srv.conn(timeout=60) as c:
            wait_until(lambda: stat(c, "curr_connections") >= 6001, 60, "the server accepting 6,000 connections")
            lines = stats_listing(c, "conns")
            fds = {ln.split(b" ")[1].split(b":")[0] for ln in lines}
            assert sum(len(ln) + 2 for ln in lines) > 512 * 1024
            assert len(fds) >= 6000, f"{len(fds)} connections listed"
            assert c.cmd("mn") == b"MN"
            if not IS_MEMCACHED:
                assert c.stats()["response_obj_oom"] == "0"
    finally:
        for s in socks:
            s.close()
