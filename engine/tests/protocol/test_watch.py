"""`watch`, memcached's live log stream (protocol.txt "Watchers"), and -W.

What it proves, against cachetd and memcached 1.6.45 alike:
- the argument words and their replies: OK for every word memcached knows
  (prefixes too, as memcached's strncmp matches them), ERROR for any other,
  CLIENT_ERROR with -W, and ERROR when replies are still queued before it;
- fetchers, mutations, deletions and evictions lines have memcached's shape,
  field by field, once the fields that differ by nature are normalised:
  ts (a clock), gid (a global sequence), cfd (a file descriptor number) and
  clsid (slab classes are sized differently);
- keys are URI-encoded as memcached encodes them;
- a watcher that reads nothing loses lines, never stalls the clients: the
  server counts them in log_watcher_skipped, and when the watcher reads
  again the stream says "skipped=N" before the next line.
Every wait is a bounded poll on a counter or on lines; nothing is timed.
"""
import re
import socket
import time

import pytest

from conftest import IO_TIMEOUT_S, Conn, stat, wait_until

LINE = re.compile(rb"^ts=\d+\.\d+ gid=\d+ (type=.*)$")


class Watcher:
    """A watch connection: its reply, then log lines ("\\n"-terminated)."""

    def __init__(self, srv, words, rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(IO_TIMEOUT_S)
        self.sock.connect(("127.0.0.1", srv.port))
        self.buf = b""
        self.sock.sendall(b"watch" + (b" " + words.encode() if words else b"") + b"\r\n")
        self.reply = self._read_until(b"\r\n").rstrip(b"\r\n")

    def _read_until(self, sep):
        while sep not in self.buf:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError(f"watcher closed; unread {self.buf[:200]!r}")
            self.buf += chunk
        out, self.buf = self.buf.split(sep, 1)
        return out + sep

    def line(self):
        return self._read_until(b"\n").rstrip(b"\n")

    def lines_until(self, want, limit=100000):
        """Log lines up to and including the first for which want(body) holds."""
        out = []
        for _ in range(limit):
            raw = self.line()
            out.append(raw)
            m = LINE.match(raw)
            if m and want(m.group(1)):
                return out
        raise AssertionError(f"no wanted line in {limit} lines; last {out[-5:]}")

    def close(self):
        self.sock.close()


def body(raw):
    m = LINE.match(raw)
    assert m, f"not a log line in memcached's format: {raw!r}"
    return m.group(1)


def fields(b):
    return dict(kv.split(b"=", 1) for kv in b.split(b" "))


def normalised(b):
    """A line's body with what differs by nature replaced: cfd, clsid."""
    f = fields(b)
    for k in (b"cfd", b"clsid"):
        if k in f:
            f[k] = b"N" if f[k] != b"0" else b"0"
    return b" ".join(k + b"=" + v for k, v in f.items())


def marker(c, name):
    """A miss on a marker key: its item_get line ends what a step logged."""
    assert c.values(f"get {name}") == {}


def until_marker(w, name):
    lines = w.lines_until(lambda b: b.startswith(b"type=item_get key=" + name.encode() + b" "))
    return [body(l) for l in lines[:-1]]


# ---- arguments and replies ----------------------------------------------------------
@pytest.mark.parametrize("words,reply", [
    ("", b"OK"), ("fetchers", b"OK"), ("fetchers mutations evictions sysevents", b"OK"),
    ("connevents deletions", b"OK"), ("proxyreqs proxyevents proxyuser rawcmds", b"OK"),
    ("fetchers fetchers", b"OK"), ("fetch", b"OK"), ("e", b"OK"),
    ("bogus", b"ERROR"), ("FETCHERS", b"ERROR"), ("fetchers bogus", b"ERROR"), ("fetchersx", b"ERROR"),
])
def test_watch_arguments(server, words, reply):
    w = Watcher(server, words)
    try:
        assert w.reply == reply
    finally:
        w.close()
    with server.conn() as c:       # the server is unharmed
        assert c.cmd("version").startswith(b"VERSION")


def test_watch_after_queued_replies_is_refused(server, key):
    with server.conn() as c:
        c.send(f"get {key}\r\nwatch\r\n".encode())
        assert c.line() == b"END"
        assert c.line() == b"ERROR cannot pipeline other commands before watch"
        assert c.cmd("version").startswith(b"VERSION")   # still an ordinary connection


def test_minus_W_refuses_watch(start_server):
    srv = start_server("-W")
    w = Watcher(srv, "fetchers")
    try:
        assert w.reply == b"CLIENT_ERROR watch commands not allowed"
    finally:
        w.close()


# ---- the lines ----------------------------------------------------------------------
def test_fetchers_lines(server, key):
    with server.conn() as c:
        assert c.store("set", key, "abc") == b"STORED"
        w = Watcher(server, "fetchers")
        try:
            assert w.reply == b"OK"
            c.values(f"get {key}")
            c.values(f"get {key}-miss")
            c.values(f"gets {key} {key}-other")
            assert c.cmd(f"mg {key} v") == b"VA 3"
            assert c.line() == b"abc"
            assert c.cmd(f"mg {key}-miss v") == b"EN"
            marker(c, f"{key}-end")
            got = [normalised(b) for b in until_marker(w, f"{key}-end")]
        finally:
            w.close()
    hit = f"type=item_get key={key} status=found clsid=N cfd=N size=3".encode()
    miss = lambda k: f"type=item_get key={k} status=not_found clsid=0 cfd=N size=0".encode()
    assert got == [hit, miss(f"{key}-miss"), hit, miss(f"{key}-other"), hit, miss(f"{key}-miss")]


def test_mutations_lines(start_server):
    srv = start_server("-I", "1m")
    with srv.conn() as c:
        assert c.store("set", "cas-me", "1") == b"STORED"
        w = Watcher(srv, "mutations")
        try:
            assert w.reply == b"OK"
            assert c.store("set", "m1", "abc") == b"STORED"
            assert c.store("add", "m1", "x") == b"NOT_STORED"
            assert c.store("replace", "m-none", "x") == b"NOT_STORED"
            assert c.store("cas", "cas-me", "2", extra="999999") == b"EXISTS"
            assert c.store("set", "m-ttl", "t", exptime=100) == b"STORED"
            assert c.store("append", "m-none", "x") == b"NOT_STORED"
            assert c.store("set", "m-big", b"x" * (2 << 20)).startswith(b"SERVER_ERROR")
            assert c.cmd("ms m2 2\r\nhi") == b"HD"
            assert c.store("set", "m-end", "e") == b"STORED"
            lines = [body(l) for l in w.lines_until(lambda b: b.startswith(b"type=item_store key=m-end "))]
        finally:
            w.close()
    got = [fields(b) for b in lines]
    assert [(f[b"key"], f[b"status"], f[b"cmd"]) for f in got] == [
        (b"m1", b"stored", b"set"), (b"m1", b"not_stored", b"add"), (b"m-none", b"not_stored", b"replace"),
        (b"cas-me", b"exists", b"cas"), (b"m-ttl", b"stored", b"set"), (b"m-none", b"not_stored", b"append"),
        (b"m-big", b"too_large", b"set"), (b"m2", b"stored", b"set"), (b"m-end", b"stored", b"set")]
    # the shape and order of the fields of a stored line, exactly
    assert normalised(lines[0]) == b"type=item_store key=m1 status=stored cmd=set ttl=0 clsid=N cfd=N size=3"
    assert 90 <= int(got[4][b"ttl"]) <= 100, got[4]     # seconds left, not the exptime sent
    assert got[7][b"size"] == b"2"


def test_keys_are_uri_encoded(server):
    with server.conn() as c:
        w = Watcher(server, "mutations")
        try:
            assert w.reply == b"OK"
            assert c.store("set", "k%,:~._-Az9", "v") == b"STORED"
            (line,) = w.lines_until(lambda b: True)
        finally:
            w.close()
    assert fields(body(line))[b"key"] == b"k%25%2C%3A~._-Az9"


def test_deletions_lines(server, key):
    with server.conn() as c:
        assert c.store("set", key, "abc") == b"STORED"
        assert c.store("set", f"{key}-md", "abc") == b"STORED"
        w = Watcher(server, "deletions")
        try:
            assert w.reply == b"OK"
            assert c.cmd(f"delete {key}") == b"DELETED"
            assert c.cmd(f"delete {key}") == b"NOT_FOUND"      # nothing deleted: no line
            assert c.cmd(f"md {key}-md") == b"HD"
            lines = [body(l) for l in w.lines_until(lambda b: b"cmd=md" in b)]
        finally:
            w.close()
    got = [fields(b) for b in lines]
    assert [(f[b"type"], f[b"key"], f[b"cmd"]) for f in got] == [
        (b"deleted", key.encode(), b"delete"), (b"deleted", f"{key}-md".encode(), b"md")]
    assert list(got[0]) == [b"type", b"key", b"cmd", b"clsid", b"size"]


def test_evictions_lines(start_server):
    srv = start_server("-m", "8")
    value = b"v" * 50000
    with srv.conn() as c:
        w = Watcher(srv, "evictions")
        try:
            assert w.reply == b"OK"
            i = 0
            while stat(c, "evictions") == 0:
                assert i < 2000, "no eviction after 100 MB of sets into -m 8"
                for j in range(50):
                    c.send(b"set ev-%d 0 0 %d noreply\r\n%s\r\n" % (i + j, len(value), value))
                i += 50
            (line,) = w.lines_until(lambda b: True)[-1:]
        finally:
            w.close()
    f = fields(body(line))
    assert list(f) == [b"type", b"key", b"fetch", b"ttl", b"la", b"clsid", b"size"]
    assert f[b"type"] == b"eviction" and f[b"key"].startswith(b"ev-")
    assert f[b"fetch"] == b"no" and f[b"ttl"] == b"-1" and f[b"size"] == b"50000"   # never read, no expiry
    assert int(f[b"la"]) >= 0 and int(f[b"clsid"]) > 0


def test_slow_watcher_loses_lines_and_is_told_skipped(start_server):
    """A watcher that reads nothing: the clients are served at full speed, the
    server drops lines for it (log_watcher_skipped) instead of buffering
    them, and once it reads it gets memcached's skipped=N."""
    srv = start_server()
    w = Watcher(srv, "fetchers", rcvbuf=4096)
    try:
        assert w.reply == b"OK"
        batch = b"".join(b"get slow-miss-%d\r\n" % i for i in range(500))
        with srv.conn() as c:
            for n in range(400):              # bounded: 200,000 lines at most
                c.send(batch)
                for _ in range(500):
                    assert c.line() == b"END"
                if stat(c, "log_watcher_skipped") > 0:
                    break
            assert stat(c, "log_watcher_skipped") > 0, "no line skipped for a watcher that reads nothing"
            assert stat(c, "log_watchers") == 1
            # the watcher reads again: a later line is preceded by skipped=N
            skipped = []

            def told():
                c.values("get slow-after")
                while True:
                    try:
                        w.sock.settimeout(0.2)
                        raw = w.line()
                    except socket.timeout:
                        return False
                    if raw.startswith(b"skipped="):
                        skipped.append(int(raw[len(b"skipped="):]))
                        return True
            wait_until(told, 60, "skipped=N in the stream once the watcher reads")
        assert skipped[0] > 0
    finally:
        w.close()


def test_watcher_leaving_frees_its_place(server):
    with server.conn() as c:
        w = Watcher(server, "fetchers")
        assert w.reply == b"OK"
        wait_until(lambda: stat(c, "log_watchers") >= 1, 10, "the watcher counted")
        before = stat(c, "log_watchers")
        w.close()
        wait_until(lambda: (c.values("get leave-poke") == {} and stat(c, "log_watchers") == before - 1),
                   30, "the watcher's place freed after it closed")


@pytest.mark.cachetd_only("cachetd bounds watchers at 8 (memory formula); memcached at 20")
def test_too_many_watchers(start_server):
    srv = start_server()
    ws = [Watcher(srv, "fetchers") for _ in range(8)]
    try:
        assert [w.reply for w in ws] == [b"OK"] * 8
        extra = Watcher(srv, "fetchers")
        assert extra.reply == b"WATCHER_TOO_MANY log watcher limit reached"
        extra.close()
    finally:
        for w in ws:
            w.close()


@pytest.mark.cachetd_only("memcached's sysevents slab_move comes from its background automover, which "
                          "waits for a window of samples; cachetd moves a page within the store that needs it")
def test_sysevents_slab_move_line(start_server):
    srv = start_server("-m", "8")
    with srv.conn() as c:
        value = b"b" * 3000
        for start in range(0, 2600, 100):     # the whole memory in one class: no free page left
            c.send(b"".join(b"set big-%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value)
                            for i in range(start, start + 100)))
        assert c.cmd("mn") == b"MN"
        w = Watcher(srv, "sysevents")
        try:
            assert w.reply == b"OK"
            moved = stat(c, "slabs_moved", "slabs")
            for start in range(0, 3000, 100):  # a class with no page of its own takes one
                c.send(b"".join(b"set small-%d 0 0 60 noreply\r\n%s\r\n" % (i, b"s" * 60)
                                for i in range(start, start + 100)))
            assert c.cmd("mn") == b"MN"
            assert stat(c, "slabs_moved", "slabs") > moved, "no page moved: the test did not exercise a move"
            line = body(w.line())
        finally:
            w.close()
    f = fields(line)
    assert list(f) == [b"type", b"src", b"dst", b"state"] and f[b"type"] == b"slab_move"
    assert f[b"state"] == b"ok" and f[b"src"] != f[b"dst"] and int(f[b"dst"]) > 0
