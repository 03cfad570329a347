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

package tuner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"cachet.dev/cachet/internal/nodetuner/fixture"
	"cachet.dev/cachet/internal/nodetuner/plan"
)

func TestMetricsShowMasksCountersAndWorkerIRQs(t *testing.T) {
	root := fixture.Copy(t, "this-machine")
	proc := filepath.Join(root, "proc")
	if err := os.MkdirAll(filepath.Join(proc, "net"), 0o755); err != nil {
		t.Fatal(err)
	}
	// softnet_stat of a 6.x kernel: 13 columns, the last the CPU id.
	softnet := "000f4240 00000002 00000003 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000\n" +
		"00000010 00000000 00000001 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000001\n"
	softirqs := "                    CPU0       CPU1\n          HI:          0          0\n      NET_TX:         11         22\n      NET_RX:        333        444\n"
	for f, s := range map[string]string{"net/softnet_stat": softnet, "softirqs": softirqs} {
		if err := os.WriteFile(filepath.Join(proc, f), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k, dir := startKubelet(t, []int64{0, 1})
	k.set(pod("default", "cache-sample-0", 1))
	m := NewMetrics(proc, filepath.Join(root, "sys"))
	tu, err := New(Config{HostRoot: root, PodResourcesDir: dir, StateDir: t.TempDir(), AssumeStrategy: plan.Auto}, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tu.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	// The fake tree does not move effective affinity as the kernel would:
	// virtio2-input.0 still says CPU 1, the pod's worker, and the gauge
	// must count it.
	want := `
# HELP cachet_nodetuner_worker_core_irqs NIC queue vectors whose effective CPU is one of the pod's worker CPUs (0 is the goal).
# TYPE cachet_nodetuner_worker_core_irqs gauge
cachet_nodetuner_worker_core_irqs{pod="default/cache-sample-0"} 1
# HELP cachet_nodetuner_softnet_time_squeeze_total Times the CPU's NAPI budget ran out with work left (/proc/net/softnet_stat).
# TYPE cachet_nodetuner_softnet_time_squeeze_total counter
cachet_nodetuner_softnet_time_squeeze_total{cpu="0"} 3
cachet_nodetuner_softnet_time_squeeze_total{cpu="1"} 1
# HELP cachet_nodetuner_softirqs_total NET_RX and NET_TX softirqs per CPU (/proc/softirqs).
# TYPE cachet_nodetuner_softirqs_total counter
cachet_nodetuner_softirqs_total{cpu="0",type="NET_RX"} 333
cachet_nodetuner_softirqs_total{cpu="0",type="NET_TX"} 11
cachet_nodetuner_softirqs_total{cpu="1",type="NET_RX"} 444
cachet_nodetuner_softirqs_total{cpu="1",type="NET_TX"} 22
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cachet_nodetuner_worker_core_irqs", "cachet_nodetuner_softnet_time_squeeze_total", "cachet_nodetuner_softirqs_total"); err != nil {
		t.Error(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sawMask, sawCount bool
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetName() {
			case "cachet_nodetuner_irq_affinity_info":
				sawMask = sawMask || (labels["irq"] == "38" && labels["smp_affinity_list"] == "0")
			case "cachet_nodetuner_nic_interrupts_total":
				sawCount = sawCount || (labels["irq"] == "38" && labels["cpu"] == "1" && mt.GetCounter().GetValue() == 95085)
			}
		}
	}
	if !sawMask || !sawCount {
		t.Errorf("irq 38: mask shown %v, per-CPU count shown %v", sawMask, sawCount)
	}
}
