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

package plan_test

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"cachet.dev/cachet/internal/nodetuner/host"
	"cachet.dev/cachet/internal/nodetuner/plan"
)

var update = flag.Bool("update", false, "rewrite the golden plans from what Make returns now")

// The machines of issue 22, read from fake trees (testdata/make-fixtures.py).
var machines = []string{"ixgbe-2s16c-ht", "virtio-vm16", "mlx5-2numa", "this-machine"}

type podsFile struct {
	Allocatable string `json:"allocatable"`
	Pods        []struct {
		Key       string `json:"key"`
		Exclusive string `json:"exclusive"`
		Veth      string `json:"veth"`
	} `json:"pods"`
}

func loadInputs(t *testing.T, machine string, s plan.Strategy) plan.Inputs {
	t.Helper()
	root := filepath.Join("testdata", machine)
	node, err := host.Read(filepath.Join(root, "proc"), filepath.Join(root, "sys"))
	if err != nil {
		t.Fatalf("read %s: %v", machine, err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "pods.json"))
	if err != nil {
		t.Fatal(err)
	}
	var pf podsFile
	if err := json.Unmarshal(raw, &pf); err != nil {
		t.Fatal(err)
	}
	in := plan.Inputs{Node: node, Allocatable: mustParse(pf.Allocatable)}
	for _, p := range pf.Pods {
		in.Pods = append(in.Pods, plan.Pod{Key: p.Key, Exclusive: mustParse(p.Exclusive), Strategy: s, RPS: true, Veth: p.Veth})
	}
	return in
}

func TestGoldenPlans(t *testing.T) {
	for _, machine := range machines {
		for _, s := range plan.Strategies {
			t.Run(machine+"/"+string(s), func(t *testing.T) {
				got := plan.Make(loadInputs(t, machine, s)).String()
				golden := filepath.Join("testdata", "golden", machine, string(s)+".txt")
				if *update {
					if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
						t.Fatal(err)
					}
					return
				}
				want, err := os.ReadFile(golden)
				if err != nil {
					t.Fatalf("%v (run go test ./internal/nodetuner/plan -update)", err)
				}
				if got != string(want) {
					t.Errorf("plan differs from %s (go test ./internal/nodetuner/plan -update rewrites it)\n--- got\n%s--- want\n%s", golden, got, want)
				}
			})
		}
	}
}

// The reader finds the queue vectors of each driver and nothing else.
func TestReaderFindsQueueVectors(t *testing.T) {
	cases := map[string]struct {
		nic   string
		count int
		numa  int
		xps   bool
	}{
		"ixgbe-2s16c-ht": {"ens1f0", 16, 0, true},    // misc vector and fdir- skipped
		"virtio-vm16":    {"eth0", 16, -1, true},     // 8 input + 8 output, config skipped
		"mlx5-2numa":     {"ens2f0np0", 24, 1, true}, // async skipped
		"this-machine":   {"eth0", 2, -1, false},     // virtio2-input.0/output.0 of 37-39
	}
	for machine, c := range cases {
		root := filepath.Join("testdata", machine)
		node, err := host.Read(filepath.Join(root, "proc"), filepath.Join(root, "sys"))
		if err != nil {
			t.Fatal(err)
		}
		nics := node.NICs()
		if len(nics) != 1 || nics[0].Name != c.nic || len(nics[0].IRQs) != c.count || nics[0].NUMANode != c.numa || nics[0].XPS != c.xps {
			t.Errorf("%s: NICs %+v, want one %s with %d vectors on NUMA %d, xps %v", machine, nics, c.nic, c.count, c.numa, c.xps)
		}
	}
}

func TestParseQueueIRQName(t *testing.T) {
	cases := []struct {
		name string
		kind host.QueueKind
		q    int
		ok   bool
	}{
		{"virtio2-input.0", host.RX, 0, true},
		{"virtio2-output.7", host.TX, 7, true},
		{"virtio2-config", "", 0, false},
		{"ens1f0-TxRx-15", host.Combined, 15, true},
		{"i40e-0000:3b:00.0:fdir-TxRx-0", "", 0, false},
		{"eth1-rx-3", host.RX, 3, true},
		{"mlx5_comp11@pci:0000:81:00.0", host.Combined, 11, true},
		{"mlx5_async0@pci:0000:81:00.0", "", 0, false},
		{"eth0-Tx-Rx-5", host.Combined, 5, true},
		{"ena-mgmnt@pci:0000:00:05.0", "", 0, false},
	}
	for _, c := range cases {
		kind, q, ok := host.ParseQueueIRQName(c.name)
		if kind != c.kind || q != c.q || ok != c.ok {
			t.Errorf("%s: got %q %d %v, want %q %d %v", c.name, kind, q, ok, c.kind, c.q, c.ok)
		}
	}
}

func TestMaskIsTheKernelFormat(t *testing.T) {
	cases := []struct {
		set   string
		nbits int
		want  string
	}{
		{"1", 2, "2"}, {"0-1", 2, "3"}, {"", 2, "0"},
		{"0-23", 24, "ffffff"}, {"12-23", 24, "fff000"},
		{"0-31", 32, "ffffffff"}, {"1,33", 40, "02,00000002"},
	}
	for _, c := range cases {
		got := plan.Mask(mustParse(c.set), c.nbits)
		if got != c.want {
			t.Errorf("Mask(%s, %d) = %s, want %s", c.set, c.nbits, got, c.want)
		}
		back, err := plan.ParseMask(got)
		if err != nil || !back.Equals(mustParse(c.set)) {
			t.Errorf("ParseMask(%s) = %s, %v", got, back, err)
		}
	}
}

// Auto says why it chose, and chooses by shape.
func TestAutoChoosesByShape(t *testing.T) {
	want := map[string][]string{
		"ixgbe-2s16c-ht": {"siblings", "siblings"},
		"virtio-vm16":    {"siblings", "housekeeping"},
		"mlx5-2numa":     {"housekeeping", "housekeeping"},
		"this-machine":   {"housekeeping"},
	}
	for machine, strategies := range want {
		p := plan.Make(loadInputs(t, machine, plan.Auto))
		for i, r := range p.Pods {
			if string(r.Strategy) != strategies[i] || !strings.HasPrefix(r.Why, "auto: ") {
				t.Errorf("%s %s: %s (%s), want %s", machine, r.Key, r.Strategy, r.Why, strategies[i])
			}
		}
	}
}

func mustParse(s string) cpuset.CPUSet {
	set, err := cpuset.Parse(s)
	if err != nil {
		panic(err)
	}
	return set
}

// A pod that comes after every queue is taken gets its own reason, not a
// share of another pod's queues.
func TestLatePodGetsNoQueue(t *testing.T) {
	in := loadInputs(t, "virtio-vm16", plan.Spread)
	in.Pods = []plan.Pod{
		{Key: "a/first-0", Exclusive: mustParse("2-5"), Strategy: plan.Spread, RPS: true},
		{Key: "a/second-0", Exclusive: mustParse("10-13"), Strategy: plan.Spread, RPS: true},
		{Key: "a/third-0", Exclusive: mustParse("6"), Strategy: plan.Spread, RPS: true},
	}
	p := plan.Make(in)
	owners := map[string]string{}
	for _, w := range p.Writes {
		if strings.HasPrefix(w.Path, "proc/irq/") {
			if prev, ok := owners[w.Path]; ok && prev != w.Owner {
				t.Errorf("%s written for %s and %s", w.Path, prev, w.Owner)
			}
			owners[w.Path] = w.Owner
		}
	}
	for i, want := range []string{plan.ReasonTuned, plan.ReasonTuned, plan.ReasonNoQueue} {
		if p.Pods[i].Reason != want {
			t.Errorf("%s: %s (%s), want %s", p.Pods[i].Key, p.Pods[i].Reason, p.Pods[i].Why, want)
		}
	}
	if len(p.Pods[0].Queues) != 4 || len(p.Pods[1].Queues) != 4 || len(p.Pods[2].Queues) != 0 {
		t.Errorf("queues %v %v %v", p.Pods[0].Queues, p.Pods[1].Queues, p.Pods[2].Queues)
	}
}
