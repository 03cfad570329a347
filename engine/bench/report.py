#!/usr/bin/env python3
"""Prints the Markdown tables of docs/benchmarks.md from one results
directory (after summarize.py wrote summary.json), so the numbers in the
document are copied by a program, never by hand.

Usage: report.py RESULTS_DIR
"""
import json
import os
import sys


def fmt(v, key=""):
    if v is None:
        return "–"
    if key == "w4_hit_ratio":
        return f"{v:.4f}"
    if key == "w3_bytes_per_item":
        return f"{v:.1f}"
    return f"{v:,.0f}"


def lat(v):
    return "–" if v is None else f"{v:,.1f}"


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    m = s["machine"]
    print(f"Run `{m.get('run_id')}` (quick={m.get('quick')}): {m.get('cpu_model')}, {m.get('cpus')} CPUs, "
          f"kernel {m.get('kernel')}, memcached {m.get('memcached_version')}, cachetd at commit "
          f"`{m.get('cachetd_commit')}`. Load average at start {m.get('loadavg_start')}, at end {s.get('loadavg_end')}.")
    for name, c in (s.get("calibration") or {}).items():
        us = c["loadgen_us_per_request"]
        print(f"- load generator against `cachet-sink`, {c['conns']} conns × depth {c['depth']}: "
              f"{c['throughput']:,.0f} requests/s delivered; generator CPU {us:.3f} µs per request "
              f"(= {1 / us:.2f} M requests per CPU-second)")
    print()
    print("| figure | cachetd | memcached 1.6.18 | ratio | target | result |")
    print("|---|---:|---:|---:|---|---|")
    for r in s["targets"]:
        ratio = "–" if r["ratio"] is None else f"{r['ratio']:.3f}×"
        unit = f" {r['unit']}" if r["unit"] else ""
        note = f" ({r['note']})" if r["note"] else ""
        print(f"| {r['target']} | {fmt(r['cachetd'], r['key'])}{unit} | {fmt(r['memcached'], r['key'])}{unit} | "
              f"{ratio} | {r['goal'].replace('x', '×')} | **{r['verdict']}**{note} |")
    print()
    for name in ("cachetd", "memcached"):
        i = s["figures"][name].get("integrity")
        if i:
            print(f"- integrity, {name}: {i['wrong_values']} wrong values (another key's, or the wrong length), "
                  f"{i['errors']} error replies, {i['w1_w2_misses']:,} misses in {i['w1_w2_lookups']:,} W1/W2 lookups "
                  f"of keys that were all stored")
    for name, n in (s.get("cpu_wait") or {}).items():
        if n.get("loadgen_mean") is not None and n.get("server_mean") is not None:
            print(f"- waiting for a CPU (other processes on the shared VM) while measuring {name}: generator "
                  f"{100 * n['loadgen_mean']:.1f}% of the time (worst step {100 * n['loadgen_max']:.0f}%), server "
                  f"{100 * n['server_mean']:.1f}% (worst step {100 * n['server_max']:.0f}%)"
                  + (f"; hypervisor steal {100 * n['steal_mean']:.1f}% (worst step {100 * n['steal_max']:.0f}%)"
                     if n.get("steal_mean") is not None else ""))
    fc, fm = s["figures"]["cachetd"], s["figures"]["memcached"]
    print()
    print("Max-throughput rounds (median is quoted): "
          f"cachetd pipelined {[round(x) for x in fc['w1_pipelined_rounds']]}, "
          f"memcached pipelined {[round(x) for x in fm['w1_pipelined_rounds']]}; "
          f"cachetd unpipelined {[round(x) for x in fc['w1_unpipelined_rounds']]}, "
          f"memcached unpipelined {[round(x) for x in fm['w1_unpipelined_rounds']]}. "
          f"Load generator CPU busy during them: cachetd {[round(100 * b) for b in fc['w1_pipelined_loadgen_busy'] if b]}% / "
          f"{[round(100 * b) for b in fc['w1_unpipelined_loadgen_busy'] if b]}%, memcached "
          f"{[round(100 * b) for b in fm['w1_pipelined_loadgen_busy'] if b]}% / "
          f"{[round(100 * b) for b in fm['w1_unpipelined_loadgen_busy'] if b]}%.")
    if s.get("efficiency"):
        print()
        print("Server CPU time per GET in the same W1 runs (from /proc/PID/task/*/schedstat; a cost, which other "
              "processes on the machine change far less than throughput):")
        print()
        print("| W1 run | cachetd µs/GET | memcached µs/GET | GETs per CPU-second, cachetd/memcached |")
        print("|---|---:|---:|---:|")
        for e in s["efficiency"]:
            print(f"| {e['figure'].split(':')[0]} | {e['cachetd_us']:.2f} | {e['memcached_us']:.2f} | {e['memcached_over_cachetd']:.2f}× |")
    ep = s.get("cachetd_epoll") or {}
    if ep.get("w1_pipelined") is not None:
        print()
        print(f"Extra row (not a target): cachetd with `-o no_io_uring` (plain epoll read/send) in the same run: "
              f"W1 pipelined {fmt(ep['w1_pipelined'])} req/s ({ep['w1_pipelined'] / fm['w1_pipelined']:.2f}× memcached), "
              f"unpipelined {fmt(ep['w1_unpipelined'])} req/s ({ep['w1_unpipelined'] / fm['w1_unpipelined']:.2f}× memcached); "
              f"rounds {[round(x) for x in ep['w1_pipelined_rounds']]} / {[round(x) for x in ep['w1_unpipelined_rounds']]}.")
    print()
    kc, km = fc.get("w2_rate_kept_up"), fm.get("w2_rate_kept_up")
    print(f"W2 highest step each server kept up with, at any latency: cachetd {fmt(kc)}/s, memcached {fmt(km)}/s"
          + (f" ({kc / km:.2f}×)." if kc and km else "."))
    print()
    print(f"W1 highest step with mean RTT ≤ 1 ms (seed 000's criterion): cachetd {fmt(fc['w1_rate_mean_under_1ms'])}/s, "
          f"memcached {fmt(fm['w1_rate_mean_under_1ms'])}/s.")
    for name, f in (("cachetd", fc), ("memcached", fm)):
        if f.get("w3_items"):
            print(f"W3 {name}: RSS {f['w3_rss_kb_before']:,} kB before, {f['w3_rss_kb_after']:,} kB after, "
                  f"{f['w3_items']:,} items.")
    for name, f in (("cachetd", fc), ("memcached", fm)):
        if f.get("w4_items_held") is not None:
            print(f"W4 {name}: {f['w4_items_held']:,} items held at the end, {f['w4_evictions']:,} evictions.")
    for wl, key, cols in (("W1", "w1_steps", ("mean_us", "p99_us")), ("W2", "w2_steps", ("p50_us", "p999_us"))):
        print()
        print(f"{wl} open-loop steps (latency in µs from the intended send time; ✗ = fell behind its schedule):")
        print()
        print(f"| target req/s | cachetd req/s | cachetd {cols[0][:-3]} | cachetd {cols[1][:-3]} | "
              f"memcached req/s | memcached {cols[0][:-3]} | memcached {cols[1][:-3]} |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        rates = []
        for f in (fc, fm):
            for st in f[key]:
                if st["target_rate"] not in rates:
                    rates.append(st["target_rate"])
        for rate in sorted(rates):
            cells = [f"{rate:,.0f}"]
            for f in (fc, fm):
                st = next((x for x in f[key] if x["target_rate"] == rate), None)
                if st is None:
                    cells += ["", "", ""]
                else:
                    mark = "" if st["kept_up"] else " ✗"
                    cells += [f"{st['throughput']:,.0f}{mark}", lat(st[cols[0]]), lat(st[cols[1]])]
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
