"""Bad input: a clear error, nothing lost, the server keeps serving.

One server for the module, seeded with sentinel items; after every test the
server must still be alive, answer a new connection, and hold every sentinel
unchanged. Every expected reply is memcached 1.6.45's, measured by running
these tests against it (`make conformance CACHETD=<memcached 1.6.45>`).
"""
import os
import random
import socket

import pytest

from conftest import conn_state, wait_until


@pytest.fixture(scope="module")
def module_server(module_server_each_backend):
    """Every test here runs against both network backends."""
    return module_server_each_backend


ONE_MB = 1024 * 1024
SENTINELS = {f"sentinel-{i}": (i, os.urandom(16).hex().encode() * (i + 1)) for i in range(20)}
BAD = b"CLIENT_ERROR bad command line format"


@pytest.fixture(scope="module")
def seeded(module_server):
    with module_server.conn() as c:
        for k, (flags, value) in SENTINELS.items():
            assert c.store("set", k, value, flags=flags) == b"STORED"
    return module_server


@pytest.fixture
def srv(seeded):
    yield seeded
    seeded.check_healthy()
    with seeded.conn() as c:
        got = c.values("get " + " ".join(SENTINELS))
    assert {k: (f, v) for k, (f, v, _) in got.items()} == SENTINELS, "earlier data was lost or changed"


def assert_resyncs(c):
    """After an error the same connection still parses commands from a clean line."""
    c.send(b"version\r\n")
    while True:
        line = c.line()
        if line.startswith(b"VERSION "):
            return
        # what is left of a broken data block is read as short or unknown lines
        assert line in (b"ERROR", BAD), f"unexpected line while resyncing: {line!r}"


MALFORMED = [
    # memcached 1.6.45: a line under 4 bytes with its "\r\n" and a known
    # command with too few tokens are CLIENT_ERROR; an unknown command is ERROR
    ("", BAD),
    (" ", BAD),
    ("x", BAD),
    ("bogus", b"ERROR"),
    ("GET k", b"ERROR"),  # commands are case-sensitive
    (" get k", b"ERROR"),  # the command is what precedes the first space
    ("mn_", b"ERROR"),
    ("get", BAD),
    ("gets", BAD),
    ("mg", BAD),
    ("md", BAD),
    ("ma", BAD),
    ("ms", BAD),
    ("ms k", BAD),
    ("set", BAD),
    ("set k", BAD),
    ("set k 0 0", BAD),
    # the length itself is bad: no data block is known, none is skipped
    ("set k 0 0 abc", BAD),
    ("set k 0 0 -1", BAD),
    ("set k 0 0 +1", BAD),
    ("incr", BAD),
    ("incr k", BAD),
    ("incr k abc", b"CLIENT_ERROR invalid numeric delta argument"),
    ("decr k -5", b"CLIENT_ERROR invalid numeric delta argument"),
    ("delete", BAD),
    ("touch k", BAD),
    ("touch k abc", b"CLIENT_ERROR invalid exptime argument"),
    ("touch k 2147483648", b"CLIENT_ERROR invalid exptime argument"),
    ("gat", BAD),
    ("gat 10", BAD),
    ("gat abc k", b"CLIENT_ERROR invalid exptime argument"),
    ("gat 2147483648 k", b"CLIENT_ERROR invalid exptime argument"),
    ("flush_all abc", b"CLIENT_ERROR invalid exptime argument"),
    ("flush_all 4294967296", b"CLIENT_ERROR invalid exptime argument"),
    ("verbosity", BAD),
    ("verbosity abc", BAD),
    ("verbosity -5", BAD),
]


@pytest.mark.parametrize("line,expected", MALFORMED, ids=[repr(m[0]) for m in MALFORMED])
def test_malformed_line(srv, line, expected):
    with srv.conn() as c:
        assert c.cmd(line) == expected
        assert_resyncs(c)


@pytest.mark.parametrize("line", ["mn\n", "ab\n", " \n"])
def test_short_line_with_bare_newline(srv, line):
    # memcached counts the terminator: "mn\n" is 3 bytes, under its minimum of 4
    with srv.conn() as c:
        c.send(line.encode())
        assert c.line() == BAD
        assert c.cmd("mn") == b"MN"


def test_unknown_command_with_noreply_is_silent(srv):
    with srv.conn() as c:
        c.send(b"bogus noreply\r\nverbosity abc noreply\r\nmn\r\n")
        assert c.line() == b"MN"


@pytest.mark.parametrize("line", [
    "set {k} -1 0 {n}", "set {k} abc 0 {n}", "set {k} 0 abc {n}", "set {k} 0 0x10 {n}",
    "set {k} 18446744073709551616 0 {n}", "set {k} 0 9223372036854775808 {n}",
    "add {long} 0 0 {n}", "cas {k} 0 0 {n}", "cas {k} 0 0 {n} ", "cas {k} 0 0 {n} abc",
    "cas {k} 0 0 {n} -1"])
def test_malformed_storage_line_swallows_its_data(srv, key, line):
    # memcached 1.6.45 skips the data block of a storage line it refuses once
    # the length is read (1.6.18 parsed it as commands): here it would delete
    # a sentinel
    data = b"delete sentinel-5"
    with srv.conn() as c:
        c.send(line.format(k=key, long="k" * 251, n=len(data)).encode() + b"\r\n" + data + b"\r\nmn\r\n")
        assert c.line() == BAD
        assert c.line() == b"MN", "the data block was parsed as a command"
        c.send(line.format(k=key, long="k" * 251, n=len(data)).encode() + b" noreply\r\n" + data + b"\r\nmn\r\n")
        assert c.line() == b"MN", "noreply hides the error, and the data block is skipped"
        assert c.values(f"get {key}") == {}


def test_storage_line_extra_tokens_are_ignored(srv, key):
    with srv.conn() as c:
        assert c.cmd(f"set {key} 0 0 1 extra\r\nx") == b"STORED"
        # noreply counts only as the last token
        assert c.cmd(f"set {key} 0 0 1 noreply extra\r\ny") == b"STORED"
        assert c.cmd(f"touch {key} 0 extra tokens") == b"TOUCHED"
        assert c.cmd(f"incr {key} 1 extra") == b"CLIENT_ERROR cannot increment or decrement non-numeric value"
        assert c.values(f"get {key}") == {key: (0, b"y", None)}


@pytest.mark.parametrize("flags,stored", [
    ("4294967295", 4294967295), ("4294967296", 0), ("4294967297", 1), ("+5", 5), ("-0", 0),
    ("18446744073709551615", 4294967295)])
def test_client_flags_are_cut_to_32_bits(srv, key, flags, stored):
    # memcached reads flags as an unsigned long and keeps 32 bits
    with srv.conn() as c:
        assert c.cmd(f"set {key} {flags} 0 1\r\nx") == b"STORED"
        assert c.values(f"get {key}") == {key: (stored, b"x", None)}


@pytest.mark.parametrize("exptime,kept", [
    ("+5", True),
    ("2147483648", False),             # -2147483648 once cut to 32 bits: expired
    ("9223372036854775807", False),    # -1
    ("-9223372036854775808", True),    # 0: never expires
    ("4294967296", True),              # 0
    ("-2147483649", True),             # 2147483647: a unix time far ahead
])
def test_storage_exptime_is_cut_to_32_bits(srv, key, exptime, kept):
    # memcached reads a storage command's exptime as a long, then keeps 32 bits
    with srv.conn() as c:
        assert c.cmd(f"set {key} 0 {exptime} 1\r\nx") == b"STORED"
        assert c.values(f"get {key}") == ({key: (0, b"x", None)} if kept else {})


@pytest.mark.parametrize("line", ["delete {k} 5 noreply", "delete {k} 0 noreply", "delete {k} x y noreply"])
def test_delete_ignores_what_follows_the_key(srv, key, line):
    # memcached 1.6.45 dropped the hold-time check: anything after the key is ignored
    with srv.conn() as c:
        assert c.store("set", key, "v") == b"STORED"
        c.send(line.format(k=key).encode() + b"\r\n")
        assert c.values(f"get {key}") == {}, "delete with noreply must delete silently"
        assert c.cmd(f"delete {key} 5") == b"NOT_FOUND"


CONTROL_BYTES = [b for b in range(32) if b != 10] + [127, 128, 255]


def test_control_bytes_in_keys_are_stored(srv, key):
    # memcached 1.6.45 checks a key's length only: any byte but a space (and
    # the newline that ends the line) belongs to the key
    with srv.conn() as c:
        for b in CONTROL_BYTES:
            k = key.encode() + bytes([b]) + b"z"
            c.send(b"set " + k + b" 0 0 1\r\nx\r\n")
            assert c.line() == b"STORED", b
            c.send(b"get " + k + b"\r\n")
            assert c.line() == b"VALUE " + k + b" 0 1", b
            assert c.line() == b"x" and c.line() == b"END"
            c.send(b"mg " + k + b" v k\r\n")
            assert c.line() == b"VA 1 k" + k, b
            assert c.line() == b"x"
            c.send(b"touch " + k + b" 0\r\ndelete " + k + b"\r\n")
            assert (c.line(), c.line()) == (b"TOUCHED", b"DELETED"), b


def test_padded_complete_line_over_2048_bytes_is_parsed(srv, key):
    # the 2048-byte bound applies to a line still waiting for its end
    with srv.conn() as c:
        c.send(f"set {key} 0 0 1".encode() + b" " * 3000 + b"\r\nx\r\n")
        assert c.line() == b"STORED"
        assert c.values(f"get {key}") == {key: (0, b"x", None)}


# gat and gats lines carry keys as get lines do: cachetd lets them grow too
# (test_long_get.py), where memcached 1.6.45 closes them
@pytest.mark.parametrize("head", [b"set k 0 0 1", b"mg k v", b"delete k", b"mn"])
def test_unended_line_over_2048_bytes_closes_silently(srv, head):
    with srv.conn(timeout=5) as c:
        c.send(head + b" " * 3000)
        assert c.closed_within(3), "a non-get line without an end must close the connection"
        assert c.buf == b"", "memcached closes without a reply"


def test_unended_get_line_may_pass_2048_bytes(srv):
    with srv.conn(timeout=5) as c:
        c.send(b"get " + b"nokey " * 1000)
        assert not c.closed_within(0.5)
        c.send(b"sentinel-0\r\n")
        assert c.read_values() == {"sentinel-0": (0, SENTINELS["sentinel-0"][1], None)}


@pytest.mark.parametrize("request_line", [b"GET / HTTP/1.0", b"PUT /x HTTP/1.1", b"DELETE HTTP/1.1",
                                          b"POST /index.html HTTP/1.1"])
def test_http_request_closes_without_reply(srv, request_line):
    # memcached's answer to cross-protocol attacks: an unknown command whose
    # last token starts with HTTP/ closes the connection
    with srv.conn(timeout=5) as c:
        c.send(request_line + b"\r\nHost: x\r\n\r\n")
        assert c.closed_within(3)
        assert c.buf == b""


def test_flush_all_arguments(start_server):
    srv = start_server()
    with srv.conn() as c:
        # over 30 days a delay is a unix time; one before the start flushes nothing
        assert c.store("set", "kept", "v") == b"STORED"
        assert c.cmd("flush_all 2592001") == b"OK"
        assert c.values("get kept") == {"kept": (0, b"v", None)}
        # only the first argument is read
        assert c.cmd("flush_all 0 2") == b"OK"
        assert c.values("get kept") == {}
        assert c.cmd("flush_all 4294967296") == b"CLIENT_ERROR invalid exptime argument"
        assert c.cmd("flush_all 1 2") == b"OK"


def test_verbosity_and_stats_arguments(srv):
    with srv.conn() as c:
        assert c.cmd("verbosity 1 2") == b"OK"
        assert c.cmd("verbosity 0") == b"OK"
        # only the first argument of stats is read
        assert "maxconns" in c.stats("settings x")
        assert c.cmd("stats reset x") == b"RESET"


def test_set_with_bad_data_chunk_stores_nothing(srv, key):
    with srv.conn() as c:
        assert c.store("set", key, "old") == b"STORED"
        c.send(f"set {key} 0 0 1\r\nxyz\r\n".encode())
        assert c.line() == b"CLIENT_ERROR bad data chunk"
        assert_resyncs(c)
        assert c.values(f"get {key}") == {key: (0, b"old", None)}, "a bad chunk must not replace the value"
        c.send(f"set {key}-new 0 0 3\r\nabcdefgh\r\n".encode())
        assert c.line() == b"CLIENT_ERROR bad data chunk"
        assert_resyncs(c)
        assert c.values(f"get {key}-new") == {}


@pytest.mark.parametrize("verb", ["set", "add", "replace", "append", "prepend"])
def test_oversized_value_is_swallowed_then_refused(srv, verb):
    # The payload hides commands; had the server parsed it instead of
    # swallowing it, the sentinel would be deleted and `flush_all` would run.
    evil = b"\r\ndelete sentinel-3\r\nflush_all\r\n"
    payload = (evil + b"z" * 4096) * ((2 * ONE_MB) // (len(evil) + 4096))
    with srv.conn() as c:
        c.send(f"{verb} sentinel-1 0 0 {len(payload)}\r\n".encode() + payload + b"\r\nversion\r\n")
        assert c.line() == b"SERVER_ERROR object too large for cache"
        assert c.line().startswith(b"VERSION "), "the oversized data was not swallowed whole"
        # the connection keeps working after the refusal
        assert c.store("set", "after-oversized", "ok") == b"STORED"
        assert c.values("get after-oversized") == {"after-oversized": (0, b"ok", None)}
    # sentinel-1 may have been dropped by the refused set (memcached does); restore it
    with srv.conn() as c:
        flags, value = SENTINELS["sentinel-1"]
        got = c.values("get sentinel-1")
        assert got in ({}, {"sentinel-1": (flags, value, None)}), "a refused write left a partial value"
        c.store("set", "sentinel-1", value, flags=flags)


def test_oversized_cas_is_swallowed(srv, key):
    with srv.conn() as c:
        payload = b"q" * (ONE_MB + 100)
        c.send(f"cas {key} 0 0 {len(payload)} 1\r\n".encode() + payload + b"\r\nversion\r\n")
        assert c.line() == b"SERVER_ERROR object too large for cache"
        assert c.line().startswith(b"VERSION ")


def test_absurd_length(srv, key):
    with srv.conn() as c:
        reply = c.cmd(f"set {key} 0 0 4294967295")
        if reply == b"CLIENT_ERROR bad command line format":  # memcached: does not fit its int
            assert_resyncs(c)
        else:  # a server that swallows would now wait for 4 GB; it must at least say why
            assert reply == b"SERVER_ERROR object too large for cache", reply
    with srv.conn() as c:
        assert c.values(f"get {key}") == {}


@pytest.mark.parametrize("line", [
    "get {k}", "gets {k}", "delete {k}", "incr {k} 1", "decr {k} 1", "touch {k} 10",
    "gat 10 {k}", "mg {k} v", "md {k}", "ma {k}", "me {k}"])
def test_key_too_long(srv, line):
    # ma answers every problem before its flags are read alike
    expected = b"CLIENT_ERROR invalid or duplicate flag" if line.startswith("ma") else BAD
    with srv.conn() as c:
        assert c.cmd(line.format(k="k" * 251)) == expected
        if line.startswith("g"):
            # memcached 1.6.45 follows this error (and only this one) with an empty line
            assert c.line() == b""
        assert c.cmd("mn") == b"MN"


@pytest.mark.parametrize("verb", ["set", "add", "cas"])
def test_store_with_key_too_long(srv, verb):
    extra = " 1" if verb == "cas" else ""
    with srv.conn() as c:
        c.send(f"{verb} {'k' * 251} 0 0 1{extra}\r\nx\r\n".encode())
        assert c.line() == b"CLIENT_ERROR bad command line format"
        assert c.cmd("mn") == b"MN", "the data block is skipped"
        assert c.values("get " + "k" * 250) == {}


def test_key_of_250_bytes_in_multiget(srv):
    k = "m" * 250
    with srv.conn() as c:
        assert c.store("set", k, "edge") == b"STORED"
        assert c.values(f"get {k} sentinel-0") == {k: (0, b"edge", None),
                                                   "sentinel-0": (0, SENTINELS["sentinel-0"][1], None)}


def test_binary_garbage_lines(srv):
    rng = random.Random(20261121)
    with srv.conn() as c:
        for _ in range(200):
            n = rng.randrange(1, 300)
            junk = bytes(rng.choice([b for b in range(256) if b not in (10, 13)]) for _ in range(n))
            if junk[:1].isalpha():
                junk = b"\x01" + junk  # never a real command by accident
            c.send(junk + b"\r\n")
            reply = c.line()
            assert reply == b"ERROR" or reply.startswith(b"CLIENT_ERROR"), (junk, reply)
        assert_resyncs(c)


def test_binary_garbage_stream(srv):
    rng = random.Random(4242)
    for _ in range(5):
        with srv.conn(timeout=5) as c:
            blob = bytes(rng.randrange(256) for _ in range(64 * 1024))
            try:
                c.send(blob)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server gave up on this connection: acceptable
            c.closed_within(1)


def test_binary_protocol_magic(srv):
    # A binary-protocol request header; cachetd speaks ASCII only, memcached
    # switches protocols. Either way: an error or a close, never a hang or crash.
    header = bytes([0x80, 0x00, 0x00, 0x05, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0] + [0] * 8) + b"hello"
    with srv.conn(timeout=5) as c:
        c.send(header)
        closed = c.closed_within(3)
        assert closed or c.buf, "no answer and no close for a binary request"


def test_line_without_end_is_bounded(srv):
    """A command line that never ends: the server must stop buffering it."""
    with srv.conn(timeout=5) as c:
        sent, stopped = 0, False
        chunk = b"a" * 65536
        try:
            while sent < 16 * ONE_MB:
                c.send(chunk)
                sent += len(chunk)
                if c.closed_within(0.01) or c.buf:
                    stopped = True
                    break
        except (BrokenPipeError, ConnectionResetError):
            stopped = True
        if not stopped:
            stopped = c.closed_within(5) or bool(c.buf)
        assert stopped, f"server kept buffering a {sent}-byte line without an end"
        if c.buf:
            assert c.buf.startswith((b"CLIENT_ERROR", b"SERVER_ERROR", b"ERROR")), c.buf[:100]


def test_long_multiget_line_works(srv):
    keys = [f"long-multiget-{i:04d}-" + "p" * 80 for i in range(200)]  # a ~19 KB line
    with srv.conn() as c:
        for k in keys[::10]:
            c.store("set", k, k[-4:] + "v")
        got = c.values("get " + " ".join(keys))
        assert set(got) == set(keys[::10])


def test_unterminated_get_line_does_not_hurt(srv):
    with srv.conn(timeout=5) as c:
        try:
            c.send(b"get ")
            for _ in range(64):
                c.send(b"nokey " * 10000)
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.mark.parametrize("partial", [
    b"set half-a 0 0 100\r\n" + b"x" * 50,
    b"set half-b 0 0 10\r\n",
    b"get half",
    b"ms half-c 10 T0\r\nabc",
    b"cas half-d 0 0 5 1\r\nab",
    b"incr sentinel-2",
    b"set sentinel-4 0 0 1000\r\n" + b"y" * 999,
])
def test_half_sent_command_then_disconnect(srv, partial):
    for _ in range(10):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(partial)
        s.close()
    with srv.conn() as c:
        assert c.values("get half-a half-b half-c half-d") == {}, "a half-sent value was stored"


def test_half_sent_value_is_invisible_until_complete(srv, key):
    with srv.conn() as writer, srv.conn() as reader:
        writer.send(f"set {key} 0 0 10\r\n01234".encode())
        # the server has read the request line and waits for the rest of the value
        wait_until(lambda: conn_state(reader, writer) == "conn_nread", 10, "the server reading the value")
        assert reader.values(f"get {key}") == {}
        writer.send(b"56789\r\n")
        assert writer.line() == b"STORED"
        assert reader.values(f"get {key}") == {key: (0, b"0123456789", None)}


def test_many_abrupt_disconnects(srv):
    for i in range(100):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST on close
        s.sendall(b"get sentinel-0 sentinel-1 sentinel-2\r\n" if i % 2 else b"set x 0 0 5\r\nab")
        s.close()
