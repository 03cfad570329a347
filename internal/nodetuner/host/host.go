/*
Copyright 2026 The Cachet Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

// Package host reads what the node tuner needs to know about a node from
// its /proc and /sys trees: the CPU topology (threads, cores, packages,
// NUMA nodes), the network links with their RX/TX queues, and which
// interrupt serves which queue of which NIC.
//
// It exists apart from the plan so that the plan stays a pure function:
// everything here takes a root directory, so tests read fake trees
// (testdata) and the tuner reads the host's /proc and /sys mounted into its
// pod. Nothing here writes.
//
// Concurrency: Read only reads files and returns fresh values; it is safe
// to call from any goroutine, and what it returns is owned by the caller.
package host

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// CPU is one logical CPU (a hardware thread).
type CPU struct {
	ID       int
	Core     int // core_id, unique only within its package
	Package  int
	NUMA     int
	Siblings cpuset.CPUSet // thread_siblings_list, itself included
}

// QueueKind says which direction an interrupt serves.
type QueueKind string

// Queue kinds, as the drivers name their interrupts.
const (
	RX       QueueKind = "rx"
	TX       QueueKind = "tx"
	Combined QueueKind = "rxtx" // one vector serves RX and TX queue K (Intel, mlx5, ENA)
)

// IRQ is one interrupt vector that serves a queue of a NIC.
type IRQ struct {
	Number   int
	Name     string // as /proc/interrupts names it
	Kind     QueueKind
	Queue    int
	Affinity cpuset.CPUSet // smp_affinity_list now
}

// Link is a network interface and its software queues.
type Link struct {
	Name     string
	RXQueues int  // queues/rx-K directories
	TXQueues int  // queues/tx-K directories
	XPS      bool // multi-queue with queues/tx-K/xps_cpus (on a single-queue device the file is listed but reading it fails ENOENT)
	// Only for NICs (links with a device):
	Driver   string
	NUMANode int // -1 when the platform does not say
	IRQs     []IRQ
}

// Node is everything the plan reads about one machine.
type Node struct {
	CPUs  []CPU // by ID
	Links map[string]Link
}

// Online is the set of every CPU of the node.
func (n Node) Online() cpuset.CPUSet {
	ids := make([]int, 0, len(n.CPUs))
	for _, c := range n.CPUs {
		ids = append(ids, c.ID)
	}
	return cpuset.New(ids...)
}

// CPU returns the CPU with this id, and whether the node has it.
func (n Node) CPU(id int) (CPU, bool) {
	i := sort.Search(len(n.CPUs), func(i int) bool { return n.CPUs[i].ID >= id })
	if i < len(n.CPUs) && n.CPUs[i].ID == id {
		return n.CPUs[i], true
	}
	return CPU{}, false
}

// NICs are the links that have queue interrupts, by name.
func (n Node) NICs() []Link {
	var nics []Link
	for _, l := range n.Links {
		if len(l.IRQs) > 0 {
			nics = append(nics, l)
		}
	}
	sort.Slice(nics, func(i, j int) bool { return nics[i].Name < nics[j].Name })
	return nics
}

// Read reads a node from procRoot (normally /proc) and sysRoot (normally /sys).
func Read(procRoot, sysRoot string) (Node, error) {
	cpus, err := readCPUs(sysRoot)
	if err != nil {
		return Node{}, err
	}
	names, err := readInterruptNames(filepath.Join(procRoot, "interrupts"))
	if err != nil {
		return Node{}, err
	}
	links, err := readLinks(procRoot, sysRoot, names)
	if err != nil {
		return Node{}, err
	}
	return Node{CPUs: cpus, Links: links}, nil
}

// ReadLinks reads only the network links of sysRoot: the node's network
// namespace when it is not the host's (see tuner.Config.NetSysRoot).
func ReadLinks(procRoot, sysRoot string) (map[string]Link, error) {
	names, err := readInterruptNames(filepath.Join(procRoot, "interrupts"))
	if err != nil {
		return nil, err
	}
	return readLinks(procRoot, sysRoot, names)
}

func readString(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func readInt(path string) (int, error) {
	s, err := readString(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(s)
}

func readCPUs(sysRoot string) ([]CPU, error) {
	cpuDir := filepath.Join(sysRoot, "devices/system/cpu")
	online, err := readString(filepath.Join(cpuDir, "online"))
	if err != nil {
		return nil, err
	}
	set, err := cpuset.Parse(online)
	if err != nil {
		return nil, fmt.Errorf("%s/online: %w", cpuDir, err)
	}
	numaOf, err := readNUMA(sysRoot)
	if err != nil {
		return nil, err
	}
	var cpus []CPU
	for _, id := range set.List() {
		topo := filepath.Join(cpuDir, fmt.Sprintf("cpu%d/topology", id))
		c := CPU{ID: id, NUMA: numaOf[id]}
		if c.Core, err = readInt(filepath.Join(topo, "core_id")); err != nil {
			return nil, err
		}
		if c.Package, err = readInt(filepath.Join(topo, "physical_package_id")); err != nil {
			return nil, err
		}
		sib, err := readString(filepath.Join(topo, "thread_siblings_list"))
		if err != nil {
			return nil, err
		}
		if c.Siblings, err = cpuset.Parse(sib); err != nil {
			return nil, fmt.Errorf("cpu%d thread_siblings_list: %w", id, err)
		}
		cpus = append(cpus, c)
	}
	return cpus, nil
}

// readNUMA maps each CPU to its NUMA node; a kernel without NUMA has no
// node directories and every CPU is on node 0.
func readNUMA(sysRoot string) (map[int]int, error) {
	dirs, err := filepath.Glob(filepath.Join(sysRoot, "devices/system/node/node[0-9]*"))
	if err != nil {
		return nil, err
	}
	numaOf := map[int]int{}
	for _, d := range dirs {
		node, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "node"))
		if err != nil {
			continue
		}
		list, err := readString(filepath.Join(d, "cpulist"))
		if err != nil {
			return nil, err
		}
		set, err := cpuset.Parse(list)
		if err != nil {
			return nil, fmt.Errorf("%s/cpulist: %w", d, err)
		}
		for _, id := range set.List() {
			numaOf[id] = node
		}
	}
	return numaOf, nil
}

// readInterruptNames maps IRQ numbers to their action name, the last
// column of /proc/interrupts (queue vectors never have spaces in it).
func readInterruptNames(path string) (map[int]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	names := map[int]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(fields[0], ":"))
		if err != nil {
			continue // NMI, LOC, the header...
		}
		names[n] = fields[len(fields)-1]
	}
	return names, sc.Err()
}

var (
	virtioQueue   = regexp.MustCompile(`^virtio\d+-(input|output)\.(\d+)$`)
	intelQueue    = regexp.MustCompile(`-TxRx-(\d+)$`)
	intelRXorTX   = regexp.MustCompile(`-(rx|tx)-(\d+)$`)
	mlx5Queue     = regexp.MustCompile(`^mlx5_comp(\d+)@`)
	enaQueue      = regexp.MustCompile(`-Tx-Rx-(\d+)$`)
	queueDirIndex = regexp.MustCompile(`^(rx|tx)-(\d+)$`)
)

// ParseQueueIRQName says which queue an interrupt serves from its name in
// /proc/interrupts, for the drivers whose names say it: virtio-net, Intel
// (ixgbe, i40e, ice, igb), mlx5 and ENA. Intel's flow-director sideband
// vector ("fdir-TxRx-0") serves no traffic queue and is not one.
func ParseQueueIRQName(name string) (QueueKind, int, bool) {
	atoi := func(s string) int { n, _ := strconv.Atoi(s); return n }
	if m := virtioQueue.FindStringSubmatch(name); m != nil {
		if m[1] == "input" {
			return RX, atoi(m[2]), true
		}
		return TX, atoi(m[2]), true
	}
	if strings.Contains(name, "fdir-") {
		return "", 0, false
	}
	if m := enaQueue.FindStringSubmatch(name); m != nil {
		return Combined, atoi(m[1]), true
	}
	if m := intelQueue.FindStringSubmatch(name); m != nil {
		return Combined, atoi(m[1]), true
	}
	if m := intelRXorTX.FindStringSubmatch(name); m != nil {
		return QueueKind(m[1]), atoi(m[2]), true
	}
	if m := mlx5Queue.FindStringSubmatch(name); m != nil {
		return Combined, atoi(m[1]), true
	}
	return "", 0, false
}

func readLinks(procRoot, sysRoot string, irqNames map[int]string) (map[string]Link, error) {
	netDir := filepath.Join(sysRoot, "class/net")
	entries, err := os.ReadDir(netDir)
	if err != nil {
		return nil, err
	}
	links := map[string]Link{}
	for _, e := range entries {
		dir := filepath.Join(netDir, e.Name())
		l := Link{Name: e.Name(), NUMANode: -1}
		if err := readQueues(dir, &l); err != nil {
			return nil, err
		}
		if err := readDevice(procRoot, dir, irqNames, &l); err != nil {
			return nil, err
		}
		links[l.Name] = l
	}
	return links, nil
}

func readQueues(linkDir string, l *Link) error {
	qs, err := os.ReadDir(filepath.Join(linkDir, "queues"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, q := range qs {
		m := queueDirIndex.FindStringSubmatch(q.Name())
		switch {
		case m == nil:
		case m[1] == "rx":
			l.RXQueues++
		default:
			l.TXQueues++
			if _, err := os.Stat(filepath.Join(linkDir, "queues", q.Name(), "xps_cpus")); err == nil {
				l.XPS = true
			}
		}
	}
	l.XPS = l.XPS && l.TXQueues > 1
	return nil
}

// readDevice finds a NIC's interrupts. The PCI function lists its vectors
// in msi_irqs; virtio-net's device is a virtio bus device whose parent is
// the PCI function. The names in /proc/interrupts then say which queue
// each vector serves; vectors with other names (config, misc, async) are
// not queue vectors.
func readDevice(procRoot, linkDir string, irqNames map[int]string, l *Link) error {
	dev, err := filepath.EvalSymlinks(filepath.Join(linkDir, "device"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // virtual: veth, bridge, lo
	}
	if err != nil {
		return err
	}
	if drv, err := filepath.EvalSymlinks(filepath.Join(dev, "driver")); err == nil {
		l.Driver = filepath.Base(drv)
	}
	pci := dev
	if _, err := os.Stat(filepath.Join(pci, "msi_irqs")); err != nil {
		pci = filepath.Dir(dev)
	}
	if n, err := readInt(filepath.Join(pci, "numa_node")); err == nil {
		l.NUMANode = n
	}
	vectors, err := os.ReadDir(filepath.Join(pci, "msi_irqs"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, v := range vectors {
		n, err := strconv.Atoi(v.Name())
		if err != nil {
			continue
		}
		kind, q, ok := ParseQueueIRQName(irqNames[n])
		if !ok {
			continue
		}
		irq := IRQ{Number: n, Name: irqNames[n], Kind: kind, Queue: q}
		if aff, err := readString(filepath.Join(procRoot, "irq", strconv.Itoa(n), "smp_affinity_list")); err == nil {
			irq.Affinity, _ = cpuset.Parse(aff)
		}
		l.IRQs = append(l.IRQs, irq)
	}
	sort.Slice(l.IRQs, func(i, j int) bool { return l.IRQs[i].Number < l.IRQs[j].Number })
	return nil
}
