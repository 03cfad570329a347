"""Deferred replies (src/reply.h), end to end through a real server.

A reply slot that is completed later, by another thread, is what extstore will
use for values on disk. Until extstore exists, test builds (CACHET_TEST_HOOKS:
the ASan and TSan builds of `make check`) carry a fake slow source
(src/testhook.h): the GET key `__cachet_defer:<gate>:<rest>` is looked up as
usual but its reply is completed by the hook's thread, after <gate>
milliseconds or when some client asks for `__cachet_open:<gate>`. Gates make
the tests independent of timing: a reply is released exactly when the test
says so.

These tests run only against a test build (CACHETD_TEST_HOOKS=1, set by the
Makefile); against a release build the last test checks instead that the hook
is not there at all.
"""
import signal
import socket
import struct
import time
import uuid

import pytest

from conftest import CACHETD, pass_idle_timeout

pytestmark = pytest.mark.cachetd_only(reason="the deferred-reply hook is cachetd's")
hooks = pytest.mark.test_hooks


def gate():
    return uuid.uuid4().hex[:12]


def dkey(g, name):
    return f"__cachet_defer:{g}:{name}"


def open_gate(srv, g):
    with srv.conn() as c:
        assert c.values(f"get __cachet_open:{g}") == {}


def nothing_arrives(c, seconds=0.3):
    """True if no byte is readable on c for `seconds` (the reply is being held)."""
    c.sock.settimeout(seconds)
    try:
        data = c.sock.recv(1)
    except socket.timeout:
        return True
    finally:
        c.sock.settimeout(10)
    c.buf += data
    return False


def wait_stat(c, name, pred, seconds=10):
    end = time.monotonic() + seconds
    while True:
        v = int(c.stats()[name])
        if pred(v):
            return v
        assert time.monotonic() < end, f"{name} stayed at {v}"
        time.sleep(0.05)


@hooks
@pytest.mark.parametrize("backend", [[], ["-o", "no_io_uring"]], ids=["default", "epoll"])
def test_later_replies_wait_in_order_while_parsing_goes_on(start_server, backend):
    """A deferred GET holds back every reply behind it, but the requests behind it are
    parsed and executed meanwhile (a SET lands before the GET is answered); once the
    slot completes, everything arrives in request order."""
    srv = start_server(*backend)
    g = gate()
    k = dkey(g, "slow")
    big = b"B" * 200_000          # sent by reference from item memory
    with srv.conn() as c:
        assert c.store("set", k, "slow-value", flags=7) == b"STORED"
        assert c.store("set", "fast", "fast-value") == b"STORED"
        assert c.store("set", dkey(g, "big"), big) == b"STORED"
    with srv.conn() as c, srv.conn() as other:
        c.send(f"get {k} fast {dkey(g, 'missing')}\r\n"
               f"set after 0 0 5\r\nlater\r\n"
               f"gets {dkey(g, 'big')}\r\nmn\r\n".encode())
        # the SET behind the held GET is executed before any reply is sent
        end = time.monotonic() + 10
        while other.values("get after") == {}:
            assert time.monotonic() < end, "the request behind a deferred reply was not parsed"
            time.sleep(0.05)
        assert nothing_arrives(c), "a reply overtook a deferred one"
        assert int(other.stats()["deferred_replies_active"]) == 3
        open_gate(srv, g)
        assert c.read_values() == {k: (7, b"slow-value", None), "fast": (0, b"fast-value", None)}
        assert c.line() == b"STORED"
        got = c.read_values()
        assert list(got) == [dkey(g, "big")] and got[dkey(g, "big")][1] == big and got[dkey(g, "big")][2]
        assert c.line() == b"MN"
        wait_stat(other, "deferred_replies_active", lambda v: v == 0)


@hooks
def test_completions_out_of_order_are_sent_in_order(start_server):
    """Three slots on one connection complete in reverse order (by three gates)."""
    srv = start_server()
    gs = [gate() for _ in range(3)]
    with srv.conn() as c:
        for i, g in enumerate(gs):
            assert c.store("set", dkey(g, "v"), f"value-{i}") == b"STORED"
        c.send(b"".join(f"get {dkey(g, 'v')}\r\n".encode() for g in gs))
        for g in reversed(gs[1:]):
            open_gate(srv, g)
            assert nothing_arrives(c), "sent past a slot that is still waiting"
        open_gate(srv, gs[0])
        for i, g in enumerate(gs):
            assert c.read_values() == {dkey(g, "v"): (0, f"value-{i}".encode(), None)}


@hooks
def test_pending_slots_per_connection_are_bounded(start_server):
    """At most 64 slots wait per connection: the 65th request waits unparsed (the SET
    behind it is not executed) until slots complete; then all is answered in order."""
    srv = start_server()
    g = gate()
    with srv.conn() as c, srv.conn() as other:
        c.send(b"".join(f"get {dkey(g, str(i))}\r\n".encode() for i in range(80)) +
               b"set bounded 0 0 1\r\nx\r\n")
        wait_stat(other, "deferred_replies_active", lambda v: v == 64)
        assert other.values("get bounded") == {}, "parsed past the per-connection bound"
        assert int(other.stats()["deferred_replies_active"]) == 64
        open_gate(srv, g)
        for _ in range(80):
            assert c.read_values() == {}
        assert c.line() == b"STORED"
        assert other.values("get bounded") == {"bounded": (0, b"x", None)}
        wait_stat(other, "deferred_replies_active", lambda v: v == 0)


@hooks
def test_client_closing_with_slots_pending_frees_them_later(start_server):
    """The connection goes away while its slots wait: the server frees the connection at
    once and each slot when its completion arrives (ASan checks no one touches freed
    memory); the buffer budget returns to what it was. The client resets the connection
    (SO_LINGER 0): a plain close is a FIN, which the server treats as a half-close and
    answers first (test_stream's half-close tests), as memcached does."""
    srv = start_server()
    g = gate()
    with srv.conn() as c:
        assert c.store("set", dkey(g, "big"), b"z" * 100_000) == b"STORED"
        base_used = int(c.stats()["conn_buffer_bytes"])
    doomed = srv.conn()
    doomed.send(f"get {dkey(g, 'big')} {dkey(g, 'x')}\r\nget {dkey(g, 'big')}\r\n".encode())
    with srv.conn() as c:
        wait_stat(c, "deferred_replies_active", lambda v: v == 3)
        doomed.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        doomed.close()
        wait_stat(c, "curr_connections", lambda v: v == 1)
        assert int(c.stats()["deferred_replies_active"]) == 3
        open_gate(srv, g)
        wait_stat(c, "deferred_replies_active", lambda v: v == 0)
        wait_stat(c, "conn_buffer_bytes", lambda v: v == base_used)
        assert c.store("set", "still", "serving") == b"STORED"
        assert c.values("get still") == {"still": (0, b"serving", None)}


@hooks
def test_quit_waits_for_pending_slots(start_server):
    """`quit` behind a deferred GET: the reply still comes, then the connection closes."""
    srv = start_server()
    g = gate()
    with srv.conn() as c:
        assert c.store("set", dkey(g, "q"), "before-quit") == b"STORED"
        c.send(f"get {dkey(g, 'q')}\r\nquit\r\n".encode())
        assert nothing_arrives(c)
        open_gate(srv, g)
        assert c.read_values() == {dkey(g, "q"): (0, b"before-quit", None)}
        assert c.closed_within(10)


@hooks
def test_half_close_waits_for_pending_slots(start_server):
    """A client that shuts its side behind a deferred GET (shutdown(SHUT_WR), as
    `nc -N` does) still gets the reply when the slot completes, then the close."""
    srv = start_server()
    g = gate()
    with srv.conn() as c:
        assert c.store("set", dkey(g, "h"), "before-eof") == b"STORED"
        c.send(f"get {dkey(g, 'h')}\r\n".encode())
        c.sock.shutdown(socket.SHUT_WR)
        assert nothing_arrives(c)
        open_gate(srv, g)
        assert c.read_values() == {dkey(g, "h"): (0, b"before-eof", None)}
        assert c.closed_within(10)


@hooks
def test_sigterm_waits_for_pending_slots(start_server):
    """SIGTERM while a slot waits (completing 1.5 s later, on the hook's clock): the
    server answers it, closes and exits 0, within its shutdown deadline."""
    srv = start_server()
    k = "__cachet_defer:1500:term"
    with srv.conn() as c, srv.conn() as watcher:
        assert c.store("set", k, "drained") == b"STORED"
        c.send(f"get {k}\r\n".encode())
        wait_stat(watcher, "deferred_replies_active", lambda v: v == 1)
        srv.expect_exit = True
        srv.proc.send_signal(signal.SIGTERM)
        assert c.read_values() == {k: (0, b"drained", None)}
        assert c.closed_within(10)
    assert srv.proc.wait(timeout=15) == 0


@hooks
def test_idle_timeout_spares_a_connection_waiting_for_a_slot(start_server):
    """A connection whose reply is pending is not idle: idle_timeout leaves it alone until
    the reply is out, then kicks it once it really is idle. The minute passes on the
    test clock, so no pause of the machine makes anyone else idle."""
    srv = start_server("-t", "1", "-o", "idle_timeout=60")   # one worker: one idle sweep sees all
    g = gate()
    with srv.conn() as c, srv.conn() as bystander, srv.conn() as watcher:
        assert c.store("set", dkey(g, "i"), "kept") == b"STORED"
        c.send(f"get {dkey(g, 'i')}\r\n".encode())
        assert bystander.cmd("mn") == b"MN"
        wait_stat(watcher, "deferred_replies_active", lambda v: v == 1)
        pass_idle_timeout(watcher, 61)
        # the sweep ran: it kicked the idle bystander, and spared c
        assert bystander.closed_within(10), "the idle bystander was not kicked"
        assert watcher.stats()["idle_kicks"] == "1"
        open_gate(srv, g)
        assert c.read_values() == {dkey(g, "i"): (0, b"kept", None)}
        pass_idle_timeout(watcher, 61)
        assert c.closed_within(10), "idle after its reply, it should be kicked"
        assert watcher.stats()["idle_kicks"] == "2"


@pytest.mark.release_build
def test_release_binary_has_no_test_hook(start_server):
    """Against a release build: no trace of the hook, and its keys are ordinary keys."""
    with open(CACHETD, "rb") as f:
        assert b"__cachet_defer" not in f.read()
    srv = start_server()
    with srv.conn() as c:
        c.send(b"get __cachet_defer:60000:x\r\nmn\r\n")
        assert c.line() == b"END"      # answered at once: an ordinary miss
        assert c.line() == b"MN"
        assert int(c.stats()["deferred_replies"]) == 0
        # nor the test clock (conftest.advance_clock)
        assert c.cmd("debugtime 1") == b"ERROR"
