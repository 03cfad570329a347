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

// Metrics the tuner serves for Prometheus, read from the host's /proc at
// scrape time: the counters are the kernel's own (per-CPU NIC queue
// interrupts, NET_RX/NET_TX softirqs, softnet drops and time squeezes), so
// rate() over them is the per-CPU delta and a tuner restart loses nothing.
// The gauges are what the last pass of the tuner saw and did.
//
// Concurrency: Collect may run on any goroutine while the loop calls
// SetPass; pass is guarded by mu.
package tuner

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/cpuset"

	"cachet.dev/cachet/internal/nodetuner/host"
)

var (
	descIRQ = prometheus.NewDesc("cachet_nodetuner_nic_interrupts_total",
		"Interrupts of a NIC queue vector, per CPU (/proc/interrupts).", []string{"nic", "irq", "queue", "cpu"}, nil)
	descSoftirq = prometheus.NewDesc("cachet_nodetuner_softirqs_total",
		"NET_RX and NET_TX softirqs per CPU (/proc/softirqs).", []string{"type", "cpu"}, nil)
	descSoftnetProcessed = prometheus.NewDesc("cachet_nodetuner_softnet_processed_total",
		"Packets processed per CPU (/proc/net/softnet_stat).", []string{"cpu"}, nil)
	descSoftnetDropped = prometheus.NewDesc("cachet_nodetuner_softnet_dropped_total",
		"Packets dropped because the CPU's backlog was full (/proc/net/softnet_stat).", []string{"cpu"}, nil)
	descSoftnetSqueezed = prometheus.NewDesc("cachet_nodetuner_softnet_time_squeeze_total",
		"Times the CPU's NAPI budget ran out with work left (/proc/net/softnet_stat).", []string{"cpu"}, nil)
	descAffinity = prometheus.NewDesc("cachet_nodetuner_irq_affinity_info",
		"1 for each NIC queue vector, with the CPUs it may run on and the one it runs on.", []string{"nic", "irq", "queue", "smp_affinity_list", "effective_affinity_list"}, nil)
	descWorkerIRQs = prometheus.NewDesc("cachet_nodetuner_worker_core_irqs",
		"NIC queue vectors whose effective CPU is one of the pod's worker CPUs (0 is the goal).", []string{"pod"}, nil)
	descPodTuned = prometheus.NewDesc("cachet_nodetuner_pod_tuned",
		"1 when the tuner applied the pod's plan, 0 when it could not (see reason).", []string{"pod", "strategy", "reason"}, nil)
)

// Metrics is the tuner's Prometheus collector.
type Metrics struct {
	procRoot, sysRoot string
	mu                sync.Mutex
	workers           map[string]cpuset.CPUSet // pod -> CPUs that run its workers (not its IRQ CPUs)
	pods              []PodStatus
}

// NewMetrics reads the host's /proc and /sys at procRoot and sysRoot.
func NewMetrics(procRoot, sysRoot string) *Metrics {
	return &Metrics{procRoot: procRoot, sysRoot: sysRoot}
}

// SetPass records what the last pass decided.
func (m *Metrics) SetPass(workers map[string]cpuset.CPUSet, pods []PodStatus) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.workers, m.pods = workers, pods
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIRQ, descSoftirq, descSoftnetProcessed, descSoftnetDropped, descSoftnetSqueezed, descAffinity, descWorkerIRQs, descPodTuned} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	node, err := host.Read(m.procRoot, m.sysRoot)
	if err == nil {
		m.collectIRQs(ch, node)
	}
	m.collectSoftirqs(ch)
	m.collectSoftnet(ch)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.pods {
		v := 0.0
		if p.Status == "True" {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(descPodTuned, prometheus.GaugeValue, v, p.Pod, p.Strategy, p.Reason)
	}
}

func (m *Metrics) collectIRQs(ch chan<- prometheus.Metric, node host.Node) {
	counts := perCPUCounts(filepath.Join(m.procRoot, "interrupts"))
	m.mu.Lock()
	workers := m.workers
	m.mu.Unlock()
	onWorker := map[string]int{}
	for pod := range workers {
		onWorker[pod] = 0
	}
	for _, nic := range node.NICs() {
		for _, irq := range nic.IRQs {
			n, q := strconv.Itoa(irq.Number), strconv.Itoa(irq.Queue)
			for cpu, c := range counts[irq.Number] {
				ch <- prometheus.MustNewConstMetric(descIRQ, prometheus.CounterValue, float64(c), nic.Name, n, q, strconv.Itoa(cpu))
			}
			eff, _ := os.ReadFile(filepath.Join(m.procRoot, "irq", n, "effective_affinity_list"))
			effective := strings.TrimSpace(string(eff))
			ch <- prometheus.MustNewConstMetric(descAffinity, prometheus.GaugeValue, 1, nic.Name, n, q, irq.Affinity.String(), effective)
			effSet, err := cpuset.Parse(effective)
			if err != nil {
				continue
			}
			for pod, w := range workers {
				if !effSet.Intersection(w).IsEmpty() {
					onWorker[pod]++
				}
			}
		}
	}
	for pod, n := range onWorker {
		ch <- prometheus.MustNewConstMetric(descWorkerIRQs, prometheus.GaugeValue, float64(n), pod)
	}
}

// perCPUCounts parses /proc/interrupts: IRQ number -> per-CPU counts.
func perCPUCounts(path string) map[int][]uint64 {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	ncpu := 0
	out := map[int][]uint64{}
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if ncpu == 0 {
			ncpu = len(fields) // the header: CPU0 CPU1 ...
			continue
		}
		if len(fields) < ncpu+1 {
			continue
		}
		irq, err := strconv.Atoi(strings.TrimSuffix(fields[0], ":"))
		if err != nil {
			continue
		}
		counts := make([]uint64, ncpu)
		for i := range counts {
			counts[i], _ = strconv.ParseUint(fields[1+i], 10, 64)
		}
		out[irq] = counts
	}
	return out
}

func (m *Metrics) collectSoftirqs(ch chan<- prometheus.Metric) {
	f, err := os.Open(filepath.Join(m.procRoot, "softirqs"))
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || (fields[0] != "NET_RX:" && fields[0] != "NET_TX:") {
			continue
		}
		for cpu, v := range fields[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			ch <- prometheus.MustNewConstMetric(descSoftirq, prometheus.CounterValue, float64(n), strings.TrimSuffix(fields[0], ":"), strconv.Itoa(cpu))
		}
	}
}

// collectSoftnet reads softnet_stat: one line per CPU, hex columns
// processed, dropped, time_squeeze; the 13th column (kernels >= 5.10) is
// the CPU id, else the line number is.
func (m *Metrics) collectSoftnet(ch chan<- prometheus.Metric) {
	f, err := os.Open(filepath.Join(m.procRoot, "net/softnet_stat"))
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for line := 0; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		hex := func(i int) float64 { v, _ := strconv.ParseUint(fields[i], 16, 64); return float64(v) }
		cpu := strconv.Itoa(line)
		if len(fields) >= 13 {
			cpu = strconv.Itoa(int(hex(12)))
		}
		ch <- prometheus.MustNewConstMetric(descSoftnetProcessed, prometheus.CounterValue, hex(0), cpu)
		ch <- prometheus.MustNewConstMetric(descSoftnetDropped, prometheus.CounterValue, hex(1), cpu)
		ch <- prometheus.MustNewConstMetric(descSoftnetSqueezed, prometheus.CounterValue, hex(2), cpu)
	}
}
