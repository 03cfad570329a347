#!/usr/bin/env python3
"""Turns one bench-engine.sh results directory into the figures, the
cachetd/memcached ratios and PASS/MISS against the targets of engine issue 2.

Why a separate script: the shell driver only runs things; every number that
is quoted (terminal, summary.json, docs/benchmarks.md) comes from here, so
they cannot disagree. Usage: summarize.py RESULTS_DIR  (writes summary.json)
"""
import json
import os
import statistics
import sys

SERVERS = ("cachetd", "memcached")
W2_P999_LIMIT_US = 2000.0
W1_MEAN_LIMIT_US = 1000.0


def load(d, name):
    path = os.path.join(d, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def max_throughput(d, kind, server):
    runs, busy = [], []
    for i in range(1, 20):
        j = load(d, f"w1-{kind}-{server}-{i}.json")
        if j is None:
            continue
        runs.append(j["steps"][0]["throughput"])
        busy.append(j["steps"][0].get("loadgen_cpu_busy"))
    return (statistics.median(runs) if runs else None), runs, busy


def server_cpu_per_request(d, kind, server):
    """Median over rounds of the server's CPU time per request (us): its
    cost, which a busy machine changes far less than its throughput."""
    v = []
    for i in range(1, 20):
        j = load(d, f"w1-{kind}-{server}-{i}.json")
        if j and j["steps"] and j["steps"][0].get("server_cpu_us_per_request") is not None:
            v.append(j["steps"][0]["server_cpu_us_per_request"])
    return statistics.median(v) if v else None


def calibration(d):
    out = {}
    for name in ("calibration", "calibration-deep", "calibration-unpipelined"):
        j = load(d, f"{name}.json")
        if j and j["steps"]:
            st = j["steps"][0]
            out[name] = {"throughput": st["throughput"], "conns": st["conns"], "depth": st["depth"],
                         "loadgen_us_per_request": st.get("loadgen_us_per_request"),
                         "loadgen_cpu_busy": st.get("loadgen_cpu_busy")}
    return out


def steps(d, name):
    """Open-loop steps in order; a step that was run again (--retries) is
    represented by its last attempt."""
    j = load(d, name)
    return [s for s in j["steps"] if not s.get("superseded")] if j else []


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def main():
    d = sys.argv[1]
    machine = load(d, "machine.json") or {}
    cal = calibration(d)
    figures = {}
    for s in SERVERS:
        f = {}
        f["w1_pipelined"], f["w1_pipelined_rounds"], f["w1_pipelined_loadgen_busy"] = max_throughput(d, "pipelined", s)
        f["w1_unpipelined"], f["w1_unpipelined_rounds"], f["w1_unpipelined_loadgen_busy"] = max_throughput(d, "unpipelined", s)
        f["w1_pipelined_server_cpu_us"] = server_cpu_per_request(d, "pipelined", s)
        f["w1_unpipelined_server_cpu_us"] = server_cpu_per_request(d, "unpipelined", s)
        w1s = steps(d, f"w1-steps-{s}.json")
        f["w1_steps"] = [
            {k: st.get(k) for k in ("target_rate", "throughput", "kept_up")}
            | {"lag_p99_us": (st.get("generator_lag_us") or {}).get("p99")}
            | {"mean_us": (st["latency_us"] or {}).get("mean"), "p99_us": (st["latency_us"] or {}).get("p99")}
            for st in w1s
        ]
        ok = [st["target_rate"] for st in w1s
              if st["kept_up"] and st["latency_us"] and st["latency_us"]["mean"] <= W1_MEAN_LIMIT_US]
        f["w1_rate_mean_under_1ms"] = max(ok) if ok else None
        w2s = steps(d, f"w2-steps-{s}.json")
        f["w2_steps"] = [
            {k: st.get(k) for k in ("target_rate", "throughput", "kept_up")}
            | {"lag_p99_us": (st.get("generator_lag_us") or {}).get("p99")}
            | {"p50_us": (st["latency_us"] or {}).get("p50"), "p999_us": (st["latency_us"] or {}).get("p999")}
            for st in w2s
        ]
        # The highest step that met the SLO (steps run on until the server
        # falls behind, so a noisy low step does not end the search).
        ok = [st["target_rate"] for st in w2s
              if st["kept_up"] and st["latency_us"] and st["latency_us"]["p999"] <= W2_P999_LIMIT_US]
        f["w2_rate_p999_under_2ms"] = max(ok) if ok else None
        kept = [st["target_rate"] for st in w2s if st["kept_up"]]
        f["w2_rate_kept_up"] = max(kept) if kept else None
        f["w2_top_step_passed"] = bool(w2s) and f["w2_rate_p999_under_2ms"] == w2s[-1]["target_rate"]
        rss = load(d, f"w3-rss-{s}.json")
        if rss and rss["curr_items"]:
            f["w3_rss_kb_before"] = rss["rss_before_kb"]
            f["w3_rss_kb_after"] = rss["rss_after_kb"]
            f["w3_items"] = rss["curr_items"]
            f["w3_bytes_per_item"] = (rss["rss_after_kb"] - rss["rss_before_kb"]) * 1024 / rss["curr_items"]
        else:
            f["w3_bytes_per_item"] = None
        w4 = load(d, f"w4-{s}.json")
        if w4 and w4["steps"]:
            f["w4_hit_ratio"] = w4["steps"][0]["hit_ratio"]
            st = w4.get("server_stats") or {}
            f["w4_items_held"] = st.get("curr_items")
            f["w4_evictions"] = st.get("evictions")
        else:
            f["w4_hit_ratio"] = None
        figures[s] = f

    epoll = {}
    epoll["w1_pipelined"], epoll["w1_pipelined_rounds"], _ = max_throughput(d, "pipelined", "cachetd-epoll")
    epoll["w1_unpipelined"], epoll["w1_unpipelined_rounds"], _ = max_throughput(d, "unpipelined", "cachetd-epoll")

    # How much other processes disturbed the run: the share of wall time the
    # generator and each server spent runnable but waiting for a CPU.
    noise = {}
    for s in SERVERS:
        gen, srv, steal = [], [], []
        for name in sorted(os.listdir(d)):
            if name.endswith(f"-{s}.json") or f"-{s}-" in name:
                j = load(d, name)
                for st in (j or {}).get("steps", []) if isinstance(j, dict) else []:
                    if st.get("loadgen_runqueue_wait_share") is not None:
                        gen.append(st["loadgen_runqueue_wait_share"])
                    if st.get("server_runqueue_wait_share") is not None:
                        srv.append(st["server_runqueue_wait_share"])
                    if st.get("steal_share_per_cpu"):
                        steal.append(max(st["steal_share_per_cpu"]))
        integrity = {"wrong_values": 0, "errors": 0, "w1_w2_misses": 0, "w1_w2_lookups": 0}
        for name in sorted(os.listdir(d)):
            if not name.endswith(".json") or not (name.endswith(f"-{s}.json") or f"-{s}-" in name):
                continue
            j = load(d, name)
            for st in (j or {}).get("steps", []) if isinstance(j, dict) else []:
                integrity["wrong_values"] += st.get("wrong_values", 0)
                integrity["errors"] += st.get("errors", 0)
                # W1 and W2 read a fully prefilled key space that fits in memory: every get should hit.
                if name.startswith(("w1-", "w2-")) and "prefill" not in name:
                    integrity["w1_w2_misses"] += st.get("misses", 0)
                    integrity["w1_w2_lookups"] += st.get("hits", 0) + st.get("misses", 0)
        figures[s]["integrity"] = integrity
        noise[s] = {"loadgen_mean": statistics.mean(gen) if gen else None, "loadgen_max": max(gen) if gen else None,
                    "server_mean": statistics.mean(srv) if srv else None, "server_max": max(srv) if srv else None,
                    "steal_mean": statistics.mean(steal) if steal else None, "steal_max": max(steal) if steal else None}

    c, m = figures["cachetd"], figures["memcached"]
    targets = [
        ("W1 pipelined GET throughput", "w1_pipelined", ">=", 4.0, "req/s"),
        ("W1 unpipelined GET throughput", "w1_unpipelined", ">=", 1.3, "req/s"),
        ("W2 highest rate with p999 < 2 ms", "w2_rate_p999_under_2ms", ">=", 1.3, "req/s"),
        ("W3 RSS bytes per item", "w3_bytes_per_item", "<=", 0.75, "B"),
        ("W4 hit ratio, Zipf 0.99, 10% memory", "w4_hit_ratio", ">=", 1.0, ""),
    ]
    rows = []
    for name, key, op, goal, unit in targets:
        r = ratio(c.get(key), m.get(key))
        if r is None:
            verdict = "NO DATA"
        elif op == ">=":
            verdict = "PASS" if r >= goal else "MISS"
        else:
            verdict = "PASS" if r <= goal else "MISS"
        note = ""
        if key == "w2_rate_p999_under_2ms" and c.get("w2_top_step_passed"):
            note = "cachetd passed the top step: its figure is a lower bound"
        if key == "w2_rate_p999_under_2ms" and c.get(key) is None:
            note = "cachetd met the SLO at no step"
        rows.append({"target": name, "key": key, "cachetd": c.get(key), "memcached": m.get(key),
                     "ratio": r, "goal": f"{op} {goal}x", "verdict": verdict, "unit": unit, "note": note})

    def fmt(v, key):
        if v is None:
            return "-"
        if key == "w4_hit_ratio":
            return f"{v:.4f}"
        if key == "w3_bytes_per_item":
            return f"{v:.1f}"
        return f"{v:,.0f}"

    print(f"machine: {machine.get('cpu_model', '?')}, {machine.get('cpus', '?')} CPUs, kernel {machine.get('kernel', '?')}; "
          f"memcached {machine.get('memcached_version', '?')}; cachetd {machine.get('cachetd_commit', '?')}")
    print(f"load average at start {machine.get('loadavg_start', '?')}, at end {load(d, 'loadavg_end.json') or '?'}")
    for name, c_ in cal.items():
        us = c_["loadgen_us_per_request"]
        print(f"load generator vs cachet-sink, {c_['conns']} conns x depth {c_['depth']}: {c_['throughput']:,.0f} req/s, "
              f"generator CPU {us:.3f} us/request (= {1 / us:.2f}M requests per CPU-second)")
    print()
    print(f"{'figure':<38} {'cachetd':>12} {'memcached':>12} {'ratio':>7}  target   result")
    for row in rows:
        r = "-" if row["ratio"] is None else f"{row['ratio']:.3f}x"
        print(f"{row['target']:<38} {fmt(row['cachetd'], row['key']):>12} {fmt(row['memcached'], row['key']):>12} "
              f"{r:>7}  {row['goal']:<8} {row['verdict']}" + (f"  ({row['note']})" if row["note"] else ""))
    print()
    print(f"W2 highest rate kept up with (any latency): cachetd {fmt(c['w2_rate_kept_up'], '')}, "
          f"memcached {fmt(m['w2_rate_kept_up'], '')}, ratio "
          f"{'-' if ratio(c['w2_rate_kept_up'], m['w2_rate_kept_up']) is None else round(ratio(c['w2_rate_kept_up'], m['w2_rate_kept_up']), 2)}")
    print(f"W1 rate with mean RTT <= 1 ms (seed 000's criterion): cachetd {fmt(c['w1_rate_mean_under_1ms'], '')}, "
          f"memcached {fmt(m['w1_rate_mean_under_1ms'], '')}")
    for s in SERVERS:
        f = figures[s]
        print(f"W1 pipelined rounds {s}: {[round(x) for x in f['w1_pipelined_rounds']]}, "
              f"unpipelined: {[round(x) for x in f['w1_unpipelined_rounds']]}; generator CPU busy "
              f"{[round(100 * b) for b in f['w1_pipelined_loadgen_busy'] if b is not None]}% / "
              f"{[round(100 * b) for b in f['w1_unpipelined_loadgen_busy'] if b is not None]}%")
        if any(b is not None and b > 0.9 for b in f["w1_pipelined_loadgen_busy"] + f["w1_unpipelined_loadgen_busy"]):
            print(f"  WARNING: the load generator was >90% busy against {s}: that figure may be the generator's limit")
    for s in SERVERS:
        f = figures[s]
        if f.get("w4_items_held") is not None:
            print(f"W4 {s}: items held {f['w4_items_held']}, evictions {f['w4_evictions']}")
    for s in SERVERS:
        for wl in ("w1_steps", "w2_steps"):
            st = figures[s][wl]
            if st and (st[-1].get("lag_p99_us") or 0) > 200:
                print(f"WARNING: {wl[:2].upper()} last step against {s}: the generator sent 1% of requests more than "
                      f"{st[-1]['lag_p99_us']:.0f} us late (starved of CPU, or at its own limit): that step measured the generator too")
    eff = []
    for kind in ("pipelined", "unpipelined"):
        key = f"w1_{kind}_server_cpu_us"
        cv, mv = c.get(key), m.get(key)
        if cv and mv:
            eff.append({"figure": f"W1 {kind}: server CPU per GET", "cachetd_us": cv, "memcached_us": mv,
                        "memcached_over_cachetd": mv / cv})
            print(f"W1 {kind}: server CPU per GET cachetd {cv:.2f} us, memcached {mv:.2f} us: "
                  f"cachetd does {mv / cv:.2f}x the GETs per CPU-second")
    if epoll["w1_pipelined"] is not None:
        print(f"extra row, cachetd -o no_io_uring (epoll): W1 pipelined {fmt(epoll['w1_pipelined'], '')} req/s "
              f"({fmt(ratio(epoll['w1_pipelined'], m['w1_pipelined']), 'w4_hit_ratio')[:4]}x memcached), "
              f"unpipelined {fmt(epoll['w1_unpipelined'], '')} req/s "
              f"({fmt(ratio(epoll['w1_unpipelined'], m['w1_unpipelined']), 'w4_hit_ratio')[:4]}x memcached)")
    for s in SERVERS:
        i = figures[s]["integrity"]
        print(f"integrity {s}: {i['wrong_values']} wrong values, {i['errors']} error replies, "
              f"{i['w1_w2_misses']} misses in {i['w1_w2_lookups']:,} W1/W2 lookups of prefilled keys")
    for s in SERVERS:
        n = noise[s]
        if n["loadgen_mean"] is not None and n["server_mean"] is not None:
            print(f"waiting for a CPU while measuring {s}: generator {100 * n['loadgen_mean']:.1f}% of the time "
                  f"(worst step {100 * n['loadgen_max']:.0f}%), server {100 * n['server_mean']:.1f}% "
                  f"(worst {100 * n['server_max']:.0f}%)"
                  + (f"; hypervisor steal {100 * n['steal_mean']:.1f}% (worst {100 * n['steal_max']:.0f}%)"
                     if n.get("steal_mean") is not None else ""))
    print("(a benchmark, not a test: MISS never fails the build)")
    summary = {"machine": machine, "calibration": cal, "cpu_wait": noise, "cachetd_epoll": epoll, "efficiency": eff,
               "loadavg_end": load(d, "loadavg_end.json"), "targets": rows, "figures": figures}
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
