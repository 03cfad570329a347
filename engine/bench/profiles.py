#!/usr/bin/env python3
"""`make bench-profiles` (issue 23): workload profiles side by side with
memcached 1.6.45, in one run, each part ending in PASS or MISS.

Parts done here:
  (a) seed 003's whole table: cachetd with slab classes derived by the DP
      below from the workload's item sizes keeps all 50,000 items at -m 3,
      against memcached 1.6.45 at each of seed 003's -f (best: 41,554).
  (d) the page mover by marginal gain (-o slab_mover=gain, slabs_gain.c)
      against today's age mover and memcached 1.6.45's automover, hit ratio
      at equal memory on a two-class workload: small values read again at
      random (one more page is worth hits) and a stream of large values never
      read again (a page is worth nothing).
  (b) a bimodal and a wide log-normal value-size mix: items kept with derived
      classes, with cachetd's defaults, with memcached 1.6.45's best -f, at a
      -m where memcached's pages fit its limit (-m 64/128 with BENCH_QUICK=1,
      else 256/512; the items scale with -m). BENCH_PARTS=b runs only (b).
  (c) the curve's accuracy: `stats mrc` of one run at -m 32 against four
      separate runs of the same trace at -m 8, 16, 32, 64, on a Zipf trace and
      on the same with one-time keys mixed in; target: absolute error < 0.02.

The classes come from the operator's derivation (internal/engine
ClassesForMemory, through hack/profile-classes -needs -memory, built once
per run): for each count up to the operator's K (engine.MaxProfileClasses,
the tool's default -k) the DP's 8-byte aligned chunk sizes minimising the
bytes wasted (chunk - item) summed over the items, and of those the count
the page model says keeps the most items at the part's -m (its prediction
is printed beside the measured count): the classes a Cache with this
workload and memory gets, not a bench-only choice. Item sizes are not modelled: they
are measured on a calibration cachetd with classes every 8 bytes (the class
an item lands in is its chunk need; for (b)'s 5,857 log-normal value sizes
this equals cachev1alpha1.ItemBytes exactly).

Only 127.0.0.0/8; every loop is bounded by a count. Ports from
BENCH_PORT_BASE (default 26400).
"""
import itertools
import os
import random
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import seed003  # noqa: E402
from mcstats import Client, memcached_vv_ladder, slab_classes  # noqa: E402

PORT_BASE = int(os.environ.get("BENCH_PORT_BASE", "26400"))
QUICK = os.environ.get("BENCH_QUICK") == "1"
CACHETD = os.environ["CACHETD"]
MEMCACHED = os.environ["MEMCACHED"]   # memcached 1.6.45 (bench.mk: MEMCACHED_1645 or shared/peers)
CALIBRATION_CLASSES = 63   # explicit classes one cachetd takes (slabs.c)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROFILE_CLASSES = None   # built by derive_classes on first use


class Server:
    def __init__(self, argv, port):
        self.port = port
        if argv[0] == MEMCACHED and os.geteuid() == 0:
            argv = argv + ["-u", "root"]
        self.proc = subprocess.Popen(argv + ["-p", str(port), "-l", "127.0.0.1", "-U", "0"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{argv}: {self.proc.stderr.read().decode()}")
                time.sleep(0.05)
        raise RuntimeError(f"{argv}: not listening")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def cmd(c, line):
    c.sock.sendall(line)
    return c._line()


def chunk_needs(lengths):
    """{(nkey, nbytes): chunk bytes cachetd needs}, measured: a cachetd with
    classes every 8 bytes from 48, one item stored per distinct size."""
    out = {}
    todo = sorted(set(lengths))
    base = 48   # cachetd's smallest chunk: header, CAS and 16 bytes
    while todo:
        sizes = [base + 8 * i for i in range(CALIBRATION_CLASSES)]
        with Server([CACHETD, "-m", "64", "-n", "8", "-o", "slab_sizes=" + "-".join(map(str, sizes))], PORT_BASE + 1) as s, \
                Client(s.port) as c:
            rest = []
            for i, (nk, nb) in enumerate(todo):
                before = {k: v.get("used_chunks", 0) for k, v in slab_classes(c.stats("slabs")).items()}
                key = ("k%0*d" % (nk - 1, i))[:nk]
                assert cmd(c, b"set %s 0 0 %d\r\n%s\r\n" % (key.encode(), nb, b"v" * nb)) == "STORED"
                after = slab_classes(c.stats("slabs"))
                grown = [k for k, v in after.items() if v.get("used_chunks", 0) > before.get(k, 0)]
                size = int(after[grown[0]]["chunk_size"]) if grown else 0
                if not grown or size > sizes[-1]:
                    rest.append((nk, nb))   # needs more than this range: the next one
                else:
                    out[(nk, nb)] = size
            todo = rest
            base = sizes[-1]
        if base > 1 << 20:
            raise RuntimeError("item too large to calibrate")
    return out


def build_profile_classes():
    """The operator's DP (internal/engine OptimalClasses) through
    hack/profile-classes -needs, built once per run: one definition, no copy."""
    out = os.path.join(tempfile.mkdtemp(prefix="bench-profiles."), "profile-classes")
    subprocess.run(["go", "build", "-o", out, "./hack/profile-classes"], cwd=REPO, check=True)
    return out


def derive_classes(needs, mb):
    """The operator's classes for these items at -m mb: at most its K chunk
    sizes, the least-waste set for each count (the DP), the count the page
    model says keeps the most items (engine.ClassesForMemory). needs:
    {size: count}. Returns (classes, the model's line of items kept)."""
    global PROFILE_CLASSES
    if PROFILE_CLASSES is None:
        PROFILE_CLASSES = build_profile_classes()
    hist = "".join(f"{size} {count}\n" for size, count in sorted(needs.items()))
    out = subprocess.run([PROFILE_CLASSES, "-needs", "-memory", f"{mb}Mi"], input=hist, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    return ([int(c) for c in out[0].split("-")] if out and out[0] else []), (out[1] if len(out) > 1 else "")


def part_a():
    pairs = seed003.seed003_workload()
    lens = [(len(k), len(v)) for k, v in pairs]
    need = chunk_needs(lens)
    hist = {}
    for nk_nb in lens:
        hist[need[nk_nb]] = hist.get(need[nk_nb], 0) + 1
    classes, model = derive_classes(hist, 3)
    print(f"  derived for -m 3: {model}")
    args = [CACHETD, "-m", "3", "-n", "24", "-o", "slab_sizes=" + "-".join(map(str, classes))]
    with Server(args, PORT_BASE + 2) as s:
        r = seed003.fill(s.port)
    ours = r["curr_items"]
    best_f, best = None, -1
    for f in seed003.FACTORS:
        with Server([MEMCACHED, "-m", "3", "-n", "24", "-f", str(f)], PORT_BASE + 3) as s:
            got = seed003.fill(s.port)["curr_items"]
        print(f"  memcached 1.6.45 -m 3 -n 24 -f {f}: {got:,} items kept")
        if got > best:
            best_f, best = f, got
    verdict = "PASS" if ours == seed003.ITEMS else "MISS"
    print(f"(a) seed 003: cachetd -o slab_sizes={'-'.join(map(str, classes))} ({len(classes)} classes) keeps "
          f"{ours:,} of {seed003.ITEMS:,}; memcached 1.6.45's best -f {best_f} keeps {best:,} "
          f"(ratio {ours / best:.3f}) {verdict}")
    return verdict == "PASS"


def mover_run(argv, port, rounds, seed=23):
    """Hit ratio of the small class's rereads over the second half of the run."""
    small, large, working = 100, 2000, 5000
    rng = random.Random(seed)
    with Server(argv, port) as s, Client(s.port) as c:
        def stream(n, start):
            req = b"".join(b"set st%07d 0 0 %d noreply\r\n%s\r\n" % (start + i, large, b"s" * large) for i in range(n))
            c.sock.sendall(req)
            assert cmd(c, b"version\r\n").startswith("VERSION")
        streamed = 0
        stream(6000, 0)
        streamed = 6000
        c.sock.sendall(b"".join(b"set ws%05d 0 0 %d noreply\r\n%s\r\n" % (i, small, b"w" * small)
                                for i in range(working)))
        hits = gets = 0
        t_end = time.monotonic() + rounds * 1.0
        for r in range(rounds):
            keys = [rng.randrange(working) for _ in range(1000)]
            c.sock.sendall(b"".join(b"get ws%05d\r\n" % i for i in keys))
            miss = []
            for i in keys:
                line = c._line()
                if line.startswith("VALUE"):
                    c._line()
                    assert c._line() == "END"
                    if r >= rounds // 2:
                        hits += 1
                else:
                    miss.append(i)
                if r >= rounds // 2:
                    gets += 1
            c.sock.sendall(b"".join(b"set ws%05d 0 0 %d noreply\r\n%s\r\n" % (i, small, b"w" * small) for i in miss))
            stream(500, streamed)
            streamed += 500
            # the movers decide once a second: give each round its second
            wait = t_end - (rounds - r - 1) - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        moved = c.stats().get("slabs_moved")
        if moved is None:
            moved = c.stats("slabs").get("slabs_moved")   # cachetd shows it there
    return hits / max(gets, 1), moved


def part_d():
    rounds = 30 if QUICK else 90
    common = ["-m", "8"]
    age = mover_run([CACHETD] + common + ["-o", "slab_mover=age"], PORT_BASE + 4, rounds)
    gain = mover_run([CACHETD] + common + ["-o", "slab_mover=gain"], PORT_BASE + 5, rounds)
    mc = mover_run([MEMCACHED] + common + ["-I", "128k", "-o", "slab_chunk_max=64"], PORT_BASE + 6, rounds)
    print(f"  cachetd -m 8 slab_mover=age:  hit ratio {age[0]:.3f} (pages moved {age[1]})")
    print(f"  cachetd -m 8 slab_mover=gain: hit ratio {gain[0]:.3f} (pages moved {gain[1]})")
    print(f"  memcached 1.6.45 -m 8 -I 128k -o slab_chunk_max=64 (automove 1): hit ratio {mc[0]:.3f} (pages moved {mc[1]})")
    verdict = "PASS" if gain[0] > age[0] else "MISS"
    print(f"(d) mover by marginal gain vs by age at equal memory: {gain[0]:.3f} vs {age[0]:.3f} "
          f"(memcached 1.6.45 {mc[0]:.3f}; gain/memcached {gain[0] / max(mc[0], 1e-9):.2f}) {verdict}")
    return verdict == "PASS"


def zipf_trace(n_keys, n_gets, alpha, rng):
    weights = [1.0 / (i + 1) ** alpha for i in range(n_keys)]
    return rng.choices(range(n_keys), weights=weights, k=n_gets)


def scan_trace(n_keys, n_gets, alpha, rng):
    """Zipf GETs with one-time keys (a scan) mixed in: every 5th GET a new key."""
    z = zipf_trace(n_keys, n_gets, alpha, rng)
    return [n_keys + i if i % 5 == 4 else k for i, k in enumerate(z)]


def replay(port, trace, size):
    """GET each key of the trace, store it on a miss; returns the hit ratio."""
    hits = 0
    value = b"v" * size
    with Client(port) as c:
        for start in range(0, len(trace), 500):
            chunk = trace[start:start + 500]
            c.sock.sendall(b"".join(b"get k%08d\r\n" % k for k in chunk))
            miss = []
            for k in chunk:
                line = c._line()
                if line.startswith("VALUE"):
                    c._line()
                    c._line()
                    hits += 1
                else:
                    miss.append(k)
            c.sock.sendall(b"".join(b"set k%08d 0 0 %d noreply\r\n%s\r\n" % (k, size, value) for k in miss))
        assert cmd(c, b"version\r\n").startswith("VERSION")
        mrc = c.stats("mrc")
    return hits / len(trace), mrc


def part_c():
    """The curve read on one run at -m 32 against separate runs at -m 8, 16,
    32, 64 (its points at 1/4, 1/2, 1 and 2 x -m)."""
    rng = random.Random(2311)
    n_gets = 400_000 if QUICK else 1_200_000
    worst = 0.0
    for name, trace in (("zipf 0.9", zipf_trace(400_000, n_gets, 0.9, rng)),
                        ("zipf 0.9 + 20% scan", scan_trace(400_000, n_gets, 0.9, rng))):
        with Server([CACHETD, "-m", "32"], PORT_BASE + 7) as s:
            _, mrc = replay(s.port, trace, 400)
        for mb in (8, 16, 32, 64):
            predicted = 1 - float(mrc[f"{mb << 20}:miss_ratio"])
            with Server([CACHETD, "-m", str(mb)], PORT_BASE + 8) as s:
                measured, _ = replay(s.port, trace, 400)
            err = abs(predicted - measured)
            worst = max(worst, err)
            print(f"  {name}, -m {mb}: curve {predicted:.3f}, measured {measured:.3f}, error {err:.3f}")
    verdict = "PASS" if worst < 0.02 else "MISS"
    print(f"(c) curve accuracy: largest absolute error {worst:.3f} (target < 0.02) {verdict}")
    return verdict == "PASS"


def memcached_ladder(mb, f, port):
    """memcached 1.6.45's chunk sizes at -m mb -f f, as its -vv prints them
    at start, below its slab_chunk_max class (cachetd appends its own)."""
    argv = [MEMCACHED, "-m", str(mb), "-f", str(f), "-vv", "-p", str(port), "-l", "127.0.0.1", "-U", "0"]
    if os.geteuid() == 0:
        argv += ["-u", "root"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # at most 63 classes and a few lines around them; EOF ends it too
        sizes = memcached_vv_ladder(itertools.islice(iter(proc.stderr.readline, ""), 200))
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    if not sizes:
        raise RuntimeError(f"{' '.join(argv)} printed no slab class lines")
    return sizes[:-1]


def fill_mix(port, sizes):
    """Stores every item once; returns (items kept, slab page bytes held)."""
    with Client(port) as c:
        c.set_many([(f"p{i:07d}", "v" * n) for i, n in enumerate(sizes)])
        return int(c.stats()["curr_items"]), int(c.stats("slabs").get("total_malloced", 0))


def part_b():
    """Items kept at equal memory: derived classes, memcached's best -f and
    cachetd's defaults, on a bimodal and a wide log-normal value-size mix.
    The -m is large enough that memcached's one page per class in use fits
    within its limit (at -m 8/16 it held up to 58 MB of pages), and the items
    scale with it so that every server is full; each server's page bytes
    (total_malloced) are printed, and the derived classes past their limit
    are a MISS (another server past its limit is named: it only gains)."""
    rng = random.Random(2312)
    scale = 8 if QUICK else 32        # x the 30,000 items at -m 8/16 of the first run
    n = 30_000 * scale
    mixes = {
        "bimodal (70% ~100 B, 30% ~3000 B)": ([max(1, int(rng.gauss(100, 10))) if rng.random() < 0.7
                                               else max(1, int(rng.gauss(3000, 300))) for _ in range(n)], 16 * scale),
        "log-normal (median 300 B, sigma 1.2)": ([min(8000, max(1, int(rng.lognormvariate(5.7, 1.2))))
                                                  for _ in range(n)], 8 * scale),
    }
    ok = True
    for name, (sizes, mb) in mixes.items():
        limit = mb << 20
        need = chunk_needs([(8, v) for v in sizes])
        hist = {}
        for v in sizes:
            hist[need[(8, v)]] = hist.get(need[(8, v)], 0) + 1
        classes, model = derive_classes(hist, mb)
        print(f"  {name} derived {len(classes)} classes for -m {mb}: {model}")
        with Server([CACHETD, "-m", str(mb), "-o", "slab_sizes=" + "-".join(map(str, classes))], PORT_BASE + 9) as s:
            derived, derived_bytes = fill_mix(s.port, sizes)
        with Server([CACHETD, "-m", str(mb)], PORT_BASE + 9) as s:
            default, default_bytes = fill_mix(s.port, sizes)
        best_f, best, best_bytes = None, -1, 0
        for f in seed003.FACTORS:
            with Server([MEMCACHED, "-m", str(mb), "-f", str(f)], PORT_BASE + 10) as s:
                got, got_bytes = fill_mix(s.port, sizes)
            print(f"  {name} memcached 1.6.45 -m {mb} -f {f}: {got:,} kept, {got_bytes / 2**20:.1f} MB of pages")
            if got > best:
                best_f, best, best_bytes = f, got, got_bytes
        # memcached's best ladder in cachetd: what is left of the gap to
        # memcached is the item header, the rest is the choice of classes
        ladder = memcached_ladder(mb, best_f, PORT_BASE + 10)
        with Server([CACHETD, "-m", str(mb), "-o", "slab_sizes=" + "-".join(map(str, ladder))], PORT_BASE + 9) as s:
            on_ladder, on_ladder_bytes = fill_mix(s.port, sizes)
        print(f"  {name} cachetd -m {mb} on memcached -f {best_f}'s {len(ladder)} chunk sizes "
              f"({ladder[0]}..{ladder[-1]}, then cachetd's slab_chunk_max): {on_ladder:,} kept, "
              f"{on_ladder_bytes / 2**20:.1f} MB of pages (cachetd/memcached on one ladder {on_ladder / max(best, 1):.3f})")
        # a server past -m holds more than its share: only the derived
        # classes' own excess can turn a win into a MISS; the others' is
        # printed, and it only favours them
        within = derived_bytes <= limit
        past = [who for who, b in (("derived", derived_bytes), ("defaults", default_bytes),
                                   (f"memcached -f {best_f}", best_bytes)) if b > limit]
        verdict = "PASS" if derived >= best and derived >= default and within else "MISS"
        ok = ok and verdict == "PASS"
        print(f"(b) {name}, {n:,} items, -m {mb}: derived ({len(classes)} classes) keeps {derived:,} "
              f"({derived_bytes / 2**20:.1f} MB of pages), cachetd defaults {default:,} ({default_bytes / 2**20:.1f} MB), "
              f"memcached 1.6.45 best -f {best_f} {best:,} ({best_bytes / 2**20:.1f} MB) "
              f"(derived/memcached {derived / max(best, 1):.3f}, derived/defaults {derived / max(default, 1):.3f})"
              f"{' past -m: ' + ', '.join(past) if past else ''} {verdict}")
    return ok


def main():
    parts = os.environ.get("BENCH_PARTS", "adcb")   # a subset, e.g. BENCH_PARTS=b
    ok = True
    for name, part in (("a", part_a), ("d", part_d), ("c", part_c), ("b", part_b)):
        if name in parts:
            ok = part() and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
