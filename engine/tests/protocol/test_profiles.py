"""Workload profiles (issue 23, engine parts 1-2): `stats sizes` (always on:
the sizes of stored items, and `missed:<size>` for items stored right after a
GET missed them) and `stats mrc` (a live miss-ratio curve, SHARDS), both also
in /metrics.

`stats sizes` of stored items has memcached 1.6.45's format (`STAT <size>
<count>`, 32-byte buckets named by their upper bound; memcached shows it only
with -o track_sizes, which these tests pass, and answers `STAT sizes_status
disabled` otherwise): that test runs against memcached too. Item sizes include
each server's own header, so the tests check counts and format, not which
bucket. The missed histogram and `stats mrc` are cachetd's own.
"""
import random
import urllib.request

import pytest

from conftest import advance_clock, next_free_port, stat, value_of, wait_until


def size_buckets(c, prefix=""):
    out = {}
    for name, value in c.stats("sizes").items():
        if prefix and not name.startswith(prefix):
            continue
        rest = name[len(prefix):]
        if rest.isdigit():
            out[int(rest)] = int(value)
    return out


def test_stats_sizes_counts_stored_items_in_32_byte_buckets(start_server):
    srv = start_server("-o", "track_sizes")
    with srv.conn() as c:
        for i, size in enumerate([10, 10, 100, 1000, 5000]):
            assert c.store("set", f"sz{i}", b"v" * size) == b"STORED"
        stored = size_buckets(c)
        assert sum(stored.values()) == 5, stored
        assert all(b % 32 == 0 for b in stored), stored
        # the two 10-byte values share a bucket; the others are apart
        assert sorted(stored.values()) == [1, 1, 1, 2], stored
        assert c.cmd("delete sz3") == b"DELETED"
        assert sum(size_buckets(c).values()) == 4


@pytest.mark.cachetd_only
def test_stats_sizes_missed_counts_a_store_right_after_a_miss(start_server):
    srv = start_server()
    with srv.conn() as c:
        assert c.store("set", "known", b"k" * 300) == b"STORED"   # no miss before it: not counted
        assert size_buckets(c, "missed:") == {}
        assert c.cmd("mg wanted v") == b"EN"
        c.send(b"ms wanted 700\r\n" + b"w" * 700 + b"\r\n")
        assert c.line() == b"HD"
        assert c.values("get gone") == {}
        assert c.store("set", "gone", b"g" * 40) == b"STORED"
        missed = size_buckets(c, "missed:")
        assert sum(missed.values()) == 2, missed
        # the 700-byte fill lands in the bucket of the stored 700-byte item
        stored = size_buckets(c)
        big = max(missed)
        assert stored.get(big) == 1 and big > 700
        # a second store of the same key is not after a miss
        c.send(b"ms wanted 700\r\n" + b"w" * 700 + b"\r\n")
        assert c.line() == b"HD"
        assert sum(size_buckets(c, "missed:").values()) == 2


def mrc_of(c):
    out = c.stats("mrc")
    curve = {int(k.split(":")[0]): float(v) for k, v in out.items() if k.endswith(":miss_ratio")}
    return out, dict(sorted(curve.items()))


def run_zipf_gets(c, keys, count, seed=7, alpha=1.0):
    """`count` GETs over `keys` keys, Zipf-like; a miss is filled with a
    store of a size that depends on the key (the look-aside pattern). Returns
    the misses seen."""
    rnd = random.Random(seed)
    weights = [1.0 / (k + 1) ** alpha for k in range(keys)]
    misses = 0
    batch = 400
    for start in range(0, count, batch):
        ks = rnd.choices(range(keys), weights, k=min(batch, count - start))
        c.send(b"".join(b"mg p%d v\r\n" % k for k in ks) + b"mn\r\n")
        fills = []
        for k in ks:
            line = c.line()
            if line == b"EN":
                fills.append(k)
            else:
                assert line.startswith(b"VA "), line
                c.exact(int(line.split()[1]) + 2)
        assert c.line() == b"MN"
        misses += len(fills)
        for k in fills:
            size = 100 + (k % 10) * 90
            c.send(b"ms p%d %d q\r\n" % (k, size) + b"v" * size + b"\r\n")
        c.send(b"mn\r\n")
        assert c.line() == b"MN"
    return misses


@pytest.mark.cachetd_only
def test_stats_mrc_matches_the_observed_miss_ratio(start_server):
    """With -m far above the key set nothing is evicted: the observed misses
    are the first references, and the curve at -m and above must say so. Below
    the footprint the curve must rise and never fall as the cache shrinks."""
    srv = start_server("-m", "64")
    with srv.conn() as c:
        count = 40000
        misses = run_zipf_gets(c, 20000, count, alpha=0.5)
        out, curve = mrc_of(c)
        assert int(out["references"]) == count
        assert int(out["sample_keys"]) > 100
        assert 0 < float(out["sample_rate"]) <= 1 / 32
        assert int(out["limit_maxbytes"]) == 64 << 20
        sizes = list(curve)
        assert len(sizes) >= 8 and min(sizes) < 64 << 20 < max(sizes)
        ratios = list(curve.values())
        assert all(0 <= r <= 1 for r in ratios)
        assert all(a >= b - 1e-9 for a, b in zip(ratios, ratios[1:])), curve
        observed = misses / count
        assert abs(curve[64 << 20] - observed) < 0.05, (curve[64 << 20], observed)
        # ~17,000 keys of ~600 bytes are read: a 4 MiB cache (1/16 of -m) misses more
        assert curve[4 << 20] > observed + 0.05, curve


@pytest.mark.cachetd_only
def test_stats_reset_restarts_the_curve(start_server):
    srv = start_server()
    with srv.conn() as c:
        run_zipf_gets(c, 500, 2000)
        assert int(mrc_of(c)[0]["references"]) == 2000
        assert c.cmd("stats reset") == b"RESET"
        out, _ = mrc_of(c)
        assert int(out["references"]) == 0 and int(out["sample_keys"]) == 0


@pytest.mark.cachetd_only
def test_metrics_show_sizes_and_the_curve(start_server):
    port = next_free_port()
    srv = start_server("-o", f"metrics_port={port}")
    with srv.conn() as c:
        run_zipf_gets(c, 300, 3000)
        stored = sum(size_buckets(c).values())
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    lines = body.splitlines()

    def series(name):
        return {l.split("{")[1].split("}")[0]: float(l.split()[-1]) for l in lines if l.startswith(name + "{")}

    sizes = series("cachet_item_sizes")
    assert sizes['max_bytes="+Inf"'] == stored > 200
    assert sorted(sizes.values()) == list(sizes.values()), "buckets are cumulative"
    # every key was stored right after its first GET missed; the miss tags
    # are a 4096-slot table, so a fill whose tag another miss took meanwhile
    # (400 misses per batch here) is not counted
    assert 0.95 * stored <= series("cachet_missed_item_sizes_total")['max_bytes="+Inf"'] <= stored
    curve = series("cachet_miss_ratio")
    assert len(curve) >= 8 and all(0 <= v <= 1 for v in curve.values())
    assert any(l.startswith("cachet_mrc_references_total 3000") for l in lines)


def class_pages(c):
    """total_pages of each slab class, by class id (`stats slabs`)."""
    return {int(k.split(":")[0]): int(v) for k, v in c.stats("slabs").items() if k.endswith(":total_pages")}


def class_of_size(c, key, size):
    """The class id an item of `size` value bytes lands in: store one and see
    which class's used_chunks grows."""
    before = {k: int(v) for k, v in c.stats("slabs").items() if k.endswith(":used_chunks")}
    assert c.store("set", key, b"x" * size) == b"STORED"
    after = {k: int(v) for k, v in c.stats("slabs").items() if k.endswith(":used_chunks")}
    grown = [int(k.split(":")[0]) for k in after if after[k] > before.get(k, 0)]
    assert len(grown) == 1, f"one class grows for a {size}-byte value: {grown}"
    return grown[0]


@pytest.mark.cachetd_only("-o slab_mover is cachetd's; memcached 1.6.45 refuses slab_automove=3")
@pytest.mark.test_hooks
def test_gain_mover_gives_pages_to_the_class_with_the_larger_marginal_gain(start_server):
    """-o slab_mover=gain (slabs_gain.c): a class whose keys are read again at
    random gains hits from every page it is given; a class that only streams
    new keys gains none. After the stream has taken all memory, the mover
    moves pages from the streaming class to the rereading one, although both
    evict items of about the same (young) age, where the age balancer sees no
    reason to move. Time moves by debugtime, one second per round, so the
    once-a-second pass runs whatever the machine's speed; rounds are bounded."""
    srv = start_server("-m", "8", "-o", "slab_mover=gain")
    small, large = 100, 2000
    rng = random.Random(23)
    with srv.conn() as c:
        assert c.stats("settings")["slab_mover"] == "gain"
        cls_small = class_of_size(c, "ws99999", small)
        cls_large = class_of_size(c, "st9999999", large)
        streamed = 0

        def stream_large(n):
            nonlocal streamed
            for _ in range(n):
                c.send(b"set st%07d 0 0 %d noreply\r\n%s\r\n" % (streamed, large, b"s" * large))
                streamed += 1
            assert c.cmd("version").startswith(b"VERSION")

        def set_small(i):
            c.send(b"set ws%05d 0 0 %d noreply\r\n%s\r\n" % (i, small, value_of("ws", i, small)))

        stream_large(6000)   # 8 MB of 128 KB pages: the stream holds them all
        working = 5000       # about five pages of the small class
        for i in range(working):
            set_small(i)
        start = class_pages(c)[cls_small]
        grew_to = start
        for _ in range(40):
            for i in (rng.randrange(working) for _ in range(3000)):
                if not c.values(f"get ws{i:05d}"):
                    set_small(i)
            stream_large(1500)
            advance_clock(c, 1)
            grew_to = class_pages(c)[cls_small]
            if grew_to >= start + 3:
                break
        pages = class_pages(c)
        assert grew_to >= start + 3, (f"the rereading class {cls_small} had {start} pages and now {grew_to}; "
                                      f"the streaming class {cls_large} has {pages.get(cls_large)}")
        assert stat(c, "slab_gain_shadow_hits", "slabs") > 0
