"""TLS on the memcached port: -Z, memcached's -o ssl_* options, refresh_certs.

Against memcached 1.6.45 the same tests run on its TLS build
(`build-memcached.sh --tls`), the differential reference for the replies.
Certificates are made in each test with the openssl CLI.
"""
import json
import os
import socket
import ssl
import subprocess

import pytest

from conftest import CACHETD, IS_MEMCACHED, Conn, IO_TIMEOUT_S, Server, hold_every_slot, next_free_port, settings_of, stat, wait_until


def memcached_tls():
    script = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                            check=True).stdout.strip() + "/../shared/peers/build-memcached.sh"
    out = subprocess.run(["bash", script, "--tls"], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, f"building memcached 1.6.45 with TLS failed:\n{out.stderr[-2000:]}"
    return out.stdout.strip().splitlines()[-1]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


class PKI:
    """A CA and certificates it signs, as PEM files in a directory."""

    def __init__(self, d, name="ca"):
        self.d = str(d)
        self.name = name
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt",
                "-days", "2", "-subj", f"/CN={name}", cwd=self.d)
        self.ca = os.path.join(self.d, f"{name}.crt")

    def issue(self, cn, server=True):
        base = f"{self.name}-{cn}"
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{base}.key", "-out", f"{base}.csr",
                "-subj", f"/CN={cn}", cwd=self.d)
        with open(os.path.join(self.d, f"{base}.ext"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n" if server else "extendedKeyUsage=clientAuth\n")
        openssl("x509", "-req", "-in", f"{base}.csr", "-CA", f"{self.name}.crt", "-CAkey", f"{self.name}.key",
                "-CAcreateserial", "-out", f"{base}.crt", "-days", "2", "-extfile", f"{base}.ext", cwd=self.d)
        return os.path.join(self.d, f"{base}.crt"), os.path.join(self.d, f"{base}.key")


def client_context(ca, cert=None, key=None, version=None):
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    if version:
        ctx.minimum_version = ctx.maximum_version = version
    return ctx


class TLSConn(Conn):
    """conftest's Conn over a TLS socket."""

    def __init__(self, port, ctx, timeout=IO_TIMEOUT_S):
        self.port = port
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        self.buf = b""

    def until(self, suffix):
        """Everything received until the stream ends with suffix."""
        while not self.buf.endswith(suffix):
            self._fill()
        out, self.buf = self.buf, b""
        return out


class TLSServer(Server):
    """A server with -Z: ready when a TLS client gets VERSION."""

    def __init__(self, args, tmpdir, ca, binary=None, client=None):
        super().__init__(args, tmpdir, binary=binary)
        self.ca = ca
        self.client = client or (None, None)   # mTLS: the certificate the readiness check shows

    def conn(self, timeout=IO_TIMEOUT_S):
        """conftest's readiness check and check_healthy go through TLS too."""
        return TLSConn(self.port, client_context(self.ca, *self.client), timeout)

    def tls(self, ctx=None):
        return TLSConn(self.port, ctx or client_context(self.ca))


@pytest.fixture
def tls_server(start_server, tmp_path):
    binary = memcached_tls() if IS_MEMCACHED else None

    def start(ca, cert, key, *extra, client=None):
        opts = f"ssl_chain_cert={cert},ssl_key={key}"
        srv = TLSServer(["-Z", "-o", opts, *extra], start_server.tmpdir, ca, binary=binary, client=client)
        start_server.servers.append(srv)
        return srv.start()
    return start


@pytest.fixture
def pki(tmp_path):
    return PKI(tmp_path)


def test_round_trips_over_tls(tls_server, pki):
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key)
    with srv.tls() as c:
        assert c.sock.version() in ("TLSv1.2", "TLSv1.3")
        c.send(b"set k 0 0 5\r\nhello\r\nget k\r\n")
        assert c.until(b"END\r\n") == b"STORED\r\nVALUE k 0 5\r\nhello\r\nEND\r\n"
        # a value larger than a TLS record and than the read buffer, both ways
        big = os.urandom(300_000)
        c.send(b"set big 0 0 %d\r\n%s\r\n" % (len(big), big))
        assert c.until(b"\r\n") == b"STORED\r\n"
        # pipelined: many requests in few records, many replies in few records
        c.send(b"".join(b"get big\r\n" for _ in range(5)) + b"mn\r\n")
        out = c.until(b"MN\r\n")
        assert out == (b"VALUE big 0 %d\r\n%s\r\nEND\r\n" % (len(big), big)) * 5 + b"MN\r\n"
        c.send(b"".join(b"set p%d 0 0 1 noreply\r\nx\r\n" % i for i in range(2000)) + b"get p1999\r\n")
        assert c.until(b"END\r\n") == b"VALUE p1999 0 1\r\nx\r\nEND\r\n"


def io_uring_rings(pid):
    """The io_uring instances a process holds open. A descriptor listed can
    be closed before it is read (the server's threads open and close files,
    e.g. its certificate watch): such a one is not a ring."""
    fds = f"/proc/{pid}/fd"
    rings = 0
    for fd in os.listdir(fds):
        try:
            rings += "io_uring" in os.readlink(os.path.join(fds, fd))
        except FileNotFoundError:
            pass
    return rings


@pytest.mark.cachetd_only(reason="memcached has no io_uring batching")
def test_tls_reads_are_batched_through_io_uring(tls_server, pki):
    """Under -Z the worker keeps its io_uring batching (uring_turn): a turn with
    many readable TLS connections receives their ciphertext in one submit and
    hands it to OpenSSL (tls_stage). Many connections send at once, so turns
    find several ready; the requests are single records, records of many
    pipelined requests, a value larger than what a turn stages (16 KiB) and
    one read straight into item memory, and every reply must come back whole."""
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key, "-t", "1")
    assert settings_of(srv)["io_uring"] == "yes"
    assert io_uring_rings(srv.proc.pid) >= 1
    conns = [srv.tls() for _ in range(24)]
    try:
        mid, big = os.urandom(40_000), os.urandom(300_000)
        for rnd in range(6):
            for i, c in enumerate(conns):
                c.send(b"set k%d 0 0 %d\r\n%s\r\n" % (i, 6 + rnd, b"v%05d" % i + b"x" * rnd))
            for i, c in enumerate(conns):
                assert c.until(b"\r\n") == b"STORED\r\n", (rnd, i)
            for i, c in enumerate(conns):
                c.send(b"".join(b"get k%d\r\n" % ((i + j) % len(conns)) for j in range(16)))
            for i, c in enumerate(conns):
                want = b"".join(b"VALUE k%d 0 %d\r\n%s\r\nEND\r\n" % (k, 6 + rnd, b"v%05d" % k + b"x" * rnd)
                                for k in ((i + j) % len(conns) for j in range(16)))
                assert c.exact(len(want)) == want, (rnd, i)
        for i, c in enumerate(conns[:8]):
            value = mid if i % 2 else big
            c.send(b"set big%d 0 0 %d\r\n%s\r\nget big%d\r\n" % (i, len(value), value, i))
        for i, c in enumerate(conns[:8]):
            value = mid if i % 2 else big
            assert c.until(b"END\r\n") == b"STORED\r\nVALUE big%d 0 %d\r\n%s\r\nEND\r\n" % (i, len(value), value)
        # not the plain path for every connection: the batch received ciphertext
        with srv.tls() as c:
            assert int(stat(c, "tls_staged_reads")) > 0
    finally:
        for c in conns:
            c.close()


def test_a_plaintext_client_is_refused(tls_server, pki):
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=IO_TIMEOUT_S) as s:
        s.sendall(b"set k 0 0 1\r\nx\r\nversion\r\n")
        data = b""
        while True:
            try:
                chunk = s.recv(4096)
            except ConnectionResetError:   # memcached resets it
                break
            if not chunk:
                break
            data += chunk
        assert b"STORED" not in data and b"VERSION" not in data, data
    with srv.tls() as c:
        c.send(b"get k\r\n")
        assert c.until(b"END\r\n") == b"END\r\n"


@pytest.mark.parametrize("mode", [2, 3])
def test_mtls_accepts_a_signed_client_and_refuses_others(tls_server, pki, tmp_path, mode):
    cert, key = pki.issue("server")
    ccert, ckey = pki.issue("client", server=False)
    other = PKI(tmp_path, "other")
    ocert, okey = other.issue("intruder", server=False)
    srv = tls_server(pki.ca, cert, key, "-o", f"ssl_ca_cert={pki.ca},ssl_verify_mode={mode}",
                     client=(ccert, ckey))
    with srv.tls(client_context(pki.ca, ccert, ckey)) as c:
        assert c.cmd("mn") == b"MN"

    def refused(ctx):
        # TLS 1.3: the server's refusal arrives after the client's handshake
        # returns, so it shows on the first read
        try:
            with srv.tls(ctx) as c:
                c.send(b"mn\r\n")
                return c.sock.recv(100) == b""
        except (ssl.SSLError, ConnectionError, OSError):
            return True
    assert refused(client_context(pki.ca))                  # no certificate
    assert refused(client_context(pki.ca, ocert, okey))     # signed by someone else
    with srv.tls(client_context(pki.ca, ccert, ckey)) as c:
        assert c.cmd("mn") == b"MN"


def test_refresh_certs_rotates_under_open_connections(tls_server, pki, tmp_path):
    cert, key = pki.issue("server")
    live_cert, live_key = str(tmp_path / "live.crt"), str(tmp_path / "live.key")
    for src, dst in ((cert, live_cert), (key, live_key)):
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read())
    srv = tls_server(pki.ca, live_cert, live_key)
    old = srv.tls()
    assert old.cmd("set k 0 0 1\r\nx") == b"STORED"
    # the new certificate, from a new CA, replaces the files in place
    new_ca = PKI(tmp_path, "newca")
    ncert, nkey = new_ca.issue("server")
    for src, dst in ((ncert, live_cert), (nkey, live_key)):
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read())
    assert old.cmd("refresh_certs") == b"OK"
    # the connection opened before keeps working
    old.send(b"get k\r\n")
    assert old.until(b"END\r\n") == b"VALUE k 0 1\r\nx\r\nEND\r\n"
    # new connections get the new certificate
    with srv.tls(client_context(new_ca.ca)) as c:
        assert c.cmd("mn") == b"MN"
    with pytest.raises(ssl.SSLCertVerificationError):
        srv.tls(client_context(pki.ca))
    # a broken file: an error, and the current certificate stays
    with open(live_key, "w") as f:
        f.write("not a key\n")
    reply = old.cmd("refresh_certs")
    assert reply.startswith(b"Error loading the key") or reply.startswith(b"Error validating"), reply
    with srv.tls(client_context(new_ca.ca)) as c:
        assert c.cmd("mn") == b"MN"
    old.close()


class RenewedSecret:
    """A Secret volume as the kubelet keeps it: cert and key are paths
    through the `data` symlink to a version directory, first signed by pki;
    renew() swaps the symlink to one signed by new_ca, as the kubelet does
    when cert-manager renews."""

    def __init__(self, tmp_path, pki):
        self.new_ca = PKI(tmp_path, "newca")
        self.versions = []
        for i, issuer in enumerate((pki, self.new_ca)):
            d = tmp_path / f"v{i}"
            d.mkdir()
            cert, key = issuer.issue("server")
            os.replace(cert, d / "tls.crt")
            os.replace(key, d / "tls.key")
            self.versions.append(d)
        self.tmp_path = tmp_path
        self.link = tmp_path / "data"
        self.link.symlink_to(self.versions[0])
        self.cert, self.key = str(self.link / "tls.crt"), str(self.link / "tls.key")

    def renew(self):
        tmp_link = self.tmp_path / "data.tmp"
        tmp_link.symlink_to(self.versions[1])
        os.replace(tmp_link, self.link)


@pytest.mark.cachetd_only(reason="memcached reloads its certificates only on refresh_certs or SIGHUP")
def test_a_renewed_secret_is_picked_up_without_a_command(tls_server, pki, tmp_path):
    """cert-manager renews into the Secret; the kubelet swaps the volume's
    symlink to a new directory. Nothing sends refresh_certs: new connections
    get the new certificate, and one opened before keeps working."""
    secret = RenewedSecret(tmp_path, pki)
    srv = tls_server(pki.ca, secret.cert, secret.key)
    old = srv.tls()
    assert old.cmd("set k 0 0 1\r\nx") == b"STORED"
    secret.renew()
    new_ca = secret.new_ca

    def new_certificate_served():
        try:
            with srv.tls(client_context(new_ca.ca)) as c:
                return c.cmd("mn") == b"MN"
        except ssl.SSLCertVerificationError:
            return False
    wait_until(new_certificate_served, 30, "the renewed certificate served to new connections")
    with pytest.raises(ssl.SSLCertVerificationError):
        srv.tls(client_context(pki.ca))
    old.send(b"get k\r\n")
    assert old.until(b"END\r\n") == b"VALUE k 0 1\r\nx\r\nEND\r\n"
    old.close()


def s_client(port, ca, *flags):
    """openssl s_client's handshake: (completed and verified, protocol)."""
    out = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-CAfile", ca,
                          "-verify_return_error", *flags], input=b"mn\r\n", capture_output=True, timeout=30)
    text = out.stdout.decode(errors="replace")
    # "New, TLSv1.3, Cipher is ..." ("New, (NONE), Cipher is (NONE)" when refused)
    proto = next((l.split(",")[1].strip() for l in text.splitlines() if l.startswith("New, ")), None)
    done = out.returncode == 0 and "Verify return code: 0 (ok)" in text and "Cipher is (NONE)" not in text
    return done, proto


@pytest.mark.parametrize("min_version,flag,ok", [
    (None, "-tls1_2", True), (None, "-tls1_3", True),
    ("3", "-tls1_3", True), ("3", "-tls1_2", False),
])
def test_openssl_s_client_handshake_matrix(tls_server, pki, min_version, flag, ok):
    cert, key = pki.issue("server")
    extra = ["-o", f"ssl_min_version={min_version}"] if min_version else []
    srv = tls_server(pki.ca, cert, key, *extra)
    good, proto = s_client(srv.port, pki.ca, flag)
    assert good == ok, (flag, proto)
    if ok:
        assert proto == {"-tls1_2": "TLSv1.2", "-tls1_3": "TLSv1.3"}[flag]


def test_half_handshakes_and_renegotiation_do_not_hurt_the_server(tls_server, pki):
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key, "-o", "idle_timeout=1")
    stalled = []
    for i in range(50):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=IO_TIMEOUT_S)
        if i % 2:
            s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")   # a ClientHello cut short
        stalled.append(s)
    with srv.tls() as c:
        assert c.cmd("mn") == b"MN"
    # the stalled handshakes are idle connections: idle_timeout closes them
    def all_closed():
        for s in stalled:
            s.settimeout(0.05)
            try:
                if s.recv(1) != b"":
                    return False
            except socket.timeout:
                return False
            except OSError:
                pass
        return True
    wait_until(all_closed, 30, "the stalled handshakes closed by idle_timeout")
    for s in stalled:
        s.close()
    # TLS 1.2 renegotiation asked by the client is refused; the server goes on
    out = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{srv.port}", "-CAfile", pki.ca,
                          "-tls1_2"], input=b"R\n", capture_output=True, timeout=30)
    assert b"RENEGOTIATING" in out.stdout + out.stderr
    with srv.tls() as c:
        assert c.cmd("mn") == b"MN"


def client_hello(ca):
    """A complete ClientHello (TLS 1.3 key shares and all) from Python's ssl,
    as the bytes a real client's first flight puts on the wire."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(ca).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))


HALF_HANDSHAKES = 400


def assert_rss_within_formula(srv, args, conns, extra, cert, key, rss_before, what):
    """cachetd, not under a sanitizer: since rss_before, the RSS grew by no
    more than the memory formula for ARGS (-c CONNS, over TLS) charges its
    last EXTRA connections, and stays under the formula's total. What one
    more connection adds is the process's own memory: socket buffers are
    the kernel's, not in the RSS."""
    from test_limits import memory_budget, under_sanitizer
    if IS_MEMCACHED or under_sanitizer(srv.proc.pid):
        return
    grown = rss_bytes(srv.proc.pid) - rss_before
    tls = ("-Z", "-o", f"ssl_chain_cert={cert},ssl_key={key}")
    budget = memory_budget(*args, *tls)
    fewer = memory_budget(*[a if a != str(conns) else str(conns - extra) for a in args], *tls)

    def process(b):
        return b["total"] - b["terms"]["socket_buffers"]
    per_conn = (process(budget) - process(fewer)) / extra
    print(f"{extra} {what}: RSS +{grown / extra / 1024:.1f} KiB each; "
          f"the formula charges {per_conn / 1024:.1f} KiB per connection")
    assert grown <= extra * per_conn, (grown, per_conn)
    assert rss_bytes(srv.proc.pid) <= budget["total"]


def tls_limits(conns):
    """-c CONNS on one worker, with kernel socket buffers bounded so that
    --memory-budget is bounded (memcached has no such option)."""
    args = ["-c", str(conns), "-t", "1", "-m", "8"]
    return args if IS_MEMCACHED else args + ["-o", "sock_sndbuf=64k,sock_rcvbuf=16k"]


def test_a_flood_of_half_handshakes_keeps_serving_within_the_memory_formula(tls_server, pki):
    """HALF_HANDSHAKES connections at once each send a whole ClientHello and
    then nothing: the server has answered each (ServerHello, certificate)
    and holds a handshake in its middle, the costliest state a client can
    leave it in for the price of one packet. A good client is served
    meanwhile, and (cachetd) the process's RSS grew by no more than the
    memory formula charges for that many more connections, and stays
    under the formula's total. Then the flood goes and the server serves."""
    cert, key = pki.issue("server")
    conns = HALF_HANDSHAKES + 24
    args = tls_limits(conns)
    srv = tls_server(pki.ca, cert, key, *args)
    with srv.tls() as c:
        assert c.cmd("set k 0 0 2\r\nok") == b"STORED"
    rss_before = rss_bytes(srv.proc.pid)
    hello = client_hello(pki.ca)
    flood = []
    try:
        for _ in range(HALF_HANDSHAKES):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=IO_TIMEOUT_S)
            s.sendall(hello)
            flood.append(s)
        # every hello was answered: a handshake record (0x16) each
        for s in flood:
            first = s.recv(1)
            assert first == b"\x16", first
        with srv.tls() as c:
            c.send(b"get k\r\n")
            assert c.until(b"END\r\n") == b"VALUE k 0 2\r\nok\r\nEND\r\n"
        assert srv.alive()
        assert_rss_within_formula(srv, args, conns, HALF_HANDSHAKES, cert, key, rss_before, "half handshakes")
    finally:
        for s in flood:
            s.close()
    with srv.tls() as c:
        assert c.cmd("mn") == b"MN"


ANSWERED_CONNS = 300


def test_connections_that_keep_their_record_buffers_stay_within_the_memory_formula(tls_server, pki):
    """cachetd keeps a data connection's OpenSSL record buffers, both ways,
    from its first record to its close (no SSL_MODE_RELEASE_BUFFERS: taking
    and freeing them per record cost about 7% of an unpipelined TLS GET's
    instructions; docs/benchmarks.md, "W1 over TLS"). The formula charges
    them (memory_budget.c TLS_CONN_BYTES): ANSWERED_CONNS connections that
    each answered a GET, and then each with a reply larger than a record
    left unread (its write buffer full, its sealed records waiting), grow
    the RSS by no more than the formula charges for them."""
    cert, key = pki.issue("server")
    conns = ANSWERED_CONNS + 24
    args = tls_limits(conns)
    srv = tls_server(pki.ca, cert, key, *args)
    big = os.urandom(200_000)
    with srv.tls() as c:
        c.send(b"set big 0 0 %d\r\n%s\r\nset k 0 0 2\r\nok\r\n" % (len(big), big))
        assert c.until(b"STORED\r\nSTORED\r\n") == b"STORED\r\nSTORED\r\n"
    rss_before = rss_bytes(srv.proc.pid)
    held = []
    try:
        for _ in range(ANSWERED_CONNS):
            c = srv.tls()
            held.append(c)
            c.send(b"get k\r\n")
            assert c.until(b"END\r\n") == b"VALUE k 0 2\r\nok\r\nEND\r\n"
        for c in held:
            c.send(b"get big\r\n")   # never read
        with srv.tls() as c:
            # every one of them has had its turn once this is answered
            assert c.cmd("mn") == b"MN"
        assert srv.alive()
        assert_rss_within_formula(srv, args, conns, ANSWERED_CONNS, cert, key, rss_before,
                                  "answered connections, a reply unread on each")
    finally:
        for c in held:
            c.close()


def test_renegotiation_attempts_are_refused_and_the_server_serves_on(tls_server, pki):
    """TLS 1.2 renegotiation asked by clients (openssl s_client's R), again
    and again with a good client connected: each is refused (OpenSSL's
    "no renegotiation" alert, the client's session ends), no request sent
    after it is answered, and the good client and new ones are served."""
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key)
    good = srv.tls()
    assert good.cmd("set k 0 0 2\r\nok") == b"STORED"
    for _ in range(10):
        p = subprocess.Popen(["openssl", "s_client", "-connect", f"127.0.0.1:{srv.port}", "-CAfile", pki.ca,
                              "-tls1_2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        # the handshake first (the session is printed), then R, then a request
        out = b""
        while b"Verify return code" not in out:
            line = p.stdout.readline()
            assert line, out
            out += line
        p.stdin.write(b"R\n")
        p.stdin.flush()
        try:
            rest, _ = p.communicate(b"mn\r\n", timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            rest, _ = p.communicate()
        assert b"RENEGOTIATING" in rest, rest
        assert b"no renegotiation" in rest, rest
        assert b"MN\r\n" not in rest, rest
        good.send(b"get k\r\n")
        assert good.until(b"END\r\n") == b"VALUE k 0 2\r\nok\r\nEND\r\n"
    good.close()
    with srv.tls() as c:
        assert c.cmd("mn") == b"MN"


def test_Z_without_a_loadable_certificate_exits_64(tmp_path):
    binary = memcached_tls() if IS_MEMCACHED else CACHETD
    extra = ["-U", "0", "-u", "root"] if IS_MEMCACHED and os.geteuid() == 0 else []
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    for args in (["-Z"], ["-Z", "-o", f"ssl_chain_cert={bad},ssl_key={bad}"]):
        out = subprocess.run([binary, "-p", str(next_free_port()), "-l", "127.0.0.1", *extra, *args],
                             capture_output=True,
                             text=True, timeout=20)
        assert out.returncode == 64, (args, out)
    assert f"Error loading the certificate chain: {bad}" in out.stderr, out.stderr


def test_refresh_certs_without_tls(start_server):
    if IS_MEMCACHED:
        srv = start_server(binary=memcached_tls())
    else:
        srv = start_server()
    with srv.conn() as c:
        assert c.cmd("refresh_certs") == b"Error TLS not enabled"


@pytest.mark.cachetd_only(reason="--memory-budget is cachetd's")
def test_tls_is_a_term_of_the_memory_formula():
    def budget(*args):
        return json.loads(subprocess.run([CACHETD, "--memory-budget", *args], capture_output=True, text=True,
                                         check=True).stdout)["terms"]
    on = budget("-c", "100", "-Z", "-o", "ssl_chain_cert=/x,ssl_key=/y")
    # OpenSSL's session and records, and the sealed records of batched sends
    assert on["tls"] == 100 * (48 + 17) * 1024 + 4 * 1024 * 1024
    assert budget("-c", "100")["tls"] == 0


@pytest.mark.cachetd_only(reason="the metrics port is cachetd's")
@pytest.mark.parametrize("mtls", [False, True])
def test_healthz_probes_the_engine_over_tls(tls_server, pki, mtls):
    import http.client
    cert, key = pki.issue("server")
    ccert, ckey = pki.issue("client", server=False)
    mport = next_free_port()
    extra = ["-o", f"metrics_port={mport}"]
    if mtls:
        extra += ["-o", f"ssl_ca_cert={pki.ca},ssl_verify_mode=2"]
    srv = tls_server(pki.ca, cert, key, *extra, client=(ccert, ckey) if mtls else None)
    c = http.client.HTTPConnection("127.0.0.1", mport, timeout=IO_TIMEOUT_S)
    try:
        c.request("GET", "/healthz")
        r = c.getresponse()
        body = r.read()
        assert r.status == 200, body
    finally:
        c.close()


def test_watch_over_tls_answers_inside_the_tls_stream(tls_server, pki):
    """The log lines must not go raw into a TLS connection: whatever the
    reply to `watch` is, it arrives as TLS records. memcached 1.6.45 --tls
    serves the watcher over TLS; cachetd refuses it with a CLIENT_ERROR
    (its logger thread sends raw bytes and cannot use the worker's SSL)."""
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key)
    with srv.tls() as c:
        c.send(b"watch\r\n")
        line = c.until(b"\r\n")
        if IS_MEMCACHED:
            assert line == b"OK\r\n", line
        else:
            assert line == b"CLIENT_ERROR watch commands not supported over TLS\r\n", line
        if line == b"OK\r\n":   # a watcher over TLS: its lines are TLS records too
            with srv.tls() as d:
                assert d.cmd("set wk 0 0 1\r\nx") == b"STORED"
                d.send(b"get wk\r\n")
                assert d.until(b"END\r\n")
            assert b"key=wk" in c.until(b"\n")
        else:                   # refused: the connection stays usable
            assert c.cmd("mn") == b"MN"


@pytest.mark.cachetd_only(reason="sock_sndbuf/sock_rcvbuf are not memcached options")
def test_handshake_completes_when_the_server_must_write_during_a_read(tls_server, pki):
    """A certificate chain larger than the socket buffers: OpenSSL, reading
    the ClientHello, must write the chain and gets WANT_WRITE from the read.
    The server has to wait for the socket to become writable then, not
    readable (the client, waiting for the rest of the chain, sends nothing)."""
    cert, key = pki.issue("server")
    with open(pki.ca) as f:
        padding = f.read()
    chain = os.path.join(pki.d, "big-chain.crt")
    with open(cert) as f, open(chain, "w") as g:
        g.write(f.read() + padding * 12)
    assert os.path.getsize(chain) > 11_000
    srv = tls_server(pki.ca, chain, key, "-o", "sock_sndbuf=1024,sock_rcvbuf=1024")
    for i in range(4):
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        raw.settimeout(IO_TIMEOUT_S)
        raw.connect(("127.0.0.1", srv.port))
        with client_context(pki.ca).wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"set k%d 0 0 1\r\nx\r\nmn\r\n" % i)
            got = b""
            while not got.endswith(b"MN\r\n"):
                chunk = s.recv(4096)
                assert chunk, got
                got += chunk
            assert got == b"STORED\r\nMN\r\n"


@pytest.mark.cachetd_only(reason="memcached 1.6.45 writes its 'Too many open connections' line in plaintext too")
def test_a_client_beyond_c_is_closed_without_plaintext(tls_server, pki):
    """At -c a new connection is turned away; under -Z the memcached error
    line would be plaintext in a stream the client reads as TLS records."""
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key, "-c", "4")

    def served_client():
        c = srv.tls()
        if c.cmd("mn") == b"MN":
            return c
        c.close()
        return None
    held = hold_every_slot(served_client, 4)
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=IO_TIMEOUT_S) as s:
            data = b""
            try:
                while chunk := s.recv(4096):
                    data += chunk
            except ConnectionResetError:
                pass
            assert data == b"", data
    finally:
        for c in held:
            c.close()


def io_syscalls(pid, kind="syscr"):
    """The read()-family (syscr) or write()-family (syscw) calls the whole
    process has made (/proc/PID/io): a kernel counter, not a clock."""
    with open(f"/proc/{pid}/io") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(kind + ":"))


def read_syscalls(pid):
    return io_syscalls(pid, "syscr")


UNPIPELINED_GETS = 300


@pytest.mark.cachetd_only(reason="memcached 1.6.45 reads a TLS record in two read() calls, header then body")
def test_an_unpipelined_get_over_tls_costs_one_read(tls_server, pki):
    """Each GET in its own record, the next sent only once the reply came:
    the server takes the record with one read() (read-ahead) and does not
    try the empty socket again before it answers, as a plaintext GET."""
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key)
    with srv.tls() as c:
        c.send(b"set k 0 0 5\r\nhello\r\n")
        assert c.until(b"\r\n") == b"STORED\r\n"
        before = read_syscalls(srv.proc.pid)
        for _ in range(UNPIPELINED_GETS):
            c.send(b"get k\r\n")
            assert c.until(b"END\r\n") == b"VALUE k 0 5\r\nhello\r\nEND\r\n"
        reads = read_syscalls(srv.proc.pid) - before
    # a little room for the other threads' own reads (timers, eventfds)
    assert reads <= UNPIPELINED_GETS * 5 // 4 + 20, f"{reads} read calls for {UNPIPELINED_GETS} GETs"


def test_records_split_across_reads_are_all_answered(tls_server, pki):
    """With read-ahead one read() can bring several records and the start of
    another: the whole ones are answered at once, and the cut one as soon as
    its rest arrives."""
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(pki.ca).wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    raw = socket.create_connection(("127.0.0.1", srv.port), timeout=IO_TIMEOUT_S)

    def pump():
        if outgoing.pending:
            raw.sendall(outgoing.read())
        data = raw.recv(65536)
        assert data, "the server closed the connection"
        incoming.write(data)

    def receive_until(suffix, times=1):
        got = b""
        while got.count(suffix) < times or not got.endswith(suffix):
            try:
                got += tls.read(65536)
            except ssl.SSLWantReadError:
                pump()
        return got

    while True:
        try:
            tls.do_handshake()
            break
        except ssl.SSLWantReadError:
            pump()
    try:
        tls.write(b"set k 0 0 5\r\nhello\r\n")
        assert receive_until(b"\r\n") == b"STORED\r\n"
        for i in range(8):   # eight records, one GET each
            tls.write(b"get k\r\n" if i < 7 else b"mn\r\n")
        records = outgoing.read()
        cut = len(records) - 7   # inside the last record (the mn)
        raw.sendall(records[:cut])
        assert receive_until(b"END\r\n", 7) == b"VALUE k 0 5\r\nhello\r\nEND\r\n" * 7
        raw.sendall(records[cut:])
        assert receive_until(b"MN\r\n") == b"MN\r\n"
    finally:
        raw.close()


LARGE_VALUES = 12


def test_replies_in_pieces_go_out_in_full_records(tls_server, pki):
    """A multi-get of values too large to be copied into the output buffer
    (sent from item memory, between their own header and trailer lines):
    the pieces are gathered into records of up to 16 KiB, one write each,
    not a record and a write() per header, value and trailer."""
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key)
    value = os.urandom(20_000)
    keys = [b"big%d" % i for i in range(LARGE_VALUES)]
    with srv.tls() as c:
        c.send(b"".join(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, len(value), value) for k in keys) + b"mn\r\n")
        assert c.until(b"MN\r\n") == b"MN\r\n"
        expected = b"".join(b"VALUE %s 0 %d\r\n%s\r\n" % (k, len(value), value) for k in keys) + b"END\r\n"
        before = io_syscalls(srv.proc.pid, "syscw")
        c.send(b"get " + b" ".join(keys) + b"\r\n")
        assert c.until(b"END\r\n") == expected
        writes = io_syscalls(srv.proc.pid, "syscw") - before
    records = -(-len(expected) // 16384)
    # room for a write cut short by a full socket buffer, and other threads'
    assert writes <= records + 8, f"{writes} write calls for {len(expected)} bytes ({records} full records)"


def test_the_server_writes_after_a_tls13_handshake(tls_server, pki):
    """A TLS 1.3 server that sends nothing after the client's Finished
    (no session tickets) leaves that segment unacknowledged until the
    delayed ACK: a client with Nagle on (Python's ssl, most libraries) then
    holds its first request for ~40 ms on every new connection (hostile
    tester, D2). memcached 1.6.45 sends OpenSSL's default session tickets,
    so bytes arrive unprompted right after the handshake; cachetd must too."""
    import select
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key)
    raw = socket.create_connection(("127.0.0.1", srv.port), timeout=IO_TIMEOUT_S)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 0)
    with client_context(pki.ca, version=ssl.TLSVersion.TLSv1_3).wrap_socket(raw, server_hostname="127.0.0.1") as s:
        assert s.version() == "TLSv1.3"
        readable, _, _ = select.select([s], [], [], IO_TIMEOUT_S)
        assert readable, "the server sent nothing after the TLS 1.3 handshake"
        s.sendall(b"version\r\n")
        assert s.recv(64).startswith(b"VERSION ")


def resume_session(port, ctx, session):
    """A new connection offering session; (resumed, the reply to a set/get)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)
    s = ctx.wrap_socket(raw, server_hostname="127.0.0.1", session=session)
    try:
        s.sendall(b"set r 0 0 1\r\nx\r\nget r\r\n")
        got = b""
        while not got.endswith(b"END\r\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        return s.session_reused, got
    finally:
        s.close()


@pytest.mark.cachetd_only(reason="memcached 1.6.45 sets no session ID context without ssl_session_cache: "
                                 "it fails the resumption with an internal_error alert (engine/README.md)")
@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_a_client_with_a_certificate_resumes_without_a_session_cache(tls_server, pki, version):
    """ssl_verify_mode 2 and no ssl_session_cache (what the operator deploys
    for clientAuth Require): a client keeping its session (a ticket) comes
    back with it and is served, not sent a fatal alert."""
    cert, key = pki.issue("server")
    ccert, ckey = pki.issue("client", server=False)
    srv = tls_server(pki.ca, cert, key, "-o", f"ssl_ca_cert={pki.ca},ssl_verify_mode=2", client=(ccert, ckey))
    ctx = client_context(pki.ca, ccert, ckey, version=version)
    raw = socket.create_connection(("127.0.0.1", srv.port), timeout=IO_TIMEOUT_S)
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(b"version\r\n")
        assert s.recv(4096).startswith(b"VERSION ")   # the TLS 1.3 ticket came before it
        session = s.session
    assert session is not None and session.has_ticket
    for _ in range(2):
        reused, got = resume_session(srv.port, ctx, session)
        assert got == b"STORED\r\nVALUE r 0 1\r\nx\r\nEND\r\n", got


class ClosingClient:
    """A TLS client over a raw socket (ssl.MemoryBIO), so that its request and
    its close_notify go out in one write, and bytes after them can follow."""

    def __init__(self, port, ctx, rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:   # before connect: shrunk after it, the window stalls in zero-window probes
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(IO_TIMEOUT_S)
        self.sock.connect(("127.0.0.1", port))
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.tls = ctx.wrap_bio(self.incoming, self.outgoing, server_hostname="127.0.0.1")
        while True:
            try:
                self.tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.sock.sendall(self.outgoing.read())
                self.incoming.write(self.sock.recv(65536))
        self.sock.sendall(self.outgoing.read())

    def send_then_close_notify(self, data):
        self.tls.write(data)
        try:
            self.tls.unwrap()
        except ssl.SSLWantReadError:
            pass   # the server's close_notify, never awaited
        self.sock.sendall(self.outgoing.read())

    def read_plain(self, until):
        got = b""
        while not got.endswith(until):
            try:
                got += self.tls.read(65536)
                continue
            except ssl.SSLWantReadError:
                pass
            chunk = self.sock.recv(65536)
            if not chunk:
                break
            self.incoming.write(chunk)
        return got


@pytest.mark.cachetd_only(reason="the stderr line and io_uring staging are cachetd's")
def test_a_request_with_its_close_notify_is_answered_and_nothing_left_over(tls_server, pki):
    """A request and the client's close_notify in one write: the reply comes
    back. Bytes the client sends after its close_notify, received by an
    io_uring batch (many connections at once), must not be staged for an
    OpenSSL that takes no more: no "left ciphertext" line, only a close."""
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key, "-t", "1")
    ctx = client_context(pki.ca, version=ssl.TLSVersion.TLSv1_3)
    with srv.tls() as c:
        c.send(b"set k 0 0 5\r\nhello\r\n")
        assert c.until(b"\r\n") == b"STORED\r\n"
    for rnd in range(3):
        clients = [ClosingClient(srv.port, ctx) for _ in range(24)]
        for cl in clients:
            cl.send_then_close_notify(b"get k\r\n")
        for cl in clients:
            assert cl.read_plain(b"END\r\n") == b"VALUE k 0 5\r\nhello\r\nEND\r\n"
        for cl in clients:   # at once, so turns find many ready
            cl.sock.sendall(os.urandom(200))
        for cl in clients:
            try:
                while cl.sock.recv(4096):
                    pass
            except ConnectionResetError:
                pass
            cl.sock.close()
    assert "left ciphertext" not in srv.log()
    with srv.tls() as c:
        assert int(stat(c, "tls_staged_reads")) > 0   # the batches did receive TLS reads


class TricklingProxy:
    """In front of a TLS server: the client's bytes go through at once, the
    server's come back one byte per `pace` seconds, at most `limit` of them,
    then both sides are closed. Records how many the client had been given
    when it gave up and closed (None: it never did before the limit)."""

    def __init__(self, target_port, pace=0.3, limit=40):
        import threading
        self.target_port, self.pace, self.limit = target_port, pace, limit
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.port = next_free_port()
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(1)
        self.sent_when_client_left = None
        self.client_left = threading.Event()
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        import threading
        import time
        client, _ = self.listener.accept()
        server = socket.create_connection(("127.0.0.1", self.target_port), timeout=IO_TIMEOUT_S)
        sent = [0]

        def upstream():
            try:
                while True:
                    data = client.recv(65536)
                    if not data:
                        break
                    server.sendall(data)
            except OSError:
                pass
            if sent[0] < self.limit:
                self.sent_when_client_left = sent[0]
            self.client_left.set()
        threading.Thread(target=upstream, daemon=True).start()
        pending = b""
        try:
            while sent[0] < self.limit and not self.client_left.is_set():
                if not pending:
                    pending = server.recv(65536)
                    if not pending:
                        break
                time.sleep(self.pace)   # pacing the fake network, not a measurement
                client.sendall(pending[:1])
                pending = pending[1:]
                sent[0] += 1
        except OSError:
            pass
        finally:
            client.close()
            server.close()
            self.listener.close()


@pytest.mark.cachetd_only(reason="cachet-probe is cachetd's")
def test_the_tls_round_trip_has_one_deadline_not_one_per_read(tls_server, pki):
    """tls_client.c (cachet-probe --tls and /healthz under -Z) against a
    server whose handshake bytes arrive one at a time, each well inside the
    timeout: with a timeout per read it waited for every byte (the metrics
    thread blocked past the kubelet's readiness timeout); with one deadline
    it gives up while the server still has bytes to send."""
    from test_probe import run_probe
    cert, key = pki.issue("server")
    srv = tls_server(pki.ca, cert, key)
    proxy = TricklingProxy(srv.port)
    r = run_probe("-p", str(proxy.port), "--tls", "-t", "1500")
    assert r.returncode == 1, r
    assert "within 1500 ms" in r.stderr, r.stderr
    assert proxy.client_left.wait(IO_TIMEOUT_S)
    assert proxy.sent_when_client_left is not None and proxy.sent_when_client_left < proxy.limit
