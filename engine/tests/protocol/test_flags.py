"""memcached 1.6.45's command line: the flags an operator brings from a memcached
configuration (engine/README.md, "Command line", has the table).

Every test here that is not marked cachetd_only also passes against memcached
1.6.45 itself (CACHETD=<path to memcached>): replies, stats settings names and
what each flag does were measured there. Exit codes differ on purpose:
memcached exits 1 (or 64, 67) on a bad value, cachetd always 64 (EX_USAGE), so
refusal tests expect 64 from cachetd and any failure from memcached.
"""
import os
import resource
import signal
import subprocess

import pytest

from conftest import CACHETD, IS_MEMCACHED, next_free_port, Conn, is_memcached_binary, settings_of, wait_until


def run_flags(*args, timeout=20):
    """Run the server with args that should make it exit at once (usage errors, -V)."""
    argv = [CACHETD, "-p", str(next_free_port()), "-l", "127.0.0.1"]
    if is_memcached_binary(CACHETD):
        argv += ["-U", "0"] + (["-u", "root"] if os.geteuid() == 0 else [])
    try:
        return subprocess.run(argv + list(args), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{args} did not make the server exit: it started")


def assert_refused(proc, args):
    if IS_MEMCACHED:
        assert proc.returncode != 0, (args, proc)
    else:
        assert proc.returncode == 64, (args, proc.returncode, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stderr.strip(), (args, proc.stderr)


# ---- -F: flush_all disabled ------------------------------------------------------

def test_F_refuses_flush_all_with_memcacheds_reply(start_server):
    srv = start_server("-F")
    assert settings_of(srv)["flush_enabled"] == "no"
    with srv.conn() as c:
        assert c.store("set", "kept", "v") == b"STORED"
        before = int(c.stats()["cmd_flush"])
        assert c.cmd("flush_all") == b"CLIENT_ERROR flush_all not allowed"
        assert c.cmd("flush_all 0") == b"CLIENT_ERROR flush_all not allowed"
        assert c.cmd("flush_all -1") == b"CLIENT_ERROR flush_all not allowed"
        # noreply silences the refusal, as every classic reply
        c.send(b"flush_all noreply\r\nflush_all 10 noreply\r\n")
        assert c.cmd("mn") == b"MN"
        assert c.values("get kept") == {"kept": (0, b"v", None)}, "-F must not flush"
        # memcached counts the refused flushes
        assert int(c.stats()["cmd_flush"]) - before == 5


def test_flush_all_enabled_by_default(start_server):
    srv = start_server()
    assert settings_of(srv)["flush_enabled"] == "yes"
    with srv.conn() as c:
        c.store("set", "gone", "v")
        assert c.cmd("flush_all") == b"OK"
        assert c.values("get gone") == {}


# ---- -A: the shutdown command ----------------------------------------------------

def test_shutdown_without_A_is_refused(start_server):
    srv = start_server()
    assert settings_of(srv)["shutdown_command"] == "no"
    with srv.conn() as c:
        for line in ("shutdown", "shutdown graceful", "shutdown foo"):
            assert c.cmd(line) == b"SERVER_ERROR: shutdown not enabled", line
        c.send(b"shutdown noreply\r\n")
        assert c.cmd("mn") == b"MN"
    assert srv.alive()


def test_shutdown_with_A_rejects_other_modes(start_server):
    srv = start_server("-A")
    assert settings_of(srv)["shutdown_command"] == "yes"
    with srv.conn() as c:
        for line in ("shutdown foo", "shutdown graceful x", "shutdown GRACEFUL"):
            assert c.cmd(line) == b"CLIENT_ERROR invalid shutdown mode", line
        # "noreply" is an argument (an invalid mode), and silences the refusal
        c.send(b"shutdown noreply\r\nshutdown graceful noreply\r\n")
        # an accepted shutdown closes the connection that asked: mn would go unanswered
        assert c.cmd("mn") == b"MN"
    srv.check_healthy()


def shutdown_stops_the_server(srv, line, pipelined):
    other = srv.conn()
    try:
        assert other.cmd("mn") == b"MN"
        with srv.conn() as c:
            if pipelined:
                c.send(b"set k 0 0 1\r\nx\r\n" + line.encode() + b"\r\n")
            else:
                assert c.store("set", "k", "x") == b"STORED"
                c.send(line.encode() + b"\r\n")
            srv.expect_exit = True
            if pipelined:
                assert c.line() == b"STORED", "a reply queued before shutdown was dropped"
            assert c.closed_within(10), "the connection that sent shutdown stayed open"
            assert c.buf == b"", f"shutdown answered {c.buf!r}"
        assert other.closed_within(10), "another client's connection survived the shutdown"
        assert srv.proc.wait(timeout=10) == 0, "shutdown must exit with 0"
    finally:
        other.close()


@pytest.mark.parametrize("line", ["shutdown", "shutdown graceful"])
def test_shutdown_with_A_stops_the_server(start_server, line):
    shutdown_stops_the_server(start_server("-A"), line, pipelined=False)


@pytest.mark.cachetd_only(reason="memcached 1.6.45 closes at once and drops replies queued in the same read; "
                          "cachetd sends them first, as it does for quit and SIGTERM")
@pytest.mark.parametrize("line", ["shutdown", "shutdown graceful"])
def test_shutdown_sends_replies_queued_before_it(start_server, line):
    shutdown_stops_the_server(start_server("-A"), line, pipelined=True)


# ---- -B: the binding protocol ----------------------------------------------------

def test_B_ascii_is_accepted(start_server):
    srv = start_server("-B", "ascii")
    assert settings_of(srv)["binding_protocol"] == "ascii"
    with srv.conn() as c:
        assert c.store("set", "k", "v") == b"STORED"
        assert c.cmd("mn") == b"MN"


@pytest.mark.cachetd_only(reason="memcached speaks the binary protocol; cachetd refuses -B binary/auto")
@pytest.mark.parametrize("proto", ["binary", "auto"])
def test_B_binary_and_auto_are_refused(proto):
    proc = run_flags("-B", proto)
    assert_refused(proc, proto)
    assert "binary protocol is not supported" in proc.stderr


def test_B_other_values_are_refused():
    assert_refused(run_flags("-B", "udp"), "-B udp")


# ---- flags refused: what cachetd does not do --------------------------------------

@pytest.mark.cachetd_only(reason="memcached has these features (or, for TLS, exits 64 itself)")
@pytest.mark.parametrize("args", [
    ["-U", "11211"], ["-S"], ["-e", "/tmp/cachet-memfile"], ["-N", "1"],
    ["-D", ":"],
    ["-o", "proxy_config=/dev/null"], ["-o", "drop_privileges"], ["-o", "sock_cookie_id=1"],
    ["-l", "proto[ascii]:127.0.0.1:21950"],
])
def test_unsupported_features_are_refused_with_64(args):
    proc = run_flags(*args)
    assert_refused(proc, args)
    assert "not supported" in proc.stderr, proc.stderr


# ---- -o options for machinery cachetd does not have: accepted, checked ------------

NOOP_OPTIONS = ",".join([
    "maxconns_fast", "no_hashexpand", "slab_reassign", "slab_automove=2", "slab_automove_ratio=0.5",
    "slab_automove_window=30", "tail_repair_time=10", "hash_algorithm=xxh3", "lru_crawler",
    "lru_crawler_sleep=50", "lru_crawler_tocrawl=100", "lru_maintainer", "hot_lru_pct=10",
    "warm_lru_pct=30", "hot_max_factor=0.5", "warm_max_factor=1.5", "temporary_ttl=30",
    "watcher_logbuf_size=128", "worker_logbuf_size=32", "track_sizes", "no_inline_ascii_resp",
    "no_drop_privileges", "modern",
])


def test_tuning_options_of_memcached_are_accepted(start_server):
    srv = start_server("-X", "-W", "-o", NOOP_OPTIONS, "-o", "no_slab_automove,no_lru_crawler")
    with srv.conn() as c:
        assert c.store("set", "k", "v" * 5000) == b"STORED"
        assert c.values("get k") == {"k": (0, b"v" * 5000, None)}


@pytest.mark.parametrize("opt", [
    "slab_automove=3", "slab_automove_ratio=0", "slab_automove_window=2", "tail_repair_time=5",
    "hash_algorithm=md5", "lru_crawler_sleep=2000000", "lru_crawler_tocrawl=x", "hot_lru_pct=90",
    "warm_lru_pct=0", "hot_max_factor=0", "hot_lru_pct=50,warm_lru_pct=40", "watcher_logbuf_size=x",
    "no_lru_maintainer,temporary_ttl=10",
])
def test_tuning_options_out_of_memcacheds_range_are_refused(opt):
    assert_refused(run_flags("-o", opt), opt)


# ---- -o slab_chunk_max ------------------------------------------------------------

def test_slab_chunk_max_sets_the_largest_class_and_values_are_chunked(start_server):
    srv = start_server("-o", "slab_chunk_max=16")
    assert int(settings_of(srv)["slab_chunk_max"]) == 16 * 1024
    big = bytes(range(256)) * 400          # 100 KiB: chunked from 16 KiB pieces
    with srv.conn() as c:
        for key, value in (("small", b"s" * 100), ("mid", b"m" * 10000), ("big", big)):
            c.send(f"set {key} 0 0 {len(value)}\r\n".encode() + value + b"\r\n")
            assert c.line() == b"STORED", key
            assert c.values(f"get {key}") == {key: (0, value, None)}, key
        sizes = [int(v) for k, v in c.stats("slabs").items() if k.endswith(":chunk_size")]
    assert max(sizes) == 16 * 1024, f"largest class in use: {max(sizes)}"


def test_small_slab_chunk_max_chains_values_up_to_I(start_server):
    srv = start_server("-I", "128k", "-o", "slab_chunk_max=1")
    value = bytes(range(256)) * 390          # ~100 KB from 1 KiB pieces
    with srv.conn() as c:
        c.send(f"set k 0 0 {len(value)}\r\n".encode() + value + b"\r\n")
        assert c.line() == b"STORED"
        assert c.values("get k") == {"k": (0, value, None)}


@pytest.mark.cachetd_only(reason="memcached chains any -I from 1 KiB chunks; cachetd's chained head lists its "
                          "chunks and must fit the largest class, so it refuses at start what it could not store")
def test_slab_chunk_max_too_small_for_I_is_refused_at_start():
    proc = run_flags("-o", "slab_chunk_max=1")         # -I 1m: at most ~180 KB chainable
    assert proc.returncode == 64, proc                 # a usage error, as --check-args says
    assert "raise -o slab_chunk_max or lower -I" in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [
    ["-o", "slab_chunk_max=0"],                          # must be positive
    ["-o", "slab_chunk_max=2000"],                       # kilobytes: at most 1024
    ["-o", "slab_chunk_max=x"],
    ["-o", "slab_chunk_max=3"],                          # -I (1m) is not a multiple of 3 KiB
    ["-I", "512k", "-o", "slab_chunk_max=1024"],         # larger than -I
    ["-I", "1536k", "-o", "slab_chunk_max=768"],         # does not divide a 1 MiB page
])
def test_slab_chunk_max_out_of_memcacheds_limits_is_refused(args):
    assert_refused(run_flags(*args), args)


# ---- stats settings under memcached's names --------------------------------------

def test_read_buf_mem_limit_is_megabytes_in_stats_settings(start_server):
    srv = start_server("-o", "read_buf_mem_limit=3")
    assert int(settings_of(srv)["read_buf_mem_limit"]) == 3 << 20


def test_M_shows_evictions_off(start_server):
    assert settings_of(start_server("-M"))["evictions"] == "off"
    assert settings_of(start_server())["evictions"] == "on"


@pytest.mark.cachetd_only(reason="memcached has no io_uring or cpus options")
def test_cpus_does_not_undo_an_io_uring_choice(start_server):
    srv = start_server("-o", "no_io_uring,cpus=0")
    assert settings_of(srv)["io_uring"] == "no"


# ---- process flags: -V -d -P -u -r -k -----------------------------------------------

def test_V_prints_the_version_and_exits_zero():
    proc = run_flags("-V")
    assert proc.returncode == 0 and proc.stdout.strip(), proc


def test_d_daemonizes_and_P_writes_the_pid(tmp_path):
    pidfile = tmp_path / "server.pid"
    port = next_free_port()
    argv = [CACHETD, "-p", str(port), "-l", "127.0.0.1", "-d", "-P", str(pidfile)]
    if is_memcached_binary(CACHETD):
        argv += ["-U", "0"] + (["-u", "root"] if os.geteuid() == 0 else [])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc           # the foreground process returns at once
    wait_until(pidfile.exists, 20, "no pid file")
    pid = int(pidfile.read_text().strip())
    try:
        assert os.getsid(pid) == pid, "the daemon did not start a session of its own"

        def answers():
            try:
                with Conn(port, timeout=2) as c:
                    return c.cmd("mn") == b"MN"
            except OSError:
                return False
        wait_until(answers, 20, "the daemon does not serve")
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not os.path.exists(f"/proc/{pid}"), 15, "the daemon outlived SIGTERM")
        wait_until(lambda: not pidfile.exists(), 5, "the pid file was left behind by a daemon")
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def proc_status(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].split()
    return None


@pytest.mark.skipif(os.geteuid() != 0, reason="-u switches users only when started as root")
def test_u_runs_as_that_user(start_server):
    srv = start_server("-u", "nobody")
    uid = proc_status(srv.proc.pid, "Uid")
    assert uid and int(uid[1]) == 65534, f"effective uid {uid}"
    with srv.conn() as c:
        assert c.store("set", "k", "v") == b"STORED"


@pytest.mark.skipif(os.geteuid() != 0, reason="-u is ignored unless started as root")
def test_u_unknown_user_is_refused():
    argv = [CACHETD, "-p", str(next_free_port()), "-l", "127.0.0.1", "-u", "no-such-user-cachet"]
    if is_memcached_binary(CACHETD):
        argv += ["-U", "0"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
    assert proc.returncode != 0 and proc.stderr.strip(), proc
    if not IS_MEMCACHED:
        assert proc.returncode == 64, proc


def test_r_raises_the_core_limit(start_server):
    # start from no core files at all, so -r has something to raise
    soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (0, hard))
    try:
        srv = start_server("-r")
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, (soft, hard))
    with open(f"/proc/{srv.proc.pid}/limits") as f:
        core = next(line for line in f if line.startswith("Max core file size"))
    assert core.split()[4] != "0", core


def built_with_sanitizer(path):
    with open(path, "rb") as f:
        data = f.read()
    return b"__asan_init" in data or b"__tsan_init" in data


def test_k_locks_memory(start_server):
    if built_with_sanitizer(CACHETD):
        pytest.skip("the sanitizers intercept mlockall and do nothing")
    srv = start_server("-m", "8", "-k")
    # mlockall may fail without CAP_IPC_LOCK: memcached and cachetd then warn and go on
    locked_kb = int(proc_status(srv.proc.pid, "VmLck")[0])
    assert locked_kb > 1024 or "-k invalid, mlockall() failed" in srv.log(), \
        f"VmLck {locked_kb} kB after -k and no warning; log: {srv.log()[-500:]}"
    with srv.conn() as c:
        assert c.store("set", "k", "v") == b"STORED"


@pytest.mark.cachetd_only(reason="cachetd's bound: every worker and its 2 background threads need one of 256 storage contexts")
def test_t_above_254_is_refused_with_the_range_it_takes():
    proc = run_flags("-t", "255")
    assert_refused(proc, ("-t", "255"))
    assert "1-254" in proc.stderr, proc.stderr
