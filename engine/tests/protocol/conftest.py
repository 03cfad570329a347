"""Shared harness for the protocol conformance suite.

Why it is built this way:
- Every test talks to a server that the suite starts itself (CACHETD, an
  absolute path), on ports 21000-21999 only, so runs never touch a server
  someone else started and a missing or crashing binary FAILS the run rather
  than skipping it.
- The same tests run against memcached 1.6.45 (CACHETD pointing at a binary
  named `memcached`, built by /work/shared/peers/build-memcached.sh): that is
  how every expectation here was checked to be memcached's real behaviour. Tests marked `cachetd_only` encode what the
  engine issue asks beyond memcached; they are skipped only in memcached mode.
- Every wait is bounded (socket timeouts, start deadline, pytest-timeout), and
  every server is checked at teardown: still alive, and no sanitizer report in
  its log, so an ASan/UBSan build turns memory errors into test failures.
"""
import os
import random
import signal
import socket
import subprocess
import tempfile
import time

import pytest

CACHETD = os.environ.get("CACHETD", "")
IS_MEMCACHED = os.path.basename(os.path.realpath(CACHETD)) == "memcached" if CACHETD else False
HAS_TEST_HOOKS = os.environ.get("CACHETD_TEST_HOOKS") == "1"
PORT_RANGE = (21000, 21999)
START_DEADLINE_S = 20.0  # an ASan build on a busy 2-core machine starts slowly
IO_TIMEOUT_S = 10.0
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer",
                     "WARNING: ThreadSanitizer", "SUMMARY: UndefinedBehaviorSanitizer")


def pytest_report_header(config):
    flavour = "memcached (reference mode)" if IS_MEMCACHED else \
        "cachetd test build" if HAS_TEST_HOOKS else "cachetd"
    return [f"server under test: {CACHETD or '<unset>'} [{flavour}]"]


def pytest_collection_modifyitems(config, items):
    # A test build (CACHETD_TEST_HOOKS=1, see tests/protocol/test_deferred.py) runs the
    # tests of its hooks; a release build runs the check that it has none. Each set is
    # deselected, not skipped, on the other kind of binary.
    keep, drop = [], []
    for item in items:
        hooks_only = item.get_closest_marker("test_hooks") is not None
        release_only = item.get_closest_marker("release_build") is not None
        # A long run (test_differential.py's test_for_a_while) runs only when its time
        # is given, from `make differential-long`; `make check` deselects it.
        long_run = item.get_closest_marker("long_run") is not None and not os.environ.get("CACHET_DIFF_SECONDS")
        (drop if (hooks_only and not HAS_TEST_HOOKS) or (release_only and HAS_TEST_HOOKS) or long_run
         else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if not IS_MEMCACHED:
        return  # against cachetd nothing is ever skipped
    for item in items:
        mark = item.get_closest_marker("cachetd_only")
        if mark is not None:
            why = mark.kwargs.get("reason") or (mark.args[0] if mark.args else "")
            item.add_marker(pytest.mark.skip(reason=f"cachetd-only: {why}"))


# ---- ports ------------------------------------------------------------------
def _worker_ports():
    """This process's share of PORT_RANGE. Under pytest-xdist (make check runs
    the suite on several workers) each worker gets its own slice: a server
    that lost a bind race could otherwise pass its readiness probe by reaching
    another worker's server on the same port."""
    lo, hi = PORT_RANGE
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 0:
        span = (hi - lo + 1) // int(count)
        lo = lo + int(worker[2:]) * span
        hi = lo + span - 1
    return lo, hi


_PORTS = _worker_ports()
_port_cursor = [_PORTS[0] + (os.getpid() * 37) % (_PORTS[1] - _PORTS[0] + 1)]


def _port_is_free(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def next_free_port():
    span = _PORTS[1] - _PORTS[0] + 1
    for _ in range(span):
        port = _port_cursor[0]
        _port_cursor[0] = _PORTS[0] + (port + 1 - _PORTS[0]) % span
        if _port_is_free(port):
            return port
    raise RuntimeError(f"no free TCP port in {_PORTS[0]}-{_PORTS[1]}")


# ---- a raw ASCII connection ---------------------------------------------------
class Conn:
    """A blocking socket with line/exact reads, each bounded by a timeout."""

    def __init__(self, port, timeout=IO_TIMEOUT_S, rcvbuf=None):
        """rcvbuf: SO_RCVBUF set before connecting (so the window stays that
        small): a client across a slow link, which the kernel cannot hide."""
        self.port = port
        if rcvbuf is None:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        else:
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.settimeout(timeout)
            self.sock.connect(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError(f"server closed the connection; unread: {self.buf[:200]!r}")
        self.buf += chunk

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def cmd(self, line):
        """Send one command line, return the first reply line."""
        if isinstance(line, str):
            line = line.encode()
        self.send(line + b"\r\n")
        return self.line()

    def store(self, verb, key, value, flags=0, exptime=0, extra=""):
        if isinstance(value, str):
            value = value.encode()
        head = f"{verb} {key} {flags} {exptime} {len(value)}{(' ' + extra) if extra else ''}\r\n"
        self.send(head.encode() + value + b"\r\n")
        if "noreply" in extra.split():
            return None
        return self.line()

    def values(self, line):
        """Send a get-like command; return {key: (flags, data, cas-or-None)} up to END."""
        if isinstance(line, str):
            line = line.encode()
        self.send(line + b"\r\n")
        return self.read_values()

    def read_values(self):
        out = {}
        while True:
            head = self.line()
            if head == b"END":
                return out
            parts = head.split()
            assert parts[0] == b"VALUE", f"unexpected line in retrieval reply: {head!r}"
            data = self.exact(int(parts[3]))
            assert self.exact(2) == b"\r\n", "data block not terminated by CRLF"
            cas = int(parts[4]) if len(parts) > 4 else None
            out[parts[1].decode()] = (int(parts[2]), data, cas)

    def stats(self, sub=""):
        self.send(f"stats{(' ' + sub) if sub else ''}\r\n".encode())
        return self.read_stats()

    def read_stats(self):
        """The reply of a stats request already sent (one pipelined behind others)."""
        out = {}
        while True:
            line = self.line()
            if line == b"END":
                return out
            assert line.startswith(b"STAT "), f"unexpected stats line {line!r}"
            _, name, value = line.decode().split(" ", 2)
            out[name] = value

    def closed_within(self, seconds):
        """True if the server closes this connection within `seconds` (data before EOF is kept in buf)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True
            self.buf += chunk
        return False


# ---- a server under test --------------------------------------------------------
def advance_clock(conn, seconds):
    """Moves the server's clock `seconds` forward: `debugtime`, a command of
    cachetd's test-hooks builds (memcached's debug builds have one too). TTLs,
    delayed flushes and idle ages then pass without the test sleeping through
    them; a test that uses it is marked test_hooks. Against a release build the
    command is an ERROR, and the test fails rather than wait on the wall clock."""
    reply = conn.cmd(f"debugtime {seconds}")
    assert reply == b"OK", f"debugtime {seconds}: {reply!r} (a test-hooks build is needed: CACHETD_TEST_HOOKS=1)"


def pass_idle_timeout(conn, seconds):
    """advance_clock by `seconds` on `conn`, with a command right behind it in
    the same read: the worker answers both in one turn and sweeps idle
    connections at its end (cachetd's net_worker.c, memcached's conn timeout
    check), so every connection whose last command is now more than
    idle_timeout old is closed there, except `conn` itself. With
    idle_timeout far above any pause of a busy machine, the wall clock
    decides nothing."""
    conn.send(f"debugtime {seconds}\r\nmn\r\n".encode())
    reply = conn.line()
    assert reply == b"OK", f"debugtime {seconds}: {reply!r} (a test-hooks build is needed: CACHETD_TEST_HOOKS=1)"
    assert conn.line() == b"MN"


def wait_until(predicate, seconds, what):
    """Polls predicate() until it is true; fails naming `what` after `seconds`.
    For work the server does on its own threads (a cleaner pass, a disk write):
    the test waits for the state it needs, never a fixed time."""
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.05)


def hold_every_slot(open_client, slots, seconds=15):
    """Opens `slots` served clients with open_client() (a client, or None or an
    OSError when the server turned it away) and returns them. A connection the
    test has just closed, such as start()'s readiness probe, holds its slot
    until a worker reaps the close, so a refusal is retried until then: a
    test of what happens at -c needs exactly -c clients held, not a race."""
    held = []
    deadline = time.monotonic() + seconds
    try:
        while len(held) < slots:
            try:
                client = open_client()
            except OSError:
                client = None
            if client is not None:
                held.append(client)
                continue
            assert time.monotonic() < deadline, f"only {len(held)} of {slots} clients served within {seconds} s"
            time.sleep(0.05)
    except BaseException:
        for client in held:
            client.close()
        raise
    return held


def conn_state(server_conn, client, field="state"):
    """The server's state for `client`'s connection (`stats conns`, which
    memcached has too), found by the client's port; `field` another of its
    lines, such as secs_since_last_cmd."""
    port = client.sock.getsockname()[1]
    st = server_conn.stats("conns")
    fds = [k.split(":")[0] for k, v in st.items() if k.endswith(":addr") and v.endswith(f":{port}")]
    return st[f"{fds[0]}:{field}"] if fds else None


def stat(conn, name, sub=""):
    """One counter of `stats [sub]` as an int (a ratio such as "0.80" truncated)."""
    value = conn.stats(sub)[name]
    return int(value) if value.lstrip("-").isdigit() else int(float(value))


def settings_of(srv):
    with srv.conn() as c:
        return c.stats("settings")


def value_of(prefix, i, size):
    """The value fill() stores under prefix<i>: its key repeated, so a value read
    back under another key, or cut short, never matches."""
    unit = b"%s:%08d|" % (prefix.encode(), i)
    return (unit * (size // len(unit) + 1))[:size]


def fill(c, count, prefix="fill", size=4096, batch=100):
    """Stores `count` values of `size` bytes (keys prefix0...), pipelined in batches, each reply read."""
    for start in range(0, count, batch):
        n = min(batch, count - start)
        c.send(b"".join(b"set %s%d 0 0 %d\r\n" % (prefix.encode(), i, size) + value_of(prefix, i, size) + b"\r\n"
                        for i in range(start, start + n)))
        for _ in range(n):
            line = c.line()
            assert line == b"STORED", line


def memcached_1645():
    """Path of memcached 1.6.45, the reference, built once from the snapshot in
    shared/peers (cached under ~/.cache/cachet/peers). A build that fails fails
    the calling test: a comparison that cannot run must never pass as skipped."""
    script = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                            check=True).stdout.strip() + "/../shared/peers/build-memcached.sh"
    out = subprocess.run(["bash", script], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"building memcached 1.6.45 failed:\n{out.stderr[-2000:]}"
    return out.stdout.strip().splitlines()[-1]


def is_memcached_binary(path):
    return os.path.basename(os.path.realpath(path)) == "memcached"


class Server:
    def __init__(self, args, tmpdir, binary=None):
        self.binary = binary or CACHETD
        self.args = list(args)
        self.tmpdir = tmpdir
        self.proc = None
        self.port = None
        self.log_path = None
        self.expect_exit = False  # set by a test that stops the server itself

    def argv(self, port):
        argv = [self.binary, "-p", str(port), "-l", "127.0.0.1"]
        if is_memcached_binary(self.binary):
            argv += ["-U", "0"]
            if os.geteuid() == 0:
                argv += ["-u", "root"]  # memcached refuses to run as root otherwise
        return argv + self.args

    def start(self):
        if not self.binary or not os.access(self.binary, os.X_OK):
            pytest.fail(f"{self.binary!r} is not an executable server binary (set CACHETD)")
        for _attempt in range(5):
            self.port = next_free_port()
            fd, self.log_path = tempfile.mkstemp(prefix=f"server-{self.port}-", suffix=".log", dir=self.tmpdir)
            env = dict(os.environ)
            # A cache frees nothing at exit by design; leak reports at shutdown are noise.
            env.setdefault("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
            env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
            self.proc = subprocess.Popen(self.argv(self.port), stdout=fd, stderr=fd,
                                         stdin=subprocess.DEVNULL, env=env)
            os.close(fd)
            if self._wait_ready():
                return self
            log = self.log()
            if self.proc.poll() is not None and "in use" in log.lower():
                continue  # someone took the port between our probe and the bind
            self._kill()
            pytest.fail(f"server did not start: {' '.join(self.argv(self.port))}\n"
                        f"exit={self.proc.returncode}\nlog:\n{log[-4000:]}")
        pytest.fail("server could not bind a free port after 5 attempts")

    def _wait_ready(self):
        deadline = time.monotonic() + START_DEADLINE_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with self.conn(timeout=2) as c:
                    reply = c.cmd("version")
                    # -Y: answered, but not before the client authenticates
                    if reply.startswith(b"VERSION ") or reply == b"CLIENT_ERROR unauthenticated":
                        return True
            except (OSError, ConnectionError):
                time.sleep(0.05)
        return False

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def conn(self, timeout=IO_TIMEOUT_S):
        return Conn(self.port, timeout=timeout)

    def check_healthy(self):
        """The server still runs, answers a new connection, and logged no sanitizer report."""
        assert self.alive(), f"server died (exit {self.proc.returncode}); log:\n{self.log()[-4000:]}"
        with self.conn() as c:
            assert c.cmd("version").startswith(b"VERSION "), "server no longer answers `version`"
        self.check_log()

    def check_log(self):
        log = self.log()
        for marker in SANITIZER_MARKERS:
            assert marker not in log, f"sanitizer report in server log:\n{log[-6000:]}"

    def _kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self):
        """Stop the server; return a problem description, or None if all was well."""
        if self.proc is None:
            return None
        problem = None
        if self.proc.poll() is not None:
            if not self.expect_exit:
                problem = f"server had died during the test (exit {self.proc.returncode})"
        else:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill()
        log = self.log()
        if problem is None:
            for marker in SANITIZER_MARKERS:
                if marker in log:
                    problem = "sanitizer report in server log"
                    break
        if problem:
            return f"{problem}; argv: {' '.join(self.argv(self.port))}\nlog:\n{log[-6000:]}"
        return None


class ServerFactory:
    def __init__(self, tmpdir):
        self.tmpdir = tmpdir
        self.servers = []

    def __call__(self, *args, binary=None):
        server = Server(args, self.tmpdir, binary=binary)
        self.servers.append(server)
        return server.start()

    def stop_all(self):
        problems = [p for p in (s.stop() for s in self.servers) if p]
        self.servers = []
        if problems:
            pytest.fail("\n\n".join(problems))


@pytest.fixture
def start_server(tmp_path):
    """Start a fresh server with extra flags: `start_server("-m", "8")`."""
    factory = ServerFactory(str(tmp_path))
    yield factory
    factory.stop_all()


@pytest.fixture(scope="module")
def module_server(tmp_path_factory):
    """One server shared by a module whose tests use disjoint keys."""
    factory = ServerFactory(str(tmp_path_factory.mktemp("srv")))
    server = factory()
    yield server
    factory.stop_all()


@pytest.fixture(scope="module", params=["default", "epoll"])
def module_server_each_backend(request, tmp_path_factory):
    """Like module_server, once per network backend: cachetd's default (io_uring
    batching where the kernel allows it) and plain epoll (-o no_io_uring), so
    both paths see the same traffic. memcached has one backend: no second pass."""
    if request.param == "epoll" and IS_MEMCACHED:
        pytest.skip("memcached has no -o no_io_uring")
    factory = ServerFactory(str(tmp_path_factory.mktemp("srv")))
    server = factory(*(["-o", "no_io_uring"] if request.param == "epoll" else []))
    yield server
    factory.stop_all()


@pytest.fixture
def server(module_server):
    """The module's server, checked healthy after every test that used it."""
    yield module_server
    module_server.check_healthy()


@pytest.fixture
def key(request):
    """A key unique to the test, so tests sharing a server never see each other's data."""
    name = request.node.name.replace("[", "_").replace("]", "").replace(" ", "_")
    return f"{name[:150]}-{random.randrange(1 << 30)}"


def cpulist_to_set(text):
    """Parse a Linux cpulist ('0-2,5') or a comma list into a set of ints."""
    cpus = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return cpus
