#!/usr/bin/env python3
"""Where each server's disk writes went in bench-extstore's Zipf session.

Why: the Zipf rows compare GETs/s and p99, and a busy machine moves both; the
counters say what each server did with the disk whatever the machine's load.
Per phase of the session (the pipelined prefill with the closed-loop run, the
open-loop steps, the half-load step, whose p99 is judged), from the servers'
own `stats` saved by bench-extstore.sh:
- records written, and of them the compactor's rewrites (extstore_compact_rescues);
  the rest is the flusher's;
- records written per value set (cmd_set), and per recache (recache_from_extstore):
  a recached value's disk record becomes garbage, and the value it displaces is
  written out again;
- pages evicted and the live records they held (lost values), misses from disk.

Usage: xt-zipf-writes.py RESULTS_DIR   (engine/bench/results/xt-...)
The half-load step has counters of its own only in runs that saved
zipf-half-before-stats-NAME.json; older runs print steps and half as one.
"""
import json
import os
import sys

SERVERS = ["cachetd", "mc1645", "mc1618"]
COUNTERS = ["cmd_get", "cmd_set", "get_extstore", "recache_from_extstore", "miss_from_extstore", "evictions",
            "extstore_objects_written", "extstore_bytes_written", "extstore_compact_rescues",
            "extstore_compact_skipped", "extstore_page_evictions", "extstore_objects_evicted",
            "extstore_page_reclaims"]


def load(path):
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError):
        return None
    return j.get("server_stats") or j.get("stats")


def num(stats, key):
    try:
        return int(float(stats.get(key, 0)))
    except (TypeError, ValueError):
        return 0


def phase(name, a, b):
    d = {k: num(b, k) - (num(a, k) if a else 0) for k in COUNTERS}
    written, rescues = d["extstore_objects_written"], d["extstore_compact_rescues"]
    flusher = written - rescues
    per_set = written / d["cmd_set"] if d["cmd_set"] else float("nan")
    per_recache = written / d["recache_from_extstore"] if d["recache_from_extstore"] else float("nan")
    disk_share = d["get_extstore"] / d["cmd_get"] if d["cmd_get"] else float("nan")
    print(f"  {name:<22} gets {d['cmd_get']:>9,}  disk {disk_share:6.1%}  sets {d['cmd_set']:>8,}  "
          f"recaches {d['recache_from_extstore']:>7,}  written {written:>8,} (flusher {flusher:,}, "
          f"compactor {rescues:,})  per set {per_set:.2f}  per recache {per_recache:.2f}  "
          f"pages evicted {d['extstore_page_evictions']} ({d['extstore_objects_evicted']:,} live records)  "
          f"reclaimed {d['extstore_page_reclaims']}  misses from disk {d['miss_from_extstore']:,}")


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-4], file=sys.stderr)
        sys.exit(2)
    d = sys.argv[1]
    for s in SERVERS:
        closed = load(os.path.join(d, f"zipf-{s}.json"))
        end = load(os.path.join(d, f"zipf-end-stats-{s}.json"))
        if closed is None or end is None:
            continue
        print(s)
        phase("prefill + closed loop", None, closed)
        before_half = load(os.path.join(d, f"zipf-half-before-stats-{s}.json"))
        if before_half is not None:
            phase("open-loop steps", closed, before_half)
            phase("half-load step", before_half, end)
        else:
            phase("steps + half-load step", closed, end)


if __name__ == "__main__":
    main()
