"""Network flags, as memcached 1.6.45 defines them: -s/-a (a unix socket instead of
TCP, and its permissions), -o idle_timeout (idle TCP connections are closed and
counted as idle_kicks), -o read_buf_mem_limit (memcached's name and unit for the
connection buffer cap; cachetd's -o conn_buffer_limit keeps working).

These tests start servers themselves when the harness's TCP start does not fit
(-s disables TCP). They pass against memcached 1.6.45 too (CACHETD=.../memcached),
except where marked cachetd_only.
"""
import os
import signal
import socket
import stat
import subprocess
import tempfile
import time

import pytest

from conftest import CACHETD, HAS_TEST_HOOKS, IS_MEMCACHED, SANITIZER_MARKERS, next_free_port, pass_idle_timeout, wait_until


def unix_argv(path, *extra):
    argv = [CACHETD, "-s", path, *extra]
    if IS_MEMCACHED:
        argv += ["-U", "0"] + (["-u", "root"] if os.geteuid() == 0 else [])
    return argv


class UnixServer:
    def __init__(self, tmp_path, *extra, path=None):
        self.path = path or str(tmp_path / "cachetd.sock")
        self.log = tmp_path / "unix-server.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(unix_argv(self.path, *extra), stdout=log, stderr=log,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"server exited {self.proc.returncode}: {self.log.read_text()}"
            try:
                with self.conn() as s:
                    s.sendall(b"version\r\n")
                    if s.recv(100).startswith(b"VERSION "):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        pytest.fail(f"unix socket server did not start: {self.log.read_text()}")

    def conn(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(self.path)
        return s

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        text = self.log.read_text(errors="replace")
        for marker in SANITIZER_MARKERS:
            assert marker not in text, f"sanitizer report:\n{text[-4000:]}"


def exchange(s, request, until=b"\r\n"):
    s.sendall(request)
    data = b""
    while not data.endswith(until):
        chunk = s.recv(65536)
        assert chunk, f"closed; got {data!r}"
        data += chunk
    return data


def test_unix_socket_serves_with_the_mask_and_no_tcp(tmp_path):
    """-s PATH -a 600: the socket file has mode 0600, the protocol works over it, and
    no TCP port is opened (memcached: "-s ... disables network support")."""
    port = next_free_port()
    srv = UnixServer(tmp_path, "-a", "600", "-p", str(port))
    try:
        mode = stat.S_IMODE(os.stat(srv.path).st_mode)
        assert stat.S_ISSOCK(os.stat(srv.path).st_mode)
        assert mode == 0o600, oct(mode)
        with srv.conn() as s:
            assert exchange(s, b"set k 5 0 2\r\nhi\r\n") == b"STORED\r\n"
            assert exchange(s, b"get k\r\n", b"END\r\n") == b"VALUE k 5 2\r\nhi\r\nEND\r\n"
            settings = exchange(s, b"stats settings\r\n", b"END\r\n").decode()
            assert f"STAT domain_socket {srv.path}\r\n" in settings
            assert "STAT umask 600\r\n" in settings
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        srv.stop()


def test_unix_socket_default_mask_and_stale_file(tmp_path):
    """Without -a the mask is 0700 (memcached's default), and a socket file left by an
    earlier run is replaced rather than refusing to start."""
    path = str(tmp_path / "stale.sock")
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(path)
    leftover.close()
    assert os.path.exists(path)
    srv = UnixServer(tmp_path, path=path)
    try:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700
        with srv.conn() as s:
            assert exchange(s, b"mn\r\n") == b"MN\r\n"
    finally:
        srv.stop()


@pytest.mark.cachetd_only(reason="cachetd checks -a and -s; memcached takes any text")
def test_bad_unix_flags_are_usage_errors(tmp_path):
    for argv in (["-s", ""], ["-s", "x" * 200], ["-a", "9"], ["-a", "1777"], ["-a", "rw"]):
        r = subprocess.run([CACHETD, *argv], capture_output=True, timeout=20)
        assert r.returncode == 64, (argv, r.returncode, r.stderr)
        assert r.stderr.count(b"\n") == 1, r.stderr


def test_unix_socket_many_clients_across_workers(tmp_path):
    """One listening socket shared by every worker: 40 clients all get served."""
    srv = UnixServer(tmp_path, "-t", "2")
    socks = []
    try:
        for i in range(40):
            s = srv.conn()
            socks.append(s)
            assert exchange(s, f"set u{i} 0 0 1\r\n{i % 10}\r\n".encode()) == b"STORED\r\n"
        for i, s in enumerate(socks):
            assert exchange(s, f"get u{i}\r\n".encode(), b"END\r\n") == f"VALUE u{i} 0 1\r\n{i % 10}\r\nEND\r\n".encode()
    finally:
        for s in socks:
            s.close()
        srv.stop()


# ---- idle_timeout --------------------------------------------------------------

def wait_closed(sock, seconds):
    """True if the peer closes within `seconds` (bounded poll)."""
    sock.settimeout(0.2)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            if sock.recv(4096) == b"":
                return True
        except socket.timeout:
            continue
        except ConnectionResetError:
            return True
    return False


# cachetd's test builds pass an idle timeout on the test clock, a minute that
# no pause of a busy machine comes near; memcached 1.6.45 and release builds
# have no such clock and pass a short one on the wall clock.
ON_TEST_CLOCK = HAS_TEST_HOOKS and not IS_MEMCACHED


def test_idle_timeout_closes_idle_connections_and_counts_them(start_server):
    """-o idle_timeout=N: a connection silent for more than N s is closed (also one that
    sent half a command), one that keeps sending commands is not, and each close is
    counted as idle_kicks."""
    timeout = 60 if ON_TEST_CLOCK else 2
    srv = start_server("-t", "1", "-o", f"idle_timeout={timeout}")   # one worker: one sweep sees all
    with srv.conn() as c:
        assert c.stats("settings")["idle_timeout"] == str(timeout)
    idle = srv.conn()
    half = srv.conn()
    busy = srv.conn()
    try:
        assert idle.cmd("version").startswith(b"VERSION ")
        half.send(b"get half-sent-comm")
        assert busy.cmd("version").startswith(b"VERSION ")
        closed = {}
        if ON_TEST_CLOCK:
            pass_idle_timeout(busy, timeout + 1)   # busy's own command keeps it alive
            closed = {name: True for name, s in (("idle", idle), ("half", half)) if wait_closed(s.sock, 10)}
        end = time.monotonic() + 15
        while not ON_TEST_CLOCK and time.monotonic() < end and len(closed) < 2:
            assert busy.cmd("mn") == b"MN"   # a command every 0.3 s keeps it alive
            for name, s in (("idle", idle), ("half", half)):
                if name not in closed and wait_closed(s.sock, 0.15):
                    closed[name] = True
        assert set(closed) == {"idle", "half"}, f"not closed: {set(('idle', 'half')) - set(closed)}"
        assert busy.cmd("mn") == b"MN"
        s = busy.stats()
        assert s["idle_kicks"] == "2", s.get("idle_kicks")
    finally:
        for s in (idle, half, busy):
            s.close()


def test_idle_timeout_spares_a_client_with_replies_pending(start_server):
    """memcached kicks only connections waiting for a command: a client that has asked
    for more than it has read (replies queued) is not idle, however long it waits."""
    timeout = 60 if ON_TEST_CLOCK else 1
    srv = start_server("-t", "1", "-o", f"idle_timeout={timeout}")
    big = b"x" * 500_000
    with srv.conn() as c:
        assert c.store("set", "big", big) == b"STORED"
    slow = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", srv.port))
    watcher = srv.conn()
    # an idle connection beside it: its kick proves the sweep ran, so the
    # slow client's survival is not just a sweep that never came
    bystander = srv.conn()
    try:
        assert bystander.cmd("mn") == b"MN"
        hits = int(watcher.stats()["get_hits"])
        slow.sendall(b"get big big big big big big big big\r\n")
        if ON_TEST_CLOCK:
            # its replies are queued once the first is answered; then the
            # minute passes, and the sweep at the end of that turn spares it
            wait_until(lambda: int(watcher.stats()["get_hits"]) > hits, 10, "the slow client's GET answered")
            pass_idle_timeout(watcher, timeout + 1)
        else:
            # well past the timeout, measured on the server's own clock
            start = int(watcher.stats()["uptime"])
            while int(watcher.stats()["uptime"]) < start + 4:
                time.sleep(0.2)
        assert bystander.closed_within(10), "the idle bystander was not kicked: no sweep ran"
        assert watcher.stats()["idle_kicks"] == "1"
        slow.settimeout(10)
        want = (b"VALUE big 0 500000\r\n" + big + b"\r\n") * 8 + b"END\r\n"
        got = b""
        while len(got) < len(want):
            chunk = slow.recv(1 << 20)
            assert chunk, "the slow client was closed"
            got += chunk
        assert got == want
    finally:
        slow.close()
        watcher.close()
        bystander.close()


def test_idle_timeout_off_by_default(start_server):
    srv = start_server()
    with srv.conn() as c:
        assert c.stats("settings")["idle_timeout"] == "0"
        assert "idle_kicks" not in c.stats()   # memcached shows it only with a timeout


# ---- the connection buffer cap: memcached's flag and cachetd's ----------------------

@pytest.mark.cachetd_only(reason="memcached has no default cap and no conn_buffer_limit")
def test_read_buf_mem_limit_sets_the_cap_in_megabytes(start_server):
    srv = start_server("-o", "read_buf_mem_limit=3")
    with srv.conn() as c:
        s = c.stats("settings")
        assert s["read_buf_mem_limit"] == str(3 << 20)
        assert s["conn_buffer_limit"] == str(3 << 20)


@pytest.mark.cachetd_only(reason="cachetd's own flag")
def test_conn_buffer_limit_still_works_and_zero_means_none(start_server):
    srv = start_server("-o", "conn_buffer_limit=5m")
    with srv.conn() as c:
        assert c.stats("settings")["conn_buffer_limit"] == str(5 << 20)
    srv2 = start_server("-o", "conn_buffer_limit=0")
    with srv2.conn() as c:
        assert c.stats("settings")["conn_buffer_limit"] == "0"


@pytest.mark.cachetd_only(reason="the default cap is cachetd's")
@pytest.mark.parametrize("args,want", [
    ([], 8 << 20),                                          # -m 64 -c 1024: 64 MiB, capped at m/8
    (["-c", "16"], 4 << 20),                                # 1 MiB -> the 4 MiB floor
    (["-m", "1024", "-c", "1000"], 1000 * 64 * 1024),       # 62.5 MiB, below m/8
    (["-m", "16", "-c", "2000"], 4 << 20),                  # m/8 = 2 MiB -> the floor wins
])
def test_default_cap_is_sized_from_m_and_c(start_server, args, want):
    srv = start_server(*args)
    with srv.conn() as c:
        assert int(c.stats("settings")["conn_buffer_limit"]) == want


@pytest.mark.cachetd_only(reason="cachetd checks its values")
@pytest.mark.parametrize("opt", ["read_buf_mem_limit=-1", "read_buf_mem_limit=x", "idle_timeout=-3",
                                 "idle_timeout=soon", "conn_buffer_limit=12q"])
def test_bad_network_options_are_usage_errors(opt):
    r = subprocess.run([CACHETD, "-o", opt], capture_output=True, timeout=20)
    assert r.returncode == 64, (opt, r.returncode, r.stderr)
    assert r.stderr.count(b"\n") == 1, r.stderr


# Every worker listens on every -l address (SO_REUSEPORT), and each worker's
# event table is indexed by fd. The table was sized -c + 8 per worker + 1024,
# but workers x addresses listeners are open before any client: with 100
# workers and 16 addresses the last addresses' listeners were past the table,
# never polled, and their connections never accepted. Every address must
# answer, on every connection: a listener the kernel picks that no worker
# polls leaves the connection unanswered (the read times out).
@pytest.mark.cachetd_only(reason="sizes cachetd's own event table")
def test_every_listen_address_answers_with_many_workers(start_server):
    addresses = [f"127.0.0.{i}" for i in range(1, 17)]
    srv = start_server("-t", "100", "-c", "10", "-o", "cpus=none", "-l", ",".join(addresses))
    for addr in addresses:
        for _ in range(40):   # spread over the address's 100 listeners
            with socket.create_connection((addr, srv.port), timeout=5) as s:
                s.sendall(b"version\r\n")
                assert s.recv(64).startswith(b"VERSION "), f"{addr}: no answer"
    srv.check_healthy()


def test_c_beyond_the_open_file_limit_refuses_to_start():
    """A -c the process cannot hold open is refused at start with 71, as memcached
    1.6.45 does ("failed to set rlimit for open files"), rather than started with a
    warning and found out when accept() fails with EMFILE: that spun the worker on the
    still-readable listener and wrote 1.5 million log lines in 4 s."""
    import resource

    def low_nofile():
        resource.setrlimit(resource.RLIMIT_NOFILE, (60, 60))

    argv = [CACHETD, "-c", "100", "-t", "2", "-p", str(next_free_port()), "-l", "127.0.0.1"]
    if IS_MEMCACHED:
        argv += ["-U", "0"] + (["-u", "root"] if os.geteuid() == 0 else [])
    r = subprocess.run(argv, capture_output=True, timeout=20, preexec_fn=low_nofile, stdin=subprocess.DEVNULL)
    assert r.returncode == 71, (r.returncode, r.stderr[-500:])
    assert b"rlimit for open files" in r.stderr, r.stderr[-500:]
