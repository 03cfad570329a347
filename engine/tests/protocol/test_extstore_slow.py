"""Extstore beside clients that read slowly or not at all (issue 21, part 1).

A disk value is read and sent in pieces of 64 KiB (engine/README.md,
Extstore, "Reads"): a reply holds one piece of the connection buffer budget,
never its whole value, and reads the next piece only once its client took
the last one. So ordinary clients asking for large disk values at once all
fit in the budget, and clients that ask and never read hold a piece or two
each, never the budget every other client's disk GET needs.

The non-reading clients (test_extstore.slow_readers) shrink their receive
buffer before they connect, so the kernel takes little of what the server
sends them and the server holds the rest, as with a client across a slow
link. Each test waits on the server's state (its counters settling), never
on a fixed time.
"""
import random
import statistics
import threading
import time

import pytest

from conftest import IS_MEMCACHED, Conn, stat, value_of, wait_until
from test_extstore import age_items, slow_readers, start_ext, wait_written

MB_VALUE = 1_000_000
D2_VALUE = 300_000
# The socket buffers the operator gives every Cache (memcached has no such
# option): the kernel then holds at most ~128 KiB of a reply, and the server
# the rest. Autotuned, it took all 8 GETs of a silent client here, and
# cachetd held nothing.
OPERATOR_SOCKETS = ",sock_sndbuf=64k,sock_rcvbuf=16k"


def start_with_values_on_disk(start_server, tmp_path, prefix, n, size, more_opts=""):
    """A server (-m 64) with n values of `size` bytes (prefix0..), all on disk."""
    srv = start_ext(start_server, tmp_path, size="256m",
                    extra_opts="ext_item_age=0,ext_recache_rate=0" + more_opts)
    keys = [f"{prefix}{i}" for i in range(n)]
    with srv.conn() as c:
        for i, k in enumerate(keys):
            assert c.store("set", k, value_of(prefix, i, size)) == b"STORED"
        wait_written(c, n)
        age_items(c, 2)
    return srv, keys


def get_each(srv, prefix, keys, indexes, size):
    """One client per index gets its key at once, reading its reply; returns
    for each whether the value came back whole and right (or the error)."""
    results = [None] * len(indexes)

    def client(n, i):
        try:
            with srv.conn(timeout=60) as cc:
                got = cc.values(f"get {keys[i]}").get(keys[i], (None, b""))[1]
                results[n] = got == value_of(prefix, i, size) or f"{keys[i]}: {len(got)} bytes, wrong"
        except Exception as e:   # reported by the caller's assert
            results[n] = repr(e)

    threads = [threading.Thread(target=client, args=(n, i)) for n, i in enumerate(indexes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads), "a client hung"
    return results


def test_sixteen_clients_get_1mb_disk_values_at_once_within_a_1mib_buffer_budget(start_server, tmp_path):
    """16 clients each get one 1 MB disk value at once and read it, with a
    connection buffer budget of 1 MiB (read_buf_mem_limit=1, memcached's
    option and unit): all 16 values come back whole. cachetd reserved each
    disk value whole from the budget before reading it, and a value over
    half the budget failed at once: every client got `SERVER_ERROR out of
    memory writing get response`. Sent in pieces, a value needs one piece of
    the budget, whatever its size. memcached 1.6.45 serves them all."""
    srv, keys = start_with_values_on_disk(start_server, tmp_path, "mb", 20, MB_VALUE, ",read_buf_mem_limit=1")
    results = get_each(srv, "mb", keys, [(n * 7) % len(keys) for n in range(16)], MB_VALUE)
    assert results == [True] * 16, results
    # the same values through mg, with a flag after the value's head
    with srv.conn() as c:
        c.send(b"mg mb3 v f\r\n")
        assert c.line() == b"VA %d f0" % MB_VALUE
        assert c.exact(MB_VALUE + 2) == value_of("mb", 3, MB_VALUE) + b"\r\n"
        if not IS_MEMCACHED:
            assert stat(c, "get_oom_extstore") == 0
            assert stat(c, "miss_from_extstore") == 0
    srv.check_healthy()


def test_thirty_silent_clients_of_300kb_disk_values_leave_other_disk_gets_served(start_server, tmp_path):
    """D2 of the issue's hostile tester, at -m 64 (a buffer budget of
    8 MiB): 30 clients each pipeline GETs of a 300 KB disk value and never
    read (with the operator's socket buffers); then another client's disk
    GETs of 300 KB values are all served.
    cachetd held each silent client's value whole (a 300 KB reply each: 9 MB,
    more than the budget), so every other disk GET waited 5 s and failed
    with SERVER_ERROR out of memory. memcached 1.6.45 serves them."""
    srv, keys = start_with_values_on_disk(start_server, tmp_path, "d", 40, D2_VALUE,
                                          "" if IS_MEMCACHED else OPERATOR_SOCKETS)
    with srv.conn() as c:
        silent = slow_readers(srv, c, [[keys[s]] for s in range(30)], repeat=8)
        for i in range(30, 40):   # one after another, each read at once
            assert c.values(f"get {keys[i]}") == {keys[i]: (0, value_of("d", i, D2_VALUE), None)}, keys[i]
        # and ten more at once, from ten clients
        results = get_each(srv, "d", keys, list(range(30, 40)), D2_VALUE)
        assert results == [True] * 10, results
        if not IS_MEMCACHED:
            assert stat(c, "get_oom_extstore") == 0
    for s in silent:
        s.close()
    srv.check_healthy()


@pytest.mark.cachetd_only(reason="conn_buffer_bytes is cachetd's gauge of its connection buffer budget")
def test_a_client_that_never_reads_20_disk_values_of_1mb_holds_a_few_pieces_of_the_budget(start_server, tmp_path):
    """A client pipelines GETs of 20 disk values of 1 MB and never reads. Once
    the server has done what it can for it, the buffer budget it holds
    (`stats` conn_buffer_bytes) is a few 64 KiB pieces, not a 1 MB value, and
    all of it comes back when the client hangs up. cachetd held a whole
    1 MB value (its slot reserved the value before the read)."""
    srv, keys = start_with_values_on_disk(start_server, tmp_path, "mb", 20, MB_VALUE)
    with srv.conn() as c:
        base = stat(c, "conn_buffer_bytes")
        s, = slow_readers(srv, c, [keys])
        held = stat(c, "conn_buffer_bytes") - base
        assert 0 < held <= 256 * 1024, held
        # another client is served meanwhile, the same value included
        assert c.values(f"get {keys[0]}") == {keys[0]: (0, value_of("mb", 0, MB_VALUE), None)}
        s.close()
        wait_until(lambda: stat(c, "conn_buffer_bytes") == base, 60, "the budget coming back after the hang-up")
    srv.check_healthy()


def test_silent_clients_holding_the_whole_budget_are_cut_off_and_other_disk_gets_served(start_server, tmp_path):
    """More silent clients than the budget has pieces for: 20 clients each
    pipeline GETs of 1 MB disk values and never read, with a 1 MiB budget
    (read_buf_mem_limit=1) and the operator's socket buffers; a 64 KiB
    piece each (a connection's share of this budget) is more than it.
    Another client's disk GETs are all served: a client that holds budget
    and has taken nothing for 2 s while disk reads have waited over a
    second for it is closed (slow_kicks), alone. Without that, the budget
    stayed theirs and the other GET failed after 5 s with
    SERVER_ERROR out of memory. memcached 1.6.45 serves them too."""
    srv, keys = start_with_values_on_disk(start_server, tmp_path, "mb", 20, MB_VALUE,
                                          ",read_buf_mem_limit=1" + ("" if IS_MEMCACHED else OPERATOR_SOCKETS))
    with srv.conn() as c:
        silent = slow_readers(srv, c, [[keys[s % 14], keys[(s + 1) % 14]] for s in range(20)], repeat=4)
        for i in (15, 16, 17):
            assert c.values(f"get {keys[i]}") == {keys[i]: (0, value_of("mb", i, MB_VALUE), None)}, keys[i]
        if not IS_MEMCACHED:
            kicked = stat(c, "slow_kicks")
            assert 1 <= kicked <= len(silent), kicked
            assert stat(c, "get_oom_extstore") == 0
    for s in silent:
        s.close()
    srv.check_healthy()


@pytest.mark.test_hooks
@pytest.mark.cachetd_only(reason="cachetd's fault hook (CACHET_TEST_EXT_FAULTS)")
def test_a_piece_that_cannot_be_read_closes_the_connection_mid_value(start_server, tmp_path, monkeypatch):
    """A 1 MB disk value is read whole and its CRC checked before its first
    piece is sent; each later piece is read again when the client has taken
    the last. When one of those reads fails (the fault hook fails every
    third disk read), the value is already partly sent: the connection is
    closed mid-value, so the client never takes a cut-short value for a
    whole one (no END), and the failed read is counted. Other connections
    are served as before."""
    monkeypatch.setenv("CACHET_TEST_EXT_FAULTS", "read=3")
    srv, keys = start_with_values_on_disk(start_server, tmp_path, "mb", 4, MB_VALUE)
    with srv.conn() as c:
        errors = stat(c, "extstore_read_errors")
        cuts = stat(c, "extstore_streams_cut")
        with srv.conn() as g:
            g.send(f"get {keys[0]}\r\n".encode())
            assert g.line() == f"VALUE {keys[0]} 0 {MB_VALUE}".encode()
            got = b""
            with pytest.raises(ConnectionError):
                while True:
                    got = g.buf
                    g._fill()
            got = g.buf
        assert len(got) < MB_VALUE, len(got)
        assert got == value_of("mb", 0, MB_VALUE)[:len(got)]
        assert stat(c, "extstore_read_errors") > errors
        assert stat(c, "extstore_streams_cut") == cuts + 1
        assert c.cmd("set small 0 0 1\r\nx") == b"STORED"
        assert c.values("get small") == {"small": (0, b"x", None)}
    srv.check_healthy()


@pytest.mark.cachetd_only(reason="memcached 1.6.45 sends from the whole item it read into memory, and its "
                                 "compactor did not move this 1 MB value here (measured: no rescue in 15 s)")
def test_a_value_compacted_while_it_is_streamed_arrives_whole(start_server, tmp_path):
    """A 1 MB disk value shares its page with others (5 MB written before
    and after it), then those are deleted: the page is closed and a quarter live. A client asks for
    the value through a 4 KiB receive buffer and stops reading after its
    VALUE line, so the server has sent a piece or two (the operator's
    socket buffers) and holds the rest. Then
    compaction is allowed (`extstore compact_under`): the compactor moves
    the value to a page of its own and frees the old one. The pieces after
    that must come from where the record is now (same CAS and CRC: the same
    bytes): the client reads the whole value and END. cachetd read every
    later piece at the first read's locator: the page was re-versioned, the
    connection was closed mid-value (and counted nowhere `stats` showed).
    memcached 1.6.45 holds the whole item in memory while sending it."""
    srv = start_ext(start_server, tmp_path, size="64m",
                    extra_opts="ext_item_age=0,ext_recache_rate=0,ext_compact_under=0,ext_max_sleep=10000"
                    + ("" if IS_MEMCACHED else OPERATOR_SOCKETS))
    fill = [f"fill{i}" for i in range(40)]
    with srv.conn() as c:
        assert c.store("set", "big", value_of("big", 0, MB_VALUE)) == b"STORED"
        for i, k in enumerate(fill[:20]):
            assert c.store("set", k, value_of("fill", i, 250_000)) == b"STORED"
        wait_written(c, 21)
        age_items(c, 2)
        # 5 MB more written after it: whichever page big went to is closed
        for i, k in enumerate(fill[20:], 20):
            assert c.store("set", k, value_of("fill", i, 250_000)) == b"STORED"
        wait_written(c, 1 + len(fill))
        age_items(c, 2)
        for k in fill:
            assert c.cmd(f"delete {k}") == b"DELETED"
        counter = "get_hits" if IS_MEMCACHED else "get_extstore"
        reads = stat(c, counter)
        g = Conn(srv.port, rcvbuf=4096)
        try:
            g.send(b"get big\r\n")
            assert g.line() == b"VALUE big 0 %d" % MB_VALUE
            if not IS_MEMCACHED:
                wait_until(lambda: stat(c, counter) > reads, 30, "the first read of big")
            rescues, reclaims = stat(c, "extstore_compact_rescues"), stat(c, "extstore_page_reclaims")
            assert c.cmd("extstore compact_under 16") == b"OK"
            wait_until(lambda: stat(c, "extstore_compact_rescues") > rescues and
                       stat(c, "extstore_page_reclaims") > reclaims, 60, "the compactor moving big and freeing its page")
            assert c.cmd("extstore compact_under 0") == b"OK"
            g.sock.settimeout(30)
            while len(g.buf) < MB_VALUE + 2 + 5:
                g._fill()
            assert g.buf[:MB_VALUE] == value_of("big", 0, MB_VALUE)
            assert g.buf[MB_VALUE:] == b"\r\nEND\r\n"
        finally:
            g.close()
        if not IS_MEMCACHED:
            assert stat(c, "extstore_streams_cut") == 0
        assert c.values("get big") == {"big": (0, value_of("big", 0, MB_VALUE), None)}
    srv.check_healthy()


def churn_and_read(srv, writers=2, readers=4, sets=240, reads=400, seconds=40.0):
    """Writers set new 600-900 KB values (keys never reused) while the disk
    holds about 70 of them, so its oldest pages are evicted again and again;
    readers each `get` a random key among the last 90 acknowledged (the
    oldest of them on the page evicted next) and read the reply whole as it
    comes, as an ordinary client does. Every loop is bounded in count and
    time. Returns what the readers saw: values whole and right, misses
    (END and nothing else), values cut (the connection closed after a
    VALUE line, before the END), and anything else."""
    written = []            # (key, index, size) acknowledged, in order
    lock = threading.Lock()
    seen = {"hits": 0, "misses": 0, "cut": [], "wrong": [], "stream_s": []}
    stop_at = time.monotonic() + seconds
    done_writing = threading.Event()

    def size_of(i):
        return 600_000 + (i * 7919) % 300_000

    def writer(w):
        with srv.conn(timeout=60) as c:
            for n in range(sets):
                if time.monotonic() > stop_at:
                    break
                i = w + n * writers
                key = f"ch{i}"
                assert c.store("set", key, value_of("ch", i, size_of(i))) == b"STORED", key
                with lock:
                    written.append((key, i))

    def reader(r):
        rng = random.Random(r)
        c = srv.conn(timeout=60)
        try:
            for _ in range(reads):
                if time.monotonic() > stop_at or (done_writing.is_set() and _ > reads // 4):
                    break
                with lock:
                    recent = written[-90:]
                if not recent:
                    time.sleep(0.01)
                    continue
                key, i = rng.choice(recent)
                c.send(f"get {key}\r\n".encode())
                head = c.line()
                if head == b"END":
                    with lock:
                        seen["misses"] += 1
                    continue
                try:
                    assert head.startswith(b"VALUE %s " % key.encode()), head
                    began = time.monotonic()   # reported, never asserted
                    data = c.exact(int(head.split()[3]))
                    tail = c.exact(7)
                    seen["stream_s"].append(time.monotonic() - began)
                except ConnectionError:
                    with lock:
                        seen["cut"].append(key)
                    c.close()
                    c = srv.conn(timeout=60)
                    continue
                with lock:
                    if data == value_of("ch", i, size_of(i)) and tail == b"\r\nEND\r\n":
                        seen["hits"] += 1
                    else:
                        seen["wrong"].append(key)
        finally:
            c.close()

    ws = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    rs = [threading.Thread(target=reader, args=(r,)) for r in range(readers)]
    for t in ws + rs:
        t.start()
    for t in ws:
        t.join(seconds + 30)
    done_writing.set()
    for t in rs:
        t.join(seconds + 30)
    assert not any(t.is_alive() for t in ws + rs), "a client hung"
    seen["written"] = len(written)
    return seen


def test_ordinary_readers_of_large_disk_values_get_them_whole_while_the_disk_churns(start_server, tmp_path):
    """A 64 MB disk of 4 MB pages holds about 70 values of 600-900 KB, and two
    writers keep setting new ones, so its oldest page is evicted every few
    values. Four readers get recent keys (the oldest of them about to go)
    and read each reply as it comes. Every reply is the whole value or a
    clean miss (END before any byte of it): never a value cut short after
    its VALUE line. cachetd read the pieces after a large value's first from
    its page as the client drained them, and a page evicted meanwhile cut
    the value (the connection closed mid-value, extstore_streams_cut).
    memcached 1.6.45 reads the whole value into memory before sending it."""
    srv = start_ext(start_server, tmp_path, size="64m", extra_opts="ext_item_age=0,ext_recache_rate=0")
    with srv.conn() as c:
        before = {k: stat(c, k) for k in ("extstore_page_evictions", "get_hits", "get_misses")}
        t0 = time.monotonic()
        seen = churn_and_read(srv)
        took = time.monotonic() - t0
        after = {k: stat(c, k) for k in before}
        cut_stat = None if IS_MEMCACHED else stat(c, "extstore_streams_cut")
    print(f"\nchurn: {seen['written']} values written, {seen['hits']} read whole, {seen['misses']} misses, "
          f"{len(seen['cut'])} cut, {len(seen['wrong'])} wrong in {took:.1f} s; page evictions "
          f"{after['extstore_page_evictions'] - before['extstore_page_evictions']}; streams_cut {cut_stat}; "
          f"a value's stream took {statistics.median(seen['stream_s']) * 1000:.1f} ms median, "
          f"{max(seen['stream_s']) * 1000:.1f} ms at most")
    assert seen["wrong"] == [], seen["wrong"]
    assert seen["cut"] == [], f"{len(seen['cut'])} values cut mid-value: {seen['cut'][:10]}"
    # the disk did churn under the reads, and the reads were mostly hits
    assert after["extstore_page_evictions"] > before["extstore_page_evictions"]
    assert seen["hits"] >= 50, seen
    if not IS_MEMCACHED:
        assert cut_stat == 0
    srv.check_healthy()


def test_a_silent_reader_of_a_large_disk_value_is_cut_alone_and_holds_no_page_for_long(start_server, tmp_path):
    """The disk churns as above. One client asks for a 900 KB disk value
    through a 4 KiB receive buffer and stops reading after its VALUE line,
    so the server holds the rest of the value. Its page is kept for it only
    while it takes pieces (2 s without one, and the page goes as any
    other): the disk keeps turning its pages over meanwhile, and the
    ordinary readers get every value whole. When the silent client reads
    again, cachetd has cut its value (the connection closes mid-value,
    extstore_streams_cut 1: that client's alone); memcached 1.6.45, which
    holds the whole value in memory, sends it whole. Either way what it
    got is a prefix of its value, never another's bytes."""
    srv = start_ext(start_server, tmp_path, size="64m", extra_opts="ext_item_age=0,ext_recache_rate=0"
                    + ("" if IS_MEMCACHED else OPERATOR_SOCKETS))
    size = 900_000
    with srv.conn() as c:
        assert c.store("set", "silent", value_of("silent", 0, size)) == b"STORED"
        wait_written(c, 1)
        age_items(c, 2)
        evictions, evictions_after = stat(c, "extstore_page_evictions"), None
        s = Conn(srv.port, rcvbuf=4096)
        try:
            s.send(b"get silent\r\n")
            assert s.line() == b"VALUE silent 0 %d" % size
            silent_since = time.monotonic()
            seen = churn_and_read(srv)
            assert seen["cut"] == [] and seen["wrong"] == [], seen
            # The churn goes on until the silent stream has taken nothing
            # for over its page's 2 s hold, then until the disk's 16 pages
            # turned over twice more: its page has gone by then. Bounded in
            # count and time; the time is the scenario, nothing asserts it.
            deadline = time.monotonic() + 60
            with srv.conn() as w:
                for more in range(20_000):
                    if time.monotonic() > deadline:
                        break
                    if time.monotonic() > silent_since + 3:
                        if evictions_after is None:
                            evictions_after = stat(c, "extstore_page_evictions")
                        elif stat(c, "extstore_page_evictions") - evictions_after >= 32:
                            break
                    assert w.store("set", f"late{more}", value_of("late", more, 700_000)) == b"STORED"
            assert evictions_after is not None and stat(c, "extstore_page_evictions") - evictions_after >= 32
            assert evictions_after > evictions
            s.sock.settimeout(30)
            got, cut = s.buf, False
            try:
                while len(got) < size + 7:
                    s._fill()
                    got = s.buf
            except ConnectionError:
                cut = True
            got = s.buf
        finally:
            s.close()
        assert got[:size] == value_of("silent", 0, size)[:min(len(got), size)]
        if IS_MEMCACHED:
            assert not cut and got == value_of("silent", 0, size) + b"\r\nEND\r\n"
        else:
            assert cut and len(got) < size, len(got)
            assert stat(c, "extstore_streams_cut") == 1
        assert c.cmd("set small 0 0 1\r\nx") == b"STORED"
    srv.check_healthy()
