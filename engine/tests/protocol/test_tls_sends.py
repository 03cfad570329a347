"""TLS sends batched through io_uring (tls.c tls_encrypt, net_conn.c uring_turn).

cachetd seals a connection's queued replies into records in a buffer of its
own and sends that buffer in the worker's io_uring send batch, as plaintext
replies are sent; a partial send keeps the rest of the records until the
socket drains. These tests drive that path with many connections at once
(so a loop turn finds several ready) and check every byte of every reply:
large and chained values read slowly in small pieces, pipelined replies far
larger than the socket buffers, clients that half-close after their
requests, and a TLS 1.3 key update in the middle of a session. On cachetd
each also asserts `stats tls_staged_sends` > 0, so none passes by the plain
path alone; against memcached 1.6.45 (its TLS build) the replies are the
same.
"""
import os
import socket
import ssl
import subprocess

import pytest

from conftest import IS_MEMCACHED, stat
from test_tls import ClosingClient, client_context, pki, tls_server  # noqa: F401 (fixtures)

CONNS = 8


def assert_sends_were_batched(srv):
    """On cachetd: an io_uring batch did send sealed records (tls_staged_sends),
    so the test did not pass on the plain path alone."""
    if not IS_MEMCACHED:
        with srv.tls() as c:
            assert stat(c, "tls_staged_sends") > 0


def small_window_conn(port, ctx, rcvbuf=4096):
    """A TLS connection whose kernel receive buffer is small, so the server's
    socket fills as soon as this client stops reading."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    raw.settimeout(60)
    raw.connect(("127.0.0.1", port))
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def expect_round_robin(conns, wants, piece, rnd):
    """Reads every connection's expected bytes `piece` bytes at a time, one
    connection after another, so each waits while the others are read, and
    checks each one's bytes whole."""
    got = [b""] * len(conns)
    while any(len(g) < len(w) for g, w in zip(got, wants)):
        for i, s in enumerate(conns):
            if len(got[i]) < len(wants[i]):
                chunk = s.recv(min(piece, len(wants[i]) - len(got[i])))
                assert chunk, f"connection {i} closed after {len(got[i])} of {len(wants[i])} bytes"
                got[i] += chunk
    for i, (g, w) in enumerate(zip(got, wants)):
        assert g == w, (rnd, i)


def test_large_and_chained_values_reach_slow_small_readers(tls_server, pki):
    """1 MB and 600 KB values (chained: longer than a slab chunk) and a 100 KB
    one, asked by eight connections at once and read back 1,500 bytes at a
    time, round robin, through 4 KiB receive buffers: the server's sends are
    partial again and again, and every byte arrives, in order."""
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key, "-t", "1")
    values = {b"big": os.urandom(1_000_000), b"mid": os.urandom(600_000), b"small": os.urandom(100_000)}
    with srv.tls() as c:
        for k, v in values.items():
            c.send(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
            assert c.until(b"\r\n") == b"STORED\r\n"
    ctx = client_context(pki.ca)
    for rnd in range(2):
        conns = [small_window_conn(srv.port, ctx) for _ in range(CONNS)]
        try:
            order = [list(values)[(i + rnd) % 3:] + list(values)[:(i + rnd) % 3] for i in range(CONNS)]
            for s, keys in zip(conns, order):
                s.sendall(b"".join(b"get %s\r\n" % k for k in keys))
            wants = [b"".join(b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(values[k]), values[k]) for k in keys)
                     for keys in order]
            expect_round_robin(conns, wants, 1500, rnd)
        finally:
            for s in conns:
                s.close()
    assert_sends_were_batched(srv)


def test_pipelined_gets_whose_replies_exceed_the_socket_buffer(tls_server, pki):
    """Eight connections each pipeline 1,500 GETs of a 1,000-byte value (1.5 MB
    of replies each, far beyond the socket buffers) in one write, then read
    them back in 3,000-byte pieces: nothing lost, repeated or reordered.
    Then rounds of 300 and 16, all connections at once."""
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key, "-t", "1")
    value = os.urandom(500).hex().encode()   # 1,000 bytes
    with srv.tls() as c:
        for i in range(50):
            c.send(b"set k%d 0 0 %d\r\n%d%s\r\n" % (i, len(value) + len(str(i)), i, value))
            assert c.until(b"\r\n") == b"STORED\r\n"
    ctx = client_context(pki.ca)
    conns = [small_window_conn(srv.port, ctx, rcvbuf=16384) for _ in range(CONNS)]
    try:
        for rnd, gets in enumerate((1500, 300, 16, 300, 16)):
            wants = []
            for n, s in enumerate(conns):
                keys = [(n * 7 + rnd + j) % 50 for j in range(gets)]
                s.sendall(b"".join(b"get k%d\r\n" % k for k in keys) + b"mn\r\n")
                wants.append(b"".join(b"VALUE k%d 0 %d\r\n%d%s\r\nEND\r\n" % (k, len(value) + len(str(k)), k,
                                                                            value) for k in keys) + b"MN\r\n")
            expect_round_robin(conns, wants, 3000, rnd)
    finally:
        for s in conns:
            s.close()
    assert_sends_were_batched(srv)


def server_with_big_value(tls_server, pki):
    """A -Z server (-t 1) holding `big`, a 300 KB value; returns it and the value."""
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key, "-t", "1")
    big = os.urandom(300_000)
    with srv.tls() as c:
        c.send(b"set big 0 0 %d\r\n%s\r\n" % (len(big), big))
        assert c.until(b"\r\n") == b"STORED\r\n"
    return srv, big


def send_and_half_close(cl, request, ending):
    """The request, then the end of the client's side: a close_notify and a
    FIN, or a FIN alone."""
    if ending == "close_notify":
        cl.send_then_close_notify(request)
    else:
        cl.tls.write(request)
        cl.sock.sendall(cl.outgoing.read())
    cl.sock.shutdown(socket.SHUT_WR)


@pytest.mark.parametrize("ending", ["close_notify", "fin"])
def test_a_client_that_half_closes_after_its_requests_gets_every_reply(tls_server, pki, ending):
    """Eight clients each send GETs whose replies (about 700 KB) exceed the
    socket buffers, then end their side: with a close_notify and a FIN, or a
    FIN alone. Each still receives every reply whole before the server
    closes."""
    srv, big = server_with_big_value(tls_server, pki)
    with srv.tls() as c:
        assert c.cmd("set k 0 0 5\r\nhello") == b"STORED"
    ctx = client_context(pki.ca, version=ssl.TLSVersion.TLSv1_3)
    request = b"get k\r\nget big\r\nget k\r\nget big\r\nget k\r\nmn\r\n"
    want = (b"VALUE k 0 5\r\nhello\r\nEND\r\n" + b"VALUE big 0 %d\r\n%s\r\nEND\r\n" % (len(big), big)) * 2 + \
        b"VALUE k 0 5\r\nhello\r\nEND\r\nMN\r\n"
    for rnd in range(2):
        clients = [ClosingClient(srv.port, ctx, rcvbuf=8192) for _ in range(CONNS)]
        for cl in clients:
            send_and_half_close(cl, request, ending)
        for i, cl in enumerate(clients):
            assert cl.read_plain(b"MN\r\n") == want, (rnd, i)
        for cl in clients:
            cl.sock.close()
    assert_sends_were_batched(srv)


@pytest.mark.parametrize("ending", ["close_notify", "fin"])
def test_a_half_closed_client_gets_replies_far_beyond_the_socket_buffers(tls_server, pki, ending):
    """One client asks for 9 MB (30 GETs of a 300 KB value) through an 8 KiB
    receive buffer and ends its side at once, with or without a close_notify:
    the server reads the end of the stream long before it has sent the
    replies, and still sends them all. (A FIN without close_notify used to be
    a fatal TLS error: what was not yet encrypted was lost.)"""
    srv, big = server_with_big_value(tls_server, pki)
    cl = ClosingClient(srv.port, client_context(pki.ca, version=ssl.TLSVersion.TLSv1_3), rcvbuf=8192)
    send_and_half_close(cl, b"get big\r\n" * 30 + b"mn\r\n", ending)
    got = cl.read_plain(b"MN\r\n")
    cl.sock.close()
    assert got == b"VALUE big 0 %d\r\n%s\r\nEND\r\n" % (len(big), big) * 30 + b"MN\r\n"


def test_key_updates_in_the_middle_of_a_session(tls_server, pki):
    """TLS 1.3 key updates from the client (openssl s_client's k, and K, which
    asks the server to update its own keys too) between requests: the server
    answers with the new keys, its own KeyUpdate goes out in order with its
    records, and the session serves on."""
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key)
    # stdbuf: s_client's stdout is stdio, block-buffered into a pipe
    p = subprocess.Popen(["stdbuf", "-oL", "openssl", "s_client", "-connect", f"127.0.0.1:{srv.port}",
                          "-CAfile", pki.ca, "-tls1_3", "-crlf"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    try:
        out = b""
        while b"Verify return code" not in out:
            line = p.stdout.readline()
            assert line, out
            out += line

        def ask(line, expect):
            p.stdin.write(line + b"\n")
            p.stdin.flush()
            seen = b""
            while expect not in seen:
                got = p.stdout.readline()
                assert got, seen
                seen += got
            return seen

        ask(b"set k 0 0 5\nhello", b"STORED")   # -crlf sends each newline as CRLF
        for update in (b"K", b"k", b"K"):
            assert b"KEYUPDATE" in ask(update, b"KEYUPDATE")
            ask(b"get k", b"END")
            ask(b"mn", b"MN")
        p.stdin.close()
        rest = p.stdout.read()
        assert b"error" not in rest.lower(), rest
    finally:
        p.kill()
        p.wait()
    with srv.tls() as c:
        assert c.cmd("mn") == b"MN"
