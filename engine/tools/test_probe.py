#!/usr/bin/env python3
"""Behaviour tests for cachet-probe (tools/cachet-probe.c), against a real
cachetd and against fake servers that misbehave in the ways a readiness probe
must catch. Standard library only; the last line reads "N passed, N failed".

usage: test_probe.py PROBE CACHETD
"""
import socket
import subprocess
import sys
import threading
import time

PROBE, CACHETD = sys.argv[1], sys.argv[2]
results = {"passed": 0, "failed": 0}


def check(name, cond, detail=""):
    results["passed" if cond else "failed"] += 1
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else f": {detail}"), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(*args):
    # the guard timeout only stops a hung probe from hanging the suite
    p = subprocess.run([PROBE, *args], capture_output=True, text=True, timeout=20)
    return p.returncode, p.stderr


def ask(port, line):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(line)
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf.decode()


def fake_server(behaviour):
    """A listening socket that answers every connection with `behaviour`."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0))
    ls.listen(8)
    held = []

    def loop():
        while True:
            try:
                c, _ = ls.accept()
            except OSError:
                return
            held.append(c)
            if behaviour == "error":
                c.recv(100)
                c.sendall(b"ERROR\r\n")
            elif behaviour == "close":
                c.close()
            # "silent": keep the connection open and say nothing

    threading.Thread(target=loop, daemon=True).start()
    return ls, ls.getsockname()[1]


port = free_port()
server = subprocess.Popen([CACHETD, "-p", str(port), "-l", "127.0.0.1", "-t", "1", "-m", "16"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
try:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.05)

    rc, err = probe("-h", "127.0.0.1", "-p", str(port))
    check("mn against a live cachetd exits 0 silently", rc == 0 and err == "", (rc, err))

    items_before = [l for l in ask(port, b"stats\r\n").splitlines() if l.startswith("STAT curr_items ")]
    rc, err = probe("-p", str(port), "-t", "2000", "--set-get")
    check("--set-get round trip exits 0", rc == 0 and err == "", (rc, err))
    items_after = [l for l in ask(port, b"stats\r\n").splitlines() if l.startswith("STAT curr_items ")]
    check("--set-get leaves no key behind", items_before == items_after, (items_before, items_after))
    stats = ask(port, b"stats\r\n")
    check("--set-get really stored and read (cmd_set, get_hits moved)",
          "STAT cmd_set 1\r" in stats and "STAT get_hits 1\r" in stats, stats[:0])

    closed = free_port()
    rc, err = probe("-p", str(closed), "-t", "500")
    check("a closed port exits 1 with one line", rc == 1 and err.count("\n") == 1 and "refused" in err, (rc, err))

    ls, fport = fake_server("error")
    rc, err = probe("-p", str(fport), "-t", "2000")
    check("a server answering ERROR is not ready", rc == 1 and "expected" in err and err.count("\n") == 1, (rc, err))
    rc, err = probe("-p", str(fport), "-t", "2000", "--set-get")
    check("--set-get against a wrong answer is not ready", rc == 1, (rc, err))
    ls.close()

    ls, fport = fake_server("close")
    rc, err = probe("-p", str(fport), "-t", "2000")
    check("a server that hangs up is not ready", rc == 1 and err.count("\n") == 1 and
          ("closed" in err or "reset" in err), (rc, err))
    ls.close()

    ls, fport = fake_server("silent")
    rc, err = probe("-p", str(fport), "-t", "300")
    check("a server that never answers: the probe gives up by itself", rc == 1 and "timed out" in err, (rc, err))
    ls.close()

    rc, err = probe("-x")
    check("a usage error exits 2", rc == 2 and "usage" in err, (rc, err))
    rc, err = probe("-t", "0")
    check("-t 0 is refused", rc != 0, (rc, err))
finally:
    server.terminate()
    try:
        rc = server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        rc = None
    check("cachetd exits 0 on SIGTERM", rc == 0, rc)

print(f"{results['passed']} passed, {results['failed']} failed")
sys.exit(1 if results["failed"] else 0)
