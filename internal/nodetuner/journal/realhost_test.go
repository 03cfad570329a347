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

package journal

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"cachet.dev/cachet/internal/nodetuner/host"
	"cachet.dev/cachet/internal/nodetuner/plan"
)

// The plan applied to this machine's real /proc and /sys, then reverted:
// the kernel takes the values in the formats the plan writes, the
// interrupts' effective affinity follows, and every file is back byte for
// byte. It changes the host's interrupt affinity for a moment, so it runs
// only when asked (CACHET_REAL_HOST_TUNING=1, as root).
func TestRealHostApplyAndRevert(t *testing.T) {
	if os.Getenv("CACHET_REAL_HOST_TUNING") != "1" || os.Getuid() != 0 {
		t.Skip("set CACHET_REAL_HOST_TUNING=1 and run as root: this writes the host's /proc/irq and /sys/class/net")
	}
	node, err := host.Read("/proc", "/sys")
	if err != nil {
		t.Fatal(err)
	}
	online := node.Online().List()
	if len(online) < 2 || len(node.NICs()) == 0 {
		t.Skip("needs 2 CPUs and a NIC with known queue vectors")
	}
	last := online[len(online)-1]
	p := plan.Make(plan.Inputs{Node: node, Pods: []plan.Pod{{Key: "test/real-0", Exclusive: cpuset.New(last), Strategy: plan.Housekeeping, RPS: true}}})
	before := map[string]string{}
	for _, w := range p.Writes {
		raw, err := os.ReadFile(filepath.Join("/", w.Path))
		if err != nil {
			t.Fatal(err)
		}
		before[w.Path] = string(raw)
	}
	j, err := Open(t.TempDir(), "/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if res, err := j.Apply(nil); err != nil || len(res.Errors) > 0 {
			t.Errorf("revert: %v %v", err, res.Errors)
		}
		for path, want := range before {
			if raw, _ := os.ReadFile(filepath.Join("/", path)); string(raw) != want {
				t.Errorf("%s = %q after revert, was %q", path, raw, want)
			}
		}
	})
	res, err := j.Apply(p.Writes)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("apply: %v %v", err, res.Errors)
	}
	for _, w := range p.Writes {
		raw, _ := os.ReadFile(filepath.Join("/", w.Path))
		got, want := strings.TrimSpace(string(raw)), w.Value
		if strings.HasSuffix(w.Path, "_cpus") { // the kernel pads masks to its own width
			g, _ := plan.ParseMask(got)
			wm, _ := plan.ParseMask(want)
			if g.Equals(wm) {
				continue
			}
		}
		if _, refused := res.Refused[w.Path]; got != want && !refused {
			t.Errorf("%s = %q, want %q", w.Path, got, want)
		}
	}
	for path, eff := range res.Effective {
		if _, refused := res.Refused[path]; !refused && eff == "" {
			t.Errorf("%s: no effective affinity read back", path)
		}
		t.Logf("%s: effective %s", path, eff)
	}
}
