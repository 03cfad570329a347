"""How requests arrive on the wire: pipelined, fragmented, concurrent.

Real clients pipeline many requests per write, and TCP may split any request
at any byte; the parser must give the same answers either way. The concurrent
test checks through real sockets what the TSan checker checks in-process: a
GET never returns another key's value or a torn one. Every loop is bounded.
"""
import threading
import random

import pytest

from pymemcache.client.base import Client


@pytest.fixture(scope="module")
def module_server(module_server_each_backend):
    """Every test here runs against both network backends."""
    return module_server_each_backend



def test_pipelined_mixed_commands_answer_in_order(server, key):
    reqs, expected = [], []
    for i in range(300):
        k = f"{key}-{i % 30}"
        op = i % 6
        if op == 0:
            reqs.append(f"set {k} {i} 0 {len(str(i))}\r\n{i}\r\n")
            expected.append(["STORED"])
        elif op == 1:
            reqs.append(f"get {key}-{(i - 1) % 30}\r\n")  # set by the previous request
            expected.append(None)  # VALUE ... END, checked loosely below
        elif op == 2:
            reqs.append(f"delete {k}-none\r\n")
            expected.append(["NOT_FOUND"])
        elif op == 3:
            reqs.append(f"touch {k}-none 10\r\n")
            expected.append(["NOT_FOUND"])
        elif op == 4:
            reqs.append("mn\r\n")
            expected.append(["MN"])
        else:
            reqs.append(f"add {key}-{(i - 5) % 30} 0 0 1\r\nx\r\n")  # exists: set 5 requests ago
            expected.append(["NOT_STORED"])
    with server.conn() as c:
        c.send("".join(reqs).encode())
        for i, exp in enumerate(expected):
            if exp is None:
                got = c.read_values()
                k = f"{key}-{(i - 1) % 30}"
                assert list(got) == [k] and got[k][0] == int(got[k][1]), (i, got)
            else:
                assert c.line().decode() == exp[0], f"reply {i} out of order"


def test_byte_by_byte_requests(server, key):
    stream = (f"set {key} 5 0 12\r\nhello\r\nworld\r\n"
              f"get {key}\r\n"
              f"ms {key}-m 3 T0\r\nabc\r\n"
              f"mg {key}-m v\r\n"
              f"incr {key}-n 1\r\n").encode()
    with server.conn() as c:
        for b in stream:
            c.send(bytes([b]))
        assert c.line() == b"STORED"
        assert c.read_values() == {key: (5, b"hello\r\nworld", None)}
        assert c.line() == b"HD"
        assert c.line() == b"VA 3"
        assert c.exact(5) == b"abc\r\n"
        assert c.line() == b"NOT_FOUND"


def test_requests_split_at_every_offset(server, key):
    req = f"set {key} 0 0 4\r\nab\r\n\r\nget {key}\r\n".encode()
    with server.conn() as c:
        for cut in range(1, len(req)):
            c.send(req[:cut])
            c.send(req[cut:])
            assert c.line() == b"STORED", cut
            assert c.read_values() == {key: (0, b"ab\r\n", None)}, cut


def test_concurrent_clients_never_see_wrong_values(server, key):
    """4 clients, 1500 ops each, on 40 shared keys; every value names its key."""
    keys = [f"{key}-{i}" for i in range(40)]
    errors = []

    def worker(seed):
        rng = random.Random(seed)
        mc = Client(("127.0.0.1", server.port), connect_timeout=5, timeout=20, default_noreply=False)
        try:
            for n in range(1500):
                k = rng.choice(keys)
                op = rng.random()
                if op < 0.45:
                    v = mc.get(k)
                    if v is not None and not (v.startswith(k.encode() + b"|") and v.endswith(b"|end")):
                        errors.append((k, v[:80]))
                elif op < 0.85:
                    mc.set(k, f"{k}|{seed}-{n}|{'p' * rng.randrange(0, 3000)}|end".encode())
                elif op < 0.95:
                    mc.delete(k)
                else:
                    mc.touch(k, 100)
        except Exception as e:  # noqa: BLE001 - any client error is a failure of the test
            errors.append(("exception", repr(e)))
        finally:
            mc.close()

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=100)
    assert not any(t.is_alive() for t in threads), "a client thread hung"
    assert not errors, f"wrong or torn values: {errors[:5]}"


def test_reads_during_append_and_incr_are_never_torn(server, key):
    """Writers append "ab" and incr a counter; readers must only ever see whole states."""
    app, ctr = f"{key}-app", f"{key}-ctr"
    setup = Client(("127.0.0.1", server.port), connect_timeout=5, timeout=20, default_noreply=False)
    setup.set(app, b"ab")
    setup.set(ctr, b"0")
    setup.close()
    errors = []

    def writer():
        mc = Client(("127.0.0.1", server.port), connect_timeout=5, timeout=20, default_noreply=False)
        try:
            for _ in range(800):
                if not mc.append(app, b"ab"):
                    errors.append("append refused")
                mc.incr(ctr, 1)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
        finally:
            mc.close()

    def reader():
        mc = Client(("127.0.0.1", server.port), connect_timeout=5, timeout=20, default_noreply=False)
        last = 0
        try:
            for _ in range(800):
                v = mc.get(app)
                if v is None or len(v) % 2 or v != b"ab" * (len(v) // 2):
                    errors.append(("torn append", None if v is None else v[-10:]))
                n = mc.get(ctr)
                if n is None or not n.rstrip(b" ").isdigit() or int(n) < last:
                    errors.append(("bad counter", n, last))
                else:
                    last = int(n)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
        finally:
            mc.close()

    threads = [threading.Thread(target=f) for f in (writer, writer, reader, reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=100)
    assert not any(t.is_alive() for t in threads), "a client thread hung"
    assert not errors, errors[:5]
    check = Client(("127.0.0.1", server.port), connect_timeout=5, timeout=20)
    try:
        assert check.get(app) == b"ab" * 1601
        assert int(check.get(ctr)) == 1600
    finally:
        check.close()


def test_noreply_flood_then_one_reply(server, key):
    """5000 noreply writes in one burst: nothing answers until the version, and all landed."""
    keys = [f"{key}-{i}" for i in range(5000)]
    burst = b"".join(f"set {k} {i} 0 {len(k)} noreply\r\n{k}\r\n".encode() for i, k in enumerate(keys))
    burst += b"".join(f"incr {k} 1 noreply\r\n".encode() for k in keys[:10])  # non-numeric: errors may be sent
    with server.conn(timeout=30) as c:
        c.send(burst + b"version\r\n")
        while True:
            line = c.line()
            if line.startswith(b"VERSION "):
                break
            assert line == b"CLIENT_ERROR cannot increment or decrement non-numeric value", line
        for start in range(0, len(keys), 500):
            got = c.values("get " + " ".join(keys[start:start + 500]))
            assert len(got) == 500 and all(got[k][:2] == (start + j, k.encode())
                                           for j, k in enumerate(keys[start:start + 500]))


def _half_closed_exchange(port, request, timeout=30):
    """Send `request`, shut our side (shutdown(SHUT_WR), as `nc -N` and many
    scripts do), and read until the server closes. Returns every byte read."""
    import socket
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        got = bytearray()
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                return bytes(got)
            got += chunk
    finally:
        s.close()


HALF_CLOSE_VALUE = bytes(random.Random(7).choice(b"abcdefghij") for _ in range(100_000))


def _expect_every_get_then_version(got, key, n):
    reply = f"VALUE {key} 0 {len(HALF_CLOSE_VALUE)}\r\n".encode() + HALF_CLOSE_VALUE + b"\r\nEND\r\n"
    assert got.startswith(reply * n), (
        f"{len(got)} bytes before the close, {n * len(reply)} owed for {n} gets: replies lost after the half-close")
    assert got[n * len(reply):].startswith(b"VERSION "), f"no VERSION after the gets: {got[n * len(reply):][:80]!r}"


def test_half_closed_client_gets_every_reply(server, key):
    """A client that half-closes after its last request still gets every reply:
    memcached answers what it read before it closes. 50 gets of a 100 KB value are
    5 MB, more than the kernel's send buffer, so most of it is still queued in the
    server when the EOF arrives."""
    with server.conn() as c:
        assert c.store("set", key, HALF_CLOSE_VALUE) == b"STORED"
    n = 50
    got = _half_closed_exchange(server.port, f"get {key}\r\n".encode() * n + b"version\r\n")
    _expect_every_get_then_version(got, key, n)


@pytest.mark.cachetd_only(reason="-o sock_sndbuf is cachetd's")
def test_half_closed_client_gets_every_reply_through_a_small_send_buffer(start_server):
    """The same with the fixed socket buffers the operator sets, made small: even
    one reply larger than the send buffer is still queued at the EOF."""
    srv = start_server("-o", "sock_sndbuf=4k,sock_rcvbuf=4k")
    with srv.conn() as c:
        assert c.store("set", "hc", HALF_CLOSE_VALUE) == b"STORED"
    for n in (1, 3):
        got = _half_closed_exchange(srv.port, b"get hc\r\n" * n + b"version\r\n")
        _expect_every_get_then_version(got, "hc", n)
