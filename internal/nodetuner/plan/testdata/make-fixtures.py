#!/usr/bin/env python3
"""Builds the fake /proc and /sys trees the golden plans are computed from.

Each machine is a directory with proc/, sys/ and pods.json (the cache pods,
as the kubelet's PodResources API would report them). Run from this
directory: python3 make-fixtures.py. The trees hold only the files the
reader (internal/nodetuner/host) opens. "this-machine" was copied from the
2-vCPU build VM (its /proc/interrupts verbatim, its sysfs layout: eth0 ->
virtio2 -> PCI 0000:00:03.0 with msi_irqs 37-39, numa_node -1, one queue
pair; its tx-0/xps_cpus is listed but reading it fails with ENOENT on a
single-queue device, so the tree leaves it out).
"""
import json, os, shutil

def w(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text + "\n")

def cpulist(ids):
    ids = sorted(ids); out = []; i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1: j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}"); i = j + 1
    return ",".join(out)

def topology(root, cpus):
    """cpus: list of (id, core, package, numa, siblings)."""
    base = f"{root}/sys/devices/system/cpu"
    w(f"{base}/online", cpulist([c[0] for c in cpus]))
    nodes = {}
    for cid, core, pkg, numa, sib in cpus:
        t = f"{base}/cpu{cid}/topology"
        w(f"{t}/core_id", str(core)); w(f"{t}/physical_package_id", str(pkg))
        w(f"{t}/thread_siblings_list", cpulist(sib))
        nodes.setdefault(numa, []).append(cid)
    for n, ids in nodes.items():
        w(f"{root}/sys/devices/system/node/node{n}/cpulist", cpulist(ids))

def interrupts(root, ncpu, irqs):
    """irqs: list of (number, chip, name, affinity)."""
    lines = [" " * 11 + "".join(f"CPU{i:<7}" for i in range(ncpu))]
    for n, chip, name, aff in irqs:
        lines.append(f"{n:>4}: " + "".join(f"{0:>10} " for _ in range(ncpu)) + f"{chip}   {name}")
        w(f"{root}/proc/irq/{n}/smp_affinity_list", aff)
        w(f"{root}/proc/irq/{n}/effective_affinity_list", aff.split("-")[0].split(",")[0])
    w(f"{root}/proc/interrupts", "\n".join(lines))
    w(f"{root}/proc/sys/net/core/rps_sock_flow_entries", "0")

def nic(root, name, pci, driver, numa, vectors, rxq, txq, virtio=None):
    dev = f"{root}/sys/devices/pci0000:00/{pci}"
    w(f"{dev}/numa_node", str(numa))
    os.makedirs(f"{dev}/msi_irqs", exist_ok=True)
    for v in vectors: w(f"{dev}/msi_irqs/{v}", "msix")
    os.makedirs(f"{root}/sys/bus/pci/drivers/{driver}", exist_ok=True)
    leaf = f"{dev}/{virtio}" if virtio else dev
    os.makedirs(leaf, exist_ok=True)
    os.symlink(os.path.relpath(f"{root}/sys/bus/pci/drivers/{driver}", leaf), f"{leaf}/driver")
    link = f"{root}/sys/class/net/{name}"
    queues(link, rxq, txq)
    os.symlink(os.path.relpath(leaf, link), f"{link}/device")

def queues(link, rxq, txq):
    for q in range(rxq):
        w(f"{link}/queues/rx-{q}/rps_cpus", "0"); w(f"{link}/queues/rx-{q}/rps_flow_cnt", "0")
    for q in range(txq):
        os.makedirs(f"{link}/queues/tx-{q}", exist_ok=True)
        if txq > 1: w(f"{link}/queues/tx-{q}/xps_cpus", "0")

def pods(root, allocatable, items):
    w(f"{root}/pods.json", json.dumps({"allocatable": allocatable, "pods": items}, indent=1))

def fresh(root):
    shutil.rmtree(root, ignore_errors=True); os.makedirs(root)

# Seed 000's machine: 2 sockets x 8 cores x 2 threads, a 16-queue ixgbe on socket 0.
r = "ixgbe-2s16c-ht"; fresh(r)
cpus = []
for t in range(2):
    for pkg in range(2):
        for core in range(8):
            cid = t * 16 + pkg * 8 + core
            cpus.append((cid, core, pkg, pkg, [pkg * 8 + core, 16 + pkg * 8 + core]))
topology(r, sorted(cpus))
irqs = [(0, "IO-APIC   2-edge", "timer", "0-31"), (120, "PCI-MSI 524288-edge", "ens1f0", "0-31")]
irqs += [(121 + q, f"PCI-MSI {524289+q}-edge", f"ens1f0-TxRx-{q}", "0-31") for q in range(16)]
irqs += [(137, "PCI-MSI 524305-edge", "i40e-0000:3b:00.0:fdir-TxRx-0", "0-31")]
interrupts(r, 32, irqs)
nic(r, "ens1f0", "0000:3b:00.0", "ixgbe", 0, [120] + list(range(121, 138)), 16, 16)
queues(f"{r}/sys/class/net/vethc0ffee01", 1, 1); queues(f"{r}/sys/class/net/vethc0ffee02", 1, 1)
pods(r, "1-15,17-31", [
    {"key": "default/cache-a-0", "exclusive": "1-4,17-20", "veth": "vethc0ffee01"},
    {"key": "default/cache-b-0", "exclusive": "9-10,25-26", "veth": "vethc0ffee02"}])

# A 16-vCPU VM (8 cores x 2 threads, as clouds expose them), virtio-net with 8 queue pairs.
r = "virtio-vm16"; fresh(r)
topology(r, [(c, c % 8, 0, 0, [c % 8, c % 8 + 8]) for c in range(16)])
irqs = [(24, "PCI-MSIX-0000:00:04.0   0-edge", "virtio1-config", "0-15")]
for q in range(8):
    irqs.append((25 + 2 * q, f"PCI-MSIX-0000:00:04.0   {1+2*q}-edge", f"virtio1-input.{q}", str(q)))
    irqs.append((26 + 2 * q, f"PCI-MSIX-0000:00:04.0   {2+2*q}-edge", f"virtio1-output.{q}", str(q)))
interrupts(r, 16, irqs)
nic(r, "eth0", "0000:00:04.0", "virtio-pci", -1, range(24, 41), 8, 8, virtio="virtio1")
queues(f"{r}/sys/class/net/veth1a2b3c4d", 1, 1); queues(f"{r}/sys/class/net/veth5e6f7a8b", 1, 1)
pods(r, "1-7,9-15", [
    {"key": "prod/sessions-0", "exclusive": "2-3,10-11", "veth": "veth1a2b3c4d"},
    {"key": "prod/tiny-0", "exclusive": "5", "veth": "veth5e6f7a8b"}])

# A 2-node NUMA server without HT (2 x 12 cores), a ConnectX (mlx5) on node 1.
r = "mlx5-2numa"; fresh(r)
topology(r, [(c, c % 12, c // 12, c // 12, [c]) for c in range(24)])
irqs = [(200, "PCI-MSIX-0000:81:00.0   0-edge", "mlx5_async0@pci:0000:81:00.0", "0-23")]
irqs += [(201 + q, f"PCI-MSIX-0000:81:00.0   {q+1}-edge", f"mlx5_comp{q}@pci:0000:81:00.0", str(12 + q % 12)) for q in range(24)]
interrupts(r, 24, irqs)
nic(r, "ens2f0np0", "0000:81:00.0", "mlx5_core", 1, range(200, 225), 24, 24)
queues(f"{r}/sys/class/net/vethnuma0001", 1, 1); queues(f"{r}/sys/class/net/vethnuma0002", 1, 1)
pods(r, "1-11,13-23", [
    {"key": "default/near-0", "exclusive": "14-17", "veth": "vethnuma0001"},
    {"key": "default/far-0", "exclusive": "2-5", "veth": "vethnuma0002"}])

# This build VM as it is: 2 vCPUs, virtio-net with one queue pair.
r = "this-machine"; fresh(r)
topology(r, [(0, 0, 0, 0, [0]), (1, 1, 0, 0, [1])])
w(f"{r}/proc/interrupts", open("this-machine.interrupts").read().rstrip("\n"))
for n in [37, 38, 39]:
    w(f"{r}/proc/irq/{n}/smp_affinity_list", "0-1")
    w(f"{r}/proc/irq/{n}/effective_affinity_list", {37: "0", 38: "1", 39: "0"}[n])
w(f"{r}/proc/sys/net/core/rps_sock_flow_entries", "0")
nic(r, "eth0", "0000:00:03.0", "virtio-pci", -1, [37, 38, 39], 1, 1, virtio="virtio2")
queues(f"{r}/sys/class/net/lo", 1, 1)
queues(f"{r}/sys/class/net/vethcachet01", 1, 1)
pods(r, "0-1", [{"key": "default/cache-sample-0", "exclusive": "1", "veth": "vethcachet01"}])
