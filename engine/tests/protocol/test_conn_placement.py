"""-o conn_placement (issue 22 part 6): a new TCP connection is served by the
worker pinned to the CPU that received it (SO_INCOMING_CPU), else by one on a
hyperthread sibling of that CPU, and with conn_placement=napi first through the
node tuner's NAPI id -> CPU map (-o napi_map). `stats` counts how connections
were placed; `stats conns` shows each connection's worker CPU.

On loopback the CPU that receives a connection is the one the connecting thread
runs on (the softirq runs there), so pinning the client thread with
os.sched_setaffinity picks the receiving CPU. memcached 1.6.45 has no such
placement (its -N gives NAPI ids to threads first come): cachetd_only.
"""
import os
import socket
import subprocess
import urllib.request

import pytest

from conftest import CACHETD, next_free_port, stat

pytestmark = pytest.mark.cachetd_only

ALLOWED = sorted(os.sched_getaffinity(0))
needs_two_cpus = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs two CPUs this process may run on")


def connect_from(cpu, port, count):
    """`count` connections made by this thread while it runs only on `cpu`;
    each has been answered once, so the server has accepted and placed it."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        socks = []
        for _ in range(count):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"version\r\n")
            assert s.recv(100).startswith(b"VERSION ")
            socks.append(s)
        return socks
    finally:
        os.sched_setaffinity(0, before)


def worker_cpu_by_port(conn):
    """client port -> the CPU of the worker serving it, from `stats conns`."""
    out = conn.stats("conns")
    by_fd = {}
    for name, value in out.items():
        fd, field = name.split(":", 1)
        by_fd.setdefault(fd, {})[field] = value
    return {int(f["addr"].rsplit(":", 1)[1]): int(f["worker_cpu"]) for f in by_fd.values() if "worker_cpu" in f}


@needs_two_cpus
@pytest.mark.parametrize("mode", ["cpu", "napi"])
def test_connection_served_by_worker_on_receiving_cpu(start_server, mode):
    a, b = ALLOWED[:2]
    srv = start_server("-t", "2", "-o", f"cpus={a},{b},conn_placement={mode}")
    placed = {}
    for cpu in (a, b, a):
        placed[cpu] = placed.get(cpu, []) + connect_from(cpu, srv.port, 8)
    with srv.conn() as c:
        where = worker_cpu_by_port(c)
        for cpu, socks in placed.items():
            got = [where[s.getsockname()[1]] for s in socks]
            assert got == [cpu] * len(socks), f"connections from CPU {cpu} served by workers on {got}"
        # no NAPI id on loopback: napi mode falls through to the receiving CPU
        assert stat(c, "conn_placed_cpu") >= 24
        assert stat(c, "conn_placed_napi") == 0
        assert stat(c, "conn_placed_sibling") == 0
        assert c.stats("settings")["conn_placement"] == mode
    for socks in placed.values():
        for s in socks:
            s.close()


@needs_two_cpus
def test_no_worker_on_receiving_cpu_falls_back_to_the_acceptor(start_server):
    a, b = ALLOWED[:2]
    srv = start_server("-t", "1", "-o", f"cpus={a},conn_placement=cpu")
    socks = connect_from(b, srv.port, 4)
    with srv.conn() as c:
        assert stat(c, "conn_placed_fallback") >= 4
        where = worker_cpu_by_port(c)
        assert {where[s.getsockname()[1]] for s in socks} == {a}
    for s in socks:
        s.close()


@needs_two_cpus
@pytest.mark.test_hooks   # CACHET_TEST_SYSFS_CPU: a fake topology
def test_sibling_worker_takes_the_connection(start_server, tmp_path, monkeypatch):
    a, b = ALLOWED[:2]
    for cpu in (a, b):   # a fake topology: a and b are hyperthreads of one core
        d = tmp_path / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "thread_siblings_list").write_text(f"{a},{b}\n")
    monkeypatch.setenv("CACHET_TEST_SYSFS_CPU", str(tmp_path))
    srv = start_server("-t", "1", "-o", f"cpus={a},conn_placement=cpu")
    socks = connect_from(b, srv.port, 4)
    with srv.conn() as c:
        assert stat(c, "conn_placed_sibling") >= 4
    for s in socks:
        s.close()


def test_placement_is_off_by_default(start_server):
    srv = start_server()
    with srv.conn() as c:
        assert c.stats("settings")["conn_placement"] == "off"
        general = c.stats()
        assert "conn_placed_cpu" not in general
        assert not any(k.endswith(":worker_cpu") for k in c.stats("conns"))


def test_napi_map_is_read_and_shown(start_server, tmp_path):
    path = tmp_path / "napi-map"
    path.write_text("# written by cachet node-tuner\n8193 0\n\n8194 1\n")
    srv = start_server("-o", f"conn_placement=napi,napi_map={path}")
    with srv.conn() as c:
        assert c.stats("settings")["napi_map"] == str(path)


@pytest.mark.parametrize("opts,words", [
    ("conn_placement=sideways", "must be off, cpu or napi"),
    ("cpus=none,conn_placement=cpu", "needs pinned workers"),
    ("napi_map=/tmp/x", "only with -o conn_placement=napi"),
])
def test_bad_placement_options_are_refused(opts, words):
    proc = subprocess.run([CACHETD, "-p", "21999", "-l", "127.0.0.1", "-o", opts, "--check-args"],
                          capture_output=True, text=True, timeout=20)
    assert proc.returncode == 64, proc.stderr
    assert words in proc.stderr


def test_malformed_napi_map_stops_the_start(tmp_path):
    path = tmp_path / "napi-map"
    path.write_text("8193 zero\n")
    proc = subprocess.run([CACHETD, "-p", "21998", "-l", "127.0.0.1", "-o",
                           f"conn_placement=napi,napi_map={path}"], capture_output=True, text=True, timeout=20)
    assert proc.returncode != 0
    assert "line 1 is not '<napi_id> <cpu>'" in proc.stderr


@needs_two_cpus
def test_placement_counters_in_metrics(start_server):

    a, b = ALLOWED[:2]
    mport = next_free_port()
    srv = start_server("-t", "2", "-o", f"cpus={a},{b},conn_placement=cpu,metrics_port={mport}")
    socks = connect_from(b, srv.port, 3)
    with srv.conn() as c:
        placed = stat(c, "conn_placed_cpu")
    body = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=10).read().decode()
    line = [l for l in body.splitlines() if l.startswith('cachet_connections_placed_total{by="cpu"}')]
    assert line and int(line[0].split()[-1]) >= placed >= 3
    for s in socks:
        s.close()
