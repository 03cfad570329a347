"""Command line and `stats settings`: threads, CPU pinning, flags.

worker_cpus is cachetd's own setting (memcached has no pinning), so those tests
are cachetd-only. Pinning is checked twice: what `stats settings` claims, and
what the kernel says about the server's threads (/proc/<pid>/task/*/status), so
a report that is not backed by real affinity fails.
"""
import json
import os
import queue
import select
import socket
import subprocess
import threading
import time

import pytest

from conftest import CACHETD, IO_TIMEOUT_S, Conn, cpulist_to_set, fill, is_memcached_binary, settings_of, stat, value_of, wait_until


def thread_affinities(pid):
    """{tid: set of allowed CPUs} for every thread of a process."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("Cpus_allowed_list:"):
                        out[int(tid)] = cpulist_to_set(line.split(":", 1)[1])
        except FileNotFoundError:
            pass
    return out


ALLOWED = os.sched_getaffinity(0)


def test_num_threads_follows_t(start_server):
    srv = start_server("-t", "3")
    assert settings_of(srv)["num_threads"] == "3"
    with srv.conn() as c:
        assert c.stats()["threads"] == "3"


def test_settings_reflect_flags(start_server):
    srv = start_server("-m", "32", "-c", "100", "-I", "2m", "-f", "1.5", "-n", "64")
    s = settings_of(srv)
    assert int(s["maxbytes"]) == 32 * 1024 * 1024
    assert int(s["maxconns"]) == 100
    assert int(s["item_size_max"]) == 2 * 1024 * 1024
    assert float(s["growth_factor"]) == 1.5
    assert int(s["chunk_size"]) == 64
    assert int(s["tcpport"]) == srv.port


def test_no_cas_flag(start_server):
    srv = start_server("-C")
    assert settings_of(srv)["cas_enabled"] == "no"
    with srv.conn() as c:
        c.store("set", "k", "v")
        assert c.values("gets k")["k"][2] == 0, "with -C every CAS unique is 0"


@pytest.mark.cachetd_only(reason="memcached does not pin workers and has no worker_cpus setting")
def test_default_workers_one_per_allowed_cpu(start_server):
    srv = start_server()
    s = settings_of(srv)
    assert "worker_cpus" in s, f"stats settings lacks worker_cpus: {sorted(s)}"
    assert cpulist_to_set(s["worker_cpus"]) == ALLOWED
    assert int(s["num_threads"]) == len(ALLOWED)
    affinities = thread_affinities(srv.proc.pid)
    for cpu in ALLOWED:
        assert any(cpus == {cpu} for cpus in affinities.values()), \
            f"no thread pinned to CPU {cpu}: {affinities}"


@pytest.mark.cachetd_only(reason="memcached has no -o cpus")
def test_cpus_option_pins_workers(start_server):
    srv = start_server("-o", "cpus=0")
    s = settings_of(srv)
    assert cpulist_to_set(s["worker_cpus"]) == {0}
    assert s["num_threads"] == "1"
    affinities = thread_affinities(srv.proc.pid)
    assert sum(1 for cpus in affinities.values() if cpus == {0}) >= 1, \
        f"no thread is pinned to CPU 0: {affinities}"
    with srv.conn() as c:  # and it serves
        assert c.store("set", "k", "v") == b"STORED"


@pytest.mark.cachetd_only(reason="memcached has no -o cpus")
def test_cpus_option_with_threads(start_server):
    if len(ALLOWED) < 2:
        pytest.fail("this machine must allow at least 2 CPUs for the pinning test")
    cpus = sorted(ALLOWED)[:2]
    srv = start_server("-o", f"cpus={cpus[0]},{cpus[1]}", "-t", "2")
    s = settings_of(srv)
    assert cpulist_to_set(s["worker_cpus"]) == set(cpus)
    assert s["num_threads"] == "2"
    pinned = sorted(next(iter(c)) for c in thread_affinities(srv.proc.pid).values()
                    if len(c) == 1 and next(iter(c)) in cpus)
    assert set(pinned) == set(cpus), f"expected a worker on each of {cpus}, saw {pinned}"


@pytest.mark.cachetd_only(reason="memcached exits 1 on an unknown flag; the issue asks for exit code 64")
def test_unknown_flag_exits_64():
    proc = subprocess.run([CACHETD, "--no-such-flag"], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 64, proc
    assert proc.stderr.strip(), "an unknown flag must say what is wrong"
    proc = subprocess.run([CACHETD, "-Q"], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 64, proc


@pytest.mark.cachetd_only(reason="memcached has no -o cpus")
def test_cpus_outside_allowed_set_is_refused():
    proc = subprocess.run([CACHETD, "-p", "21999", "-l", "127.0.0.1", "-o", "cpus=9999"],
                          capture_output=True, text=True, timeout=10)
    assert proc.returncode != 0 and proc.stderr.strip(), proc


def test_help_exits_zero():
    proc = subprocess.run([CACHETD, "-h"], capture_output=True, text=True, timeout=10)
    assert proc.returncode == 0
    out = proc.stdout + proc.stderr
    for flag in ("-p", "-m", "-c", "-t", "-I"):
        assert flag in out, f"-h does not document {flag}"


def test_hashpower_option(start_server):
    srv = start_server("-o", "hashpower=20")
    with srv.conn() as c:
        assert c.stats()["hash_power_level"] == "20"


def test_no_hashexpand_keeps_the_initial_table(start_server):
    """-o no_hashexpand: memcached 1.6.45 never grows the table, whatever the
    item count (users set it to avoid the expansion's pause); without it the
    table grows past 1.5 items per bucket."""
    for opts, grows in (("hashpower=13,no_hashexpand", False), ("hashpower=13", True)):
        srv = start_server("-o", opts)
        with srv.conn() as c:
            fill(c, 14000, prefix="h", size=10)   # over 1.5 items per bucket of 2^13
            if grows:
                wait_until(lambda: c.stats()["hash_power_level"] != "13", 10, "the table growing")
            else:
                assert c.stats()["hash_power_level"] == "13"
                got = c.values("get h0 h13999")
                assert [got[k][1] for k in ("h0", "h13999")] == [value_of("h", 0, 10), value_of("h", 13999, 10)]


def test_no_maxconns_fast_clients_beyond_c_wait_instead_of_an_error(start_server):
    """-o no_maxconns_fast: a client beyond -c is not answered "ERROR Too many
    open connections" and closed; it waits in the backlog and is served once
    another connection closes (memcached 1.6.45 accepts until it runs out of
    the descriptors -c gives it, then waits; cachetd, whose memory formula
    holds -c connections, waits at -c)."""
    srv = start_server("-c", "64", "-o", "no_maxconns_fast")
    with srv.conn() as c:
        assert c.stats("settings")["maxconns_fast"] == "no"
    # memcached also shrinks its backlog while it waits, so a connect itself
    # can wait: every client runs on its own thread and holds its connection
    # until the test lets it go, one at a time
    served = queue.Queue()

    def client():
        release = threading.Event()
        try:
            with Conn(srv.port, timeout=60) as c:
                c.send(b"version\r\n")
                served.put((c.line(), release))
                release.wait(60)
        except OSError as e:
            served.put((repr(e).encode(), release))

    threads = [threading.Thread(target=client, daemon=True) for _ in range(68)]
    for t in threads:
        t.start()
    wait_until(lambda: served.qsize() >= 30, 30, "the first clients served")
    for _ in threads:
        reply, release = served.get(timeout=60)
        assert reply.startswith(b"VERSION"), reply
        release.set()
    for t in threads:
        t.join(10)


def test_no_maxconns_fast_a_burst_across_c_on_many_workers_is_never_refused(start_server):
    """-o no_maxconns_fast again, where a burst of connects crosses -c while
    several workers accept at once: each accepts from its own listener, and
    cachetd looked at the count before accepting and counted after, so two
    workers could both see room for the last place and the second answered
    "ERROR Too many open connections" (make check's release pass hit it on a
    busy machine). Eight workers; bursts of twice -c non-blocking connects,
    which reach every worker's backlog together; each client asks `version`
    and hangs up once answered, so those beyond -c are served in turn."""
    limit = 64    # memcached 1.6.45 needs the descriptors of -c 64 to start eight workers
    srv = start_server("-c", str(limit), "-t", "8", "-o", "no_maxconns_fast")
    for burst in range(40):
        socks = []
        try:
            for _ in range(2 * limit):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", srv.port))
                socks.append(s)
            # a client beyond -c is connected in cachetd's backlog; memcached
            # may leave its connect waiting: ask each once it is connected
            unsent, waiting, replies = list(socks), [], []
            deadline = time.monotonic() + 60
            while unsent or waiting:
                assert time.monotonic() < deadline, \
                    f"burst {burst}: {len(unsent) + len(waiting)} clients never answered"
                readable, writable, _ = select.select(waiting, unsent, [], 1.0)
                for s in writable:
                    s.setblocking(True)
                    s.settimeout(IO_TIMEOUT_S)
                    s.sendall(b"version\r\n")
                    unsent.remove(s)
                    waiting.append(s)
                for s in readable:
                    replies.append(s.recv(100))
                    waiting.remove(s)
                    s.close()               # its place goes to one still waiting
            refused = [r for r in replies if not r.startswith(b"VERSION ")]
            assert not refused, f"burst {burst}: {len(refused)} of {2 * limit} clients got {refused[0]!r}"
        finally:
            for s in socks:
                s.close()
    with srv.conn() as c:   # memcached 1.6.45 shows the counter only with maxconns_fast on
        assert c.stats().get("rejected_connections", "0") == "0"


def test_m_above_the_handle_limit_starts_capped(start_server):
    """memcached 1.6.45 starts with any -m. cachetd addresses items with 32-bit
    handles: above 32767 MB it says so and starts with -m 32767 (nothing is
    allocated up front, so the test costs no memory)."""
    out = subprocess.run([CACHETD, "--check-args", "-m", "40000"], capture_output=True, text=True, timeout=20)
    if not is_memcached_binary(CACHETD):
        assert out.returncode == 0 and "capped at 32767 MB" in out.stderr, out
        budgets = [json.loads(subprocess.run([CACHETD, "--memory-budget", "-m", m], capture_output=True,
                                             text=True, timeout=20, check=True).stdout) for m in ("40000", "32767")]
        assert budgets[0] == budgets[1], "the memory formula counts the memory used, not the -m asked for"
    srv = start_server("-m", "40000")
    with srv.conn() as c:
        want = 40000 << 20 if is_memcached_binary(CACHETD) else 32767 << 20
        assert int(c.stats("settings")["maxbytes"]) == want
        assert c.cmd("set k 0 0 1\r\nx") == b"STORED"


def test_temporary_ttl_items_are_never_evicted(start_server):
    """-o temporary_ttl=N: memcached 1.6.45 keeps items stored with a TTL of at
    most N seconds in an LRU that only expiry empties. With memory full of
    them a store is refused (out of memory) rather than one of them evicted;
    items without a TTL are still evicted to make room."""
    srv = start_server("-m", "8", "-o", "temporary_ttl=100")
    with srv.conn() as c:
        st = c.stats("settings")
        assert (st["temp_lru"], st["temporary_ttl"]) == ("yes", "100")
        fill(c, 1000, prefix="keep", size=1000)
        replies = []
        for start in range(0, 12000, 100):   # more than -m 8 holds
            c.send(b"".join(b"set tmp%d 0 50 1000\r\n%s\r\n" % (i, value_of("tmp", i, 1000))
                            for i in range(start, start + 100)))
            replies += [c.line() for _ in range(100)]
        assert set(replies) <= {b"STORED", b"SERVER_ERROR out of memory storing object"}, set(replies)
        stored = [i for i, r in enumerate(replies) if r == b"STORED"]
        assert 0 < len(stored) < len(replies)
        for start in range(0, len(stored), 100):
            keys = [f"tmp{i}" for i in stored[start:start + 100]]
            got = c.values("get " + " ".join(keys))
            assert sorted(got) == sorted(keys), f"{len(keys) - len(got)} temporary items evicted"
        assert stat(c, "evictions") > 0, "the items without a TTL made room"
    assert settings_of(start_server())["temp_lru"] == "no"


def test_udp_is_off(start_server):
    srv = start_server()
    assert settings_of(srv)["udpport"] == "0"
    bound = []
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(table) as f:
                next(f)
                bound += [int(line.split()[1].rsplit(":", 1)[1], 16) for line in f]
        except FileNotFoundError:
            pass
    assert srv.port not in bound, "a UDP socket is bound to the server's port"


def test_explicit_slab_sizes(start_server):
    srv = start_server("-o", "slab_sizes=128-512-2048")
    with srv.conn() as c:
        assert c.store("set", "small", "s" * 100) == b"STORED"
        assert c.store("set", "large", "l" * 1000) == b"STORED"
        assert c.values("get small large") == {"small": (0, b"s" * 100, None), "large": (0, b"l" * 1000, None)}
        slabs = c.stats("slabs")
    used = {int(slabs[k.replace("used_chunks", "chunk_size")])
            for k, v in slabs.items() if k.endswith(":used_chunks") and int(v) > 0}
    assert used == {512, 2048}, f"items landed in classes {used}; stats slabs: {slabs}"


def test_verbose_flag_logs_and_serves(start_server):
    srv = start_server("-vv")
    with srv.conn() as c:
        assert c.store("set", "k", "v") == b"STORED"
        assert c.values("get k") == {"k": (0, b"v", None)}
    assert srv.log().strip(), "-vv wrote nothing to the log"


@pytest.mark.cachetd_only(reason="--args-file is cachetd's (the operator passes flags through a file)")
@pytest.mark.parametrize("form", ["--args-file={}", "--args-file {}"])
def test_args_file(start_server, tmp_path, form):
    args = tmp_path / "cachetd.args"
    args.write_text("# flags from a file; the command line wins\n-p 1\n-o cpus=0\n-m 32\n")
    srv = start_server(*form.format(args).split(" "))  # argv's -p (added by the harness) beats the file's -p 1
    s = settings_of(srv)
    assert s["tcpport"] == str(srv.port)
    assert cpulist_to_set(s["worker_cpus"]) == {0}
    assert int(s["maxbytes"]) == 32 * 1024 * 1024


@pytest.mark.cachetd_only(reason="--args-file is cachetd's")
def test_args_file_errors_exit_64(tmp_path):
    proc = subprocess.run([CACHETD, f"--args-file={tmp_path / 'missing'}", "-p", "21998"],
                          capture_output=True, text=True, timeout=10)
    assert proc.returncode == 64 and proc.stderr.strip(), proc
    bad = tmp_path / "bad.args"
    bad.write_text("--no-such-flag\n")
    proc = subprocess.run([CACHETD, f"--args-file={bad}", "-p", "21998"],
                          capture_output=True, text=True, timeout=10)
    assert proc.returncode == 64 and proc.stderr.strip(), proc


@pytest.mark.cachetd_only(reason="memcached has no io_uring switch")
@pytest.mark.parametrize("option,expected", [("no_io_uring", "no"), ("io_uring", "yes")])
def test_network_backend_switch(start_server, option, expected):
    srv = start_server("-o", option)
    assert settings_of(srv)["io_uring"] == expected
    with srv.conn() as c:
        c.send(b"".join(f"set k{i} 0 0 1\r\n{i % 10}\r\n".encode() for i in range(100)))
        assert all(c.line() == b"STORED" for _ in range(100))
        assert len(c.values("get " + " ".join(f"k{i}" for i in range(100)))) == 100


@pytest.mark.cachetd_only(reason="memcached 1.6.18 exits at once on SIGTERM and cuts a reply in half; "
                          "cachetd drains what it queued (pods are stopped with SIGTERM)")
def test_sigterm_mid_pipeline_exits_cleanly(start_server):
    srv = start_server()
    unit = b"VALUE k 0 1000\r\n" + b"v" * 1000 + b"\r\nEND\r\n"
    with srv.conn() as c:
        c.store("set", "k", "v" * 1000)
        # 20 MB of replies: far more than socket buffers hold, so the server
        # is still mid-pipeline, blocked on a full socket, when SIGTERM comes
        c.send(b"get k\r\n" * 20000)
        assert c.exact(len(unit)) == unit
        srv.proc.terminate()
        srv.expect_exit = True
        assert c.closed_within(15), "the connection stayed open after SIGTERM"
        tail = c.buf
    # whatever arrived before the close is whole replies, in order: none cut in half
    assert len(tail) % len(unit) == 0 and tail == unit * (len(tail) // len(unit)), \
        f"a reply was cut: {len(tail)} bytes after SIGTERM, ends {tail[-40:]!r}"
    assert srv.proc.wait(timeout=15) == 0, "SIGTERM must end the server with exit code 0"


# ---- --check-args and --memory-budget: the same answer as a start --------------------

REFUSED_AT_START = [
    ["-o", "slab_sizes=48-600000"],                # a class above half a slab page (storage's limit)
    ["-o", "slab_sizes=40-100"],                   # a class below the smallest item
    ["-m", "8", "-I", "1k", "-o", "slab_sizes=48-40000"],
    ["-m", "2", "-I", "2m"],                       # -I above half of -m
    ["-t", "0"],
    ["-o", "ext_path=/x:64m,ext_page_size=6,ext_wbuf_size=4"],
    ["-o", "slab_sizes=41-42"],                     # both round up to one 48-byte class (storage's rule)
    ["-m", "256", "-o", "slab_chunk_max=16", "-I", "64m"],   # a chained head cannot list -I's chunks
    ["-o", "ext_path=/x:4m,ext_page_size=4"],      # fewer than 2 extstore pages
    ["-o", "ext_path=/x:1t,ext_page_size=4"],      # more pages than a locator can name
    ["-Z"],
]


@pytest.mark.cachetd_only(reason="--check-args and --memory-budget are cachetd's")
@pytest.mark.parametrize("args", REFUSED_AT_START, ids=lambda a: " ".join(a))
def test_check_args_and_memory_budget_refuse_what_a_start_refuses(args, tmp_path):
    """Each mode refuses with a start's exit code (64) and its very message: they run the
    same parse and validation, and a rule storage would apply at start is a usage error
    before anything starts."""
    start = subprocess.run([CACHETD, "-s", str(tmp_path / "sock"), *args], capture_output=True, text=True, timeout=20)
    assert start.returncode == 64 and start.stderr.startswith("cachetd: "), (start.returncode, start.stderr)
    for mode in ("--check-args", "--memory-budget"):
        got = subprocess.run([CACHETD, mode, *args], capture_output=True, text=True, timeout=20)
        assert (got.returncode, got.stderr, got.stdout) == (64, start.stderr, ""), (mode, got)


@pytest.mark.cachetd_only(reason="--check-args and --memory-budget are cachetd's")
def test_memory_budget_names_its_terms_and_follows_the_arguments():
    def budget(*args):
        out = subprocess.run([CACHETD, "--memory-budget", *args], capture_output=True, text=True, timeout=20)
        assert out.returncode == 0 and out.stderr == "", out
        b = json.loads(out.stdout)
        assert b["total"] == sum(b["terms"].values()) and all(v >= 0 for v in b["terms"].values()), b
        return b

    base = budget("-m", "64", "-t", "2")
    assert subprocess.run([CACHETD, "--check-args", "-m", "64", "-t", "2"], capture_output=True).returncode == 0
    assert base["terms"]["item_memory"] >= 64 << 20 and base["terms"]["metrics"] == 0
    assert not any(name.startswith("ext_") for name in base["terms"])
    # each argument moves its own term
    assert budget("-m", "128", "-t", "2")["terms"]["item_memory"] == base["terms"]["item_memory"] + (64 << 20)
    # a worker: 1 MiB, and an event table of -c + (8 own fds + 16 listeners) per
    # worker + 1024 slots of 32 bytes
    assert base["terms"]["workers"] == 2 * ((1 << 20) + (1024 + 2 * (8 + 16) + 1024) * 32)
    assert budget("-m", "64", "-t", "4")["terms"]["workers"] == 4 * ((1 << 20) + (1024 + 4 * (8 + 16) + 1024) * 32)
    assert budget("-m", "64", "-t", "2", "-c", "2048")["terms"]["connections"] == 2 * base["terms"]["connections"]
    assert budget("-m", "64", "-t", "2", "-o", "metrics_port=9150")["terms"]["metrics"] > 0
    assert budget("-m", "64", "-t", "2", "-o", "hashpower=24")["terms"]["hash_table"] == 4 << 24
    one = budget("-m", "64", "-t", "2", "-o", "ext_path=/nonexistent/f:1g,ext_threads=1")
    four = budget("-m", "64", "-t", "2", "-o", "ext_path=/nonexistent/f:1g,ext_threads=4")
    assert one["terms"]["ext_io_threads"] > 0 and four["terms"]["ext_io_threads"] == 4 * one["terms"]["ext_io_threads"]
    # no cap on connection buffers, no bound
    assert budget("-m", "64", "-t", "2", "-o", "conn_buffer_limit=0")["bounded"] is False
    # -k: mlockall makes whole thread stacks resident, which the terms do not count
    locked = budget("-m", "64", "-t", "2", "-k", "-o", "sock_sndbuf=64k,sock_rcvbuf=16k")
    assert locked["bounded"] is False and any("-k" in r for r in locked["unbounded"]), locked
    # each worker's event table has a slot per fd -c allows (not per RLIMIT_NOFILE)
    wide = budget("-m", "64", "-t", "2", "-c", "65536")["terms"]["workers"]
    assert wide - base["terms"]["workers"] == 2 * (65536 - 1024) * 32, (wide, base)
    # kernel socket buffers: unset, the kernel autotunes them and nothing bounds them
    auto = budget("-m", "64", "-t", "2", "-c", "100")
    assert auto["bounded"] is False and any("sock_sndbuf" in r for r in auto["unbounded"]), auto
    fixed = budget("-m", "64", "-t", "2", "-c", "100", "-o", "sock_sndbuf=64k,sock_rcvbuf=16k")
    assert fixed["bounded"] and fixed["unbounded"] == [], fixed
    # -c x (the kernel's doubled buffers + forward allocation + socket objects)
    assert fixed["terms"]["socket_buffers"] == 100 * (2 * 64 * 1024 + 2 * 16 * 1024 + 8 * 1024), fixed
    assert budget("-m", "64", "-t", "2", "-c", "100", "-o", "sock_sndbuf=128k,sock_rcvbuf=16k")["terms"][
        "socket_buffers"] == fixed["terms"]["socket_buffers"] + 100 * 2 * 64 * 1024
    for bad in ("sock_sndbuf=lots", "sock_rcvbuf=2g"):
        out = subprocess.run([CACHETD, "--check-args", "-o", bad], capture_output=True, text=True, timeout=20)
        assert out.returncode == 64 and "sock_" in out.stderr, out


def test_slabs_automove_answers_as_memcached_and_shows_in_settings(start_server):
    """`slabs automove 0|1|2` is accepted and shown as slab_automove in `stats
    settings` (0 stops cachetd's background page balancing); anything else gets
    memcached 1.6.45's reply, not ERROR for every form."""
    srv = start_server()
    with srv.conn() as c:
        assert c.stats("settings")["slab_automove"] == "1", "memcached's default"
        for line, want in [("slabs automove invalid", b"CLIENT_ERROR bad command line format"),
                           ("slabs automove -1", b"CLIENT_ERROR bad command line format"),
                           ("slabs automove 3", b"ERROR"),
                           ("slabs automove", b"ERROR"),
                           ("slabs", b"ERROR"),
                           ("slabs automove ratio x", b"ERROR"),
                           ("slabs automove ratio 0.5", b"OK"),
                           ("slabs automove freeratio 0.1", b"OK"),
                           ("slabs automove window 2", b"CLIENT_ERROR automove window too low or too high"),
                           ("slabs automove window x", b"CLIENT_ERROR bad command line format"),
                           ("slabs automove window 30", b"OK")]:
            assert c.cmd(line) == want, line
        assert c.stats("settings")["slab_automove"] == "1", "a refused or tuning request changes no level"
        for level in ("0", "2", "1", "0"):
            assert c.cmd(f"slabs automove {level}") == b"OK"
            assert c.stats("settings")["slab_automove"] == level
        # memcached's prefix match, and noreply
        assert c.cmd("slabs auto 2") == b"OK"
        c.send(b"slabs automove 1 noreply\r\nmn\r\n")
        assert c.line() == b"MN"
        assert c.stats("settings")["slab_automove"] == "1"


def class_pages(c):
    """{class id: total_pages} from `stats slabs`."""
    return {int(k.split(":")[0]): int(v) for k, v in c.stats("slabs").items() if k.endswith(":total_pages")}


def test_slabs_reassign_answers_and_moves_a_page_as_memcached(start_server):
    """`slabs reassign <src> <dst>` (protocol.txt): memcached 1.6.45's replies in
    its order of checks, and OK moves one page of src to dst."""
    srv = start_server("-m", "64")
    with srv.conn() as c:
        for line, want in [("slabs reassign 1 1", b"SAME src and dst class are identical"),
                           ("slabs reassign 99 99", b"SAME src and dst class are identical"),
                           ("slabs reassign 64 1", b"BADCLASS invalid src or dst class id"),
                           ("slabs reassign 1 -1", b"BADCLASS invalid src or dst class id"),
                           ("slabs reassign -1 2", b"BADCLASS invalid src or dst class id"),   # nothing to pick
                           ("slabs reassign 1 2", b"NOSPARE source class has no spare pages"),
                           ("slabs reassign 0 2", b"NOSPARE source class has no spare pages"),
                           ("slabs r 01 2", b"NOSPARE source class has no spare pages"),          # prefix, strtol
                           ("slabs reassign +1 2", b"CLIENT_ERROR bad command line format"),
                           ("slabs reassign 2147483648 1", b"CLIENT_ERROR bad command line format"),
                           ("slabs reassign 1 2x", b"CLIENT_ERROR bad command line format"),
                           ("slabs reassign 1", b"ERROR"),
                           ("slabs reassign 1 2 3", b"ERROR")]:
            assert c.cmd(line) == want, line
        c.send(b"slabs reassign 1 1 noreply\r\nmn\r\n")
        assert c.line() == b"MN"
        fill(c, 3000, prefix="ra", size=1000)
        before = class_pages(c)
        src = max(before, key=before.get)
        assert before[src] >= 3, before
        dst = 1 if src != 1 else 2
        assert c.cmd(f"slabs reassign {src} {dst}") == b"OK"
        wait_until(lambda: class_pages(c).get(dst, 0) == before.get(dst, 0) + 1, 10, "the page reaching dst")
        # (src may carve a fresh page for the items the move rescued while -m has room)
        assert class_pages(c)[src] <= before[src]
        assert stat(c, "slabs_moved") == 1
        assert c.cmd("set small 0 0 1\r\nx") == b"STORED", "dst's new page takes items"


def test_no_slab_reassign_refuses_reassign_and_never_moves_a_page(start_server):
    """-o no_slab_reassign and -o slab_automove=0: memcached 1.6.45 moves no page
    on its own, so once memory is full a class keeps its pages and its items
    whatever another class needs (the effect users set these for). A class
    with no page then gets none from another: memcached gives a class its
    first page even past -m, cachetd (bound by the memory formula) refuses
    the store with out of memory. `slabs reassign` says it is disabled
    without slab_reassign, and still works at slab_automove=0."""
    for opt in ("no_slab_reassign", "slab_automove=0"):
        srv = start_server("-m", "8", "-o", opt)
        with srv.conn() as c:
            st = c.stats("settings")
            assert (st["slab_reassign"], st["slab_automove"]) == (("no", "1") if opt == "no_slab_reassign"
                                                                  else ("yes", "0")), st
            fill(c, 12000, prefix="small", size=1000)   # more than -m 8 holds: the class evicts
            assert stat(c, "evictions") > 0
            pages = class_pages(c)
            src = max(pages, key=pages.get)
            small_items = stat(c, f"items:{src}:number", "items")
            for i in range(20):
                reply = c.cmd(f"set big{i} 0 0 100000\r\n" + "b" * 100000)
                assert reply in (b"STORED", b"SERVER_ERROR out of memory storing object"), (opt, reply)
            after = class_pages(c)
            assert all(after[k] == n for k, n in pages.items()), (opt, pages, after)
            assert stat(c, f"items:{src}:number", "items") == small_items, opt
            want = b"CLIENT_ERROR slab reassignment disabled" if opt == "no_slab_reassign" else b"OK"
            assert c.cmd(f"slabs reassign {src} 1") == want, opt
