#!/usr/bin/env python3
"""Turns one bench-metrics.sh results directory into the figures and ratios
it prints and that docs/benchmarks.md quotes ("Metrics endpoint cost"):
median W1 pipelined throughput and server CPU per request for off / on /
scraped, the ratios on/off (the latency histogram) and scraped/on (the
scrape; target >= 0.99), the metrics thread's CPU per scrape, and how
disturbed the machine was. Usage: summarize_metrics.py RESULTS_DIR
(writes summary.json there)."""
import glob
import json
import os
import re
import statistics
import sys

TARGET_SCRAPE_RATIO = 0.99


def steps(d, cfg):
    out = []
    for path in sorted(glob.glob(os.path.join(d, f"w1-{cfg}-*.json"))):
        with open(path) as f:
            out.append(json.load(f)["steps"][0])
    return out


def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main(d):
    s = {}
    for cfg in ("off", "on", "scraped"):
        runs = steps(d, cfg)
        s[cfg] = {
            "runs": [r["throughput"] for r in runs],
            "throughput": med(r["throughput"] for r in runs),
            "server_cpu_us_per_request": med(r.get("server_cpu_us_per_request") for r in runs),
            "server_runq_share": med(r.get("server_runqueue_wait_share") for r in runs),
            "loadgen_runq_share": med(r.get("loadgen_runqueue_wait_share") for r in runs),
            "steal_share": med(max(r.get("steal_share_per_cpu") or [0]) for r in runs),
            "errors": sum(r.get("errors", 0) + r.get("wrong_values", 0) for r in runs),
        }

    def ratio(a, b, key):
        return s[a][key] / s[b][key] if s[a][key] and s[b][key] else None

    # paired per round as well: each round ran the three back to back
    paired = []
    for path in sorted(glob.glob(os.path.join(d, "w1-scraped-*.json"))):
        n = path.rsplit("-", 1)[1]
        on = os.path.join(d, f"w1-on-{n}")
        if os.path.exists(on):
            with open(path) as f1, open(on) as f2:
                paired.append(json.load(f1)["steps"][0]["throughput"] / json.load(f2)["steps"][0]["throughput"])

    scrapes, bad, sizes, cpu_ns = 0, 0, [], 0
    for log in glob.glob(os.path.join(d, "scrapes-*.log")):
        with open(log) as f:
            for line in f:
                code, size, _ = line.split()
                scrapes += 1
                if code != "200":
                    bad += 1
                sizes.append(int(size))
    for p in glob.glob(os.path.join(d, "metrics-thread-cpu-ns-*.txt")):
        with open(p) as f:
            cpu_ns += int(f.read().strip() or 0)
    cost = {}
    lc = os.path.join(d, "latency-cost.txt")
    if os.path.exists(lc):
        m = re.search(r"LATENCY_COST (.*)", open(lc).read())
        if m:
            cost = {k: float(v) for k, v in (kv.split("=") for kv in m.group(1).split())}

    summary = {
        "configs": s,
        "histogram_ratio_on_over_off": ratio("on", "off", "throughput"),
        "histogram_cpu_ratio_on_over_off": ratio("on", "off", "server_cpu_us_per_request"),
        "scrape_ratio_scraped_over_on": ratio("scraped", "on", "throughput"),
        "scrape_ratio_per_round": paired,
        "scrape_cpu_ratio_scraped_over_on": ratio("scraped", "on", "server_cpu_us_per_request"),
        "scrapes": scrapes, "scrapes_failed": bad,
        "scrape_bytes": med(sizes),
        "metrics_thread_ms_per_scrape": cpu_ns / 1e6 / scrapes if scrapes else None,
        "latency_cost_ns_per_request": cost,
    }
    def fmt(v, spec):
        return format(v, spec) if v is not None else "-"
    print(f"{'config':8} {'median req/s':>13} {'server CPU us/req':>18} {'server CPU wait':>16} {'load CPU wait':>14}  runs")
    for cfg in ("off", "on", "scraped"):
        c = s[cfg]
        print(f"{cfg:8} {fmt(c['throughput'], '13,.0f')} {fmt(c['server_cpu_us_per_request'], '18.3f')} "
              f"{fmt(c['server_runq_share'] and 100 * c['server_runq_share'], '15.0f')}% "
              f"{fmt(c['loadgen_runq_share'] and 100 * c['loadgen_runq_share'], '13.0f')}%  "
              + " ".join(f"{r:.0f}" for r in c["runs"]))
    r = summary["scrape_ratio_scraped_over_on"]
    verdict = "-" if r is None else ("PASS" if r >= TARGET_SCRAPE_RATIO else "MISS")
    print(f"latency histogram (on/off):  throughput {fmt(summary['histogram_ratio_on_over_off'], '.4f')}x, "
          f"server CPU per request {fmt(summary['histogram_cpu_ratio_on_over_off'], '.4f')}x")
    print(f"scrape every second (scraped/on): throughput {fmt(r, '.4f')}x [{verdict}: target >= {TARGET_SCRAPE_RATIO}], "
          f"per round {' '.join(f'{x:.3f}' for x in paired)}, "
          f"server CPU per request {fmt(summary['scrape_cpu_ratio_scraped_over_on'], '.4f')}x")
    ms = summary["metrics_thread_ms_per_scrape"]
    print(f"scrapes: {scrapes} ({bad} failed), {fmt(summary['scrape_bytes'], '.0f')} bytes each, "
          f"metrics thread {fmt(ms, '.2f')} ms CPU per scrape = {fmt(ms and ms / 10, '.3f')}% of one CPU "
          f"at one scrape per second")
    if cost:
        print("histogram hooks alone: " + ", ".join(f"{k} {v:.2f} ns/request" for k, v in cost.items()))
        per_req = s["on"]["server_cpu_us_per_request"]
        if per_req and "batch16" in cost:
            share = cost["batch16"] / (per_req * 1000)
            summary["histogram_share_of_server_cpu_batch16"] = share
            print(f"  in batches of 16 (W1's depth) that is {100 * share:.2f}% of the server's "
                  f"{per_req:.3f} us of CPU per request")
    print(f"disturbance: hypervisor steal (worst CPU, median over runs) "
          f"{fmt(s['on']['steal_share'] and 100 * s['on']['steal_share'], '.1f')}%, "
          f"errors or wrong values {sum(c['errors'] for c in s.values())}")
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
