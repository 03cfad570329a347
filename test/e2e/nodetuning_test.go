//go:build e2e

// Stage 17: the node tuner on the local cluster, writing this machine's
// real interrupt affinity and RPS masks and putting them back. It runs
// right after the install, before any other Cache holds the node's one
// free exclusive core, and turns the tuner on only for itself: the cluster
// shares this VM's kernel, so every other stage runs with it off.

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"cachet.dev/cachet/internal/nodetuner/host"
	"cachet.dev/cachet/internal/nodetuner/tuner"
)

const (
	tunerStateDir = "/var/lib/cachet-e2e/node-tuner" // not the chart's default: `make up`'s tuner keeps its own
	tunerInterval = "2s"
	tunerPort     = 9154
)

// hostTuningFiles reads every file of this machine the tuner may write in
// the host's namespaces: the queue vectors' affinity, the NICs' RPS/XPS
// masks and the RFS table size.
func hostTuningFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	raw, err := os.ReadFile("/proc/interrupts")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(f[0], ":"))
		if err != nil {
			continue
		}
		if _, _, ok := host.ParseQueueIRQName(f[len(f)-1]); ok {
			files[fmt.Sprintf("/proc/irq/%d/smp_affinity_list", n)] = ""
		}
	}
	for _, pattern := range []string{"/sys/class/net/*/queues/rx-*/rps_cpus", "/sys/class/net/*/queues/rx-*/rps_flow_cnt", "/sys/class/net/*/queues/tx-*/xps_cpus"} {
		matches, _ := filepath.Glob(pattern)
		for _, m := range matches {
			files[m] = ""
		}
	}
	files["/proc/sys/net/core/rps_sock_flow_entries"] = ""
	for path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			delete(files, path) // xps_cpus of a single-queue device cannot be read
			continue
		}
		files[path] = string(b)
	}
	return files
}

// restoreHostFiles writes back whatever differs from the snapshot: the
// stage's safety net, so that a failure never leaves this VM tuned.
func restoreHostFiles(t *testing.T, before map[string]string) {
	now := hostTuningFiles(t)
	for path, orig := range before {
		if now[path] != orig {
			t.Logf("restoring %s to %q (was %q)", path, orig, now[path])
			if err := os.WriteFile(path, []byte(orig), 0o644); err != nil {
				t.Errorf("restoring %s: %v", path, err)
			}
		}
	}
}

type tunerJournal struct {
	Entries map[string]struct {
		Original string `json:"original"`
		Owner    string `json:"owner"`
	} `json:"entries"`
}

func readTunerJournal() (tunerJournal, error) {
	var j tunerJournal
	raw, err := os.ReadFile(filepath.Join(tunerStateDir, "journal.json"))
	if os.IsNotExist(err) {
		return j, nil
	}
	if err != nil {
		return j, err
	}
	return j, json.Unmarshal(raw, &j)
}

// netnsRead reads a file of the cluster's network namespace: sysfs, where
// the pod veths are (ip netns exec mounts that namespace's sysfs), or
// /proc/net, which shows the namespace of the process reading it.
func netnsRead(netns, path string) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", netns, "cat", path).CombinedOutput()
	return string(out), err
}

// hexMaskCPUs turns a cpumask ("2", "00000003") into its CPU list.
func hexMaskCPUs(mask string) (cpuSet, error) {
	mask = strings.ReplaceAll(strings.TrimSpace(mask), ",", "")
	set := cpuSet{}
	for i := 0; i < len(mask); i++ {
		d, err := strconv.ParseUint(mask[len(mask)-1-i:len(mask)-i], 16, 8)
		if err != nil {
			return nil, fmt.Errorf("mask %q: %w", mask, err)
		}
		for b := 0; b < 4; b++ {
			if d&(1<<b) != 0 {
				set[i*4+b] = true
			}
		}
	}
	return set, nil
}

func (s *suite) setTuner(t *testing.T, enabled bool) {
	t.Helper()
	args := []string{"upgrade", s.c.release, s.c.chart, "-n", s.c.systemNS, "--reuse-values", "--wait", "--timeout", "3m",
		"--set", fmt.Sprintf("nodeTuner.enabled=%v", enabled), "--set", "nodeTuner.interval=" + tunerInterval,
		"--set", "nodeTuner.stateDir=" + tunerStateDir,
		"--set", "nodeTuner.podResourcesDir=" + filepath.Join(s.c.kubeletDir, "pod-resources")}
	if out, err := s.c.helmRun(4*time.Minute, args...); err != nil {
		t.Fatalf("helm upgrade nodeTuner.enabled=%v: %v\n%s", enabled, err, out)
	}
}

func (s *suite) tunerPod(t *testing.T) obj {
	t.Helper()
	var live []obj
	eventually(t, time.Minute, time.Second, "one node-tuner pod (the rollout's old one gone)", func() (bool, string) {
		pods, err := s.c.items("pods", "-n", s.c.systemNS, "-l", "app.kubernetes.io/component=node-tuner")
		live = live[:0]
		for _, p := range pods {
			if p.get("metadata", "deletionTimestamp") == nil {
				live = append(live, p)
			}
		}
		return err == nil && len(pods) == 1 && len(live) == 1, fmt.Sprintf("%d pods, %d not terminating, err %v", len(pods), len(live), err)
	})
	return live[0]
}

func (s *suite) nodeTuning(t *testing.T) {
	c := s.c
	if !c.nodeLocal {
		t.Skip("the tuner's writes are checked on the node's files: only on the local cluster (E2E_NODE_LOCAL=1)")
	}
	netns := env("E2E_NETNS", "cachet-"+env("CACHET_CLUSTER", "test"))
	const cache, second = "tuned", "tuned-second"
	c.dumpOnFailure(t, cache, second)
	ds := c.release + "-node-tuner"

	before := hostTuningFiles(t)
	if err := os.RemoveAll(tunerStateDir); err != nil {
		t.Fatal(err)
	}
	// Whatever happens below, the tuner goes away and this VM's values come back.
	t.Cleanup(func() {
		_, _ = c.k("delete", cacheGroupResource, cache, second, "-n", c.cacheNS, "--ignore-not-found", "--wait=true", "--timeout=2m")
		s.setTuner(t, false)
		restoreHostFiles(t, before)
	})

	s.setTuner(t, true)
	// The kill between two writes: the tuner exits right after its first
	// write (once: a marker in the state directory) and the kubelet restarts it.
	c.mustK(t, "set", "env", "-n", c.systemNS, "daemonset/"+ds, tuner.ExitAfterWriteEnv+"=1")
	c.mustK(t, "rollout", "status", "-n", c.systemNS, "daemonset/"+ds, "--timeout=2m")
	restartsBefore := containerStatus(s.tunerPod(t), "node-tuner").num("restartCount")

	s.applyCache(t, cache, "  replicas: 1\n  memory: 32Mi\n  cpu: 1\n  dedicatedCPUs: true\n")
	pods := s.waitCacheReady(t, cache, 1, 3*time.Minute)
	pod := pods[0]
	podKey := c.cacheNS + "/" + pod.str("metadata", "name")
	exclusive, shared, _ := s.nodeCores(t, pod)
	t.Logf("pod %s: exclusive CPUs %s, the kubelet's shared pool %s", podKey, exclusive, shared)

	var cond obj
	eventually(t, 2*time.Minute, time.Second, "NodeTuned=True on "+cache, func() (bool, string) {
		cr, err := s.getCache(cache)
		if err != nil {
			return false, err.Error()
		}
		cond = condition(cr, "NodeTuned")
		return cond != nil && cond.str("status") == "True", describeConditions(cr)
	})
	t.Logf("NodeTuned: %s: %s", cond.str("reason"), cond.str("message"))

	if _, err := os.Stat(filepath.Join(tunerStateDir, "e2e-exited-after-write")); err != nil {
		t.Errorf("the tuner never exited after its first write (%v)", err)
	}
	if r := containerStatus(s.tunerPod(t), "node-tuner").num("restartCount"); r <= restartsBefore {
		t.Errorf("tuner container restarts %d, want more than %d: it was not killed between two writes", r, restartsBefore)
	}

	// What the converged journal holds: the originals, byte for byte. The
	// tuner finds a bridge port's veth through the neighbour table, which
	// has the pod once the kubelet's first probe reached it: the veth's
	// entries may come a pass after NodeTuned.
	var j tunerJournal
	eventually(t, time.Minute, time.Second, "the pod veth's RPS in the tuner's journal", func() (bool, string) {
		var err error
		if j, err = readTunerJournal(); err != nil {
			return false, err.Error()
		}
		for p := range j.Entries {
			if strings.HasPrefix(p, "../") && strings.Contains(p, "/class/net/") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("journal: %v", j.Entries)
	})
	var irqs, veth []string
	vethPath := regexp.MustCompile(`^\.\./.*/class/net/([^/]+)/queues/rx-\d+/rps_cpus$`)
	paths := make([]string, 0, len(j.Entries))
	for p := range j.Entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		e := j.Entries[p]
		if m := vethPath.FindStringSubmatch(p); m != nil {
			veth = append(veth, m[1])
			continue
		}
		if strings.HasPrefix(p, "..") {
			continue
		}
		abs := "/" + p
		orig, known := before[abs]
		if !known {
			t.Errorf("the journal holds %s, which the stage did not read before", abs)
			continue
		}
		if e.Original != orig {
			t.Errorf("journal original of %s is %q, the file held %q", abs, e.Original, orig)
		}
		if strings.HasSuffix(p, "smp_affinity_list") {
			irqs = append(irqs, abs)
		}
	}
	if len(irqs) == 0 {
		t.Errorf("no NIC interrupt affinity was written; journal: %v", paths)
	}
	if len(veth) != 1 {
		t.Fatalf("want the RPS of exactly one pod veth in the journal, got %v (journal %v)", veth, paths)
	}

	// The masks are real, and where the strategy says. auto chooses by the
	// node's shape: with the kubelet's reserved CPU outside the allocatable
	// ones, this node has no shared CPU, so it is spread (the queue's
	// interrupt and the veth's RPS on the pod's CPU); with a shared CPU it
	// is housekeeping (both off the pod's CPU).
	tunedPod, err := c.getJSON("pod", "-n", c.cacheNS, pod.str("metadata", "name"))
	if err != nil {
		t.Fatal(err)
	}
	var report struct{ Strategy, Message string }
	if err := json.Unmarshal([]byte(tunedPod.strMap("metadata", "annotations")["cache.cachet.dev/node-tuned"]), &report); err != nil {
		t.Fatalf("the pod's node-tuned annotation: %v", err)
	}
	t.Logf("the tuner's report: %s: %s", report.Strategy, report.Message)
	onPod := func(set cpuSet) bool {
		switch report.Strategy {
		case "spread", "siblings":
			return len(set) > 0 && set.equal(exclusive)
		case "housekeeping":
			return len(set) > 0 && !set.intersects(exclusive)
		}
		return false
	}
	for _, p := range irqs {
		raw, _ := os.ReadFile(p)
		set, err := parseCPUList(strings.TrimSpace(string(raw)))
		if err != nil || !onPod(set) {
			t.Errorf("%s = %q: not where %s puts it for the pod's CPUs %s (err %v)", p, raw, report.Strategy, exclusive, err)
		}
	}
	vethRPS, err := netnsRead(netns, "/sys/class/net/"+veth[0]+"/queues/rx-0/rps_cpus")
	if err != nil {
		t.Fatalf("reading veth %s's rps_cpus in netns %s: %v %s", veth[0], netns, err, vethRPS)
	}
	if set, err := hexMaskCPUs(vethRPS); err != nil || !onPod(set) {
		t.Errorf("veth %s rps_cpus = %q: not where %s puts it for the pod's CPUs %s (err %v)", veth[0], vethRPS, report.Strategy, exclusive, err)
	}
	t.Logf("pod veth %s rps_cpus=%s; interrupts %v", veth[0], strings.TrimSpace(vethRPS), irqs)

	// The tuner's metrics show the masks it placed.
	addr := c.portForward(t, c.systemNS, "pod/"+s.tunerPod(t).str("metadata", "name"), tunerPort)
	metrics := httpGet(t, "http://"+addr+"/metrics")
	for _, p := range irqs {
		irq := strings.Split(p, "/")[3]
		raw, _ := os.ReadFile(p)
		want := fmt.Sprintf(`irq="%s"`, irq)
		mask := fmt.Sprintf(`smp_affinity_list="%s"`, strings.TrimSpace(string(raw)))
		found := false
		for _, line := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(line, "cachet_nodetuner_irq_affinity_info{") && strings.Contains(line, want) && strings.Contains(line, mask) {
				found = true
			}
		}
		if !found {
			t.Errorf("metrics have no cachet_nodetuner_irq_affinity_info with %s %s", want, mask)
		}
	}
	if !strings.Contains(metrics, fmt.Sprintf(`cachet_nodetuner_pod_tuned{pod="%s"`, podKey)) &&
		!regexp.MustCompile(`cachet_nodetuner_pod_tuned\{[^}]*pod="`+regexp.QuoteMeta(podKey)+`"`).MatchString(metrics) {
		t.Errorf("metrics have no cachet_nodetuner_pod_tuned for %s", podKey)
	}

	eventually(t, time.Minute, time.Second, "a Normal Tuned Event on "+cache, func() (bool, string) {
		return hasEvent(c, cache, "Tuned", "NodeTuned=True")
	})

	// irqStrategy none reverts without deleting anything, and says so;
	// back to auto tunes again.
	c.mustK(t, "patch", cacheGroupResource, cache, "-n", c.cacheNS, "--type=merge", "-p", `{"spec":{"nodeTuning":{"irqStrategy":"none"}}}`)
	s.waitJournalEmptyAndRestored(t, before)
	eventually(t, time.Minute, time.Second, "a NodeTuningReverted Event on "+cache, func() (bool, string) {
		return hasEvent(c, cache, "NodeTuningReverted")
	})
	c.mustK(t, "patch", cacheGroupResource, cache, "-n", c.cacheNS, "--type=json", "-p", `[{"op":"remove","path":"/spec/nodeTuning/irqStrategy"}]`)
	eventually(t, 2*time.Minute, time.Second, "NodeTuned=True again after irqStrategy none -> auto", func() (bool, string) {
		cr, err := s.getCache(cache)
		if err != nil {
			return false, err.Error()
		}
		nt := condition(cr, "NodeTuned")
		j, _ := readTunerJournal()
		return nt != nil && nt.str("status") == "True" && len(j.Entries) > 0, describeConditions(cr)
	})

	// A second dedicated Cache: this node has no second free exclusive
	// core, so its pod stays Pending and NodeTuned says the tuner waits for it.
	s.applyCache(t, second, "  replicas: 1\n  memory: 32Mi\n  cpu: 1\n  dedicatedCPUs: true\n")
	eventually(t, 2*time.Minute, time.Second, second+": pod Unschedulable and NodeTuned Unknown/TunerPending", func() (bool, string) {
		cr, err := s.getCache(second)
		if err != nil {
			return false, err.Error()
		}
		pods, _ := s.cachePods(second)
		sched := ""
		if len(pods) == 1 {
			if pc := condition(pods[0], "PodScheduled"); pc != nil {
				sched = pc.str("status") + "/" + pc.str("reason") + ": " + pc.str("message")
			}
		}
		nt := condition(cr, "NodeTuned")
		ok := strings.HasPrefix(sched, "False/Unschedulable") && strings.Contains(sched, "Insufficient cpu") &&
			nt != nil && nt.str("status") == "Unknown" && nt.str("reason") == "TunerPending"
		return ok, "pod " + sched + "; " + describeConditions(cr)
	})
	s.deleteCache(t, second)

	// Deleting the Cache restores every journaled value byte for byte.
	s.deleteCache(t, cache)
	s.waitJournalEmptyAndRestored(t, before)
	if _, err := netnsRead(netns, "/sys/class/net/"+veth[0]+"/queues/rx-0/rps_cpus"); err == nil {
		t.Errorf("veth %s still exists after its pod was deleted: it was not the pod's", veth[0])
	}
}

// waitJournalEmptyAndRestored waits for the tuner to revert everything and
// then compares every file it may write with what it held before, byte for byte.
func (s *suite) waitJournalEmptyAndRestored(t *testing.T, before map[string]string) {
	t.Helper()
	eventually(t, time.Minute, time.Second, "the tuner's journal empty", func() (bool, string) {
		j, err := readTunerJournal()
		return err == nil && len(j.Entries) == 0, fmt.Sprintf("%d entries, err %v", len(j.Entries), err)
	})
	after := hostTuningFiles(t)
	for path, orig := range before {
		if after[path] != orig {
			t.Errorf("%s is %q after the revert, was %q", path, after[path], orig)
		}
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	cl := http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
