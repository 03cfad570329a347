#!/usr/bin/env python3
"""How steady a device's queue is during a run: samples the device's reads in
flight (/sys/block/DEV/inflight, its first field) every 2 ms and writes their
distribution as JSON.

Why: /proc/diskstats gives the mean number of reads in flight (Little's law),
and in the quiet extstore run of 2026-11-28 18:08 cachetd and fio had the same
mean (20.4 and 20.7) while cachetd's reads took 383 us at the device against
fio's 312. A mean hides whether the queue was steady (fio refills each read
as one completes) or swung between empty and full (a closed loop's GETs
moving in batches): a device whose throughput saturates with depth serves a
swinging queue more slowly at the same mean. bench-extstore.sh runs this
beside fio's depth-32 run and each server's (docs/benchmarks.md, "why
cachetd's reads take longer at the device than fio's").

Bounded: it stops after SECS seconds whatever happens. It reads one sysfs
file per sample and sleeps in between (about 1% of a CPU).

Usage: inflight-sample.py DEV OUT.json SECS [DELAY]
  DELAY seconds (default 0) are waited first: the sample skips the run's
  start-up.
"""
import json
import sys
import time

LOW = 8   # "nearly empty": fewer than a quarter of the bench's depth of 32


def main():
    dev, out, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
    delay = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    time.sleep(delay)
    path = f"/sys/block/{dev}/inflight"
    xs = []
    end = time.monotonic() + secs
    while time.monotonic() < end:
        with open(path) as f:
            xs.append(int(f.read().split()[0]))
        time.sleep(0.002)
    xs.sort()
    n = len(xs)
    res = {"dev": dev, "samples": n, "interval_ms": 2, "secs": secs}
    if n:
        res.update({
            "mean": sum(xs) / n,
            "p10": xs[n // 10], "p50": xs[n // 2], "p90": xs[9 * n // 10],
            "share_below_8": sum(1 for x in xs if x < LOW) / n,
            "share_24_up": sum(1 for x in xs if x >= 24) / n,
        })
    with open(out, "w") as f:
        json.dump(res, f)
        f.write("\n")


if __name__ == "__main__":
    main()
