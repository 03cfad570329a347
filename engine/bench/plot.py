#!/usr/bin/env python3
"""Latency against throughput for the open-loop steps of W1 and W2, both
servers, from one bench-engine.sh results directory.

Usage: plot.py RESULTS_DIR OUT.png
Each point is one open-loop step: x is the throughput the server actually
delivered, y the latency measured from each request's intended send time.
Steps where the server fell behind its schedule are drawn hollow: there the
latency is queueing, not service.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"cachetd": "tab:blue", "memcached": "tab:orange"}


def load_steps(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return []
    with open(p) as f:
        return [s for s in json.load(f)["steps"] if s["latency_us"] and not s.get("superseded")]


def series(ax, steps, server, stat, style, label):
    xs = [s["throughput"] / 1000 for s in steps]
    ys = [s["latency_us"][stat] for s in steps]
    ax.plot(xs, ys, style, color=COLORS[server], label=label, markersize=5)
    bad = [(x, y) for s, x, y in zip(steps, xs, ys) if not s["kept_up"]]
    if bad:
        ax.plot([b[0] for b in bad], [b[1] for b in bad], "o", markerfacecolor="white",
                markeredgecolor=COLORS[server], markersize=8)


def main():
    d, out = sys.argv[1], sys.argv[2]
    machine = {}
    if os.path.exists(os.path.join(d, "machine.json")):
        with open(os.path.join(d, "machine.json")) as f:
            machine = json.load(f)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5))
    for s in ("cachetd", "memcached"):
        w1 = load_steps(d, f"w1-steps-{s}.json")
        series(a1, w1, s, "mean", "-o", f"{s} mean")
        series(a1, w1, s, "p99", "--s", f"{s} p99")
        w2 = load_steps(d, f"w2-steps-{s}.json")
        series(a2, w2, s, "p50", "-o", f"{s} p50")
        series(a2, w2, s, "p999", "--s", f"{s} p999")
    a1.axhline(1000, color="grey", linewidth=0.8, linestyle=":")
    a1.set_title("W1: GET-only, 64 B values, 32 conns (open loop)")
    a2.axhline(2000, color="red", linewidth=0.8, linestyle=":", label="2 ms p999 SLO")
    a2.set_title("W2: 80:20 get:set, 256 B values, 1024 conns (open loop)")
    for a in (a1, a2):
        a.set_yscale("log")
        a.set_xlabel("delivered throughput (k requests/s)")
        a.set_ylabel("latency from intended send (µs)")
        a.grid(True, which="both", alpha=0.3)
        a.legend(fontsize=8)
    fig.suptitle(f"cachetd vs Debian memcached {machine.get('memcached_version', '')}, server on CPU 1, load on CPU 0 "
                 f"(run {machine.get('run_id', '?')}; hollow = fell behind schedule)", fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=110)
    print(f"plot: wrote {out}")


if __name__ == "__main__":
    main()
