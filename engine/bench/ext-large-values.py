#!/usr/bin/env python3
"""GETs of 1 MB values on disk, from 8 clients at once: MB/s per server, side by side.

Issue 21 part 1: cachetd reads and sends a disk value over 64 KiB in pieces
(engine/README.md, Extstore, "Reads"): the whole record is read once and its
CRC checked, then each piece after the first is read again as the client
takes the one before. This measures what that costs against memcached 1.6.45
(and any other cachetd build given), each server started in turn with the
same flags (-m 64 -t 2, a 256 MB file, ext_item_age=0, ext_recache_rate=0),
40 values of 1,000,000 bytes stored and written out, then 8 clients x 40 GETs
of random keys, each read at once and checked byte for byte. No target: the
issue sets none for large values; the ratio to memcached is printed.

It is a measurement, not a test (tests/protocol/test_extstore_slow.py asserts
the behaviour). Traffic goes to 127.0.0.1 only; every loop is bounded.

usage: ext-large-values.py --memcached PATH NAME=CACHETD_PATH ... [--port-base N]
       (BENCH_PORT_BASE, default 26520; uses BASE .. BASE+servers-1)
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "protocol"))
from conftest import Conn, stat, value_of  # noqa: E402

VALUE, KEYS, CLIENTS, GETS = 1_000_000, 40, 8, 40


def run(binary, port, workdir):
    opts = (f"ext_path={workdir}/ext{port}:256m,ext_item_size=512,ext_page_size=4,ext_wbuf_size=2,"
            "ext_item_age=0,ext_recache_rate=0")
    as_root = ["-u", "root"] if os.geteuid() == 0 and "memcached" in os.path.basename(binary) else []
    p = subprocess.Popen([binary, *as_root, "-p", str(port), "-l", "127.0.0.1", "-m", "64", "-t", "2", "-o", opts],
                         stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                c = Conn(port)
                break
            except OSError:
                if time.monotonic() > deadline or p.poll() is not None:
                    raise RuntimeError(f"{binary} did not start")
                time.sleep(0.1)
        for i in range(KEYS):
            assert c.store("set", f"mb{i}", value_of("mb", i, VALUE)) == b"STORED"
        deadline = time.monotonic() + 60
        while stat(c, "extstore_objects_written") < KEYS and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.5)   # past ext_item_age's second, so nothing is read from RAM
        right = [0] * CLIENTS

        def client(n):
            rnd = random.Random(n)
            with Conn(port, timeout=60) as cc:
                for _ in range(GETS):
                    i = rnd.randrange(KEYS)
                    if cc.values(f"get mb{i}").get(f"mb{i}", (0, b""))[1] == value_of("mb", i, VALUE):
                        right[n] += 1

        t0 = time.monotonic()
        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        seconds = time.monotonic() - t0
        return sum(right), CLIENTS * GETS * VALUE / 1e6 / seconds
    finally:
        p.terminate()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memcached", required=True)
    ap.add_argument("--port-base", type=int, default=int(os.environ.get("BENCH_PORT_BASE", "26520")))
    ap.add_argument("cachetd", nargs="+", help="NAME=PATH of a cachetd build")
    a = ap.parse_args()
    servers = [("memcached-1.6.45", a.memcached)] + [tuple(s.split("=", 1)) for s in a.cachetd]
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/tmp")) as workdir:
        rates = {}
        print(f"{'server':20s} {'right':>9s} {'MB/s':>8s} {'x memcached':>12s}")
        for k, (name, path) in enumerate(servers):
            ok, rate = run(path, a.port_base + k, workdir)
            rates[name] = rate
            ratio = rate / rates["memcached-1.6.45"]
            print(f"{name:20s} {ok:4d}/{CLIENTS * GETS:<4d} {rate:8.1f} {ratio:12.2f}")


if __name__ == "__main__":
    main()
