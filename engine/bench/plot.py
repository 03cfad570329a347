#!/usr/bin/env python3
"""Latency against throughput for the open-loop steps of W1 and W2, all three
servers (cachetd, memcached 1.6.45, memcached 1.6.18), from one
bench-engine.sh results directory.

Usage: plot.py RESULTS_DIR OUT.png
A bench-extstore.sh directory gets its own plot (main_extstore): disk-hit
latency against disk-hit throughput beside fio's IOPS, and the Zipf steps.
Each point is one open-loop step: x is the throughput the server actually
delivered, y the latency measured from each request's intended send time.
Steps where the server fell behind its schedule are drawn hollow: there the
latency is queueing, not service. W2's refine steps (bisecting the bracket of
the highest rate with p99 under 1 ms) are drawn in order of rate with the
listed ones.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from summarize import NAMES, SERVERS  # noqa: E402

COLORS = {"cachetd": "tab:blue", "mc1645": "tab:orange", "mc1618": "tab:gray"}


def load_steps(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return []
    with open(p) as f:
        steps = [s for s in json.load(f)["steps"] if s["latency_us"] and not s.get("superseded")]
    return sorted(steps, key=lambda s: s["target_rate"])


def series(ax, steps, server, stat, style, label):
    if not steps:
        return
    xs = [s["throughput"] / 1000 for s in steps]
    ys = [s["latency_us"][stat] for s in steps]
    ax.plot(xs, ys, style, color=COLORS[server], label=label, markersize=4)
    bad = [(x, y) for s, x, y in zip(steps, xs, ys) if not s["kept_up"]]
    if bad:
        ax.plot([b[0] for b in bad], [b[1] for b in bad], "o", markerfacecolor="white",
                markeredgecolor=COLORS[server], markersize=7)


def disk_share(d, s):
    """The share of GETs the server read from extstore over its open-loop
    uniform steps (`get_extstore` / `cmd_get`, before and after the steps)."""
    try:
        with open(os.path.join(d, f"disk-steps-before-{s}.json")) as f:
            before = json.load(f)["stats"]
        with open(os.path.join(d, f"disk-steps-{s}.json")) as f:
            after = json.load(f)["server_stats"]
        dg = after["cmd_get"] - before["cmd_get"]
        hits = sum(sign * (after.get(k, 0) - before.get(k, 0))
                   for sign, k in ((1, "get_extstore"), (-1, "miss_from_extstore"), (-1, "badcrc_from_extstore")))
        return hits / dg if dg else None
    except (OSError, KeyError, TypeError, ValueError):
        return None


def main_extstore(d, out, machine):
    """bench-extstore.sh: left, disk hits (open-loop uniform reads over a data
    set 8x RAM; x is the delivered GETs/s times the share the server read from
    disk), with fio's O_DIRECT IOPS at depth 1 and 32 as the disk's limit;
    right, the Zipf 0.99 steps (mostly memory hits) for comparison."""
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(14, 5.5))
    for s in SERVERS:
        share = disk_share(d, s)
        st = load_steps(d, f"disk-steps-{s}.json")
        if st and share:
            scaled = [dict(x, throughput=x["throughput"] * share) for x in st]
            series(a1, scaled, s, "p50", "-o", f"{NAMES[s]} p50 ({100 * share:.0f}% of GETs from disk)")
            series(a1, scaled, s, "p99", "--s", f"{NAMES[s]} p99")
        z = load_steps(d, f"zipf-steps-{s}.json")
        series(a2, z, s, "p50", "-o", f"{NAMES[s]} p50")
        series(a2, z, s, "p99", "--s", f"{NAMES[s]} p99")
        if os.path.exists(os.path.join(d, f"notrun-{s}.json")):
            for a in (a1, a2):
                a.plot([], [], " ", label=f"{NAMES[s]}: not run")
    for qd, style in ((1, ":"), (32, "-.")):
        try:
            with open(os.path.join(d, f"fio-qd{qd}.json")) as f:
                iops = json.load(f)["jobs"][0]["read"]["iops"]
            a1.axvline(iops / 1000, color="red", linewidth=0.9, linestyle=style, label=f"fio 4 KB O_DIRECT IOPS, depth {qd}")
        except (OSError, KeyError, IndexError, ValueError):
            pass
    a1.set_title("disk hits: uniform GETs over 8x RAM (open loop, up to 32 outstanding)")
    a1.set_xlabel("disk-hit GETs/s (k) = delivered GETs/s x share read from disk")
    a2.set_title("Zipf 0.99 GETs with set-on-miss (open loop, up to 32 outstanding)")
    a2.set_xlabel("delivered throughput (k requests/s)")
    for a in (a1, a2):
        a.set_yscale("log")
        a.set_ylabel("latency from intended send (µs)")
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(f"extstore: cachetd vs memcached 1.6.45 and 1.6.18, -m {machine.get('item_mb')} MiB, "
                 f"{machine.get('value_size')} B values, pod-sized memory cgroups (run {machine.get('run_id', '?')}, "
                 f"quick={machine.get('quick', '?')}; hollow = fell behind schedule)", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"plot: wrote {out}")


def main():
    d, out = sys.argv[1], sys.argv[2]
    machine = {}
    if os.path.exists(os.path.join(d, "machine.json")):
        with open(os.path.join(d, "machine.json")) as f:
            machine = json.load(f)
    if machine.get("bench") == "extstore":
        return main_extstore(d, out, machine)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(14, 5.5))
    for s in SERVERS:
        w1 = load_steps(d, f"w1-steps-{s}.json")
        series(a1, w1, s, "mean", "-o", f"{NAMES[s]} mean")
        series(a1, w1, s, "p99", "--s", f"{NAMES[s]} p99")
        w2 = load_steps(d, f"w2-steps-{s}.json")
        series(a2, w2, s, "p99", "-o", f"{NAMES[s]} p99")
        series(a2, w2, s, "p999", ":^", f"{NAMES[s]} p999")
    a1.axhline(1000, color="grey", linewidth=0.8, linestyle=":")
    a1.set_title("W1: GET-only, 64 B values, 32 conns (open loop)")
    a2.axhline(machine.get("w2_p99_bound_us", 1000), color="red", linewidth=0.8, linestyle=":", label="1 ms p99 bound")
    a2.set_title(f"W2: 80:20 get:set, 256 B values, {machine.get('w2_conns', 256)} conns (open loop)")
    for a in (a1, a2):
        a.set_yscale("log")
        a.set_xlabel("delivered throughput (k requests/s)")
        a.set_ylabel("latency from intended send (µs)")
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(f"cachetd vs memcached 1.6.45 and 1.6.18, server on CPU 1, load on CPU 0 "
                 f"(run {machine.get('run_id', '?')}, quick={machine.get('quick', '?')}; hollow = fell behind schedule)",
                 fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"plot: wrote {out}")


if __name__ == "__main__":
    main()
