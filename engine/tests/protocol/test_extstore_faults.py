"""Extstore on a failing disk: a miss, never wrong data, never a crash.

The disk is made to fail under the test's control:
- reads and buffer writes fail with EIO (or a write with ENOSPC) through the
  test build's fault hook (CACHET_TEST_EXT_FAULTS, extstore.c), where a real
  disk would return them; the test build is the ASan one of `make check`;
- the file is truncated under the running server, so reads come back short;
- the file's filesystem is too small for the size asked for (a tmpfs of
  8 MB): the start is refused with a message and exit 64.
Every value that comes back must be the one stored; the failures must be
counted (extstore_read_errors, extstore_write_errors, miss_from_extstore).
"""
import os
import random
import signal
import subprocess
import threading

import pytest


from conftest import advance_clock, fill, stat, value_of, wait_until
from test_extstore import (big, check_engine, ext_engine, get_one, run_cachetd, start_ext,  # noqa: F401 (fixture)
                            targets_in_the_file, wait_written)

pytestmark = pytest.mark.cachetd_only(reason="cachetd's fault hook, stats and exit codes")
hooks = pytest.mark.test_hooks

def read_all(c, keys):
    """Reads every key: each is its stored value or a miss. Returns the misses."""
    misses = 0
    for k in keys:
        got = get_one(c, k)
        if got is None:
            misses += 1
        else:
            assert got == (0, big(k), None), f"{k}: wrong value {got[1][:60]!r}"
    return misses


@hooks
def test_read_errors_are_counted_misses(start_server, tmp_path, monkeypatch, ext_engine):
    """On both read paths: the fault hook fails a pread, or a ring completion."""
    monkeypatch.setenv("CACHET_TEST_EXT_FAULTS", "read=3")
    srv = start_ext(start_server, tmp_path, size="64m", extra_opts="ext_item_age=1")
    keys = [f"r{i}" for i in range(150)]
    with srv.conn() as c:
        targets_in_the_file(c, keys)
        misses = read_all(c, keys)
        errors = stat(c, "extstore_read_errors")
        assert errors > 0 and misses > 0, (errors, misses)
        assert stat(c, "miss_from_extstore") >= errors
        # a key whose read failed stays a miss; the rest still read right
        assert read_all(c, keys) >= misses
        check_engine(c, ext_engine)
    srv.check_healthy()


@hooks
@pytest.mark.parametrize("errno_name,errno_value", [("EIO", 5), ("ENOSPC", 28)])
def test_write_errors_are_counted_and_lose_only_what_they_held(start_server, tmp_path, monkeypatch,
                                                              errno_name, errno_value):
    monkeypatch.setenv("CACHET_TEST_EXT_FAULTS", f"write=5,write_errno={errno_value}")
    # 1 MB pages of one 1 MB buffer each: a page is a header write and a
    # buffer write (or a few part-full ones when the flusher idles; how many
    # depends on timing). A failed buffer write drops every record of its
    # page (the page takes a new version, extstore.c). 6 MB of targets span
    # six pages, 12 writes or more, and every 5th write fails: 5 is odd, so
    # with header and buffer writes alternating, of any two failures one
    # hits a buffer write (part-full buffers only add buffer writes), so
    # some targets are lost; at most a few of the six pages are, so some
    # survive. (With two
    # 4 MB pages, a loaded machine once put every failure on filler pages.)
    # (-I 512k: the largest record must fit one 1 MB buffer)
    path = tmp_path / "extstore"
    srv = start_server("-m", "64", "-I", "512k", "-o", f"ext_path={path}:64m,ext_item_size=512,"
                       "ext_page_size=1,ext_wbuf_size=1,ext_item_age=1")
    srv.ext_file = path
    keys = [f"w{i}" for i in range(1500)]
    with srv.conn() as c:
        targets_in_the_file(c, keys)
        misses = read_all(c, keys)
        assert stat(c, "extstore_write_errors") > 0, f"no {errno_name} write was counted"
        assert misses > 0
        assert misses < len(keys), "every target lost: the writes that succeeded were lost too"
        # the server keeps storing and serving
        assert c.store("set", "after", b"x" * 2000) == b"STORED"
        assert get_one(c, "after") == (0, b"x" * 2000, None)
    srv.check_healthy()


@hooks
def test_a_page_the_compactor_cannot_read_is_dropped_and_its_live_records_counted_lost(start_server, tmp_path,
                                                                                      monkeypatch):
    """Every read fails, so the compactor cannot walk the fragmented pages it
    picks: it frees them anyway (keeping one would make every pass pick it
    again), and each live record on them counts as extstore_compact_lost.
    The keys are never read: once the cleaner has reclaimed the orphaned
    stubs, every key that is gone was counted lost (or evicted)."""
    monkeypatch.setenv("CACHET_TEST_EXT_FAULTS", "read=1")
    path = tmp_path / "extstore"
    srv = start_server("-m", "64", "-o",
                       f"ext_path={path}:16m,ext_page_size=2,ext_wbuf_size=2,ext_item_size=512,"
                       "ext_item_age=1,ext_compact_under=4,ext_max_sleep=10000")
    n = 1000
    rng = random.Random(11)
    with srv.conn() as c:
        written = 0
        # 2 pages, then about 1 per round: more than the 8 the file has. A
        # random half each round leaves every older page partly live.
        for rnd in range(8):
            keys = [f"cl{i}" for i in range(n) if rnd == 0 or rng.random() < 0.5]
            for k in keys:
                assert c.store("set", k, big(f"{k}.{rnd}")) == b"STORED"
            written += len(keys)
            wait_written(c, written, 30)
        lost = stat(c, "extstore_compact_lost")
        assert lost > 0, "no record of a page dropped unread was counted lost"
        assert stat(c, "extstore_compact_rescues") == 0
        wait_until(lambda: stat(c, "curr_items") == stat(c, "extstore_objects_used"), 30,
                   "the orphaned stubs leaving RAM")
        st = c.stats()
        # every key gone was counted (a key lost early may have been set again since)
        gone = n - int(st["curr_items"])
        assert 0 < gone <= int(st["extstore_compact_lost"]) + int(st["extstore_objects_evicted"]), st
        assert c.store("set", "after", b"x" * 2000) == b"STORED"
    srv.check_healthy()


@hooks
def test_a_stuck_flusher_makes_stores_evict_not_wait(start_server, tmp_path, monkeypatch):
    """The flusher blocks for good in its first pass that has values to
    write (the hook stands for a write to a stuck disk: busy, no pass
    completing). A store that would evict first waits for the flusher; the
    first such wait runs out with no value moved and no pass completed, and
    from then on (the circuit breaker) every store evicts at once, as
    memcached's would, instead of each sleeping its budget and stalling its
    worker's clients. The fill spans several seconds of the server's clock
    (debugtime), so the per-second cap on a worker's waiting alone would let
    a wait through in each: only the breaker keeps it to one. Counters, not
    times: the stores all answer, many evict, and one wait was taken."""
    monkeypatch.setenv("CACHET_TEST_EXT_FAULTS", "flusher_stall")
    srv = start_ext(start_server, tmp_path, size="64m")
    rounds, per_round = 4, 7500   # 4 KB values: about twice what -m 64 holds
    with srv.conn() as c:
        for r in range(rounds):
            fill(c, per_round, prefix=f"s{r}-")
            advance_clock(c, 2)
        st = c.stats()
        waits = {k: v for k, v in st.items() if k.startswith("extstore_store_waits")}
        assert int(st["evictions"]) >= 1000, st   # RAM ran out with nothing going to disk
        assert int(st["extstore_objects_written"]) == 0, st
        turned_away = int(waits.pop("extstore_store_waits_broken"))
        assert waits == {"extstore_store_waits": "1", "extstore_store_waits_fruitless": "1",
                         "extstore_store_waits_timed_out": "1", "extstore_store_waits_capped": "0"}, waits
        assert turned_away >= 100, turned_away   # the stores that evicted at once instead
        # a RAM hit is served right after
        key = f"s{rounds - 1}-"
        assert get_one(c, f"{key}{per_round - 1}") == (0, value_of(key, per_round - 1, 4096), None)
    srv.check_healthy()


@hooks
def test_a_store_waiting_for_the_flusher_leaves_its_workers_other_clients_served(start_server, tmp_path,
                                                                                 monkeypatch):
    """One worker (-t 1). A client fills RAM with values the flusher cannot
    write (the stall hook: a stuck disk), so its first store that must evict
    waits for the flusher, for up to 5 s here (park_ms) instead of the
    store's 100 ms. While it waits, another client of the same worker is
    answered: its `stats` shows the wait begun and not yet run out, and its
    GET of a value in RAM gets the value. A store that slept on the worker
    held every other client of that worker for as long (a reader of RAM
    values beside a client setting faster than the disk writes: p99 77 ms);
    it now waits alone, and is answered when its wait runs out, as before.
    An append meanwhile, whose combined value cannot wait that way, does not
    wait at all."""
    monkeypatch.setenv("CACHET_TEST_EXT_FAULTS", "flusher_stall,park_ms=5000")
    path = tmp_path / "extstore"
    srv = start_server("-m", "64", "-t", "1", "-o", f"ext_path={path}:64m,ext_item_size=512,ext_wbuf_size=2")
    filled, failed = [], []

    def writer():
        try:
            with srv.conn(timeout=60) as w:
                fill(w, 30000, prefix="w")   # 4 KB values: about twice what -m 64 holds
                filled.append(True)
        except Exception as e:   # noqa: BLE001 (reported by the test below)
            failed.append(e)
    with srv.conn() as c:
        c.send(b"set hot 0 0 5\r\nhello\r\n")
        assert c.line() == b"STORED"
        c.send(b"set hotbig 0 0 4096\r\n" + b"b" * 4096 + b"\r\n")
        assert c.line() == b"STORED"
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        wait_until(lambda: stat(c, "extstore_store_waits") == 1 or not t.is_alive(), 60,
                   "a store waiting for the stalled flusher")
        st = c.stats()
        assert st["extstore_store_waits"] == "1" and st["extstore_store_waits_timed_out"] == "0", \
            (t.is_alive(), failed, filled, {k: v for k, v in st.items() if "extstore" in k or k in ("evictions", "curr_items")})
        assert not filled and not failed, f"the fill ended before any store waited: {failed}"
        assert get_one(c, "hot") == (0, b"hello", None)
        # an append's combined value, whose request cannot run again, evicts
        # at once rather than sleep the worker (it slept up to 100 ms)
        c.send(b"append hotbig 0 0 4\r\nabcd\r\n")
        assert c.line() in (b"STORED", b"NOT_STORED")
        assert stat(c, "extstore_store_waits_timed_out") == 0, "the wait ran out before the reader was served"
        assert stat(c, "extstore_store_waits") == 1, "the append waited for the flusher"
        t.join(60)
        assert filled, f"the writer's stores were not all answered: {failed}"
        st = c.stats()
        waits = {k: v for k, v in st.items() if k.startswith("extstore_store_waits") and not k.endswith("broken")}
        # the append's eviction freed chunks the waiting store took (its wait
        # ended, fruitful), so the writer's next store may have waited again:
        # one wait ran out, with nothing moved, and opened the breaker
        assert int(waits.pop("extstore_store_waits")) in (1, 2), waits
        assert waits == {"extstore_store_waits_fruitless": "1", "extstore_store_waits_timed_out": "1",
                         "extstore_store_waits_capped": "0"}, waits
        assert int(st["evictions"]) > 0, st   # the breaker: the stores after it evicted at once
    srv.check_healthy()


@hooks
def test_a_store_waiting_for_the_flusher_is_answered_on_shutdown(start_server, tmp_path, monkeypatch):
    """A store whose connection waits for the (stalled) flusher when the
    server is told to stop is a request already started: it is stored and
    answered, as a GET half answered is finished, before the connection
    closes (a sleeping store was, since its worker saw the stop only after
    it). One set at a time, so the one waiting is the last one sent."""
    monkeypatch.setenv("CACHET_TEST_EXT_FAULTS", "flusher_stall,park_ms=1000")
    path = tmp_path / "extstore"
    srv = start_server("-m", "64", "-t", "1", "-o", f"ext_path={path}:64m,ext_item_size=512,ext_wbuf_size=2")
    srv.expect_exit = True
    replies = []

    def writer():
        try:
            with srv.conn(timeout=60) as w:
                for i in range(40000):
                    w.send(b"set w%d 0 0 4096\r\n" % i + value_of("w", i, 4096) + b"\r\n")
                    replies.append(w.line())
                    if replies[-1] != b"STORED":
                        return
        except OSError as e:
            replies.append(repr(e).encode())
    with srv.conn() as c:
        t = threading.Thread(target=writer, daemon=True)
        t.start()
        wait_until(lambda: stat(c, "extstore_store_waits") == 1 or not t.is_alive(), 120,
                   "a store waiting for the stalled flusher")
        assert t.is_alive(), replies[-3:]
        sent = len(replies) + 1   # the set waiting now
        srv.proc.send_signal(signal.SIGTERM)
        t.join(60)
    assert not t.is_alive(), "the writer's connection was neither answered nor closed"
    assert len(replies) >= sent and replies[sent - 1] == b"STORED", (sent, replies[sent - 2:sent + 1])
    assert srv.proc.wait(timeout=30) == 0


def test_truncated_file_gives_short_read_misses(start_server, tmp_path):
    srv = start_ext(start_server, tmp_path, extra_opts="ext_item_age=1")
    keys = [f"t{i}" for i in range(150)]
    with srv.conn() as c:
        targets_in_the_file(c, keys)
        before = stat(c, "miss_from_extstore")
        # cut the file under the server: the first pages stay, the rest is gone
        os.truncate(srv.ext_file, 4096)
        misses = read_all(c, keys)
        assert misses > 0
        assert stat(c, "miss_from_extstore") - before >= misses, "short reads were not counted"
    srv.check_healthy()


def test_ext_path_on_a_filesystem_too_small_exits_64(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (make check runs as root)")
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (no CAP_SYS_ADMIN?): {mounted.stderr.strip()}")
    try:
        proc = run_cachetd("-o", f"ext_path={small}/extstore:64m,ext_page_size=4,ext_wbuf_size=2")
        assert proc.returncode == 64, (proc.returncode, proc.stderr)
        assert "ext_path" in proc.stderr and "No space left on device" in proc.stderr, proc.stderr
    finally:
        subprocess.run(["umount", str(small)], check=False)
