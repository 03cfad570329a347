#!/usr/bin/env python3
"""Prints the Markdown tables of docs/benchmarks.md from one results
directory (after summarize.py wrote summary.json), so the numbers in the
document are copied by a program, never by hand.

Usage: report.py RESULTS_DIR [--not-run-as TEXT]  (a bench-extstore.sh
directory gets its tables; --not-run-as replaces "not run" in the cells of a
server that refused its flags, e.g. to say why in the docs)
"""
import json
import os
import sys

from summarize import NAMES, SERVERS
from summarize import fmt as plain_fmt
from summarize import xt_fmt

# W1's closed-loop runs as bench-engine.sh names them; the per-CPU-second
# target is judged on the deep one (the generator is not the limit there)
W1_SHAPES = {"pipelined": "pipelined 32×16", "deep": "pipelined 4×128 (judged per CPU-s)",
             "unpipelined": "unpipelined 32×1"}


def fmt(v, key=""):
    return plain_fmt(v, key, missing="–")


def lat(v):
    return "–" if v is None else f"{v:,.1f}"


def rat(a, b=None):
    """A ratio to three decimals; rat(r) formats r, rat(a, b) computes a/b."""
    r = a if b is None else (a / b if a is not None and b else None)
    return "–" if r is None else f"{r:.3f}×"


def pct(v):
    return f"{100 * v:.0f}%"


def main_extstore(s, not_run_as="not run"):
    """bench-extstore.sh's tables: the targets, then what each server held and wrote."""
    m, F, fio = s["machine"], s["figures"], s.get("fio") or {}
    print(f"Run `{m.get('run_id')}` (quick={m.get('quick')}): {m.get('cpu_model')}, {m.get('cpus')} CPUs, "
          f"kernel {m.get('kernel')}; memcached {m.get('memcached_1645_version')} and {m.get('memcached_1618_version')}; "
          f"cachetd at commit `{m.get('cachetd_commit')}`. `-m {m.get('item_mb')}`, {m.get('keys', 0):,} keys × "
          f"{m.get('value_size')} B ({m.get('data_mb')} MiB, {m.get('data_factor')}× item memory), extstore file "
          f"{m.get('ext_mb')} MiB, `ext_threads={m.get('ext_threads')}`, pod memory limit "
          f"{m.get('pod_limit_bytes', 0) >> 20} MiB per server. Load average at start {m.get('loadavg_start')}, "
          f"at end {s.get('loadavg_end')}.")
    print()
    for qd in (1, 32):
        if fio.get(f"fio_qd{qd}") is not None:
            print(f"- fio, 4 KB random reads with O_DIRECT at depth {qd}: {fio[f'fio_qd{qd}']:,.0f} IOPS, "
                  f"p99 {fio[f'fio_qd{qd}_p99_us']:,.1f} µs"
                  + (f", {fio[f'fio_qd{qd}_cpu_us']:,.1f} µs of CPU per read" if fio.get(f"fio_qd{qd}_cpu_us") is not None else ""))
    for n in SERVERS:
        if F[n].get("not_run"):
            print(f"- **{NAMES[n]} not run**: {F[n]['not_run']}")
    print()
    print("| figure | cachetd | memcached 1.6.45 | memcached 1.6.18 | cachetd / 1.6.45 | cachetd / 1.6.18 | target | result |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for r in s["targets"]:
        unit = f" {r['unit'].replace('us', 'µs')}" if r["unit"] and r["unit"] != "x" else ""
        cells = []
        for n in SERVERS:
            cells.append(not_run_as if F[n].get("not_run") else xt_fmt(r[n], r["key"]).replace("-", "–") + (unit if r[n] is not None else ""))
        vs45 = (rat(r["ratio"]) if r["against"] == "mc1645" else "(own)" if r["against"] == "abs"
                else f"{rat(r['ratio'])} of fio")
        note = f" ({r['note']})" if r["note"] else ""
        verdict = "not a target" if r["verdict"] == "no target" else f"**{r['verdict']}**"
        print(f"| {r['target']} | " + " | ".join(cells) + f" | {vs45} | {rat(r['ratio_1618'])} | "
              f"{r['goal'].replace('x', '×')} | {verdict}{note} |")
    print()
    print("Session 1 is the paced fill (one set outstanding) and the uniform disk reads; session 2 a fresh server "
          "with the pipelined `--prefill` and the Zipf runs.")
    print()
    print("| server | items after the paced fill | on disk | evicted during it | RSS after it | GETs read from disk, depth 1 / 32 | "
          "on disk / evicted after the pipelined prefill and Zipf run | Zipf max kept up | half-load step kept up | "
          "cgroup max usage / limit | failcnt | header chunks after the fill (chunk size: used) | hash_bytes / curr_items |")
    print("|---|---:|---:|---:|---:|---|---|---:|---|---|---:|---|---|")
    for n in SERVERS:
        f = F[n]
        if f.get("not_run"):
            print(f"| {NAMES[n]} | {not_run_as} | | | | | | | | | | | |")
            continue
        share = " / ".join("–" if f.get(f"xt_disk_qd{q}_share") is None else pct(f[f"xt_disk_qd{q}_share"]) for q in (1, 32))
        print(f"| {NAMES[n]} | {fmt(f.get('xt_curr_items'))} | {fmt(f.get('xt_items_on_disk'))} | {fmt(f.get('xt_fill_evictions'))} | "
              f"{fmt(f.get('xt_fill_rss_kb'))} kB | {share} | {fmt(f.get('xt_zipf_on_disk'))} / {fmt(f.get('xt_zipf_evictions'))} | "
              f"{fmt(f.get('xt_zipf_max'))}/s | "
              f"{'–' if f.get('xt_half_kept_up') is None else ('yes' if f['xt_half_kept_up'] else 'no')} | "
              f"{fmt((f.get('xt_cgroup_max_usage') or 0) / 2**20)} / {fmt((f.get('xt_cgroup_limit') or 0) / 2**20)} MiB | "
              f"{fmt(f.get('xt_cgroup_failcnt'))} | "
              f"{', '.join(f'{k} B: {int(v):,}' for k, v in (f.get('xt_hdr_classes') or {}).items()) or '–'} | "
              f"{fmt(f.get('xt_hash_bytes'))} B / {fmt(f.get('xt_curr_items'))} |")


def main():
    d = sys.argv[1]
    with open(os.path.join(d, "summary.json")) as f:
        s = json.load(f)
    if s["machine"].get("bench") == "extstore":
        not_run_as = sys.argv[sys.argv.index("--not-run-as") + 1] if "--not-run-as" in sys.argv else "not run"
        return main_extstore(s, not_run_as)
    m, F = s["machine"], s["figures"]
    c, ref, old = F["cachetd"], F["mc1645"], F["mc1618"]
    print(f"Run `{m.get('run_id')}` (quick={m.get('quick')}): {m.get('cpu_model')}, {m.get('cpus')} CPUs, "
          f"kernel {m.get('kernel')}; memcached {m.get('memcached_1645_version')} (built by "
          f"`shared/peers/build-memcached.sh`) and {m.get('memcached_1618_version')} (Debian); cachetd at commit "
          f"`{m.get('cachetd_commit')}`. Load average at start {m.get('loadavg_start')}, at end {s.get('loadavg_end')}.")
    print()
    for name, cal in (s.get("calibration") or {}).items():
        us = cal["loadgen_us_per_request"]
        print(f"- load generator against `cachet-sink`, {cal['conns']} conns × depth {cal['depth']}: "
              f"{cal['throughput']:,.0f} requests/s delivered; generator CPU {us:.3f} µs per request "
              f"(= {1 / us:.2f} M requests per CPU-second)")
    for name, n in (s.get("cpu_wait") or {}).items():
        if n.get("loadgen_mean") is not None and n.get("server_mean") is not None:
            print(f"- waiting for a CPU (other processes on the VM) while measuring {NAMES.get(name, name)}: generator "
                  f"{pct(n['loadgen_mean'])} of the time (worst step {pct(n['loadgen_max'])}), server "
                  f"{pct(n['server_mean'])} (worst step {pct(n['server_max'])})"
                  + (f"; hypervisor steal {100 * n['steal_mean']:.1f}% (worst step {pct(n['steal_max'])})"
                     if n.get("steal_mean") is not None else ""))
    print()
    print("| figure | cachetd | memcached 1.6.45 | memcached 1.6.18 | cachetd / 1.6.45 | cachetd / 1.6.18 | "
          "target (vs 1.6.45) | result |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for r in s["targets"]:
        unit = f" {r['unit']}" if r["unit"] else ""
        note = f" ({r['note']})" if r["note"] else ""
        print(f"| {r['target']} | {fmt(r['cachetd'], r['key'])}{unit} | {fmt(r['mc1645'], r['key'])}{unit} | "
              f"{fmt(r['mc1618'], r['key'])}{unit} | {rat(r['ratio'])} | {rat(r['ratio_1618'])} | "
              f"{r['goal'].replace('x', '×')} | {'**' + r['verdict'] + '**' if r['verdict'] != 'no target' else 'not a target'}{note} |")
    print()
    for name in SERVERS:
        i = F[name].get("integrity")
        if i:
            print(f"- integrity, {NAMES[name]}: {i['wrong_values']} wrong values (another key's, or the wrong length), "
                  f"{i['errors']} error replies, {i['w1_w2_misses']:,} misses in {i['w1_w2_lookups']:,} W1/W2 lookups "
                  f"of keys that were all stored")

    print()
    print("W1 closed-loop rounds (the median is quoted), the server's CPU time per GET (from "
          "/proc/PID/task/*/schedstat: a cost, which other processes on the machine change far less than "
          "throughput, though not nothing), how busy the load generator was, and how much of the server's CPU "
          "the hypervisor stole:")
    print()
    print("| W1 run | server | rounds, GETs/s | CPU µs per GET (median) | GETs per CPU-second vs 1.6.45 | vs 1.6.18 | generator busy | steal on the server's CPU |")
    print("|---|---|---|---:|---:|---:|---|---|")
    for kind in ("pipelined", "deep", "unpipelined"):
        for name in SERVERS:
            f = F[name]
            us = f.get(f"w1_{kind}_server_cpu_us")
            print(f"| {W1_SHAPES[kind]} | {NAMES[name]} | {', '.join(f'{x:,.0f}' for x in f.get(f'w1_{kind}_rounds', []))} | "
                  f"{'–' if us is None else f'{us:.3f}'} | "
                  f"{rat(ref.get(f'w1_{kind}_server_cpu_us'), us)} | {rat(old.get(f'w1_{kind}_server_cpu_us'), us)} | "
                  f"{', '.join(pct(b) for b in f.get(f'w1_{kind}_loadgen_busy', []) if b is not None)} | "
                  f"{', '.join(pct(x) for x in f.get(f'w1_{kind}_server_cpu_steal', []) if x is not None)} |")
    ep = s.get("cachetd_epoll") or {}
    if ep.get("w1_pipelined") is not None:
        print()
        print(f"Extra row (not a target): cachetd with `-o no_io_uring` (plain epoll read/send) in the same run: "
              f"W1 pipelined {fmt(ep['w1_pipelined'])} GETs/s ({rat(ep['w1_pipelined'], ref['w1_pipelined'])} 1.6.45), "
              f"{ep['w1_pipelined_server_cpu_us']:.3f} µs CPU per GET; unpipelined {fmt(ep['w1_unpipelined'])} GETs/s "
              f"({rat(ep['w1_unpipelined'], ref['w1_unpipelined'])} 1.6.45), "
              f"{ep['w1_unpipelined_server_cpu_us']:.3f} µs CPU per GET.")
    print()
    print(f"W1 highest open-loop step with mean RTT ≤ 1 ms (seed 000's criterion): "
          + ", ".join(f"{NAMES[n]} {fmt(F[n]['w1_rate_mean_under_1ms'])}/s" for n in SERVERS) + ".")

    print()
    print("W2 search (256 connections, p99 bound 1 ms): the listed steps give the bracket, the refine steps bisect it.")
    print()
    print("| server | highest rate with p99 < 1 ms | lowest rate above it that was not | refine steps | highest rate kept up with, any latency |")
    print("|---|---:|---:|---:|---:|")
    for n in SERVERS:
        f = F[n]
        print(f"| {NAMES[n]} | {fmt(f['w2_rate_p99_under_1ms'])} | {fmt(f['w2_lowest_rate_over'])} | "
              f"{f.get('w2_refine_steps') if f.get('w2_refine_steps') is not None else '–'} | {fmt(f['w2_rate_kept_up'])} |")

    print()
    print("W3, where the bytes of one item go: its chunk (`stats slabs`: chunk_size × used_chunks / items), the hash "
          "table (`stats` hash_bytes / items, read once the table has stopped expanding) and the rest (partly used "
          "pages, connection buffers, allocator and process overhead):")
    print()
    print("| server | RSS before → after | items | RSS B/item | chunk | hash table (power) | rest | chunk sizes used (size: chunks) |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for n in SERVERS:
        f = F[n]
        b = f.get("w3_breakdown")
        if not f.get("w3_items"):
            continue
        print(f"| {NAMES[n]} | {f['w3_rss_kb_before']:,} → {f['w3_rss_kb_after']:,} kB | {f['w3_items']:,} | "
              f"{f['w3_bytes_per_item']:.1f} | " + (f"{b['chunk']:.1f} | {b['hash']:.1f} ({f.get('w3_hash_power')}"
                                                     f"{'' if f.get('w3_hash_settled') else ', still expanding'}) | "
                                                     f"{b['rest']:.1f} | "
                                                     f"{', '.join(f'{k}: {v:,}' for k, v in b['chunk_sizes'].items())} |"
                                                     if b else "– | – | – | – |"))
    print()
    print("W4: " + "; ".join(f"{NAMES[n]} held {F[n]['w4_items_held']:,} items at the end, {F[n]['w4_evictions']:,} evictions"
                             for n in SERVERS if F[n].get("w4_items_held") is not None) + ".")

    factors = (m.get("seed003") or {}).get("factors") or []
    if factors:
        best = ref.get("seed003_best_items")
        print()
        print(f"Seed 003 at `-m {m['seed003']['m']} -n {m['seed003']['n']}`: items kept (`curr_items`), evictions and "
              f"the MB of slab pages each server held (`stats slabs` total_malloced) after the 50,000 sets; cachetd "
              f"against 1.6.45 at the same f, and against 1.6.45's best f ({ref.get('seed003_best_f')}: {fmt(best)} items):")
        print()
        print("| -f | cachetd kept | evictions | MB | 1.6.45 kept | evictions | MB | 1.6.18 kept | evictions | MB | "
              "cachetd / 1.6.45 same f | cachetd / 1.6.45 best f |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for fac in factors:
            e = {n: F[n]["seed003"].get(str(fac)) or {} for n in SERVERS}
            print(f"| {fac} | " + " | ".join(f"{fmt(e[n].get('curr_items'))} | {fmt(e[n].get('evictions'))} | "
                                             f"{fmt(e[n].get('slab_mb'), 'mb')}" for n in SERVERS)
                  + f" | {rat(e['cachetd'].get('curr_items'), e['mc1645'].get('curr_items'))} | "
                    f"{rat(e['cachetd'].get('curr_items'), best)} |")

    for wl, key, cols in (("W1", "w1_steps", ("mean_us", "p99_us")), ("W2", "w2_steps", ("p50_us", "p99_us", "p999_us"))):
        print()
        print(f"{wl} open-loop steps (latency in µs from the intended send time; ✗ = fell behind its schedule"
              + ("; ✓ = within the 1 ms p99 bound; r = a refine step" if wl == "W2" else "") + "):")
        print()
        head = ["target req/s"]
        for n in SERVERS:
            head += [f"{NAMES[n]} req/s"] + [f"{q[:-3]}" for q in cols]
        print("| " + " | ".join(head) + " |")
        print("|" + "---:|" * len(head))
        rates = sorted({st["target_rate"] for n in SERVERS for st in F[n][key]})
        for rate in rates:
            cells = [f"{rate:,.0f}"]
            for n in SERVERS:
                st = next((x for x in F[n][key] if x["target_rate"] == rate), None)
                if st is None:
                    cells += [""] * (1 + len(cols))
                    continue
                mark = ("" if st["kept_up"] else " ✗") + (" r" if st.get("refine") else "")
                vals = [lat(st[q]) for q in cols]
                if wl == "W2" and st.get("within_bound"):
                    vals[1] += " ✓"
                cells += [f"{st['throughput']:,.0f}{mark}"] + vals
            print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
