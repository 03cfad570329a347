#!/usr/bin/env python3
"""Figures for tls-syscalls.sh from two `strace -f` traces of one server, taken
during generator runs of N and of 2N W1 GETs: syscalls per GET by name, and
the bytes written per GET, from which the TLS records per reply follow. The
difference of the two traces is N GETs' worth: the handshakes and anything
else a run does once cancel out.

Usage: tls-syscalls.py NAME DEPTH N TRACE_N TRACE_2N"""
import collections
import re
import sys

REPLY = 90         # a 64-byte W1 hit of 200,000 keys: "VALUE 123456 0 64\r\n" + value + "\r\nEND\r\n"
RECORD_EXTRA = 22  # a TLS 1.3 record: header 5, inner content type 1, AEAD tag 16
WRITES = ("write", "writev", "sendmsg", "sendto")
CALL = re.compile(r"^\d+\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()")
RESULT = re.compile(r"\)\s+=\s+(-?\d+)")


def count(path):
    calls, failed, written = collections.Counter(), collections.Counter(), 0
    pending = {}
    for line in open(path, errors="replace"):
        m = CALL.match(line)
        if not m:
            continue
        tid = line.split()[0]
        if m.group(1):                     # the end of a call strace split in two
            name = pending.pop(tid, m.group(1))
        else:
            name = m.group(2)
            if line.rstrip().endswith("<unfinished ...>"):
                pending[tid] = name
                continue
        calls[name] += 1
        r = RESULT.search(line)
        if r and int(r.group(1)) < 0:
            failed[name] += 1
        elif r and name in WRITES:
            written += int(r.group(1))
    return calls, failed, written


def main():
    name, depth, n, one, two = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    c1, f1, w1 = count(one)
    c2, f2, w2 = count(two)
    calls = {k: (c2[k] - c1[k]) / n for k in set(c1) | set(c2)}
    fails = {k: (f2[k] - f1[k]) / n for k in set(f1) | set(f2)}
    per = ", ".join(f"{k} {v:.3f}" + (f" ({fails[k]:.3f} failed)" if fails.get(k, 0) >= 0.005 else "")
                    for k, v in sorted(calls.items(), key=lambda kv: -kv[1]) if v >= 0.005)
    bytes_per_get = (w2 - w1) / n
    records = (bytes_per_get - REPLY) / RECORD_EXTRA
    writes = sum(calls.get(k, 0) for k in WRITES)
    print(f"{name} depth {depth}: per GET {sum(calls.values()):.3f} syscalls: {per}")
    if name.endswith("-plain"):
        # io_uring's sends are not write() calls: strace cannot count their bytes
        print(f"  replies: {bytes_per_get:.1f} bytes per GET through write()/sendmsg()/sendto() "
              f"({writes:.3f} calls; io_uring sends not counted)")
        return
    print(f"  replies: {bytes_per_get:.1f} bytes written per GET, {writes:.3f} writes, "
          f"{records:.3f} TLS records per GET ({records / writes if writes else 0:.2f} per write)")


if __name__ == "__main__":
    main()
