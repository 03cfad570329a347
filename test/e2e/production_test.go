//go:build e2e

package e2e

// Stages for the production review (issue 10): a configuration change never
// reaches a pod that has not rolled, a bad image rolls back when the spec is
// reverted, an operator upgrade restarts nothing, and on two nodes: spreading
// by default, a drain the PDB paces, a node that stops and comes back, and
// cores that are not exclusive reported as such.

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// applyCache applies a Cache manifest in the suite's namespace.
func (s *suite) applyCache(t *testing.T, name, spec string) {
	t.Helper()
	manifest := fmt.Sprintf("apiVersion: cache.cachet.dev/v1alpha1\nkind: Cache\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n%s", name, s.c.cacheNS, spec)
	if _, err := s.c.kIn(manifest, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) deleteCache(t *testing.T, name string) {
	t.Helper()
	if _, err := s.c.k("delete", cacheGroupResource, name, "-n", s.c.cacheNS, "--ignore-not-found", "--wait=true", "--timeout=2m"); err != nil {
		t.Errorf("deleting cache %s: %v", name, err)
	}
	eventually(t, 2*time.Minute, time.Second, "pods of "+name+" gone", func() (bool, string) {
		pods, err := s.c.items("pods", "-n", s.c.cacheNS, "-l", "app.kubernetes.io/instance="+name)
		return err == nil && len(pods) == 0, fmt.Sprintf("%d pods, err %v", len(pods), err)
	})
}

// killEngine kills the engine process of a pod on the node, as an OOM kill or
// a crash would: the kubelet restarts the container in the same pod.
func (s *suite) killEngine(t *testing.T, pod obj) {
	t.Helper()
	id, err := containerID(pod, engineContainer)
	if err != nil {
		t.Fatal(err)
	}
	_, _, threads, err := containerCPUs(pod.str("metadata", "uid"), id)
	if err != nil {
		t.Fatal(err)
	}
	for tid := range threads {
		if strings.HasSuffix(tid, "(cachetd)") {
			pid, err := strconv.Atoi(tid[:strings.IndexByte(tid, '(')])
			if err != nil {
				t.Fatalf("thread %q: %v", tid, err)
			}
			t.Logf("killing cachetd (pid %d) in pod %s", pid, pod.str("metadata", "name"))
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no cachetd process in pod %s: %v", pod.str("metadata", "name"), threads)
}

func revisionOf(cache obj, pod string) (hash string, args string) {
	for _, r := range cache.list("status", "revisions") {
		pods, _ := r.get("pods").([]any)
		for _, p := range pods {
			if p == pod {
				return r.str("configHash"), r.str("engineArgs")
			}
		}
	}
	return "", ""
}

// ---------------------------------------------------------------- stage 9

// onDeleteKeepsArgs is defect 1's scenario: with OnDelete, change memory from
// 48Mi to 96Mi, then kill the engine in the pod that has not rolled. It used
// to restart with -m 96 inside its old limit; it must restart with -m 48.
func (s *suite) onDeleteKeepsArgs(t *testing.T) {
	c := s.c
	const name = "e2e-ondelete"
	c.dumpOnFailure(t, name)
	s.applyCache(t, name, "  memory: 48Mi\n  cpu: 0\n  dedicatedCPUs: false\n  updateStrategy: {type: OnDelete}\n")
	defer s.deleteCache(t, name)
	pods := s.waitCacheReady(t, name, 1, 3*time.Minute)
	podName := pods[0].str("metadata", "name")
	oldHash := pods[0].strMap("metadata", "annotations")[configHashKey]
	if got := s.engineSettings(t, podName)["maxbytes"]; got != "50331648" {
		t.Fatalf("engine maxbytes %s before the change, want 48 MiB", got)
	}
	c.mustK(t, "patch", cacheGroupResource, name, "-n", c.cacheNS, "--type=merge", "-p", `{"spec":{"memory":"96Mi"}}`)
	eventually(t, time.Minute, time.Second, "the Cache to see the new spec and report the old pod's revision", func() (bool, string) {
		cache, err := s.getCache(name)
		if err != nil {
			return false, err.Error()
		}
		hash, args := revisionOf(cache, podName)
		return cache.num("status", "observedGeneration") == cache.num("metadata", "generation") && cache.str("status", "configHash") != oldHash &&
			hash == oldHash && strings.Contains(args, `"-m","48"`), fmt.Sprintf("configHash %s revisions %s", cache.str("status", "configHash"), cache.str("status", "revisions"))
	})
	if !c.nodeLocal {
		t.Skip("killing the engine needs the node to be this machine")
	}
	pod, err := c.getJSON("pod", podName, "-n", c.cacheNS)
	if err != nil {
		t.Fatal(err)
	}
	s.killEngine(t, pod)
	eventually(t, 2*time.Minute, time.Second, "the engine restarted in the same pod", func() (bool, string) {
		p, err := c.getJSON("pod", podName, "-n", c.cacheNS)
		if err != nil {
			return false, err.Error()
		}
		cs := containerStatus(p, engineContainer)
		return p.str("metadata", "uid") == pod.str("metadata", "uid") && cs != nil && cs.num("restartCount") >= 1 && podReady(p),
			fmt.Sprintf("uid %s restarts %v ready %v", p.str("metadata", "uid"), cs.num("restartCount"), podReady(p))
	})
	if got := s.engineSettings(t, podName)["maxbytes"]; got != "50331648" {
		t.Errorf("after a restart in the old pod the engine runs with maxbytes %s: the new configuration reached a pod that has not rolled (want 50331648, 48 MiB)", got)
	}
	eventually(t, time.Minute, time.Second, "the restart reported in the status", func() (bool, string) {
		cache, err := s.getCache(name)
		if err != nil {
			return false, err.Error()
		}
		r := condition(cache, "PodsRestarted")
		eps := cache.list("status", "endpoints")
		return r != nil && r.str("status") == "True" && len(eps) == 1 && eps[0].num("restarts") >= 1 &&
			strings.Contains(r.str("message"), podName), describeConditions(cache) + " endpoints " + cache.str("status", "endpoints")
	})
	// Deleting the pod takes the new configuration.
	c.mustK(t, "delete", "pod", podName, "-n", c.cacheNS, "--wait=true")
	eventually(t, 3*time.Minute, time.Second, "the replaced pod on the new configuration", func() (bool, string) {
		cache, err := s.getCache(name)
		if err != nil {
			return false, err.Error()
		}
		hash, _ := revisionOf(cache, podName)
		return hash != "" && hash == cache.str("status", "configHash") && len(cache.list("status", "revisions")) == 1 &&
			cache.num("status", "readyReplicas") == 1, cache.str("status", "revisions")
	})
	if got := s.engineSettings(t, podName)["maxbytes"]; got != "100663296" {
		t.Errorf("the replaced pod runs maxbytes %s, want 96 MiB", got)
	}
	eventually(t, time.Minute, time.Second, "the old revision's ConfigMap garbage-collected", func() (bool, string) {
		cms, err := c.items("configmaps", "-n", c.cacheNS, "-l", "app.kubernetes.io/instance="+name)
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, cm := range cms {
			names = append(names, cm.str("metadata", "name"))
		}
		return len(cms) == 1 && !strings.HasSuffix(names[0], oldHash), strings.Join(names, " ")
	})
}

// ---------------------------------------------------------------- stage 10

// badImageRollsBack rolls a two-pod Cache to an image no node has, and
// reverts the spec: the broken pod is replaced with the old image, the other
// pod never stopped serving.
func (s *suite) badImageRollsBack(t *testing.T) {
	c := s.c
	const name = "e2e-badimage"
	c.dumpOnFailure(t, name)
	s.applyCache(t, name, "  replicas: 2\n  memory: 32Mi\n  cpu: 0\n  dedicatedCPUs: false\n")
	defer s.deleteCache(t, name)
	pods := s.waitCacheReady(t, name, 2, 3*time.Minute)
	cache, _ := s.getCache(name)
	good := cache.str("spec", "image")
	uids := map[string]string{}
	for _, p := range pods {
		uids[p.str("metadata", "name")] = p.str("metadata", "uid")
	}
	c.mustK(t, "patch", cacheGroupResource, name, "-n", c.cacheNS, "--type=merge", "-p", `{"spec":{"image":"localhost/cachetd:does-not-exist"}}`)
	eventually(t, 3*time.Minute, time.Second, "the Cache to report the image it cannot get", func() (bool, string) {
		cache, err := s.getCache(name)
		if err != nil {
			return false, err.Error()
		}
		d := condition(cache, "Degraded")
		return d != nil && d.str("status") == "True" && d.str("reason") == "ImagePullFailed" && strings.Contains(d.str("message"), "does-not-exist"), describeConditions(cache)
	})
	// One pod at a time: the other still serves the old image.
	if ready, _ := s.cachePods(name); countReady(ready) < 1 {
		t.Errorf("no pod of %s serves while the bad image rolls", name)
	}
	c.mustK(t, "patch", cacheGroupResource, name, "-n", c.cacheNS, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"image":%q}}`, good))
	pods = s.waitCacheReady(t, name, 2, 4*time.Minute)
	kept := 0
	for _, p := range pods {
		for _, ctr := range p.list("spec", "containers") {
			if ctr.str("image") != good {
				t.Errorf("pod %s runs %s after the revert, want %s", p.str("metadata", "name"), ctr.str("image"), good)
			}
		}
		if uids[p.str("metadata", "name")] == p.str("metadata", "uid") {
			kept++
		}
	}
	if kept != 1 {
		t.Errorf("%d of 2 pods kept their UID through the bad roll and its revert; want exactly the one the roll had not reached", kept)
	}
	cache, _ = s.getCache(name)
	if d := condition(cache, "Degraded"); d == nil || d.str("status") != "False" {
		t.Errorf("still Degraded after the revert: %s", describeConditions(cache))
	}
}

func countReady(pods []obj) int {
	n := 0
	for _, p := range pods {
		if podReady(p) {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------- stage 11

// operatorUpgradeKeepsPods upgrades the operator to a new image and checks
// that no cache pod was replaced, after the new operator has reconciled
// every Cache.
func (s *suite) operatorUpgradeKeepsPods(t *testing.T) {
	c := s.c
	if c.operImgNext == "" {
		t.Skip("E2E_OPERATOR_IMAGE_NEXT is not set (only the local cluster gets a second operator image)")
	}
	c.dumpOnFailure(t, s.dedicated, s.shared)
	before := map[string]string{}
	caches, err := c.items(cacheGroupResource, "-n", c.cacheNS)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := c.items("pods", "-n", c.cacheNS, "-l", "app.kubernetes.io/component=cache")
	if err != nil || len(pods) == 0 {
		t.Fatalf("cache pods: %d, %v", len(pods), err)
	}
	for _, p := range pods {
		before[p.str("metadata", "name")] = p.str("metadata", "uid")
	}
	repo, tag, _ := strings.Cut(c.operImgNext, ":")
	out, err := c.helmRun(6*time.Minute, "upgrade", c.release, c.chart, "-n", c.systemNS, "--reuse-values", "--wait", "--timeout", "5m",
		"--set", "operator.image.repository="+repo, "--set", "operator.image.tag="+tag)
	if err != nil {
		t.Fatalf("helm upgrade to %s: %v\n%s", c.operImgNext, err, out)
	}
	eventually(t, 3*time.Minute, 2*time.Second, "the new operator running alone", func() (bool, string) {
		ops, err := c.items("pods", "-n", c.systemNS, "-l", "app.kubernetes.io/component=operator")
		if err != nil {
			return false, err.Error()
		}
		var states []string
		done := len(ops) > 0
		for _, p := range ops {
			img := p.list("spec", "containers")[0].str("image")
			states = append(states, p.str("metadata", "name")+" "+img)
			if img != c.operImgNext || !podReady(p) {
				done = false
			}
		}
		return done, strings.Join(states, ", ")
	})
	// A change that restarts no pod, on every Cache: once each Cache's status
	// has observed it, the new operator has reconciled it.
	for _, cache := range caches {
		name := cache.str("metadata", "name")
		c.mustK(t, "patch", cacheGroupResource, name, "-n", c.cacheNS, "--type=merge", "-p",
			fmt.Sprintf(`{"spec":{"service":{"annotations":{"e2e.cachet.dev/upgraded":%q}}}}`, tag))
	}
	for _, cache := range caches {
		name := cache.str("metadata", "name")
		eventually(t, 2*time.Minute, time.Second, "the new operator to reconcile "+name, func() (bool, string) {
			cur, err := s.getCache(name)
			if err != nil {
				return false, err.Error()
			}
			r := condition(cur, "Ready")
			return cur.num("status", "observedGeneration") == cur.num("metadata", "generation") && r != nil && r.str("status") == "True", describeConditions(cur)
		})
	}
	after, err := c.items("pods", "-n", c.cacheNS, "-l", "app.kubernetes.io/component=cache")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range after {
		name := p.str("metadata", "name")
		if uid, ok := before[name]; !ok || uid != p.str("metadata", "uid") {
			t.Errorf("pod %s was replaced by the operator upgrade (uid %s -> %s)", name, uid, p.str("metadata", "uid"))
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d cache pods before the upgrade, %d after", len(before), len(after))
	}
	t.Logf("%d cache pods kept their UIDs through the operator upgrade to %s", len(after), c.operImgNext)
}

// ---------------------------------------------------------------- two nodes

// clusterScript runs hack/local-cluster.sh for the suite's own instance.
func (c *cluster) clusterScript(t *testing.T, args ...string) {
	t.Helper()
	if c.clusterCmd == "" {
		t.Skip("E2E_CLUSTER_SCRIPT is not set: the two-node stages need the local cluster")
	}
	start := time.Now()
	cmd := exec.Command(c.clusterCmd, args...)
	cmd.Env = os.Environ()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", c.clusterCmd, strings.Join(args, " "), err, out)
	}
	t.Logf("%s %s (%s):\n%s", c.clusterCmd, strings.Join(args, " "), time.Since(start).Round(time.Second), lastLines(string(out), 6))
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

const secondNode = "cachet-node2"

// twoNodesSpread adds the second node, then checks that a 2-replica Cache
// puts one pod on each node without being told to, and that a dedicated pod
// on the node without the static CPU manager is reported as not exclusive.
func (s *suite) twoNodesSpread(t *testing.T) {
	c := s.c
	const name = "e2e-spread"
	c.dumpOnFailure(t, name, "e2e-notexclusive")
	c.clusterScript(t, "up", "--nodes", "2")
	eventually(t, 2*time.Minute, time.Second, "two Ready nodes", func() (bool, string) {
		nodes, err := c.items("nodes")
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, n := range nodes {
			if r := condition(n, "Ready"); r != nil && r.str("status") == "True" {
				ready++
			}
		}
		return ready == 2, fmt.Sprintf("%d of %d nodes Ready", ready, len(nodes))
	})
	s.applyCache(t, name, "  replicas: 2\n  memory: 32Mi\n  cpu: 0\n  dedicatedCPUs: false\n")
	s.spread = name
	pods := s.waitCacheReady(t, name, 2, 3*time.Minute)
	nodes := map[string]bool{}
	for _, p := range pods {
		nodes[p.str("spec", "nodeName")] = true
	}
	if len(nodes) != 2 {
		t.Errorf("both pods of %s on %v: the default anti-affinity did not spread them", name, nodes)
	}
	cache, _ := s.getCache(name)
	t.Logf("cache %s endpoints: %s", name, cache.str("status", "endpoints"))

	// A "dedicated" Cache on the node whose kubelet has no static CPU manager.
	const shared = "e2e-notexclusive"
	s.applyCache(t, shared, "  memory: 32Mi\n  cpu: 1\n  dedicatedCPUs: true\n  placement:\n    nodeSelector: {kubernetes.io/hostname: "+secondNode+"}\n")
	defer s.deleteCache(t, shared)
	s.waitCacheReady(t, shared, 1, 3*time.Minute)
	eventually(t, 2*time.Minute, time.Second, "CoresExclusive=False naming the node", func() (bool, string) {
		cache, err := s.getCache(shared)
		if err != nil {
			return false, err.Error()
		}
		x := condition(cache, "CoresExclusive")
		return x != nil && x.str("status") == "False" && x.str("reason") == "SharedCores" && strings.Contains(x.str("message"), secondNode), describeConditions(cache)
	})
	if cache, err := s.getCache(shared); err == nil {
		t.Logf("cache %s: %s", shared, describeConditions(cache))
	}
	if ev, err := c.k("get", "events", "-n", c.cacheNS, "--field-selector", "involvedObject.name="+shared+",reason=SharedCores", "-o", "name"); err != nil || strings.TrimSpace(ev) == "" {
		t.Errorf("no SharedCores Warning event for %s (%v)", shared, err)
	}
	// The sample Cache on the static node says its cores are exclusive.
	if s.dedicated != "" {
		d, _ := s.getCache(s.dedicated)
		if x := condition(d, "CoresExclusive"); x == nil || x.str("status") != "True" {
			t.Errorf("cache %s on the static node: %s", s.dedicated, describeConditions(d))
		}
	}
}

// drainHoldsPDB scales the spread Cache to three pods (two share a node),
// drains that node, and checks that the PDB let one pod go at a time and the
// Cache came back Ready.
func (s *suite) drainHoldsPDB(t *testing.T) {
	c := s.c
	name := s.spread
	c.dumpOnFailure(t, name)
	c.mustK(t, "scale", cacheGroupResource+"/"+name, "-n", c.cacheNS, "--replicas=3")
	pods := s.waitCacheReady(t, name, 3, 3*time.Minute)
	perNode := map[string]int{}
	for _, p := range pods {
		perNode[p.str("spec", "nodeName")]++
	}
	target := ""
	for n, k := range perNode {
		if k >= 2 {
			target = n
		}
	}
	if target == "" {
		t.Fatalf("no node holds two pods of %s: %v", name, perNode)
	}
	cache, _ := s.getCache(name)
	w := s.watchReadiness(t, cache.str("status", "selector"), 3)
	eventually(t, 30*time.Second, 200*time.Millisecond, "the readiness watch to see all pods Ready", func() (bool, string) { return w.allReady(), "" })
	// kubectl reports refused evictions on stderr and retries them: keep both streams.
	drain := exec.Command(c.kubectl, "drain", target, "--pod-selector=app.kubernetes.io/instance="+name,
		"--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m")
	raw, err := drain.CombinedOutput()
	out := string(raw)
	t.Logf("kubectl drain %s:\n%s", target, lastLines(out, 12))
	if err != nil {
		t.Fatalf("drain: %v", err)
	}
	defer c.mustK(t, "uncordon", target)
	if !strings.Contains(out, "disruption budget") {
		t.Errorf("the drain never met the PDB: both pods of %s on %s went at once or in turn unhindered", name, target)
	}
	pods = s.waitCacheReady(t, name, 3, 3*time.Minute)
	w.stop()
	w.mu.Lock()
	t.Logf("readiness during the drain:\n  %s", strings.Join(w.log, "\n  "))
	if w.maxDown > 1 {
		t.Errorf("%d pods of %s were not Ready at once during the drain; the PDB allows 1", w.maxDown, name)
	}
	w.mu.Unlock()
	for _, p := range pods {
		if p.str("spec", "nodeName") == target {
			t.Errorf("pod %s is on the drained node %s", p.str("metadata", "name"), target)
		}
	}
}

// nodeStops kills the second node's kubelet: the Cache reports which pod's
// node stopped, with a Warning event; restarting the kubelet recovers it.
func (s *suite) nodeStops(t *testing.T) {
	c := s.c
	name := s.spread
	c.dumpOnFailure(t, name)
	onNode := ""
	for attempt := 0; onNode == "" && attempt < 3; attempt++ {
		pods := s.waitCacheReady(t, name, 3, 3*time.Minute)
		for _, p := range pods {
			if p.str("spec", "nodeName") == secondNode {
				onNode = p.str("metadata", "name")
			}
		}
		if onNode == "" {
			// The drain may have left every pod on the first node: a
			// replaced pod goes where its anti-affinity prefers.
			victim := pods[len(pods)-1].str("metadata", "name")
			t.Logf("no pod of %s on %s; replacing %s", name, secondNode, victim)
			c.mustK(t, "delete", "pod", victim, "-n", c.cacheNS, "--wait=true")
		}
	}
	if onNode == "" {
		t.Fatalf("no pod of %s on %s to lose", name, secondNode)
	}
	c.clusterScript(t, "stop-kubelet", "2")
	restarted := false
	defer func() {
		if !restarted {
			c.clusterScript(t, "up", "--nodes", "2")
		}
	}()
	eventually(t, 3*time.Minute, 2*time.Second, "the Cache to report the stopped node", func() (bool, string) {
		cache, err := s.getCache(name)
		if err != nil {
			return false, err.Error()
		}
		d := condition(cache, "Degraded")
		return d != nil && d.str("status") == "True" && d.str("reason") == "NodeNotReady" && strings.Contains(d.str("message"), secondNode) &&
			strings.Contains(d.str("message"), onNode), describeConditions(cache)
	})
	if cache, err := s.getCache(name); err == nil {
		t.Logf("cache %s while %s is stopped: %s", name, secondNode, describeConditions(cache))
	}
	if ev, err := c.k("get", "events", "-n", c.cacheNS, "--field-selector", "involvedObject.name="+name+",reason=NodeNotReady,type=Warning", "-o", "name"); err != nil || strings.TrimSpace(ev) == "" {
		t.Errorf("no NodeNotReady Warning event on cache %s (%v)", name, err)
	}
	c.clusterScript(t, "up", "--nodes", "2")
	restarted = true
	s.waitCacheReady(t, name, 3, 4*time.Minute)
	cache, _ := s.getCache(name)
	if d := condition(cache, "Degraded"); d == nil || d.str("status") != "False" {
		t.Errorf("still Degraded after the node came back: %s", describeConditions(cache))
	}
}
