"""cachet-probe, the readiness/helm-test client, against real and broken servers.

The probe decides whether Kubernetes routes traffic to a pod, so a wrong
"healthy" is as bad as a wrong "dead": it must say 0 only for a server that
really answers, 1 (with one line on stderr) otherwise, and never hang.
It is found next to CACHETD (the build puts both in one directory).
"""
import os
import socket
import subprocess
import threading

import pytest

from conftest import CACHETD, IS_MEMCACHED, next_free_port


def probe_binary():
    here = os.path.join(os.path.dirname(CACHETD), "cachet-probe")
    if os.access(here, os.X_OK):
        return here
    if IS_MEMCACHED:
        built = os.path.join(os.path.dirname(__file__), "..", "..", "build", "cachet-probe")
        if os.access(built, os.X_OK):
            return os.path.abspath(built)
        pytest.skip("memcached mode: no engine/build/cachet-probe to run against memcached")
    pytest.fail(f"no cachet-probe next to {CACHETD}")


def run_probe(*args):
    return subprocess.run([probe_binary(), *args], capture_output=True, text=True, timeout=20)


class FakeServer:
    """Accepts on a port in our range; answers every read with `reply` (None: never answers)."""

    def __init__(self, reply):
        self.reply = reply
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.port = next_free_port()
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.conns = []
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(conn)
            if self.reply is not None:
                conn.settimeout(2)
                try:
                    while conn.recv(4096):
                        conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        self.thread.join(timeout=5)
        for c in self.conns:
            c.close()
        self.sock.close()


def test_probe_live_server(server):
    proc = run_probe("-h", "127.0.0.1", "-p", str(server.port))
    assert proc.returncode == 0, proc


def test_probe_set_get_round_trip_leaves_nothing(server):
    with server.conn() as c:
        before = c.stats()
    proc = run_probe("-h", "127.0.0.1", "-p", str(server.port), "--set-get")
    assert proc.returncode == 0, proc
    with server.conn() as c:
        after = c.stats()
    assert int(after["total_items"]) > int(before["total_items"]), "--set-get stored nothing"
    assert after["curr_items"] == before["curr_items"], "--set-get left its key behind"


def test_probe_closed_port():
    port = next_free_port()  # free: nothing listens there
    proc = run_probe("-h", "127.0.0.1", "-p", str(port))
    assert proc.returncode == 1, proc
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_probe_wrong_answer():
    fake = FakeServer(b"ERROR\r\n")
    try:
        proc = run_probe("-h", "127.0.0.1", "-p", str(fake.port))
        assert proc.returncode == 1, proc
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        proc = run_probe("-h", "127.0.0.1", "-p", str(fake.port), "--set-get")
        assert proc.returncode == 1, proc
    finally:
        fake.close()


def test_probe_silent_server_is_bounded():
    fake = FakeServer(None)
    try:
        proc = run_probe("-h", "127.0.0.1", "-p", str(fake.port), "-t", "200")  # subprocess bound: 20 s
        assert proc.returncode == 1, proc
        assert proc.stderr.strip(), "a timeout must say so"
    finally:
        fake.close()


# Against -Z and -Y servers (the pod's liveness probe with spec.tls and
# spec.auth): the round trip a client makes, over TLS and authenticated.
from test_tls import PKI, pki, tls_server  # noqa: E402,F401  (fixtures)


def test_probe_over_tls(tls_server, pki, tmp_path):
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key)
    port = str(srv.port)
    assert run_probe("-p", port).returncode == 1          # plaintext to a TLS-only port
    r = run_probe("-p", port, "--tls")
    assert r.returncode == 0, r.stderr
    r = run_probe("-p", port, "--tls", "--ca", pki.ca, "--set-get")
    assert r.returncode == 0, r.stderr
    other = PKI(tmp_path, "other")
    r = run_probe("-p", port, "--tls", "--ca", other.ca)
    assert r.returncode == 1 and "handshake" in r.stderr, r.stderr
    assert run_probe("-p", port, "--ca", pki.ca).returncode == 1   # --ca without --tls: usage


def test_probe_over_mutual_tls(tls_server, pki):
    cert, key = pki.issue("server")
    ccert, ckey = pki.issue("client", server=False)
    srv = tls_server(pki.ca, cert, key, "-o", f"ssl_ca_cert={pki.ca},ssl_verify_mode=2", client=(ccert, ckey))
    port = str(srv.port)
    r = run_probe("-p", port, "--tls", "--cert", ccert, "--key", ckey)
    assert r.returncode == 0, r.stderr
    assert run_probe("-p", port, "--tls").returncode == 1   # no client certificate


def test_probe_authenticates_with_the_authfile(start_server, tmp_path):
    path = tmp_path / "authfile"
    path.write_text("alice:s3cret\nbob:hunter2\n")
    srv = start_server("-Y", str(path))
    port = str(srv.port)
    assert run_probe("-p", port).returncode == 1   # unauthenticated: CLIENT_ERROR, not MN
    for args in (["--auth-file", str(path)], ["--auth-file", str(path), "--user", "bob", "--set-get"]):
        r = run_probe("-p", port, *args)
        assert r.returncode == 0, (args, r.stderr)
    wrong = tmp_path / "wrong"
    wrong.write_text("alice:nope\n")
    assert run_probe("-p", port, "--auth-file", str(wrong)).returncode == 1
    r = run_probe("-p", port, "--auth-file", str(path), "--user", "carol")
    assert r.returncode == 1 and "carol" in r.stderr, r.stderr


def test_probe_over_tls_with_auth(tls_server, pki, tmp_path):
    cert, key = pki.issue("server")
    path = tmp_path / "authfile"
    path.write_text("alice:s3cret\n")
    srv = tls_server(pki.ca, cert, key, "-Y", str(path))
    r = run_probe("-p", str(srv.port), "--tls", "--auth-file", str(path))
    assert r.returncode == 0, r.stderr
