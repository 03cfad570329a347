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

// Package plan decides where a node's NIC interrupts, receive packet
// steering (RPS/RFS) and transmit packet steering (XPS) go, given the cache
// pods on the node and their exclusive CPUs. It is a pure function of its
// inputs (Make), so that every placement can be golden-tested against fake
// machines; reading the node (package host) and writing the plan (package
// journal) live elsewhere.
//
// The rules, in short (docs/node-tuning.md says why):
//   - A NIC's queues are shared by the node; pods whose strategy places
//     queues (siblings, spread) are served in pod-key order and each takes
//     the next free queues, one per worker slot. What is left is the node's.
//   - siblings: queue K's vectors on the hyperthread sibling of the pod's
//     K-th core (seed 000); spread: on the pod's K-th CPU itself.
//   - housekeeping: the pod takes no queue; every vector the pods do not
//     own goes to the shared pool, one CPU each, NUMA-local first (seed 002).
//   - none: the pod is left alone.
//   - auto picks one of the above from the pod's CPUs and the node's shape.
//
// Concurrency: none; Make allocates what it returns.
package plan

import (
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"

	"cachet.dev/cachet/internal/nodetuner/host"
)

// Strategy is spec.nodeTuning.irqStrategy.
type Strategy string

// Strategies.
const (
	Auto         Strategy = "auto"
	Siblings     Strategy = "siblings"
	Housekeeping Strategy = "housekeeping"
	Spread       Strategy = "spread"
	None         Strategy = "none"
)

// Strategies lists every strategy, auto first.
var Strategies = []Strategy{Auto, Siblings, Housekeeping, Spread, None}

// Condition reasons a pod's result can carry (the Cache's NodeTuned).
const (
	ReasonTuned          = "Tuned"
	ReasonNotRequested   = "NotRequested"   // strategy none
	ReasonSharedCores    = "SharedCores"    // the pod has no exclusive CPU
	ReasonNoQueue        = "NoQueue"        // every NIC queue was taken by pods before it
	ReasonNoSharedPool   = "NoSharedPool"   // housekeeping with every CPU exclusive
	ReasonNoNICQueueIRQs = "NoNICQueueIRQs" // the node has no NIC whose queue vectors we know
)

// Tunables with fixed values; perftune.py and the kernel's
// Documentation/networking/scaling.rst use the same.
const (
	SockFlowEntries = 32768 // net.core.rps_sock_flow_entries
	FlowsPerQueue   = 4096  // rps_flow_cnt of a queue that steers flows
)

// Pod is one cache container's request.
type Pod struct {
	Key       string        // namespace/name
	Exclusive cpuset.CPUSet // from the kubelet's PodResources List
	Strategy  Strategy
	RPS       bool   // spec.nodeTuning.rps
	Veth      string // host side of the pod's interface, "" if unknown
}

// Inputs is everything Make reads.
type Inputs struct {
	Node host.Node
	// Allocatable CPUs (PodResources GetAllocatableResources); empty means
	// every online CPU. The shared pool is Allocatable minus every
	// exclusive CPU of every container, cache or not.
	Allocatable cpuset.CPUSet
	// OtherExclusive are exclusive CPUs of containers that are not cache pods.
	OtherExclusive cpuset.CPUSet
	Pods           []Pod
}

// Write is one value written to one file, relative to the host root
// ("proc/irq/38/smp_affinity_list", "sys/class/net/eth0/queues/rx-0/rps_cpus").
type Write struct {
	Path  string
	Value string
	Owner string // pod key, or "" when the write serves the node (shared queues)
	Why   string
}

// PodResult is what the plan did for one pod.
type PodResult struct {
	Key      string
	Strategy Strategy // after auto
	Why      string
	Reason   string // ReasonTuned or why not
	Queues   []string
	Workers  cpuset.CPUSet // the pod's exclusive CPUs
	IRQCPUs  cpuset.CPUSet // where its queues' vectors go (siblings: the second threads)
}

// Plan is the outcome: what to write, and what it means for each pod.
type Plan struct {
	SharedPool cpuset.CPUSet
	Pods       []PodResult
	Writes     []Write
	Notes      []string
}

// Make computes the plan. It never fails: what cannot be done is said in
// a pod's Reason or in Notes.
func Make(in Inputs) Plan {
	online := in.Node.Online()
	alloc := in.Allocatable
	if alloc.IsEmpty() {
		alloc = online
	}
	pods := append([]Pod(nil), in.Pods...)
	sort.Slice(pods, func(i, j int) bool { return pods[i].Key < pods[j].Key })

	exclusive := in.OtherExclusive
	for _, p := range pods {
		exclusive = exclusive.Union(p.Exclusive)
	}
	p := Plan{SharedPool: alloc.Difference(exclusive)}
	m := maker{in: in, plan: &p, nbits: maxCPU(online) + 1, written: map[string]bool{}}

	nics := in.Node.NICs()
	results := make([]PodResult, len(pods))
	for i, pod := range pods {
		results[i] = m.choose(pod, nics)
	}
	if len(nics) == 0 {
		p.Notes = append(p.Notes, "no NIC with known queue vectors: only pod veths are tuned")
	}
	anyTuned, anyRFS := false, false
	for i, pod := range pods {
		if results[i].Reason == ReasonTuned {
			anyTuned = true
			if pod.RPS && results[i].Strategy != Housekeeping {
				anyRFS = true
			}
		}
	}
	for _, nic := range nics {
		m.nic(nic, pods, results, anyTuned, anyRFS)
	}
	for i, pod := range pods {
		if results[i].Reason == ReasonTuned && pod.RPS {
			m.veth(pod, results[i])
		}
	}
	if anyRFS {
		m.write(Write{Path: "proc/sys/net/core/rps_sock_flow_entries", Value: strconv.Itoa(SockFlowEntries),
			Why: "RFS: the global socket flow table that rps_flow_cnt steers by"})
	}
	p.Pods = results
	return p
}

type maker struct {
	in      Inputs
	plan    *Plan
	nbits   int
	written map[string]bool
}

func (m *maker) write(w Write) {
	if m.written[w.Path] {
		return
	}
	m.written[w.Path] = true
	m.plan.Writes = append(m.plan.Writes, w)
}

// fullCores are the pod's cores whose every thread is in the pod's set,
// by their lowest thread.
func (m *maker) fullCores(set cpuset.CPUSet) []host.CPU {
	var cores []host.CPU
	for _, id := range set.List() {
		c, ok := m.in.Node.CPU(id)
		if !ok || c.Siblings.Size() < 2 || !c.Siblings.IsSubsetOf(set) || c.Siblings.List()[0] != id {
			continue
		}
		cores = append(cores, c)
	}
	return cores
}

// choose resolves auto and checks that the strategy can work for the pod.
func (m *maker) choose(pod Pod, nics []host.Link) PodResult {
	r := PodResult{Key: pod.Key, Strategy: pod.Strategy, Reason: ReasonTuned, Workers: pod.Exclusive}
	if r.Strategy == "" {
		r.Strategy = Auto
	}
	switch {
	case r.Strategy == None:
		r.Reason, r.Why = ReasonNotRequested, "irqStrategy none"
		return r
	case pod.Exclusive.IsEmpty():
		r.Reason, r.Why = ReasonSharedCores, "the pod has no exclusive CPU (not Guaranteed with whole CPUs, or the kubelet's CPU manager is not static)"
		return r
	}
	if r.Strategy == Auto {
		full := m.fullCores(pod.Exclusive)
		switch {
		case len(full) > 0:
			r.Strategy = Siblings
			r.Why = fmt.Sprintf("auto: the pod owns both threads of %d core(s), so a queue's interrupt can sit on the sibling of the worker it feeds (seed 000)", len(full))
		case !m.plan.SharedPool.IsEmpty():
			r.Strategy = Housekeeping
			r.Why = fmt.Sprintf("auto: no whole core in the pod, and %d shared CPU(s) can take every interrupt off the workers (seed 002)", m.plan.SharedPool.Size())
		default:
			r.Strategy = Spread
			r.Why = "auto: no whole core in the pod and no shared CPU left: each queue goes to its own worker CPU"
		}
	} else {
		r.Why = "irqStrategy " + string(r.Strategy)
	}
	if r.Strategy == Siblings && len(m.fullCores(pod.Exclusive)) == 0 {
		r.Why += "; but the pod owns no whole core, so each queue goes to one of its CPUs as with spread"
	}
	if r.Strategy == Housekeeping && m.plan.SharedPool.IsEmpty() {
		r.Reason = ReasonNoSharedPool
		r.Why += "; but every allocatable CPU is exclusive, so there is no shared pool to move interrupts to"
	}
	if len(nics) == 0 && r.Strategy != Housekeeping && !pod.RPS {
		r.Reason = ReasonNoNICQueueIRQs
	}
	return r
}

// slots are where a pod's queues' vectors go, in queue order.
func (m *maker) slots(pod Pod, s Strategy) []int {
	var out []int
	switch s {
	case Siblings:
		for _, core := range m.fullCores(pod.Exclusive) {
			out = append(out, core.Siblings.List()[1])
		}
		if len(out) == 0 { // no whole core: the threads themselves
			out = pod.Exclusive.List()
		}
	case Spread:
		out = pod.Exclusive.List()
	}
	return out
}

type queueOwner struct {
	pod int // index into pods, -1 for the node
	cpu int // where the vector goes (pods only)
	xps cpuset.CPUSet
}

func (m *maker) nic(nic host.Link, pods []Pod, results []PodResult, anyTuned, anyRFS bool) {
	owners := m.podQueues(nic, pods, results)
	if !anyTuned {
		return
	}
	m.nodeQueues(nic, owners)
	m.irqWrites(nic, owners, pods, results)
	m.rpsWrites(nic, owners, pods, anyRFS)
	m.xpsWrites(nic, owners, pods)
}

// podQueues gives each placing pod, in order, the next free queues, one
// per slot, and maps every CPU of the pod to one of its queues for XPS.
func (m *maker) podQueues(nic host.Link, pods []Pod, results []PodResult) map[int]*queueOwner {
	queues := nicQueues(nic)
	owners := map[int]*queueOwner{}
	next := 0
	for i, pod := range pods {
		r := &results[i]
		if r.Reason != ReasonTuned || (r.Strategy != Siblings && r.Strategy != Spread) {
			continue
		}
		var owned []int
		for _, cpu := range m.slots(pod, r.Strategy) {
			if next >= len(queues) {
				break
			}
			q := queues[next]
			owners[q] = &queueOwner{pod: i, cpu: cpu}
			owned = append(owned, q)
			r.Queues = append(r.Queues, fmt.Sprintf("%s:%d", nic.Name, q))
			r.IRQCPUs = r.IRQCPUs.Union(cpuset.New(cpu))
			next++
		}
		if len(owned) == 0 {
			r.Reason = ReasonNoQueue
			r.Why += fmt.Sprintf("; every queue of %s is taken by pods before it", nic.Name)
			continue
		}
		for k, cpu := range pod.Exclusive.List() {
			o := owners[owned[k%len(owned)]]
			o.xps = o.xps.Union(cpuset.New(cpu))
		}
	}
	return owners
}

// nodeQueues are the queues no pod took: their vectors round-robin over
// the NIC-local shared CPUs, XPS from the shared CPUs round-robin too.
func (m *maker) nodeQueues(nic host.Link, owners map[int]*queueOwner) {
	shared := m.plan.SharedPool
	local := m.numaLocal(nic, shared)
	if shared.IsEmpty() {
		m.plan.Notes = append(m.plan.Notes, fmt.Sprintf("no shared CPU: the queues of %s that no pod owns keep their interrupts where they are", nic.Name))
	}
	var free []int
	for _, q := range nicQueues(nic) {
		if owners[q] == nil {
			free = append(free, q)
		}
	}
	localList := local.List()
	for k, q := range free {
		o := &queueOwner{pod: -1, cpu: -1}
		if len(localList) > 0 {
			o.cpu = localList[k%len(localList)]
		}
		owners[q] = o
	}
	if len(free) == 0 {
		return
	}
	for k, cpu := range shared.List() {
		o := owners[free[k%len(free)]]
		o.xps = o.xps.Union(cpuset.New(cpu))
	}
}

// numaLocal is the part of set on the NIC's NUMA node, or all of set when
// that part is empty or the platform does not say.
func (m *maker) numaLocal(nic host.Link, set cpuset.CPUSet) cpuset.CPUSet {
	if nic.NUMANode < 0 {
		return set
	}
	local := cpuset.New()
	for _, id := range set.List() {
		if c, _ := m.in.Node.CPU(id); c.NUMA == nic.NUMANode {
			local = local.Union(cpuset.New(id))
		}
	}
	if local.IsEmpty() && !set.IsEmpty() {
		m.plan.Notes = append(m.plan.Notes, fmt.Sprintf("%s is on NUMA node %d, which has no shared CPU: its shared queues go to remote CPUs", nic.Name, nic.NUMANode))
		return set
	}
	return local
}

func (m *maker) irqWrites(nic host.Link, owners map[int]*queueOwner, pods []Pod, results []PodResult) {
	for _, irq := range nic.IRQs {
		o := owners[irq.Queue]
		if o == nil || o.cpu < 0 {
			continue
		}
		w := Write{Path: fmt.Sprintf("proc/irq/%d/smp_affinity_list", irq.Number), Value: strconv.Itoa(o.cpu)}
		if o.pod >= 0 {
			w.Owner = pods[o.pod].Key
			w.Why = fmt.Sprintf("%s queue %d (%s) for %s (%s)", nic.Name, irq.Queue, irq.Name, pods[o.pod].Key, results[o.pod].Strategy)
		} else {
			w.Why = fmt.Sprintf("%s queue %d (%s): no pod owns it, shared pool", nic.Name, irq.Queue, irq.Name)
		}
		m.write(w)
	}
}

func (m *maker) rpsWrites(nic host.Link, owners map[int]*queueOwner, pods []Pod, anyRFS bool) {
	shared := m.plan.SharedPool
	for q := 0; q < nic.RXQueues; q++ {
		o := owners[q]
		base := fmt.Sprintf("sys/class/net/%s/queues/rx-%d/", nic.Name, q)
		switch {
		case o != nil && o.pod >= 0 && pods[o.pod].RPS:
			key := pods[o.pod].Key
			m.write(Write{Path: base + "rps_cpus", Value: m.mask(pods[o.pod].Exclusive), Owner: key,
				Why: "RPS on the pod's CPUs; RFS picks the worker that reads the flow"})
			m.write(Write{Path: base + "rps_flow_cnt", Value: strconv.Itoa(FlowsPerQueue), Owner: key, Why: "RFS flow table"})
		case (o == nil || o.pod < 0) && !shared.IsEmpty():
			m.write(Write{Path: base + "rps_cpus", Value: m.mask(shared), Why: "RPS of a shared queue: protocol work on the shared pool"})
			flows, why := "0", "no pod wants RFS"
			if anyRFS {
				flows, why = strconv.Itoa(FlowsPerQueue), "RFS: a cache pod's flow arriving on a shared queue is steered to its worker"
			}
			m.write(Write{Path: base + "rps_flow_cnt", Value: flows, Why: why})
		}
	}
}

func (m *maker) xpsWrites(nic host.Link, owners map[int]*queueOwner, pods []Pod) {
	if !nic.XPS {
		return
	}
	for q := 0; q < nic.TXQueues; q++ {
		o := owners[q]
		if o == nil || o.xps.IsEmpty() {
			continue
		}
		w := Write{Path: fmt.Sprintf("sys/class/net/%s/queues/tx-%d/xps_cpus", nic.Name, q), Value: m.mask(o.xps)}
		if o.pod >= 0 {
			w.Owner, w.Why = pods[o.pod].Key, "XPS: the pod's CPUs send on its own queue"
		} else {
			w.Why = "XPS: shared CPUs send on the shared queues"
		}
		m.write(w)
	}
}

func (m *maker) veth(pod Pod, r PodResult) {
	if pod.Veth == "" {
		m.plan.Notes = append(m.plan.Notes, fmt.Sprintf("%s: host veth unknown, its RPS is not set", pod.Key))
		return
	}
	link, ok := m.in.Node.Links[pod.Veth]
	if !ok {
		m.plan.Notes = append(m.plan.Notes, fmt.Sprintf("%s: host veth %s not found", pod.Key, pod.Veth))
		return
	}
	cpus, flows, why := pod.Exclusive, strconv.Itoa(FlowsPerQueue), "RPS+RFS on the pod's CPUs: its veth's packets are processed by the worker that reads them"
	if r.Strategy == Housekeeping {
		cpus, flows, why = m.plan.SharedPool, "0", "RPS on the shared pool: protocol work stays off the pod's workers"
	}
	for q := 0; q < link.RXQueues; q++ {
		base := fmt.Sprintf("sys/class/net/%s/queues/rx-%d/", pod.Veth, q)
		m.write(Write{Path: base + "rps_cpus", Value: m.mask(cpus), Owner: pod.Key, Why: why})
		m.write(Write{Path: base + "rps_flow_cnt", Value: flows, Owner: pod.Key, Why: why})
	}
}

// nicQueues are the queue indexes that have a vector, in order.
func nicQueues(nic host.Link) []int {
	seen := map[int]bool{}
	var qs []int
	for _, irq := range nic.IRQs {
		if !seen[irq.Queue] && irq.Kind != host.TX {
			seen[irq.Queue] = true
			qs = append(qs, irq.Queue)
		}
	}
	sort.Ints(qs)
	return qs
}

func maxCPU(s cpuset.CPUSet) int {
	l := s.List()
	if len(l) == 0 {
		return 0
	}
	return l[len(l)-1]
}

// mask formats a CPU set as the kernel prints a cpumask of nbits bits:
// hex, 32-bit groups separated by commas, the first group only as wide as
// it needs to be ("2" on 2 CPUs, "ffffff" on 24, "ff,ffffffff" on 40).
func (m *maker) mask(s cpuset.CPUSet) string {
	return Mask(s, m.nbits)
}

// Mask is the kernel's cpumask format (see maker.mask).
func Mask(s cpuset.CPUSet, nbits int) string {
	words := make([]uint32, (nbits+31)/32)
	for _, c := range s.List() {
		if c < nbits {
			words[c/32] |= 1 << uint(c%32)
		}
	}
	var b strings.Builder
	for i := len(words) - 1; i >= 0; i-- {
		width := 8
		if i == len(words)-1 {
			if r := nbits % 32; r != 0 {
				width = (r + 3) / 4
			}
		}
		fmt.Fprintf(&b, "%0*x", width, words[i])
		if i > 0 {
			b.WriteByte(',')
		}
	}
	return b.String()
}

// ParseMask is Mask's inverse.
func ParseMask(s string) (cpuset.CPUSet, error) {
	groups := strings.Split(strings.TrimSpace(s), ",")
	var ids []int
	for i, g := range groups {
		w, err := strconv.ParseUint(g, 16, 32)
		if err != nil {
			return cpuset.New(), fmt.Errorf("cpumask %q: %w", s, err)
		}
		base := (len(groups) - 1 - i) * 32
		for v := uint32(w); v != 0; v &= v - 1 {
			ids = append(ids, base+bits.TrailingZeros32(v))
		}
	}
	return cpuset.New(ids...), nil
}

// String renders the plan for --dry-run and the golden files.
func (p Plan) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "shared pool: %s\n", orDash(p.SharedPool.String()))
	for _, r := range p.Pods {
		fmt.Fprintf(&b, "pod %s: %s %s\n  why: %s\n", r.Key, r.Strategy, r.Reason, r.Why)
		if len(r.Queues) > 0 {
			fmt.Fprintf(&b, "  queues: %s  pod cpus: %s  irq cpus: %s\n", strings.Join(r.Queues, " "), r.Workers, r.IRQCPUs)
		}
	}
	for _, n := range p.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	for _, w := range p.Writes {
		fmt.Fprintf(&b, "write %s = %s  [%s] %s\n", w.Path, w.Value, orDash(w.Owner), w.Why)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
