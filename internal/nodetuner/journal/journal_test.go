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
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"k8s.io/utils/cpuset"

	"cachet.dev/cachet/internal/nodetuner/fixture"
	"cachet.dev/cachet/internal/nodetuner/host"
	"cachet.dev/cachet/internal/nodetuner/plan"
)

var errKilled = errors.New("killed")

// diff compares byte for byte; a planned value is compared as the kernel
// reads it back (a trailing newline does not matter there).
func diff(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v && (!strings.HasPrefix(what, "applied") || strings.TrimSpace(got[k]) != v) {
			t.Errorf("%s: %s = %q, want %q", what, k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%s: %d files, want %d", what, len(got), len(want))
	}
}

// virtioVM is the 16-vCPU virtio VM with its two pods, planned with auto.
func virtioVM(t *testing.T) (string, []plan.Write) {
	t.Helper()
	root := fixture.Copy(t, "virtio-vm16")
	node, err := host.Read(filepath.Join(root, "proc"), filepath.Join(root, "sys"))
	if err != nil {
		t.Fatal(err)
	}
	in := plan.Inputs{Node: node, Allocatable: mustParse("1-7,9-15"), Pods: []plan.Pod{
		{Key: "prod/sessions-0", Exclusive: mustParse("2-3,10-11"), Strategy: plan.Auto, RPS: true, Veth: "veth1a2b3c4d"},
		{Key: "prod/tiny-0", Exclusive: mustParse("5"), Strategy: plan.Auto, RPS: true, Veth: "veth5e6f7a8b"},
	}}
	return root, plan.Make(in).Writes
}

func mustParse(s string) cpuset.CPUSet {
	set, err := cpuset.Parse(s)
	if err != nil {
		panic(err)
	}
	return set
}

// wanted is the tree as the plan wants it: the original with each write.
func wanted(root string, before map[string]string, writes []plan.Write) map[string]string {
	out := map[string]string{}
	for k, v := range before {
		out[k] = v
	}
	for _, w := range writes {
		out[filepath.Join(root, w.Path)] = w.Value
	}
	return out
}

func TestApplyThenRevertRestoresEveryByte(t *testing.T) {
	root, writes := virtioVM(t)
	before := fixture.Snapshot(t, root)
	state := t.TempDir()
	j, err := Open(state, root)
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Apply(writes)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("apply: %v %v", err, res.Errors)
	}
	if len(res.Written)+len(res.Unchanged) != len(writes) || len(res.Written) < len(writes)-2 {
		t.Errorf("wrote %d, unchanged %d, of %d", len(res.Written), len(res.Unchanged), len(writes))
	}
	if res.Effective["proc/irq/25/smp_affinity_list"] == "" {
		t.Errorf("effective affinity not read back: %v", res.Effective)
	}
	diff(t, "applied", fixture.Snapshot(t, root), wanted(root, before, writes))
	if got := j.Entries()["proc/irq/25/smp_affinity_list"]; got.Owner != "prod/sessions-0" || got.Original != "0\n" {
		t.Errorf("journal entry %+v", got)
	}
	// A second apply of the same plan changes nothing.
	if res, _ := j.Apply(writes); len(res.Written) != 0 || len(res.Restored) != 0 {
		t.Errorf("re-apply wrote %v restored %v", res.Written, res.Restored)
	}
	res, err = j.Apply(nil)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("revert: %v %v", err, res.Errors)
	}
	diff(t, "reverted", fixture.Snapshot(t, root), before)
	if n := len(j.Entries()); n != 0 {
		t.Errorf("%d entries left after revert", n)
	}
}

// One pod leaves: only what it owned (and what the node's queues now
// want differently) changes; the other pod's values stay.
func TestPodLeavingRevertsOnlyItsFiles(t *testing.T) {
	root, writes := virtioVM(t)
	before := fixture.Snapshot(t, root)
	j, err := Open(t.TempDir(), root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Apply(writes); err != nil {
		t.Fatal(err)
	}
	var remaining []plan.Write
	for _, w := range writes {
		if w.Owner != "prod/tiny-0" {
			remaining = append(remaining, w)
		}
	}
	res, err := j.Apply(remaining)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Restored) != 2 || !strings.Contains(res.Restored[0], "veth5e6f7a8b") {
		t.Errorf("restored %v, want the two veth files of prod/tiny-0", res.Restored)
	}
	diff(t, "applied after tiny-0 left", fixture.Snapshot(t, root), wanted(root, before, remaining))
}

// Each point where a kill can stop Apply; after a restart (a new Open on
// the same state directory) the same plan converges, and an empty plan
// then restores every byte.
func TestCrashPointsConverge(t *testing.T) {
	for _, point := range []string{"before-rename", "after-journal", "after-write", "after-restore"} {
		for _, nth := range []int{1, 7} {
			t.Run(point, func(t *testing.T) {
				root, writes := virtioVM(t)
				before := fixture.Snapshot(t, root)
				state := t.TempDir()
				j, err := Open(state, root)
				if err != nil {
					t.Fatal(err)
				}
				seen := 0
				j.crash = func(p string) error {
					if p == point {
						if seen++; seen == nth {
							return errKilled
						}
					}
					return nil
				}
				_, err = j.Apply(writes)
				if point == "after-restore" {
					// Reverting is where this point is: apply whole, then
					// kill the revert.
					if err != nil {
						t.Fatal(err)
					}
					_, err = j.Apply(nil)
				}
				if !errors.Is(err, errKilled) {
					t.Fatalf("the kill at %s #%d never happened: %v", point, nth, err)
				}
				j2, err := Open(state, root)
				if err != nil {
					t.Fatal(err)
				}
				target := writes
				if point == "after-restore" {
					target = nil
				}
				if res, err := j2.Apply(target); err != nil || len(res.Errors) > 0 {
					t.Fatalf("restart apply: %v %v", err, res.Errors)
				}
				diff(t, "applied after restart", fixture.Snapshot(t, root), wanted(root, before, target))
				if res, err := j2.Apply(nil); err != nil || len(res.Errors) > 0 {
					t.Fatalf("revert: %v %v", err, res.Errors)
				}
				diff(t, "reverted", fixture.Snapshot(t, root), before)
			})
		}
	}
}

// A journal file cut short by a crash of the filesystem, not of the
// tuner, is refused rather than taken as empty: forgetting originals would
// make the revert impossible.
func TestTornJournalIsRefused(t *testing.T) {
	state := t.TempDir()
	if err := os.WriteFile(filepath.Join(state, fileName), []byte(`{"entries": {"proc/irq/2`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(state, t.TempDir()); err == nil {
		t.Fatal("a torn journal opened")
	}
}

// A managed interrupt refuses its affinity with EIO: it is reported, not
// retried on the next Apply, and the rest of the plan is written.
func TestManagedIRQIsSkippedAndReported(t *testing.T) {
	root, writes := virtioVM(t)
	j, err := Open(t.TempDir(), root)
	if err != nil {
		t.Fatal(err)
	}
	managed := filepath.Join(root, "proc/irq/27/smp_affinity_list")
	attempts := 0
	j.write = func(path, value string) error {
		if path == managed {
			attempts++
			return &fs.PathError{Op: "write", Path: path, Err: syscall.EIO}
		}
		return writeFile(path, value)
	}
	res, err := j.Apply(writes)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("apply: %v %v", err, res.Errors)
	}
	if owner, ok := res.Refused["proc/irq/27/smp_affinity_list"]; !ok || owner != "prod/sessions-0" {
		t.Errorf("refused %v, want irq 27 for prod/sessions-0", res.Refused)
	}
	if len(res.Written)+len(res.Unchanged) != len(writes)-1 {
		t.Errorf("wrote %d, unchanged %d, of %d", len(res.Written), len(res.Unchanged), len(writes)-1)
	}
	res, _ = j.Apply(writes)
	if attempts != 1 || len(res.Refused) != 1 {
		t.Errorf("managed IRQ written %d times, refused %v", attempts, res.Refused)
	}
	// The journal says so after a restart too.
	raw, _ := os.ReadFile(j.file)
	var st state
	if err := json.Unmarshal(raw, &st); err != nil || st.Refused["proc/irq/27/smp_affinity_list"] == "" {
		t.Errorf("journal %s", raw)
	}
}

// Two tuner processes on one state directory (a DaemonSet surge update, a
// manual run): the second applies the same plan after the first, then
// reverts; every file gets its true original back, not the first's tuned
// value, and no Apply runs while another holds the directory's lock.
func TestTwoProcessesShareTheOriginals(t *testing.T) {
	root, writes := virtioVM(t)
	before := fixture.Snapshot(t, root)
	state := t.TempDir()
	first, err := Open(state, root)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Open(state, root)
	if err != nil {
		t.Fatal(err)
	}
	first.crash = func(string) error {
		f, err := os.Open(filepath.Join(state, "journal.lock"))
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
			return errors.New("another process could take the lock during an Apply")
		}
		return nil
	}
	if res, err := first.Apply(writes); err != nil || len(res.Errors) > 0 {
		t.Fatalf("first: %v %v", err, res.Errors)
	}
	if res, err := second.Apply(writes); err != nil || len(res.Errors) > 0 {
		t.Fatalf("second: %v %v", err, res.Errors)
	}
	if res, err := second.Apply(nil); err != nil || len(res.Errors) > 0 {
		t.Fatalf("second's revert: %v %v", err, res.Errors)
	}
	diff(t, "reverted by the second process", fixture.Snapshot(t, root), before)
}
