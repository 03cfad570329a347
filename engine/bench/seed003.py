#!/usr/bin/env python3
"""Seed 003's experiment (slab chunk growth factor against items kept): the
workload and a driver that stores it into one running server.

Why it is its own module: the benchmark (bench-engine.sh) runs it against
cachetd, memcached 1.6.45 and Debian's 1.6.18 at every -f, and a `make check`
test replays the very same workload against cachetd, so the workload must
come from one small function with a stable signature:

    seed003_workload(seed=SEED) -> list[tuple[str, str]]

50,000 (key, value) pairs, keys "t00000" ... "t49999" in order, each value
1-10 numbers drawn uniformly from 1-15, as space-separated decimal text
("3 15 7"). Python's random.Random(seed) is documented as reproducible across
versions for the same seed, so a given seed is the same workload on every
machine. The document's other parameters are constants here: -m 3 (MB), -n 24
(bytes), and the factors in FACTORS.

The driver only talks to 127.0.0.0/8, sends a bounded number of requests
(one set per pair, then one `stats`) and gives up on a silent server after a
timeout: it always stops by itself.

CLI (used by bench-engine.sh; the server is started by the caller, which owns
pinning and flags):
    seed003.py fill --port PORT [--seed N] [--json OUT]
        stores the workload, prints one line and writes JSON: replies by kind,
        and the server's curr_items, evictions, total_items, the slab classes
        in use and the bytes of slab pages it holds (`stats slabs`
        total_malloced).
    seed003.py dump [--seed N]     prints the workload, one "key value" a line
"""
import argparse
import json
import random
import sys
import time

SEED = 3
ITEMS = 50_000
MEMORY_MB = 3
MIN_CHUNK = 24
FACTORS = (1.06, 1.065, 1.07, 1.075, 1.1, 1.15, 1.2, 1.25, 1.5, 2.0)


def seed003_workload(seed=SEED):
    """The 50,000 (key, value) pairs of seed 003's experiment, both str."""
    rng = random.Random(seed)
    out = []
    for i in range(ITEMS):
        count = rng.randint(1, 10)
        out.append((f"t{i:05d}", " ".join(str(rng.randint(1, 15)) for _ in range(count))))
    return out


def fill(port, seed=SEED):
    """Stores the workload into the server on 127.0.0.1:PORT; returns the
    replies by kind and the server's counts afterwards."""
    # Imported here so that seed003_workload needs nothing beside this file.
    from mcstats import Client, slab_classes
    pairs = seed003_workload(seed)
    with Client(port) as c:
        t0 = time.monotonic()
        replies = c.set_many(pairs)
        seconds = time.monotonic() - t0
        st = c.stats()
        slabs = c.stats("slabs")
        classes = slab_classes(slabs)
    return {
        "seed": seed, "items_sent": len(pairs), "seconds": round(seconds, 3),
        "replies": replies, "stored": replies.get("STORED", 0),
        "curr_items": st.get("curr_items"), "evictions": st.get("evictions"),
        "total_items": st.get("total_items"),
        "classes_used": sum(1 for v in classes.values() if v.get("used_chunks")),
        # Bytes of slab pages the server holds for items: page sizes differ
        # between servers (and with -m), so pages alone do not compare.
        "slab_bytes": slabs.get("total_malloced"),
        "slab_classes": {str(k): v for k, v in classes.items()},
        "payload_bytes": sum(len(k) + len(v) for k, v in pairs),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fill", help="store the workload into the server on PORT and report items kept")
    f.add_argument("--port", type=int, required=True)
    f.add_argument("--seed", type=int, default=SEED)
    f.add_argument("--json", help="write the result here")
    f.add_argument("--label", default="")
    d = sub.add_parser("dump", help="print the workload")
    d.add_argument("--seed", type=int, default=SEED)
    a = ap.parse_args(argv)
    if a.cmd == "dump":
        for k, v in seed003_workload(a.seed):
            print(k, v)
        return 0
    r = fill(a.port, a.seed)
    r["label"] = a.label
    if a.json:
        with open(a.json, "w") as out:
            json.dump(r, out, indent=2)
    other = {k: v for k, v in r["replies"].items() if k != "STORED"}
    print(f"{a.label or a.port}: {r['stored']:,} stored, curr_items {r['curr_items']:,}, evictions {r['evictions']:,}, "
          f"{r['classes_used']} slab classes in use, {r['slab_bytes'] or 0:,} bytes of slab pages"
          + (f"; other replies {other}" if other else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
