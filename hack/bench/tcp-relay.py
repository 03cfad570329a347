#!/usr/bin/env python3
"""A bounded TCP relay for `make bench-tuning`.

Why it exists: cachet-loadgen sends load only to 127.0.0.0/8, and kubectl
port-forward enters the pod's network namespace and talks to the pod on its
own loopback, so neither crosses the pod's veth, whose RPS the node tuner
sets. This relay listens on 127.0.0.1 inside the local cluster's network
namespace and forwards each connection to the pod's IP over the cluster's
bridge and the pod's veth.

Concurrency: one thread per direction of each connection; the relay exits
after --seconds, bounded like every load loop here.
"""
import argparse
import socket
import sys
import threading
import time


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", required=True, help="127.0.0.1:PORT")
    ap.add_argument("--to", required=True, help="POD_IP:PORT")
    ap.add_argument("--seconds", type=float, default=600)
    a = ap.parse_args()
    lhost, lport = a.listen.rsplit(":", 1)
    if not lhost.startswith("127."):
        sys.exit("tcp-relay: listens on loopback only")
    thost, tport = a.to.rsplit(":", 1)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((lhost, int(lport)))
    srv.listen(64)
    srv.settimeout(1.0)
    deadline = time.monotonic() + a.seconds
    print(f"tcp-relay: {a.listen} -> {a.to} for {a.seconds:.0f}s", flush=True)
    while time.monotonic() < deadline:
        try:
            c, _ = srv.accept()
        except socket.timeout:
            continue
        up = socket.create_connection((thost, int(tport)), timeout=5)
        up.settimeout(None)
        for s in (c, up):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=pump, args=(c, up), daemon=True).start()
        threading.Thread(target=pump, args=(up, c), daemon=True).start()


if __name__ == "__main__":
    main()
