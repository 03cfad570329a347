"""ASCII authentication (-Y authfile), memcached 1.6.45's protocol.

Checked against memcached 1.6.45 (`make conformance CACHETD=.../memcached`):
the authfile's `user:password` lines, the `set` whose data is `user password`,
`CLIENT_ERROR unauthenticated` for everything before it, `auth_cmds` and
`auth_errors`, and the reload on SIGHUP. memcached 1.6.45 keeps only the
last reply of a read before authentication, so the tests that run on both
send one request per round trip, or assert only the end of a pipelined
stream; cachetd answers every line (asserted where marked). The hostile
clients' tests (a wrong password 10,000 times, auth pipelined after data)
run in plaintext and over TLS (-Z -Y), on memcached's TLS build too.
"""
import os
import signal
import socket
import time

import pytest

from conftest import IS_MEMCACHED, Conn, stat, wait_until
from test_tls import pki, tls_server  # noqa: F401 (fixtures, for y_server's TLS case)

USERS = "alice:s3cret\nbob:hunter2\n"


def authfile(tmp_path, text=USERS, name="authfile"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def auth(c, user, password):
    token = f"{user} {password}".encode()
    c.send(b"set auth 0 0 %d\r\n%s\r\n" % (len(token), token))
    return c.line()


def authed(srv, user="alice", password="s3cret"):
    c = srv.conn()
    assert auth(c, user, password) == b"STORED"
    return c


def read_until(c, suffix, seconds=10):
    """Everything the server sends until the stream ends with suffix."""
    c.sock.settimeout(seconds)
    data = b""
    while not data.endswith(suffix):
        chunk = c.sock.recv(65536)
        assert chunk, f"connection closed; got {data!r}"
        data += chunk
    return data


@pytest.fixture(params=["plaintext", "tls"])
def y_server(request, start_server):
    """Starts a server with these flags in plaintext, or with -Z and a fresh
    certificate: what a client can do to -Y must not change with TLS."""
    def start(*args):
        if request.param == "plaintext":
            return start_server(*args)
        ca = request.getfixturevalue("pki")
        cert, key = ca.issue("server")
        return request.getfixturevalue("tls_server")(ca.ca, cert, key, *args)
    return start


def test_right_password_lets_every_command_through(start_server, tmp_path):
    srv = start_server("-Y", authfile(tmp_path))
    with authed(srv) as c:
        assert c.cmd("set k 0 0 5\r\nhello") == b"STORED"
        assert c.values("get k") == {"k": (0, b"hello", None)}
        assert c.cmd("mn") == b"MN"
        st = c.stats()
        assert int(st["auth_cmds"]) == 1 and int(st["auth_errors"]) == 0
    with authed(srv, "bob", "hunter2") as c:
        assert c.values("get k") == {"k": (0, b"hello", None)}


@pytest.mark.parametrize("line", [
    "get k", "gets k", "version", "stats", "delete k", "incr k 1", "touch k 10", "flush_all",
    "mg k v", "md k", "ma k", "mn", "me k", "ms k 6 T0", "verbosity 1", "set k 0 0 notanumber",
])
def test_every_other_command_before_auth_is_unauthenticated(start_server, tmp_path, line):
    srv = start_server("-Y", authfile(tmp_path))
    with srv.conn() as c:
        # a line shorter than 6 bytes closes the connection (memcached's limit):
        # pad the short ones with spaces, which memcached's tokenizer skips
        assert c.cmd(line.ljust(6)) == b"CLIENT_ERROR unauthenticated"
        # still unauthenticated, still answered
        assert c.cmd("get k") == b"CLIENT_ERROR unauthenticated"
        # the data of a refused command is read as a line of its own, not swallowed
        assert auth(c, "alice", "s3cret") == b"STORED"
        assert c.values("get k") == {}
    with authed(srv) as c:
        assert stat(c, "auth_errors") == 0


def test_meta_commands_before_auth(start_server, tmp_path):
    srv = start_server("-Y", authfile(tmp_path))
    with srv.conn() as c:
        for line in ("mg foo v", "ms foo 6 T0", "value1", "md foo q", "mn    ", "ma foo"):
            assert c.cmd(line) == b"CLIENT_ERROR unauthenticated", line
        assert auth(c, "bob", "hunter2") == b"STORED"
        assert c.cmd("ms foo 6 T0\r\nvalue1") == b"HD"
        c.send(b"mg foo v\r\n")
        assert c.line() == b"VA 6" and c.line() == b"value1"


def test_wrong_password_10000_times_keeps_serving_and_counts(y_server, tmp_path):
    srv = y_server("-Y", authfile(tmp_path))
    n = 10_000
    with srv.conn() as bad:
        for i in range(n):
            # one round trip each: memcached answers only the last of a pipelined batch
            assert auth(bad, "alice", f"wrong{i}") == b"CLIENT_ERROR authentication failure"
        with authed(srv) as c:
            assert c.cmd("set k 0 0 2\r\nok") == b"STORED"
            st = c.stats()
            assert int(st["auth_errors"]) == n and int(st["auth_cmds"]) == n + 1
        # the failing connection is still open and still refused
        assert bad.cmd("get k") == b"CLIENT_ERROR unauthenticated"
        assert auth(bad, "bob", "hunter2") == b"STORED"
        assert bad.values("get k") == {"k": (0, b"ok", None)}


def test_auth_pipelined_after_data_commands(y_server, tmp_path):
    srv = y_server("-Y", authfile(tmp_path))
    with authed(srv) as c:
        assert c.cmd("set k 0 0 5\r\nhello") == b"STORED"
    with srv.conn() as c:
        token = b"alice s3cret"
        c.send(b"get k\r\ndelete k\r\nincr k 1\r\n" + b"set a 0 0 %d\r\n%s\r\n" % (len(token), token)
               + b"get k\r\n")
        out = read_until(c, b"STORED\r\nVALUE k 0 5\r\nhello\r\nEND\r\n")
        before = out[:-len(b"STORED\r\nVALUE k 0 5\r\nhello\r\nEND\r\n")]
        # nothing before authentication ran: k is still there
        assert all(l == b"CLIENT_ERROR unauthenticated" for l in before.split(b"\r\n")[:-1]), out
        if not IS_MEMCACHED:
            assert before == b"CLIENT_ERROR unauthenticated\r\n" * 3, out


def test_auth_errors_and_limits(start_server, tmp_path):
    srv = start_server("-Y", authfile(tmp_path))
    with srv.conn() as c:
        c.send(b"set a 0 0 10\r\nalicewrong\r\n")
        assert c.line() == b"CLIENT_ERROR bad authentication token format"
        c.send(b"set a 0 0 20000\r\n")
        assert c.line() == b"CLIENT_ERROR auth token too long"
        assert auth(c, "alice", "s3cre") == b"CLIENT_ERROR authentication failure"
        assert auth(c, "alice", "s3cret ") == b"CLIENT_ERROR authentication failure"
        assert auth(c, "alic", "s3cret") == b"CLIENT_ERROR authentication failure"
        assert auth(c, "alice", "s3cret") == b"STORED"
    with srv.conn() as c:
        c.send(b"set a 0 0 5\r\na bxyz\r\n")   # the block does not end in CRLF
        assert c.line() == b"CLIENT_ERROR bad command line termination"
    # a line under 6 bytes closes an unauthenticated connection, as memcached
    with srv.conn() as c:
        c.send(b"quit\r\n")
        assert c.closed_within(5)
    with authed(srv) as c:
        assert stat(c, "auth_errors") == 3


def reload_reaches(srv, user, password, seconds=20):
    """Waits until user:password authenticates (the reload is asynchronous in
    memcached: its clock thread runs it within a second of the signal)."""
    def works():
        with srv.conn() as c:
            return auth(c, user, password) == b"STORED"
    wait_until(works, seconds, f"{user}'s new password accepted")


def test_sighup_reloads_the_authfile_without_dropping_connections(start_server, tmp_path):
    path = authfile(tmp_path)
    srv = start_server("-Y", path)
    kept = authed(srv)
    with open(path, "w") as f:
        f.write("alice:rotated\n")
    srv.proc.send_signal(signal.SIGHUP)
    reload_reaches(srv, "alice", "rotated")
    with srv.conn() as c:
        assert auth(c, "alice", "s3cret") == b"CLIENT_ERROR authentication failure"
        assert auth(c, "bob", "hunter2") == b"CLIENT_ERROR authentication failure"
    # a connection authenticated before the rotation stays in
    assert kept.cmd("set k 0 0 1\r\nx") == b"STORED"
    kept.close()
    assert srv.alive()


@pytest.mark.cachetd_only(reason="memcached reloads its authfile only on SIGHUP")
def test_a_rotated_secret_is_picked_up_without_a_signal(start_server, tmp_path):
    """Kubernetes updates a Secret volume by swapping a symlink to a new
    directory: the file's inode changes under the same path."""
    d1, d2 = tmp_path / "v1", tmp_path / "v2"
    d1.mkdir()
    d2.mkdir()
    (d1 / "authfile").write_text(USERS)
    (d2 / "authfile").write_text("carol:new\n")
    link = tmp_path / "data"
    link.symlink_to(d1)
    srv = start_server("-Y", str(link / "authfile"))
    kept = authed(srv)
    tmp_link = tmp_path / "data.tmp"
    tmp_link.symlink_to(d2)
    os.replace(tmp_link, link)
    reload_reaches(srv, "carol", "new")
    with srv.conn() as c:
        assert auth(c, "alice", "s3cret") == b"CLIENT_ERROR authentication failure"
    assert kept.cmd("mn") == b"MN"
    kept.close()


@pytest.mark.cachetd_only(reason="memcached keeps the old entries too, but logs nothing to wait on")
def test_a_bad_authfile_on_reload_keeps_the_loaded_entries(start_server, tmp_path):
    path = authfile(tmp_path)
    srv = start_server("-Y", path)
    with open(path, "w") as f:
        f.write("no colon here\n")
    srv.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "not reloaded" in srv.log(), 20, "the refused reload logged")
    with authed(srv) as c:
        assert c.cmd("mn") == b"MN"


@pytest.mark.cachetd_only(reason="cachetd's limits and exit codes")
@pytest.mark.parametrize("text", ["user-without-colon\n", "a:b\n" + "x" * (64 * 1024)])
def test_a_bad_authfile_refuses_to_start(tmp_path, text):
    import subprocess
    from conftest import CACHETD
    path = authfile(tmp_path, text)
    out = subprocess.run([CACHETD, "-p", "0", "-l", "127.0.0.1", "-Y", path], capture_output=True, text=True,
                         timeout=20)
    assert out.returncode == 64, out
    assert path in out.stderr
    missing = subprocess.run([CACHETD, "-p", "0", "-l", "127.0.0.1", "-Y", str(tmp_path / "none")],
                             capture_output=True, text=True, timeout=20)
    assert missing.returncode == 64 and "cannot open" in missing.stderr


@pytest.mark.cachetd_only(reason="--memory-budget is cachetd's")
def test_the_authfile_is_a_term_of_the_memory_formula(tmp_path):
    import json
    import subprocess
    from conftest import CACHETD
    with_y = json.loads(subprocess.run([CACHETD, "--memory-budget", "-Y", "/nonexistent"], capture_output=True,
                                       text=True, check=True).stdout)
    without = json.loads(subprocess.run([CACHETD, "--memory-budget"], capture_output=True, text=True,
                                        check=True).stdout)
    assert with_y["terms"]["auth"] == 2 * (64 * 1024 + 1)
    assert without["terms"]["auth"] == 0


@pytest.mark.cachetd_only(reason="the metrics port is cachetd's")
def test_metrics_count_failures_and_healthz_passes_the_gate(start_server, tmp_path):
    from test_metrics import MetricsServer, get
    srv = MetricsServer(["-Y", authfile(tmp_path)], start_server.tmpdir)
    start_server.servers.append(srv)
    srv.start()
    with srv.conn() as c:
        for i in range(3):
            assert auth(c, "bob", f"nope{i}") == b"CLIENT_ERROR authentication failure"
        assert auth(c, "bob", "hunter2") == b"STORED"
    status, _, body = get(srv, "/metrics")
    assert status == 200
    lines = body.decode().splitlines()
    assert "memcached_auth_errors_total 3" in lines, body
    assert "memcached_auth_commands_total 4" in lines, body
    # the probe behind /healthz is answered through the gate, not refused
    status, _, body = get(srv, "/healthz")
    assert status == 200, body
