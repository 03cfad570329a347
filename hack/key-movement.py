#!/usr/bin/env python3
"""How many keys change pod when a Cache scales from N to N+1 or N-1 replicas.

docs/autoscaling.md quotes this table. Clients hash keys over the Cache's
status.endpoints (one stable DNS name per pod, in ordinal order); a key that
maps to another pod after a change misses once and is refilled from the
backing store. Two client distributions, both as real clients implement them:

- ketama (libmemcached's MEMCACHED_BEHAVIOR_KETAMA, pymemcache's HashClient
  with a ketama ring, spymemcached's KETAMA_HASH): 160 points per server on an
  MD5 ring, 4 points per digest of "host:port-i"; a key goes to the first point
  at or after the first 4 bytes of its MD5.
- modulo (libmemcached's default distribution): crc32(key) % N.

  hack/key-movement.py                 (100000 keys, N = 1..8; a few seconds)
  hack/key-movement.py --keys 20000 --max-replicas 4
"""
import argparse
import bisect
import hashlib
import zlib


def endpoints(n, cache="cache-sample", namespace="default"):
    # status.endpoints' host:port, POD.CACHE-headless.NAMESPACE.svc.DOMAIN:
    # a pod that stays keeps its name, so its points on the ring stay put.
    return [f"{cache}-{i}.{cache}-headless.{namespace}.svc.cluster.local:11211" for i in range(n)]


class Ketama:
    POINTS_PER_SERVER = 160

    def __init__(self, servers):
        ring = []
        for s in servers:
            for i in range(self.POINTS_PER_SERVER // 4):
                d = hashlib.md5(f"{s}-{i}".encode()).digest()
                for h in range(4):
                    point = d[3 + 4 * h] << 24 | d[2 + 4 * h] << 16 | d[1 + 4 * h] << 8 | d[4 * h]
                    ring.append((point, s))
        ring.sort()
        self.points = [p for p, _ in ring]
        self.servers = [s for _, s in ring]

    def server(self, key):
        d = hashlib.md5(key.encode()).digest()
        h = d[3] << 24 | d[2] << 16 | d[1] << 8 | d[0]
        i = bisect.bisect_left(self.points, h)
        return self.servers[i % len(self.servers)]


class Modulo:
    def __init__(self, servers):
        self.servers = servers

    def server(self, key):
        return self.servers[zlib.crc32(key.encode()) % len(self.servers)]


def moved(dist, keys, before, after):
    a, b = dist(endpoints(before)), dist(endpoints(after))
    return sum(a.server(k) != b.server(k) for k in keys) / len(keys)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100000)
    ap.add_argument("--max-replicas", type=int, default=8)
    args = ap.parse_args()
    keys = [f"user:{i}:profile" for i in range(args.keys)]
    print(f"Share of {args.keys} keys that map to another pod after the change "
          f"(scale-in: the removed pod's keys are lost with it and counted here).\n")
    print("| change | ideal | ketama | modulo |")
    print("|---|---|---|---|")
    for n in range(1, args.max_replicas):
        for before, after in ((n, n + 1), (n + 1, n)):
            ideal = 1 / max(before, after)
            print(f"| {before} → {after} | {ideal:.1%} | {moved(Ketama, keys, before, after):.1%} "
                  f"| {moved(Modulo, keys, before, after):.1%} |", flush=True)


if __name__ == "__main__":
    main()
