"""Every ASCII command through a real client library (pymemcache, pinned).

A client library is the other half of compatibility: it parses replies the way
applications do, so a reply that is almost right (a missing END, an extra line
after noreply) breaks it. pymemcache 4.0 has no gat/gats and sends no
`verbosity`, so those go over a raw socket here, next to the client.
Tests share one server (module scope) and use keys unique to each test; the
tests that need a clean or specially started server start their own.
"""
import re
import time

import pytest
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError, MemcacheServerError

from conftest import advance_clock, wait_until


U64_MAX = (1 << 64) - 1
ONE_MB = 1024 * 1024


def client_for(server, **kw):
    return Client(("127.0.0.1", server.port), connect_timeout=5, timeout=10,
                  default_noreply=False, **kw)


@pytest.fixture
def mc(server):
    c = client_for(server)
    yield c
    c.close()


def stats_of(mc, *group):
    """pymemcache's stats, with names as str and every numeric value as an int."""
    out = {}
    for k, v in mc.stats(*group).items():
        k = k.decode() if isinstance(k, bytes) else k
        if isinstance(v, bytes):
            v = v.decode()
        if isinstance(v, str) and re.fullmatch(r"-?\d+", v):
            v = int(v)
        out[k] = v
    return out


def num(value):
    """incr/decr may leave a value space-padded (protocol.txt allows it)."""
    return int(value.rstrip(b" "))


# ---- storage ---------------------------------------------------------------------
def test_set_get_with_flags(mc, key):
    assert mc.set(key, b"hello", flags=0)
    assert mc.get(key) == b"hello"
    with mc_raw(mc) as raw:
        assert raw.store("set", key, "x", flags=4294967295) == b"STORED"
        assert raw.values(f"get {key}") == {key: (4294967295, b"x", None)}


def test_multi_get_and_gets(mc, key):
    keys = [f"{key}-{i}" for i in range(100)]
    assert mc.set_many({k: f"v{i}".encode() for i, k in enumerate(keys)}) == []
    got = mc.get_many(keys + [f"{key}-missing-a", f"{key}-missing-b"])
    assert got == {k: f"v{i}".encode() for i, k in enumerate(keys)}
    got = mc.gets_many(keys[:10])
    assert set(got) == set(keys[:10])
    cas_values = [cas for _, cas in got.values()]
    assert all(int(c) > 0 for c in cas_values)
    assert len(set(cas_values)) == len(cas_values), "each item must have its own CAS unique"


def test_add(mc, key):
    assert mc.add(key, b"first")
    assert not mc.add(key, b"second")
    assert mc.get(key) == b"first"


def test_replace(mc, key):
    assert not mc.replace(key, b"nothing-there")
    assert mc.get(key) is None
    mc.set(key, b"a")
    assert mc.replace(key, b"b")
    assert mc.get(key) == b"b"


def test_append_prepend(mc, key):
    assert not mc.append(key, b"x")
    assert not mc.prepend(key, b"x")
    assert mc.get(key) is None
    mc.set(key, b"mid", flags=7)
    assert mc.append(key, b"-end")
    assert mc.prepend(key, b"start-")
    with mc_raw(mc) as raw:
        # append/prepend keep the item's flags
        assert raw.values(f"get {key}") == {key: (7, b"start-mid-end", None)}


def test_cas_success_conflict_and_missing(mc, key):
    assert mc.cas(key, b"v", 12345) is None  # NOT_FOUND
    mc.set(key, b"v1")
    _, cas1 = mc.gets(key)
    assert mc.cas(key, b"v2", cas1) is True  # STORED
    assert mc.cas(key, b"v3", cas1) is False  # EXISTS: the item changed since cas1
    value, cas2 = mc.gets(key)
    assert value == b"v2" and int(cas2) != int(cas1)
    mc.set(key, b"v4")  # any write changes the CAS unique
    assert mc.cas(key, b"v5", cas2) is False
    assert mc.get(key) == b"v4"


def test_cas_conflict_between_two_clients(server, key):
    a, b = client_for(server), client_for(server)
    try:
        a.set(key, b"0")
        _, cas_a = a.gets(key)
        _, cas_b = b.gets(key)
        assert cas_a == cas_b
        assert b.cas(key, b"b-wins", cas_b) is True
        assert a.cas(key, b"a-loses", cas_a) is False
        assert a.get(key) == b"b-wins"
    finally:
        a.close()
        b.close()


# ---- incr / decr -------------------------------------------------------------------
def test_incr_decr_basic(mc, key):
    assert mc.incr(key, 1) is None  # no implicit creation
    assert mc.decr(key, 1) is None
    mc.set(key, b"10")
    assert mc.incr(key, 5) == 15
    assert mc.decr(key, 6) == 9
    assert num(mc.get(key)) == 9
    assert mc.incr(key, 991) == 1000
    assert mc.get(key) == b"1000"


def test_incr_wraps_at_64_bits(mc, key):
    mc.set(key, str(U64_MAX).encode())
    assert mc.incr(key, 1) == 0
    mc.set(key, str(U64_MAX - 1).encode())
    assert mc.incr(key, 3) == 1
    mc.set(key, b"5")
    assert mc.incr(key, U64_MAX) == 4  # 5 + (2^64 - 1) mod 2^64


def test_decr_floors_at_zero(mc, key):
    mc.set(key, b"3")
    assert mc.decr(key, 5) == 0
    assert mc.decr(key, 1) == 0
    mc.set(key, str(U64_MAX).encode())
    assert mc.decr(key, U64_MAX) == 0


def test_incr_on_non_numeric_value(mc, key):
    mc.set(key, b"abc")
    with pytest.raises(MemcacheClientError, match="non-numeric"):
        mc.incr(key, 1)
    assert mc.get(key) == b"abc"


def test_incr_invalid_delta(server, key):
    with server.conn() as c:
        c.store("set", key, "1")
        assert c.cmd(f"incr {key} abc") == b"CLIENT_ERROR invalid numeric delta argument"
        assert c.cmd(f"incr {key} -1") == b"CLIENT_ERROR invalid numeric delta argument"
        assert c.cmd(f"incr {key} 18446744073709551616") == b"CLIENT_ERROR invalid numeric delta argument"
        assert c.cmd(f"incr {key} 2") == b"3"


# ---- touch / delete ------------------------------------------------------------------
@pytest.fixture
def clock_mc(start_server):
    """A client of a server of its own, whose clock the test moves (test-hooks
    builds): the module's shared server keeps its clock for the other tests."""
    srv = start_server()
    c = client_for(srv)
    c.raw = srv.conn()
    yield c
    c.raw.close()
    c.close()


@pytest.mark.test_hooks
def test_touch(clock_mc):
    mc = clock_mc
    assert mc.touch("t", 10) is False
    mc.set("t", b"t", expire=3)
    mc.set("untouched", b"u", expire=3)
    assert mc.touch("t", 100) is True
    advance_clock(mc.raw, 10)
    assert mc.get("untouched") is None, "the clock moved past the 3 s TTL"
    assert mc.get("t") == b"t", "touch must replace the 3 s TTL"
    assert mc.touch("t", -1) is True
    assert mc.get("t") is None, "touch with a negative TTL expires the item"


def test_delete(mc, key):
    assert mc.delete(key) is False
    mc.set(key, b"d")
    assert mc.delete(key) is True
    assert mc.get(key) is None
    assert mc.delete(key) is False


# ---- noreply ---------------------------------------------------------------------------
def test_noreply_variants(server, key):
    nr = client_for(server)
    try:
        nr.set(key, b"1", noreply=True)
        nr.add(key, b"ignored", noreply=True)
        nr.add(key + "-added", b"a", noreply=True)
        nr.replace(key + "-missing", b"r", noreply=True)
        nr.append(key, b"0", noreply=True)  # "10"
        nr.prepend(key, b"2", noreply=True)  # "210"
        nr.incr(key, 5, noreply=True)  # 215
        nr.decr(key, 15, noreply=True)  # 200
        nr.touch(key, 100, noreply=True)
        nr.set(key + "-del", b"x", noreply=True)
        nr.delete(key + "-del", noreply=True)
        nr.delete(key + "-never", noreply=True)
        # Had any of them answered, the version reply would be out of step.
        nr.version()  # raises unless the very next line is VERSION
        assert num(nr.get(key)) == 200
        assert nr.get(key + "-added") == b"a"
        assert nr.get(key + "-missing") is None
        assert nr.get(key + "-del") is None
    finally:
        nr.close()
    with server.conn() as c:
        _, _, cas = c.values(f"gets {key}")[key]
        c.send(f"cas {key} 0 0 1 {cas} noreply\r\nz\r\n".encode())
        c.send(f"cas {key} 0 0 1 {cas} noreply\r\ny\r\n".encode())  # stale: EXISTS, not sent
        c.send(b"verbosity 0 noreply\r\n")
        assert c.cmd("version").startswith(b"VERSION "), "a noreply command sent a reply"
        assert c.values(f"get {key}")[key][1] == b"z"


# ---- version / verbosity / quit ----------------------------------------------------------
def test_version(mc):
    assert mc.version()


def test_verbosity_and_quit(server):
    with server.conn() as c:
        assert c.cmd("verbosity 1") == b"OK"
        assert c.cmd("verbosity 0") == b"OK"
        c.send(b"quit\r\n")
        assert c.closed_within(5), "quit must close the connection"
        assert c.buf == b"", "quit must not answer"


# ---- gat / gats (raw: pymemcache has neither) ---------------------------------------------
@pytest.mark.test_hooks
def test_gat_and_gats(start_server):
    key = "g"
    with start_server().conn() as c:
        assert c.store("set", key + "-a", "A", flags=3, exptime=3) == b"STORED"
        assert c.store("set", key + "-b", "B", exptime=3) == b"STORED"
        assert c.store("set", key + "-c", "C", exptime=3) == b"STORED"
        got = c.values(f"gat 100 {key}-a {key}-b {key}-missing")
        assert got == {key + "-a": (3, b"A", None), key + "-b": (0, b"B", None)}
        got = c.values(f"gats 100 {key}-a")
        assert got[key + "-a"][:2] == (3, b"A") and got[key + "-a"][2] > 0
        gets = c.values(f"gets {key}-a")
        assert gets[key + "-a"][2] == got[key + "-a"][2], "gats must report the same CAS as gets"
        advance_clock(c, 10)
        got = c.values(f"get {key}-a {key}-b {key}-c")
        assert set(got) == {key + "-a", key + "-b"}, "gat must replace the 3 s TTL with 100 s (and -c's ran out)"
        assert c.values(f"gat -1 {key}-a") == {key + "-a": (3, b"A", None)}
        assert c.values(f"get {key}-a") == {}, "gat with a negative TTL returns the value, then it is gone"


def test_gat_errors(server):
    with server.conn() as c:
        assert c.cmd("gat") == b"CLIENT_ERROR bad command line format"  # memcached 1.6.45
        assert c.cmd("gat abc somekey") == b"CLIENT_ERROR invalid exptime argument"
        assert c.cmd("version").startswith(b"VERSION ")


# ---- stats ---------------------------------------------------------------------------------
GENERAL_STATS = ["pid", "uptime", "time", "version", "curr_items", "total_items", "bytes",
                 "curr_connections", "total_connections", "rejected_connections", "cmd_get",
                 "cmd_set", "cmd_flush", "cmd_touch", "get_hits", "get_misses", "get_expired",
                 "delete_hits", "delete_misses", "incr_hits", "incr_misses", "decr_hits",
                 "decr_misses", "cas_hits", "cas_misses", "cas_badval", "touch_hits",
                 "touch_misses", "evictions", "limit_maxbytes", "threads", "hash_power_level",
                 "hash_is_expanding", "max_connections"]


def test_stats_general_names_and_counters(mc, key):
    before = stats_of(mc)
    missing = [n for n in GENERAL_STATS if n not in before]
    assert not missing, f"stats lacks {missing}"
    mc.set(key, b"s")
    mc.get(key)
    mc.get(key + "-missing")
    mc.delete(key + "-missing")
    after = stats_of(mc)
    assert after["get_hits"] - before["get_hits"] >= 1
    assert after["get_misses"] - before["get_misses"] >= 1
    assert after["cmd_set"] - before["cmd_set"] >= 1
    assert after["delete_misses"] - before["delete_misses"] >= 1
    assert after["curr_items"] >= 1
    assert after["bytes"] > 0
    assert after["curr_connections"] >= 1
    assert after["limit_maxbytes"] == 64 * ONE_MB, "default -m is 64 MB"


def test_stats_settings(mc):
    s = stats_of(mc, "settings")
    for name in ("maxbytes", "maxconns", "tcpport", "num_threads", "item_size_max", "growth_factor",
                 "chunk_size", "cas_enabled"):
        assert name in s, f"stats settings lacks {name}"
    assert s["maxbytes"] == 64 * ONE_MB
    assert s["item_size_max"] == ONE_MB
    assert s["maxconns"] == 1024


def test_stats_items_and_slabs(mc, key):
    mc.set(key, b"i" * 100)
    items = stats_of(mc, "items")
    numbers = {k: v for k, v in items.items() if k.startswith("items:") and k.endswith(":number")}
    assert numbers and sum(numbers.values()) >= 1, f"stats items: {items}"
    slabs = stats_of(mc, "slabs")
    assert "active_slabs" in slabs and slabs["active_slabs"] >= 1
    assert "total_malloced" in slabs
    assert any(k.endswith(":chunk_size") for k in slabs), f"stats slabs: {slabs}"


@pytest.mark.cachetd_only(reason="memcached 1.6.18 answers `STAT sizes_status disabled` unless started "
                          "with -o track_sizes; the issue asks for stats sizes always on")
def test_stats_sizes_always_on(mc, key):
    mc.set(key, b"z" * 500)
    sizes = stats_of(mc, "sizes")
    counts = {k: v for k, v in sizes.items() if k.isdigit()}
    assert counts and sum(counts.values()) >= 1, f"stats sizes: {sizes}"


BAG_STATS = ["lru_bags", "lru_bags_opened", "lru_cleaner_passes", "lru_items_moved",
             "lru_bags_merged", "lru_items_merged", "lru_flusher_hold_max"]


@pytest.mark.cachetd_only(reason="bag-LRU statistics are cachetd's own (memcached has a segmented LRU)")
def test_bag_lru_stats(mc, key):
    mc.set_many({f"{key}-{i}": b"b" * 200 for i in range(500)})
    first = stats_of(mc)
    missing = [n for n in BAG_STATS if n not in first]
    assert not missing, f"stats lacks bag-LRU counters {missing}"
    assert all(isinstance(first[n], int) and first[n] >= 0 for n in BAG_STATS)
    assert first["lru_bags"] >= 1
    items = stats_of(mc, "items")
    per_class = {k: v for k, v in items.items() if k.endswith(":bags")}
    assert per_class and max(per_class.values()) >= 1, f"stats items has no per-class bag count: {items}"
    wait_until(lambda: stats_of(mc)["lru_cleaner_passes"] > first["lru_cleaner_passes"], 15,
               "a pass of the bag cleaner")


def test_stats_conns(server):
    with server.conn() as c:
        conns = c.stats("conns")
    addrs = [v for k, v in conns.items() if k.endswith(":addr")]
    assert any("127.0.0.1" in a for a in addrs), f"stats conns: {conns}"


def test_stats_reset(start_server):
    srv = start_server()
    with srv.conn() as c:
        c.store("set", "k", "v")
        c.values("get k")
        c.values("get missing")
        assert int(c.stats()["get_hits"]) == 1
        assert c.cmd("stats reset") == b"RESET"
        s = c.stats()
        assert int(s["get_hits"]) == 0 and int(s["get_misses"]) == 0
        assert int(s["curr_items"]) == 1, "stats reset must not drop items"
        assert c.values("get k") == {"k": (0, b"v", None)}


def test_stats_unknown_subcommand(server):
    with server.conn() as c:
        reply = c.cmd("stats no-such-group")
        assert reply.startswith(b"ERROR") or reply.startswith(b"CLIENT_ERROR"), reply
        assert c.cmd("version").startswith(b"VERSION ")


# ---- flush_all ------------------------------------------------------------------------------
def test_flush_all_now_and_noreply(start_server):
    srv = start_server()
    mc = client_for(srv)
    try:
        mc.set_many({"a": b"1", "b": b"2"})
        assert mc.flush_all() is True
        assert mc.get_many(["a", "b"]) == {}
        mc.set("c", b"3")
        assert mc.get("c") == b"3", "items stored after a flush are kept"
        mc.flush_all(noreply=True)
        assert mc.get("c") is None
    finally:
        mc.close()


@pytest.mark.test_hooks
def test_flush_all_with_delay(clock_mc):
    mc = clock_mc
    mc.set("old", b"1")
    assert mc.flush_all(delay=5) is True
    assert mc.get("old") == b"1", "a delayed flush leaves items readable until it fires"
    advance_clock(mc.raw, 2)
    assert mc.get("old") == b"1", "the flush fired 3 s early"
    advance_clock(mc.raw, 3)
    assert mc.get("old") is None, "the delayed flush never fired"
    # As memcached: what is stored in the very second the flush fires is
    # flushed too (whole-second clock), so store the new item a second later.
    advance_clock(mc.raw, 1)
    mc.set("new", b"2")
    assert mc.get("new") == b"2"


# ---- large values ----------------------------------------------------------------------------
def test_large_value_just_under_1mb(mc, key):
    value = bytes(range(256)) * ((ONE_MB - 1024) // 256)
    assert mc.set(key, value)
    assert mc.get(key) == value


def test_value_over_1mb_is_refused(mc, key):
    mc.set(key, b"old")
    with pytest.raises(MemcacheServerError, match="object too large for cache"):
        mc.set(key, b"x" * (ONE_MB + 1))
    # memcached 1.6.18 drops the old value when a set is refused (no stale read
    # after a failed write); keeping it is also sound. Never a partial value.
    assert mc.get(key) in (None, b"old")
    assert mc.set(key, b"after")
    assert mc.get(key) == b"after"


def test_max_item_size_2m(start_server):
    srv = start_server("-I", "2m")
    mc = client_for(srv)
    try:
        big = b"0123456789abcdef" * ((2 * ONE_MB - 2048) // 16)
        assert mc.set("big", big)
        assert mc.get("big") == big
        assert mc.set("mid", b"m" * (ONE_MB + 4096))
        assert len(mc.get("mid")) == ONE_MB + 4096
        with pytest.raises(MemcacheServerError, match="object too large for cache"):
            mc.set("huge", b"h" * (2 * ONE_MB + 1))
        assert mc.get("big") == big
        s = stats_of(mc, "settings")
        assert s["item_size_max"] == 2 * ONE_MB
    finally:
        mc.close()


@pytest.mark.parametrize("args", [("-I", "1m"), ("-I", "2m"), ("-I", "1m", "-C")])
def test_item_size_limit_counts_the_items_overhead(start_server, args):
    # memcached 1.6.45: -I bounds the whole item (48-byte header, key + NUL,
    # "\r\n", the CAS unless -C, 4 bytes of client flags when not 0), so a
    # value of exactly -I is refused; at -I 1m the largest for key k is 1,048,516
    limit = (2 if "2m" in args else 1) * ONE_MB
    srv = start_server(*args)
    cas = 0 if "-C" in args else 8
    with srv.conn() as c:
        for key, flags in (("k", 0), ("k" * 10, 0), ("k" * 250, 0), ("k", 5)):
            largest = limit - 48 - len(key) - 1 - 2 - cas - (4 if flags else 0)
            assert c.store("set", key, b"v" * largest, flags=flags) == b"STORED", (key, flags, largest)
            assert c.store("set", key, b"v" * (largest + 1), flags=flags) == \
                b"SERVER_ERROR object too large for cache", (key, flags, largest + 1)
            assert c.values(f"get {key}") in ({key: (flags, b"v" * largest, None)}, {}), \
                "never a partial value"
        assert c.store("set", "k", b"v" * limit) == b"SERVER_ERROR object too large for cache"
        # an append whose result passes the limit by one byte is refused
        assert c.store("set", "k", b"v" * (limit - 52 - cas - 1)) == b"STORED"
        assert c.store("append", "k", b"ab") == b"NOT_STORED"
        assert c.store("append", "k", b"a") == b"STORED"


# ---- expiry ------------------------------------------------------------------------------------
@pytest.mark.test_hooks
def test_relative_ttl_expires(clock_mc):
    mc = clock_mc
    mc.set("ttl-1", b"a", expire=1)
    mc.set("ttl-3", b"b", expire=3)
    mc.set("ttl-0", b"c", expire=0)
    # one second on: the 1 s TTL ran out, the 3 s one has 2 left (1 if the
    # wall clock ticked meanwhile)
    advance_clock(mc.raw, 1)
    assert mc.get("ttl-1") is None, "a 1 s TTL never expired"
    assert mc.get("ttl-3") == b"b", "a 3 s TTL expired after a second"
    advance_clock(mc.raw, 2)
    assert mc.get("ttl-3") is None, "a 3 s TTL never expired"
    advance_clock(mc.raw, 100000)
    assert mc.get("ttl-0") == b"c", "TTL 0 is never"


def test_negative_ttl_is_already_expired(mc, key):
    assert mc.set(key, b"gone", expire=-1)
    assert mc.get(key) is None
    assert mc.add(key, b"again"), "an expired item does not block add"
    assert mc.get(key) == b"again"


@pytest.mark.test_hooks
def test_absolute_unix_time(clock_mc):
    mc = clock_mc
    now = int(time.time())
    mc.set("past", b"p", expire=now - 100)  # > 30 days, so absolute, in the past
    mc.set("soon", b"s", expire=now + 3)
    mc.set("later", b"l", expire=now + 3600)
    assert mc.get("past") is None
    assert mc.get("soon") == b"s"
    advance_clock(mc.raw, 5)
    assert mc.get("soon") is None, "an absolute expiry 3 s ahead never came"
    assert mc.get("later") == b"l"


def test_ttl_of_30_days_is_relative_beyond_is_absolute(mc, key):
    mc.set(key, b"r", expire=60 * 60 * 24 * 30)
    assert mc.get(key) == b"r", "30 days exactly is still relative"
    mc.set(key + "-abs", b"a", expire=60 * 60 * 24 * 30 + 1)
    assert mc.get(key + "-abs") is None, "one second more is a unix time in 1970: already expired"


# ---- keys ----------------------------------------------------------------------------------------
def test_250_byte_key(mc):
    k = "k" * 250
    assert mc.set(k, b"long-key")
    assert mc.get(k) == b"long-key"
    assert mc.delete(k)


# ---- helpers -------------------------------------------------------------------------------------
class mc_raw:
    """A raw connection to the same server as a pymemcache client."""

    def __init__(self, mc):
        from conftest import Conn
        self.conn = Conn(mc.server[1])

    def __enter__(self):
        return self.conn

    def __exit__(self, *exc):
        self.conn.close()


def test_stats_counters_count_each_command(start_server):
    """A fresh server, one of each command: every counter moves by exactly what memcached's does."""
    srv = start_server()
    with srv.conn() as c:
        c.store("set", "a", "1")                      # cmd_set 1, total_items 1
        c.store("add", "a", "x")                      # cmd_set 2 (not stored)
        c.values("get a b")                           # cmd_get 2, get_hits 1, get_misses 1
        cas = c.values("gets a")["a"][2]              # cmd_get 3, get_hits 2
        c.store("cas", "a", "2", extra=str(cas))      # cmd_set 3, cas_hits 1, total_items 2
        c.store("cas", "a", "3", extra=str(cas))      # cmd_set 4, cas_badval 1
        c.store("cas", "zz", "3", extra="1")          # cmd_set 5, cas_misses 1
        c.cmd("incr a 5")                             # incr_hits 1 -> 7
        c.cmd("incr nope 5")                          # incr_misses 1
        c.cmd("decr a 1")                             # decr_hits 1
        c.cmd("decr nope 1")                          # decr_misses 1
        c.cmd("touch a 100")                          # cmd_touch 1, touch_hits 1
        c.cmd("touch nope 100")                       # cmd_touch 2, touch_misses 1
        c.cmd("delete nope")                          # delete_misses 1
        c.store("set", "e", "x", exptime=-1)          # cmd_set 6, total_items 3
        c.values("get e")                             # cmd_get 4, get_misses 2
        c.cmd("delete a")                             # delete_hits 1
        c.cmd("flush_all")                            # cmd_flush 1
        s = {k: v for k, v in c.stats().items()}
    expected = {"cmd_set": 6, "cmd_get": 4, "get_hits": 2, "get_misses": 2, "cas_hits": 1,
                "cas_badval": 1, "cas_misses": 1, "incr_hits": 1, "incr_misses": 1, "decr_hits": 1,
                "decr_misses": 1, "cmd_touch": 2, "touch_hits": 1, "touch_misses": 1,
                "delete_hits": 1, "delete_misses": 1, "cmd_flush": 1}
    got = {k: int(s[k]) for k in expected}
    assert got == expected


def test_empty_and_binary_values(mc, key):
    assert mc.set(key, b"")
    assert mc.get(key) == b""
    assert mc.append(key, b"")
    assert mc.append(key, b"\r\nEND\r\n")
    assert mc.get(key) == b"\r\nEND\r\n", "data that looks like protocol stays data"
    every_byte = bytes(range(256)) * 4
    assert mc.set(key + "-bin", every_byte)
    assert mc.get(key + "-bin") == every_byte
    with mc_raw(mc) as c:
        assert c.store("set", key + "-raw", b"") == b"STORED"
        assert c.values(f"get {key}-raw") == {key + "-raw": (0, b"", None)}


def test_append_past_max_item_size_keeps_old_value(server, mc, key):
    v = b"a" * 600000
    with server.conn() as c:
        assert c.store("set", key, v) == b"STORED"
        # memcached 1.6.45 says NOT_STORED (a SERVER_ERROR reads as a server
        # fault to clients: pymemcache raises MemcacheServerError)
        assert c.store("append", key, b"b" * 600000) == b"NOT_STORED"
        assert c.values(f"get {key}") == {key: (0, v, None)}, "a refused append must keep the old value"
        assert c.store("prepend", key, b"p" * 600000) == b"NOT_STORED"
        assert c.values(f"get {key}") == {key: (0, v, None)}
        # ms in append/prepend mode answers NS
        for mode in ("MA", "MP"):
            c.send(b"ms %s 600000 %s\r\n" % (key.encode(), mode.encode()) + b"m" * 600000 + b"\r\n")
            assert c.line() == b"NS", mode
        assert c.values(f"get {key}") == {key: (0, v, None)}
        assert c.store("append", key, b"ok") == b"STORED", "an append that fits still works"
        assert mc.get(key) == v + b"ok"
    # pymemcache sees a refused append as False, not as a server error
    assert mc.append(key, b"b" * 600000, noreply=False) is False
