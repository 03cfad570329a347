"""A request that finds an expired or flushed item takes it out of the cache at
once, as memcached 1.6.45's do_item_get does (do_item_unlink, then
get_expired/get_flushed): `curr_items` and `bytes` fall right then, not when a
background pass (cachetd's cleaner, memcached's LRU maintainer and crawler)
gets to it. cachetd's lock-free GET used to count the miss and leave the item
linked until the cleaner's next sweep, up to a minute later, so `stats`, and
the operator's metrics read from it, counted items every GET already missed on.

Why the tests are built this way:
- Every command that looks a key up is sent once at a dead item, each followed
  by `stats` in the same write, so the worker answers the request and the stats
  in one turn: `curr_items` must have fallen by exactly one at each step.
- A background pass taking a dead item away first would make the numbers fall
  without the request's help. Both servers count such a pass in `reclaimed`
  (memcached's crawler in `crawler_reclaimed`), and an unlink by a request in
  neither. So a run in which they moved proves nothing: it is run again on a
  fresh server (bounded); a run in which they did not is a real answer.
- Immediate flush_all in memcached unlinks, at the flush, what was stored since
  the second before it (item_flush_expired); older items leave lazily, on the
  first request that finds them. The items are therefore aged three seconds of
  the server's own clock (`uptime`) before the flush, so that the lazy path is
  the one measured, in both servers.
"""
import time

import pytest

from conftest import stat
from test_extstore import big, start_ext, wait_written

VALUE = b"100"   # a number, so that incr and decr are not refused for the value
# (name, request with {k} for the key, the reply's line when the key is absent)
PROBES = [
    ("get", b"get {k}\r\n", b"END"),
    ("gets", b"gets {k}\r\n", b"END"),
    ("get_multi", b"get {k} {k}-absent\r\n", b"END"),
    ("mg", b"mg {k} v\r\n", b"EN"),
    ("mg_no_flags", b"mg {k}\r\n", b"EN"),
    ("mg_no_bump", b"mg {k} u\r\n", b"EN"),
    ("mg_touch", b"mg {k} T30 v\r\n", b"EN"),
    ("gat", b"gat 30 {k}\r\n", b"END"),
    ("gats", b"gats 30 {k}\r\n", b"END"),
    ("touch", b"touch {k} 30\r\n", b"NOT_FOUND"),
    ("incr", b"incr {k} 1\r\n", b"NOT_FOUND"),
    ("decr", b"decr {k} 1\r\n", b"NOT_FOUND"),
    ("append", b"append {k} 0 0 1\r\nx\r\n", b"NOT_STORED"),
    ("prepend", b"prepend {k} 0 0 1\r\nx\r\n", b"NOT_STORED"),
    ("replace", b"replace {k} 0 0 1\r\nx\r\n", b"NOT_STORED"),
    ("cas", b"cas {k} 0 0 1 1\r\nx\r\n", b"NOT_FOUND"),
    ("delete", b"delete {k}\r\n", b"NOT_FOUND"),
    ("md", b"md {k}\r\n", b"NF"),
    ("ma", b"ma {k}\r\n", b"NF"),
]
ATTEMPTS = 4


class Raced(Exception):
    """A background pass reclaimed an item during the run."""


def background_reclaims(st):
    return int(st.get("reclaimed", 0)) + int(st.get("crawler_reclaimed", 0))


def probe(name, k):
    return next(req for n, req, _ in PROBES if n == name).replace(b"{k}", k.encode())


def miss_reply(name):
    return next(miss for n, _, miss in PROBES if n == name)


def wait_uptime(c, seconds):
    """Lets the server's own clock pass `seconds` (memcached's uptime is its
    item clock); bounded."""
    start = stat(c, "uptime")
    deadline = time.monotonic() + seconds + 10
    while stat(c, "uptime") < start + seconds:
        assert time.monotonic() < deadline, "the server's clock did not move"
        time.sleep(0.1)


# What tells the test the items are gone: a read that does not bump the item.
# Hits that bump keep memcached's LRU maintainer busy (it shortens its sleeps
# while they make work for it), and it then took the flushed items from the
# LRU tails the moment a delayed flush took effect, before any request did.
SENTINEL = "mg_no_bump"


def poll_until_gone(c, k, before, seconds=10):
    """Reads k until a read misses; returns that read's stats (same turn) and
    those of the read before it (`before`, the caller's, if the first missed)."""
    deadline = time.monotonic() + seconds
    while True:
        c.send(probe(SENTINEL, k) + b"stats\r\n")
        reply = c.line()
        st = c.read_stats()
        if reply == miss_reply(SENTINEL):
            return before, st
        assert reply == b"HD", f"{k}: {reply!r}"
        before = st
        assert time.monotonic() < deadline, f"{k} did not go within {seconds} s"
        time.sleep(0.001)


def run_once(c, how):
    keys = {name: f"{how.replace(' ', '_')}-{name}" for name, _, _ in PROBES}
    ttl = 1 if how == "expired" else 0
    # the sentinel's key last: it tells when the items are gone, and none goes after it
    order = [keys[n] for n in keys if n != SENTINEL] + [keys[SENTINEL]]
    c.send(b"".join(f"set {k} 0 {ttl} {len(VALUE)}\r\n".encode() + VALUE + b"\r\n" for k in order))
    for _ in keys:
        assert c.line() == b"STORED"
    if how != "expired":
        wait_uptime(c, 3)
    base = c.stats()
    assert int(base["curr_items"]) == len(keys), base["curr_items"]
    reclaims = background_reclaims(base)

    steps = []   # (what, the stats before, the stats after)
    names = [n for n, _, _ in PROBES]
    if how == "flushed":
        batch = b"flush_all\r\n" + b"".join(probe(n, keys[n]) + b"stats\r\n" for n in names)
        c.send(batch)
        assert c.line() == b"OK"
    else:
        if how == "delayed flush":
            assert c.cmd("flush_all 2") == b"OK"
        before, after = poll_until_gone(c, keys[SENTINEL], base)
        steps.append((SENTINEL, before, after))
        names.remove(SENTINEL)
        c.send(b"".join(probe(n, keys[n]) + b"stats\r\n" for n in names))
    prev = steps[-1][2] if steps else base
    for n in names:
        expected = miss_reply(n)
        reply = c.line()
        assert reply == expected, f"{n} on the {how} item: {reply!r}, expected {expected!r}"
        st = c.read_stats()
        steps.append((n, prev, st))
        prev = st
    if background_reclaims(c.stats()) != reclaims:
        raise Raced()
    kept = [f"{n}: curr_items {before['curr_items']} -> {after['curr_items']}, "
            f"bytes {before['bytes']} -> {after['bytes']}"
            for n, before, after in steps
            if int(before["curr_items"]) - int(after["curr_items"]) != 1
            or int(after["bytes"]) >= int(before["bytes"])]
    assert not kept, f"requests that left the {how} item in: " + "; ".join(kept)
    assert int(prev["curr_items"]) == 0 and int(prev["bytes"]) == 0, (prev["curr_items"], prev["bytes"])


@pytest.mark.parametrize("how", ["expired", "flushed", "delayed flush"])
def test_a_request_that_finds_a_dead_item_unlinks_it_at_once(start_server, how):
    """Each command, on an expired, flushed (flush_all) or delayed-flushed
    (flush_all 2) item: the miss, and curr_items and bytes falling in the same
    turn. Fresh server per attempt: nothing else is stored."""
    for attempt in range(ATTEMPTS):
        srv = start_server()
        with srv.conn() as c:
            try:
                run_once(c, how)
                return
            except Raced:
                print(f"attempt {attempt}: a background pass reclaimed an item first; again")
    pytest.fail(f"a background pass reclaimed an item in each of {ATTEMPTS} runs: nothing measured")


@pytest.mark.parametrize("how", ["flushed", pytest.param("expired", marks=pytest.mark.test_hooks)])
def test_a_dead_item_on_disk_gives_its_extstore_record_back_at_the_request(start_server, tmp_path, how):
    """extstore: an item whose value is on disk (cachetd: a stub; memcached: an
    item header), flushed or expired, and then read: its record on disk is
    released in the same turn (extstore_objects_used falls by one), as
    memcached's do_item_get does with STORAGE_delete. `expired` moves the
    clock of a test build past the TTL (memcached's release build has none)."""
    keys = {n: f"disk-{how}-{n}" for n in ("get", "gets", "mg", "get_multi")}
    for attempt in range(ATTEMPTS):
        (tmp_path / f"{attempt}").mkdir()
        srv = start_ext(start_server, tmp_path / f"{attempt}", extra_opts="ext_item_age=1")
        with srv.conn() as c:
            ttl = 100 if how == "expired" else 0
            for k in keys.values():
                assert c.store("set", k, big(k), exptime=ttl) == b"STORED"
            wait_written(c, len(keys))   # moves a test build's clock by ext_item_age + 1
            if how == "flushed":
                wait_uptime(c, 3)   # older than memcached's flush-time unlink (see above)
            base = c.stats()
            assert int(base["curr_items"]) == len(keys) == int(base["extstore_objects_used"]), base
            reclaims = background_reclaims(base)
            hide = b"flush_all\r\n" if how == "flushed" else b"debugtime %d\r\n" % (ttl + 1)
            c.send(hide + b"".join(probe(n, k) + b"stats\r\n" for n, k in keys.items()))
            assert c.line() == b"OK"
            steps, prev = [], base
            for n in keys:
                reply = c.line()
                assert reply == miss_reply(n), (n, reply)
                st = c.read_stats()
                steps.append((n, prev, st))
                prev = st
            if background_reclaims(c.stats()) != reclaims:
                print(f"attempt {attempt}: a background pass reclaimed an item first; again")
                continue
            kept = [f"{k}: curr_items {b['curr_items']} -> {a['curr_items']}, extstore_objects_used "
                    f"{b['extstore_objects_used']} -> {a['extstore_objects_used']}"
                    for k, b, a in steps
                    if int(b["curr_items"]) - int(a["curr_items"]) != 1
                    or int(b["extstore_objects_used"]) - int(a["extstore_objects_used"]) != 1]
            assert not kept, f"reads that left the {how} disk item in: " + "; ".join(kept)
        srv.check_healthy()
        return
    pytest.fail(f"a background pass reclaimed an item in each of {ATTEMPTS} runs: nothing measured")
