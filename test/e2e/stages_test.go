//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
	"k8s.io/apimachinery/pkg/api/resource"
)

// ---------------------------------------------------------------- stage 1

// helmInstall installs the chart into a fresh namespace, waits for the operator
// Deployment, and proves the webhook answers: a server-side dry-run create of a
// Cache without an image comes back with the image the operator defaults.
func (s *suite) helmInstall(t *testing.T) {
	c := s.c
	c.dumpOnFailure(t)
	repo, tag, _ := strings.Cut(c.operImg, ":")
	args := []string{"install", c.release, c.chart, "-n", c.systemNS, "--create-namespace", "--wait", "--timeout", "5m",
		"--set", "operator.image.repository=" + repo, "--set", "operator.image.tag=" + tag,
		"--set", "engine.image=" + c.engineImg,
		// The chart keeps the CRD on uninstall by default (deleting it deletes
		// every Cache); stage 8 checks that uninstall can leave nothing behind.
		"--set", "crds.keep=false",
		// The node tuner writes the machine's own interrupt affinity and
		// RPS masks (the e2e cluster shares this VM's kernel): off here;
		// stage 17 turns it on for itself and checks the revert.
		"--set", "nodeTuner.enabled=false"}
	for _, set := range c.helmSets {
		args = append(args, "--set", set)
	}
	start := time.Now()
	out, err := c.helmRun(6*time.Minute, args...)
	if err != nil {
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("helm install --wait returned after %s:\n%s", time.Since(start).Round(100*time.Millisecond), out)

	eventually(t, 3*time.Minute, 2*time.Second, "operator Deployment available", func() (bool, string) {
		deps, err := c.items("deployments", "-n", c.systemNS, "-l", "app.kubernetes.io/instance="+c.release)
		if err != nil {
			return false, err.Error()
		}
		if len(deps) == 0 {
			return false, "no Deployment labelled app.kubernetes.io/instance=" + c.release
		}
		var states []string
		allReady := true
		for _, d := range deps {
			want, ready := d.num("spec", "replicas"), d.num("status", "readyReplicas")
			states = append(states, fmt.Sprintf("%s %d/%d", d.str("metadata", "name"), ready, want))
			if want == 0 || ready != want {
				allReady = false
			}
		}
		return allReady, strings.Join(states, ", ")
	})

	if _, err := c.k("create", "namespace", c.cacheNS); err != nil {
		t.Fatal(err)
	}
	probe := fmt.Sprintf(`apiVersion: cache.cachet.dev/v1alpha1
kind: Cache
metadata:
  name: e2e-webhook-probe
  namespace: %s
spec:
  memory: 64Mi
`, c.cacheNS)
	var defaulted obj
	// The webhook Service gets endpoints and kube-proxy rules a moment after the
	// pod is Ready; until then the API server reports "failed calling webhook".
	eventually(t, 2*time.Minute, 2*time.Second, "the webhook to default a dry-run Cache", func() (bool, string) {
		out, err := c.kIn(probe, "create", "--dry-run=server", "-o", "json", "-f", "-")
		if err != nil {
			return false, err.Error()
		}
		defaulted = obj{}
		if err := json.Unmarshal([]byte(out), &defaulted); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	// Only the mutating webhook can fill in the image: its default is an operator flag.
	if got := defaulted.str("spec", "image"); got != c.engineImg {
		t.Errorf("dry-run Cache spec.image = %q, want %q defaulted by the webhook from the operator's --engine-image", got, c.engineImg)
	}
	t.Logf("webhook-defaulted spec: %s", defaulted.str("spec"))
	if _, err := c.k("get", cacheGroupResource, "e2e-webhook-probe", "-n", c.cacheNS); err == nil {
		t.Errorf("a server-side dry-run created the Cache e2e-webhook-probe")
	}
	if c.certManager {
		s.webhookCertFromCertManager(t)
	}
}

// ---------------------------------------------------------------- stage 2

// samplePath is the sample Cache with dedicated CPUs.
func (s *suite) samplePath() string {
	return env("E2E_SAMPLE", filepath.Join(s.c.samples, "cache_v1alpha1_cache.yaml"))
}

// dedicatedCache applies the sample and checks that the kubelet gave its pod an
// exclusive core and that the engine pinned its worker to exactly that core.
func (s *suite) dedicatedCache(t *testing.T) {
	c := s.c
	out, err := c.k("apply", "-n", c.cacheNS, "-f", s.samplePath(), "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	s.dedicated = strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "/")+1:])
	c.dumpOnFailure(t, s.dedicated)
	cache, err := s.getCache(s.dedicated)
	if err != nil {
		t.Fatal(err)
	}
	if d := cache.get("spec", "dedicatedCPUs"); d != true {
		t.Fatalf("the sample %s must ask for dedicated CPUs; spec.dedicatedCPUs=%v", s.samplePath(), d)
	}
	replicas, cpus := cache.num("spec", "replicas"), cache.num("spec", "cpu")
	t.Logf("applied sample cache %s: replicas=%d cpu=%d memory=%s", s.dedicated, replicas, cpus, cache.str("spec", "memory"))
	if replicas < 1 || cpus < 1 {
		t.Fatalf("sample spec has replicas=%d cpu=%d", replicas, cpus)
	}
	pods := s.waitCacheReady(t, s.dedicated, replicas, 5*time.Minute)

	for _, pod := range pods {
		name := pod.str("metadata", "name")
		if q := pod.str("status", "qosClass"); q != "Guaranteed" {
			t.Errorf("pod %s QoS class %q, want Guaranteed", name, q)
		}
		s.checkHealthProbe(t, pod)
		settings := s.engineSettings(t, name)
		workers, err := parseCPUList(settings["worker_cpus"])
		if err != nil || len(workers) == 0 {
			t.Fatalf("pod %s: stats settings worker_cpus=%q (%v); want the pinned core list", name, settings["worker_cpus"], err)
		}
		t.Logf("pod %s: engine reports worker_cpus=%s num_threads=%s", name, workers, settings["num_threads"])

		if !c.nodeLocal {
			t.Logf("pod %s: the node is not this machine (E2E_NODE_LOCAL!=1); the cgroup check runs only on the local cluster", name)
			continue
		}
		cores, sharedPool, workerThreads := s.nodeCores(t, pod)
		// The kernel's view of the pinning: each worker thread may run on
		// exactly one core, and together they cover the exclusive cores.
		pinned := cpuSet{}
		for tid, set := range workerThreads {
			if len(set) != 1 {
				t.Errorf("pod %s: worker thread %s may run on %s, want exactly one core", name, tid, set)
			}
			for id := range set {
				pinned[id] = true
			}
		}
		if len(workerThreads) == 0 || !pinned.equal(cores) {
			t.Errorf("pod %s: worker threads %v are pinned to %s, want one per exclusive core %s", name, workerThreads, pinned, cores)
		}
		if len(cores) != cpus {
			t.Errorf("pod %s: container cpuset %s has %d cpus, want exactly spec.cpu=%d exclusive cores", name, cores, len(cores), cpus)
		}
		if cores.intersects(sharedPool) {
			t.Errorf("pod %s: container cpuset %s overlaps the kubelet's shared pool %s: not exclusive", name, cores, sharedPool)
		}
		state, _ := readCPUManagerState(c.kubeletDir)
		assigned, err := parseCPUList(state.Entries[pod.str("metadata", "uid")][engineContainer])
		if err != nil || !assigned.equal(cores) {
			t.Errorf("pod %s: kubelet cpu_manager_state assigns %q to %s, cgroup holds %s", name, state.Entries[pod.str("metadata", "uid")][engineContainer], engineContainer, cores)
		}
		if !workers.equal(cores) {
			t.Errorf("pod %s: engine worker_cpus=%s, but its exclusive cores are %s", name, workers, cores)
		}
		s.dedicatedCores = cores
	}
}

// ---------------------------------------------------------------- stage 3

// setGet drives a real memcached client through addr: sets, gets (single and
// multi), a delete and a miss.
func setGet(t *testing.T, addr, prefix string) {
	t.Helper()
	mc := memcache.New(addr)
	mc.Timeout = 5 * time.Second
	setGetClient(t, mc, addr, prefix)
}

// setGetClient is setGet with a client of the caller's (stage 18's dials TLS
// and authenticates).
func setGetClient(t *testing.T, mc *memcache.Client, addr, prefix string) {
	t.Helper()
	want := map[string][]byte{}
	var keys []string
	for i := 0; i < 50; i++ {
		key := fmt.Sprintf("%s-%d", prefix, i)
		val := []byte(strings.Repeat(fmt.Sprintf("v%d|", i), 10+i))
		if err := mc.Set(&memcache.Item{Key: key, Value: val, Flags: uint32(i)}); err != nil {
			t.Fatalf("set %s through %s: %v", key, addr, err)
		}
		want[key] = val
		keys = append(keys, key)
	}
	it, err := mc.Get(keys[7])
	if err != nil || string(it.Value) != string(want[keys[7]]) || it.Flags != 7 {
		t.Fatalf("get %s: item=%+v err=%v", keys[7], it, err)
	}
	got, err := mc.GetMulti(keys)
	if err != nil {
		t.Fatalf("get of %d keys: %v", len(keys), err)
	}
	for k, v := range want {
		if string(got[k].Value) != string(v) {
			t.Fatalf("key %s: got %q, want %q", k, got[k].Value, v)
		}
	}
	if err := mc.Delete(keys[0]); err != nil {
		t.Fatalf("delete %s: %v", keys[0], err)
	}
	if _, err := mc.Get(keys[0]); !errors.Is(err, memcache.ErrCacheMiss) {
		t.Fatalf("get of deleted %s: err=%v, want a miss", keys[0], err)
	}
	t.Logf("memcached client through %s: %d sets, %d-key get, delete and miss all as expected", addr, len(keys), len(keys))
}

// clientSetGet uses the client Service through a port-forward, as a developer
// does from a laptop, and checks status.endpoints names every pod.
func (s *suite) clientSetGet(t *testing.T) {
	c := s.c
	c.dumpOnFailure(t, s.dedicated)
	addr := c.portForward(t, c.cacheNS, "svc/"+s.dedicated, memcachePort)
	setGet(t, addr, "e2e-dedicated")

	cache, err := s.getCache(s.dedicated)
	if err != nil {
		t.Fatal(err)
	}
	pods, err := s.cachePods(s.dedicated)
	if err != nil {
		t.Fatal(err)
	}
	s.checkEndpoints(t, cache, pods)

	// The chart's `helm test` hook connects to this Cache with cachet-probe from
	// inside the cluster. The local cluster has no DNS, so point it at the
	// Service's ClusterIP; the upgrade also exercises `helm upgrade` of a live release.
	svc, err := c.getJSON("service", s.dedicated, "-n", c.cacheNS)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.helmRun(5*time.Minute, "upgrade", c.release, c.chart, "-n", c.systemNS, "--reuse-values", "--wait", "--timeout", "4m",
		"--set", "tests.cache.name="+s.dedicated, "--set", "tests.cache.namespace="+c.cacheNS,
		"--set", "tests.cache.host="+svc.str("spec", "clusterIP"))
	if err != nil {
		t.Fatalf("helm upgrade (to aim helm test at the Cache): %v", err)
	}
	// No --logs: the hook pod is deleted as soon as it succeeds (it is kept,
	// with its logs, only when it fails).
	out, err := c.helmRun(4*time.Minute, "test", c.release, "-n", c.systemNS, "--timeout", "3m")
	if err != nil {
		// The chart runs the test pod in the Cache's namespace and keeps it when it fails.
		logs, lerr := c.k("logs", "-n", c.cacheNS, c.release+"-test-cache-connection")
		if lerr != nil {
			logs = "(could not read them: " + lerr.Error() + ")"
		}
		t.Fatalf("helm test: %v\n%s\ntest pod logs:\n%s", err, out, logs)
	}
	t.Logf("helm test:\n%s", out)
	if !strings.Contains(out, "Succeeded") {
		t.Errorf("helm test did not report a succeeded test hook:\n%s", out)
	}
}

func (s *suite) checkEndpoints(t *testing.T, cache obj, pods []obj) {
	t.Helper()
	name := cache.str("metadata", "name")
	endpoints := cache.list("status", "endpoints")
	t.Logf("cache %s status.endpoints: %s", name, cache.str("status", "endpoints"))
	if len(endpoints) != len(pods) {
		t.Errorf("status.endpoints has %d entries, the cache has %d pods", len(endpoints), len(pods))
	}
	for _, p := range pods {
		pod := p.str("metadata", "name")
		found := false
		for _, e := range endpoints {
			if e.str("pod") != pod {
				continue
			}
			found = true
			wantHost := fmt.Sprintf("%s.%s-headless.%s.svc.", pod, name, s.c.cacheNS)
			if !strings.HasPrefix(e.str("host"), wantHost) {
				t.Errorf("endpoint of %s has host %q, want the stable name %s<cluster domain>", pod, e.str("host"), wantHost)
			}
			if e.num("port") != memcachePort {
				t.Errorf("endpoint of %s has port %d, want %d", pod, e.num("port"), memcachePort)
			}
		}
		if !found {
			t.Errorf("status.endpoints does not list pod %s", pod)
		}
	}
}

// ---------------------------------------------------------------- stage 4

// scalePastCores asks for more dedicated replicas than the node has free
// exclusive cores: the extra pod must stay Pending, the Cache must say why in
// words a person can act on, and scaling back must recover.
func (s *suite) scalePastCores(t *testing.T) {
	c := s.c
	c.dumpOnFailure(t, s.dedicated)
	cache, err := s.getCache(s.dedicated)
	if err != nil {
		t.Fatal(err)
	}
	before := cache.num("spec", "replicas")
	// One replica more than the node's free whole CPUs can hold: on the 2-CPU
	// machines that is before+1, on a larger node it is more.
	fits := s.freeWholeCPUs(t) / max(cache.num("spec", "cpu"), 1)
	target := before + fits + 1
	if v := os.Getenv("E2E_SCALE_TO"); v != "" {
		target, _ = strconv.Atoi(v)
	}
	c.mustK(t, "scale", cacheGroupResource+"/"+s.dedicated, "-n", c.cacheNS, fmt.Sprintf("--replicas=%d", target))
	t.Logf("scaled cache %s from %d to %d replicas (%d more fit on the node)", s.dedicated, before, target, fits)

	// Pods are created in parallel, so which new ordinal is left over is the
	// scheduler's choice: look for it among the new pods.
	var pending string
	eventually(t, 3*time.Minute, time.Second, "a new pod to be unschedulable for lack of cpu", func() (bool, string) {
		pods, err := s.cachePods(s.dedicated)
		if err != nil {
			return false, err.Error()
		}
		var states []string
		for _, pod := range pods {
			sched := condition(pod, "PodScheduled")
			name := pod.str("metadata", "name")
			if pod.str("status", "phase") == "Pending" && sched != nil && sched.str("status") == "False" &&
				sched.str("reason") == "Unschedulable" && strings.Contains(sched.str("message"), "Insufficient cpu") {
				pending = name
				return true, ""
			}
			states = append(states, fmt.Sprintf("%s phase=%s %s", name, pod.str("status", "phase"), describeConditions(pod)))
		}
		return false, strings.Join(states, "; ")
	})
	t.Logf("pod %s is unschedulable for lack of cpu", pending)
	var explained string
	eventually(t, 2*time.Minute, time.Second, "the Cache's conditions to explain the Pending pod", func() (bool, string) {
		cache, err := s.getCache(s.dedicated)
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range cache.list("status", "conditions") {
			msg := strings.ToLower(cond.str("message"))
			if strings.Contains(msg, "insufficient cpu") || (strings.Contains(msg, "unschedulable") && strings.Contains(msg, "cpu")) {
				explained = fmt.Sprintf("%s=%s reason=%s message=%q", cond.str("type"), cond.str("status"), cond.str("reason"), cond.str("message"))
				return true, ""
			}
		}
		return false, describeConditions(cache)
	})
	t.Logf("the Cache explains: %s", explained)
	// The pod is still not scheduled after the explanation was written.
	pod, err := c.getJSON("pod", pending, "-n", c.cacheNS)
	if err != nil || pod.str("status", "phase") != "Pending" || pod.str("spec", "nodeName") != "" {
		t.Errorf("pod %s should still be Pending and unbound: phase=%s node=%q err=%v", pending, pod.str("status", "phase"), pod.str("spec", "nodeName"), err)
	}
	// The pods that fit keep serving meanwhile.
	addr := c.portForward(t, c.cacheNS, "pod/"+s.dedicated+"-0", memcachePort)
	setGet(t, addr, "e2e-while-pending")

	c.mustK(t, "scale", cacheGroupResource+"/"+s.dedicated, "-n", c.cacheNS, fmt.Sprintf("--replicas=%d", before))
	t.Logf("scaled back to %d", before)
	eventually(t, 2*time.Minute, time.Second, "pod "+pending+" to go away", func() (bool, string) {
		_, err := c.getJSON("pod", pending, "-n", c.cacheNS)
		if err != nil && strings.Contains(err.Error(), "NotFound") {
			return true, ""
		}
		return false, fmt.Sprint(err)
	})
	s.waitCacheReady(t, s.dedicated, before, 2*time.Minute)
	cache, _ = s.getCache(s.dedicated)
	for _, cond := range cache.list("status", "conditions") {
		if strings.Contains(strings.ToLower(cond.str("message")), "insufficient cpu") {
			t.Errorf("after scaling back, condition %s still says %q", cond.str("type"), cond.str("message"))
		}
	}
}

// freeWholeCPUs is the node's allocatable CPU less what its running and pending
// pods request, in whole CPUs: how many more one-CPU Guaranteed pods fit.
func (s *suite) freeWholeCPUs(t *testing.T) int {
	t.Helper()
	pods, err := s.cachePods(s.dedicated)
	if err != nil || len(pods) == 0 {
		t.Fatalf("pods of %s: %v", s.dedicated, err)
	}
	nodeName := pods[0].str("spec", "nodeName")
	node, err := s.c.getJSON("node", nodeName)
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := resource.ParseQuantity(node.str("status", "allocatable", "cpu"))
	if err != nil {
		t.Fatalf("node %s allocatable cpu: %v", nodeName, err)
	}
	free := alloc.MilliValue()
	onNode, err := s.c.items("pods", "-A", "--field-selector", "spec.nodeName="+nodeName)
	if err != nil {
		t.Fatal(err)
	}
	for _, pod := range onNode {
		if phase := pod.str("status", "phase"); phase == "Succeeded" || phase == "Failed" {
			continue
		}
		for _, ctr := range pod.list("spec", "containers") {
			if req := ctr.str("resources", "requests", "cpu"); req != "" {
				q, err := resource.ParseQuantity(req)
				if err != nil {
					t.Fatalf("pod %s cpu request %q: %v", pod.str("metadata", "name"), req, err)
				}
				free -= q.MilliValue()
			}
		}
	}
	t.Logf("node %s: allocatable cpu %s, %dm free after its pods' requests", nodeName, alloc.String(), free)
	if free < 0 {
		return 0
	}
	return int(free / 1000)
}

// ---------------------------------------------------------------- stage 6

// invalidRefused sends Caches that break one rule each; every one must be
// refused with a message that names the field, and none may be stored.
func (s *suite) invalidRefused(t *testing.T) {
	c := s.c
	c.dumpOnFailure(t)
	cases := []struct {
		name, spec, field string
		// byWebhook: the rule lives only in the validating webhook (the schema
		// and CEL cannot express it), so its refusal shows the webhook answered.
		byWebhook bool
	}{
		{"memory-below-minimum", "memory: -64Mi", "spec.memory", false},
		{"dedicated-zero-cpu", "memory: 64Mi\n  cpu: 0", "spec.cpu", false},
		{"negative-replicas", "memory: 64Mi\n  replicas: -1", "spec.replicas", false},
		{"item-over-half-memory", "memory: 16Mi\n  engine:\n    maxItemSize: 16Mi", "spec.engine.maxItemSize", false},
		{"memory-not-whole-mib", "memory: 100M", "spec.memory", false},
		{"reserved-pod-label", "memory: 64Mi\n  placement:\n    podLabels:\n      app.kubernetes.io/instance: other", "spec.placement.podLabels", true},
	}
	for _, tc := range cases {
		manifest := fmt.Sprintf("apiVersion: cache.cachet.dev/v1alpha1\nkind: Cache\nmetadata:\n  name: e2e-invalid-%s\n  namespace: %s\nspec:\n  %s\n", tc.name, c.cacheNS, tc.spec)
		_, err := c.kIn(manifest, "create", "-f", "-")
		if err == nil {
			t.Errorf("%s: the API server accepted an invalid Cache (%s)", tc.name, strings.ReplaceAll(tc.spec, "\n", " "))
			_, _ = c.k("delete", cacheGroupResource, "e2e-invalid-"+tc.name, "-n", c.cacheNS, "--wait=false")
			continue
		}
		msg := err.Error()
		if i := strings.Index(msg, "stderr:"); i >= 0 {
			msg = strings.TrimSpace(msg[i+len("stderr:"):])
		}
		if !strings.Contains(msg, tc.field) {
			t.Errorf("%s: refused, but the message does not name %s: %s", tc.name, tc.field, msg)
		} else {
			by := "schema/CEL"
			if tc.byWebhook {
				by = "webhook"
			}
			t.Logf("%s: refused (%s rule): %s", tc.name, by, strings.Join(strings.Fields(msg), " "))
		}
		if _, err := c.k("get", cacheGroupResource, "e2e-invalid-"+tc.name, "-n", c.cacheNS); err == nil {
			t.Errorf("%s: the refused Cache exists", tc.name)
		}
	}
}

// ---------------------------------------------------------------- stage 7

// sharedCache runs a second Cache without dedicated CPUs next to the first: its
// pods are Burstable, run on the shared pool, and serve.
func (s *suite) sharedCache(t *testing.T) {
	c := s.c
	sample := env("E2E_SHARED_SAMPLE", filepath.Join(c.samples, "cache_v1alpha1_cache_shared.yaml"))
	out, err := c.k("apply", "-n", c.cacheNS, "-f", sample, "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	s.shared = strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "/")+1:])
	c.dumpOnFailure(t, s.shared, s.dedicated)
	cache, err := s.getCache(s.shared)
	if err != nil {
		t.Fatal(err)
	}
	if d := cache.get("spec", "dedicatedCPUs"); d != false {
		t.Fatalf("the sample %s must set dedicatedCPUs: false; it has %v", sample, d)
	}
	// Two pods, so that stage 5 can watch a roll that goes one pod at a time.
	c.mustK(t, "scale", cacheGroupResource+"/"+s.shared, "-n", c.cacheNS, "--replicas=2")
	pods := s.waitCacheReady(t, s.shared, 2, 5*time.Minute)
	for _, pod := range pods {
		name := pod.str("metadata", "name")
		if q := pod.str("status", "qosClass"); q != "Burstable" {
			t.Errorf("pod %s QoS class %q, want Burstable", name, q)
		}
		// Defect 2: a shared pod's workers are not pinned (-o cpus=none); they
		// used to be pinned to the lowest shared CPUs, all shared Caches alike.
		if wc := s.engineSettings(t, name)["worker_cpus"]; wc != "none" {
			t.Errorf("pod %s: engine worker_cpus=%q, want none (shared cores are not pinned)", name, wc)
		}
		if c.nodeLocal {
			cores, sharedPool, _ := s.nodeCores(t, pod)
			if !cores.equal(sharedPool) {
				t.Errorf("pod %s runs on cpus %s, want the kubelet's shared pool %s", name, cores, sharedPool)
			}
			if cores.intersects(s.dedicatedCores) {
				t.Errorf("pod %s may run on %s, which includes the first cache's exclusive cores %s", name, cores, s.dedicatedCores)
			}
		}
	}
	addr := c.portForward(t, c.cacheNS, "svc/"+s.shared, memcachePort)
	setGet(t, addr, "e2e-shared")
	cache, _ = s.getCache(s.shared)
	s.checkEndpoints(t, cache, pods)
	// The first Cache is undisturbed.
	s.waitCacheReady(t, s.dedicated, 1, 30*time.Second)
}

// ---------------------------------------------------------------- stage 5

// readyWatch follows a Cache's pods through `kubectl get -w` and records the
// largest number of pods that were not Ready at any one moment.
type readyWatch struct {
	mu       sync.Mutex
	ready    map[string]bool
	maxDown  int
	seen     int
	replicas int
	log      []string
	cmd      *exec.Cmd
	done     chan struct{}
}

func (s *suite) watchReadiness(t *testing.T, selector string, replicas int) *readyWatch {
	t.Helper()
	w := &readyWatch{ready: map[string]bool{}, replicas: replicas, done: make(chan struct{})}
	w.cmd = exec.Command(s.c.kubectl, "get", "pods", "-n", s.c.cacheNS, "-l", selector, "-w", "--output-watch-events", "-o", "json")
	stdout, err := w.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(w.done)
		dec := json.NewDecoder(bufio.NewReader(stdout))
		for {
			var ev struct {
				Type   string `json:"type"`
				Object obj    `json:"object"`
			}
			if err := dec.Decode(&ev); err != nil {
				return
			}
			name := ev.Object.str("metadata", "name")
			w.mu.Lock()
			if ev.Type == "DELETED" {
				delete(w.ready, name)
			} else {
				w.ready[name] = podReady(ev.Object)
			}
			up := 0
			for _, r := range w.ready {
				if r {
					up++
				}
			}
			w.seen++
			down := w.replicas - up
			// Before the first full picture the count is meaningless.
			if w.seen > w.replicas && down > w.maxDown {
				w.maxDown = down
			}
			w.log = append(w.log, fmt.Sprintf("%s %s %s ready=%v -> %d/%d ready", time.Now().Format("15:04:05.000"), ev.Type, name, w.ready[name], up, w.replicas))
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *readyWatch) stop() {
	if w.cmd.Process != nil {
		_ = w.cmd.Process.Kill()
	}
	<-w.done
	_ = w.cmd.Wait()
}

func (w *readyWatch) allReady() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	up := 0
	for _, r := range w.ready {
		if r {
			up++
		}
	}
	return up == w.replicas
}

// configRolls changes engine.maxConnections on both Caches: every pod must be
// replaced one at a time with the new config hash, and the engines must run
// with the new setting.
func (s *suite) configRolls(t *testing.T) {
	c := s.c
	c.dumpOnFailure(t, s.shared, s.dedicated)
	const newMaxConns = 2000

	type before struct {
		uids map[string]string
		hash string
	}
	snapshot := func(name string) before {
		pods, err := s.cachePods(name)
		if err != nil {
			t.Fatal(err)
		}
		b := before{uids: map[string]string{}}
		for _, p := range pods {
			b.uids[p.str("metadata", "name")] = p.str("metadata", "uid")
			b.hash = p.strMap("metadata", "annotations")[configHashKey]
		}
		if b.hash == "" {
			t.Fatalf("pods of %s carry no %s annotation", name, configHashKey)
		}
		return b
	}
	sharedBefore, dedicatedBefore := snapshot(s.shared), snapshot(s.dedicated)
	sharedCache, _ := s.getCache(s.shared)
	if settings := s.engineSettings(t, s.shared+"-0"); settings["maxconns"] == strconv.Itoa(newMaxConns) {
		t.Fatalf("engine already runs with maxconns=%d; the test would prove nothing", newMaxConns)
	}

	w := s.watchReadiness(t, sharedCache.str("status", "selector"), 2)
	eventually(t, 30*time.Second, 200*time.Millisecond, "the readiness watch to see both pods Ready", func() (bool, string) {
		return w.allReady(), ""
	})
	patch := fmt.Sprintf(`{"spec":{"engine":{"maxConnections":%d}}}`, newMaxConns)
	for _, name := range []string{s.shared, s.dedicated} {
		c.mustK(t, "patch", cacheGroupResource, name, "-n", c.cacheNS, "--type=merge", "-p", patch)
	}
	t.Logf("patched spec.engine.maxConnections=%d on %s and %s", newMaxConns, s.shared, s.dedicated)

	for _, tc := range []struct {
		name   string
		before before
		n      int
	}{{s.shared, sharedBefore, 2}, {s.dedicated, dedicatedBefore, 1}} {
		eventually(t, 5*time.Minute, time.Second, "every pod of "+tc.name+" replaced with a new config hash", func() (bool, string) {
			pods, err := s.cachePods(tc.name)
			if err != nil {
				return false, err.Error()
			}
			var states []string
			done := len(pods) == tc.n
			for _, p := range pods {
				pn := p.str("metadata", "name")
				hash := p.strMap("metadata", "annotations")[configHashKey]
				replaced := p.str("metadata", "uid") != tc.before.uids[pn]
				states = append(states, fmt.Sprintf("%s replaced=%v hash-changed=%v ready=%v", pn, replaced, hash != tc.before.hash, podReady(p)))
				if !replaced || hash == tc.before.hash || !podReady(p) {
					done = false
				}
			}
			return done, strings.Join(states, "; ")
		})
		s.waitCacheReady(t, tc.name, tc.n, 2*time.Minute)
	}
	w.stop()
	w.mu.Lock()
	t.Logf("readiness of %s during the roll:\n  %s", s.shared, strings.Join(w.log, "\n  "))
	if w.maxDown > 1 {
		t.Errorf("%d pods of %s were not Ready at once during the roll; want at most 1", w.maxDown, s.shared)
	}
	if w.maxDown < 1 {
		t.Errorf("the watch never saw a pod of %s go down: the roll was not observed", s.shared)
	}
	w.mu.Unlock()

	// status.engineArgs reports the arguments in effect: the new limit is there.
	for _, name := range []string{s.shared, s.dedicated} {
		cache, err := s.getCache(name)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := cache.get("status", "engineArgs").([]any)
		found := false
		for i := 0; i+1 < len(raw); i++ {
			if fmt.Sprint(raw[i]) == "-c" && fmt.Sprint(raw[i+1]) == strconv.Itoa(newMaxConns) {
				found = true
			}
		}
		if !found {
			t.Errorf("cache %s status.engineArgs %s does not carry -c %d", name, cache.str("status", "engineArgs"), newMaxConns)
		}
	}

	sts, err := c.getJSON("statefulset", s.shared, "-n", c.cacheNS)
	if err != nil {
		t.Fatal(err)
	}
	templateHash := sts.strMap("spec", "template", "metadata", "annotations")[configHashKey]
	for _, name := range []string{s.shared, s.dedicated} {
		pods, _ := s.cachePods(name)
		for _, p := range pods {
			pn := p.str("metadata", "name")
			if name == s.shared && p.strMap("metadata", "annotations")[configHashKey] != templateHash {
				t.Errorf("pod %s hash %s differs from the StatefulSet template's %s", pn, p.strMap("metadata", "annotations")[configHashKey], templateHash)
			}
			settings := s.engineSettings(t, pn)
			if settings["maxconns"] != strconv.Itoa(newMaxConns) {
				t.Errorf("pod %s: engine reports maxconns=%q after the roll, want %d", pn, settings["maxconns"], newMaxConns)
			}
		}
	}
	// The replaced dedicated pod gets an exclusive core again and pins to it.
	pods, _ := s.cachePods(s.dedicated)
	for _, p := range pods {
		if q := p.str("status", "qosClass"); q != "Guaranteed" {
			t.Errorf("replaced pod %s QoS %q, want Guaranteed", p.str("metadata", "name"), q)
		}
		if c.nodeLocal {
			cores, _, _ := s.nodeCores(t, p)
			workers, _ := parseCPUList(s.engineSettings(t, p.str("metadata", "name"))["worker_cpus"])
			if !workers.equal(cores) {
				t.Errorf("replaced pod %s: worker_cpus=%s, exclusive cores %s", p.str("metadata", "name"), workers, cores)
			}
		}
	}
}

// ---------------------------------------------------------------- stage 8

var ownedKinds = []string{"statefulsets.apps", "services", "configmaps", "poddisruptionbudgets.policy", "pods"}

// ownedBy lists "kind/name" of objects in the cache namespace whose owner
// references point at uid (directly, or through the StatefulSet for pods).
func (s *suite) ownedBy(uid string) ([]string, error) {
	var out []string
	owners := map[string]bool{uid: true}
	for _, kind := range ownedKinds {
		items, err := s.c.items(kind, "-n", s.c.cacheNS)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			for _, ref := range it.list("metadata", "ownerReferences") {
				if owners[ref.str("uid")] {
					out = append(out, kind+"/"+it.str("metadata", "name"))
					if kind == "statefulsets.apps" {
						owners[it.str("metadata", "uid")] = true
					}
				}
			}
		}
	}
	return out, nil
}

// deleteAndUninstall deletes each Cache and checks garbage collection removed
// everything it owned, then uninstalls the chart and checks nothing is left.
func (s *suite) deleteAndUninstall(t *testing.T) {
	c := s.c
	c.dumpOnFailure(t, s.dedicated, s.shared)
	for _, name := range []string{s.dedicated, s.shared, s.spread} {
		if name == "" {
			continue
		}
		cache, err := s.getCache(name)
		if err != nil {
			t.Errorf("cache %s: %v", name, err)
			continue
		}
		owned, err := s.ownedBy(cache.str("metadata", "uid"))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("cache %s owns: %s", name, strings.Join(owned, " "))
		for _, kind := range []string{"statefulsets.apps/", "services/", "configmaps/", "poddisruptionbudgets.policy/"} {
			n := 0
			for _, o := range owned {
				if strings.HasPrefix(o, kind) {
					n++
				}
			}
			if n == 0 {
				t.Errorf("cache %s owns no %s: owner references are missing, so deletion could leak it", name, strings.TrimSuffix(kind, "/"))
			}
		}
		c.mustK(t, "delete", cacheGroupResource, name, "-n", c.cacheNS, "--wait=true", "--timeout=2m")
		uid := cache.str("metadata", "uid")
		eventually(t, 3*time.Minute, time.Second, "garbage collection of everything "+name+" owned", func() (bool, string) {
			left, err := s.ownedBy(uid)
			if err != nil {
				return false, err.Error()
			}
			return len(left) == 0, "still present: " + strings.Join(left, " ")
		})
		// Also by name, in case an object lost its owner reference.
		for _, o := range owned {
			if strings.HasPrefix(o, "pods/") {
				continue
			}
			kind, objName, _ := strings.Cut(o, "/")
			if _, err := c.k("get", kind, objName, "-n", c.cacheNS); err == nil {
				t.Errorf("%s still exists after deleting cache %s", o, name)
			}
		}
	}

	manifest, err := c.helmRun(time.Minute, "get", "manifest", c.release, "-n", c.systemNS)
	if err != nil {
		t.Fatal(err)
	}
	listed, err := c.kIn(manifest, "get", "-f", "-", "-o", "name")
	if err != nil {
		t.Fatalf("listing the release's objects: %v", err)
	}
	t.Logf("release %s objects before uninstall:\n%s", c.release, listed)
	out, err := c.helmRun(4*time.Minute, "uninstall", c.release, "-n", c.systemNS, "--wait", "--timeout", "3m")
	if err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	t.Logf("helm uninstall: %s", strings.TrimSpace(out))
	eventually(t, 2*time.Minute, 2*time.Second, "every object of the release to be gone", func() (bool, string) {
		left, err := c.kIn(manifest, "get", "-f", "-", "-o", "name", "--ignore-not-found")
		if err != nil {
			return false, err.Error()
		}
		return strings.TrimSpace(left) == "", "left: " + strings.Join(strings.Fields(left), " ")
	})
	// Anything else the chart or the operator made in the operator's namespace
	// (certificate Secrets, leader-election Leases, ...) counts as left behind.
	// Pods of a deleted Deployment go asynchronously (the adapter's generic API
	// server takes some seconds to shut down), so this is polled for a minute;
	// whatever is still there then is reported.
	var leftovers []string
	listLeftovers := func() {
		leftovers = nil
		for _, kind := range []string{"deployments.apps", "services", "serviceaccounts", "secrets", "configmaps", "roles", "rolebindings", "leases.coordination.k8s.io", "pods"} {
			items, err := c.items(kind, "-n", c.systemNS)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				n := it.str("metadata", "name")
				if (kind == "serviceaccounts" && n == "default") || (kind == "configmaps" && n == "kube-root-ca.crt") {
					continue
				}
				leftovers = append(leftovers, kind+"/"+n)
			}
		}
		for _, kind := range []string{"clusterroles", "clusterrolebindings", "mutatingwebhookconfigurations", "validatingwebhookconfigurations"} {
			items, err := c.items(kind, "-l", "app.kubernetes.io/instance="+c.release)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range items {
				leftovers = append(leftovers, kind+"/"+it.str("metadata", "name"))
			}
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Second) {
		listLeftovers()
		if len(leftovers) == 0 || time.Now().After(deadline) {
			break
		}
	}
	eventually(t, 2*time.Minute, 2*time.Second, "the Cache CRD to be removed with the release (crds.keep=false)", func() (bool, string) {
		_, err := c.k("get", "crd", cacheGroupResource)
		if err != nil && strings.Contains(err.Error(), "NotFound") {
			return true, ""
		}
		return false, fmt.Sprintf("crd %s still served (err=%v)", cacheGroupResource, err)
	})
	if len(leftovers) > 0 {
		t.Errorf("helm uninstall left behind: %s", strings.Join(leftovers, " "))
	}
}

// checkHealthProbe: the kubelet's readiness probe is GET /healthz on the
// metrics port (no process started inside the pod's exclusive cores), its
// liveness probe cachet-probe on the data port, and
// the endpoint answers as the engine documents: 200 on /healthz, and
// memcached_up 1 on /metrics.
func (s *suite) checkHealthProbe(t *testing.T, pod obj) {
	t.Helper()
	name := pod.str("metadata", "name")
	var ctr obj
	for _, c := range pod.list("spec", "containers") {
		if c.str("name") == engineContainer {
			ctr = c
		}
	}
	metricsPort := 0
	for _, p := range ctr.list("ports") {
		if p.str("name") == "metrics" {
			metricsPort = p.num("containerPort")
		}
	}
	if ctr.str("readinessProbe", "httpGet", "path") != "/healthz" || ctr.str("readinessProbe", "httpGet", "port") != "metrics" || ctr.get("readinessProbe", "exec") != nil {
		t.Errorf("pod %s readinessProbe = %s, want httpGet /healthz on port metrics", name, ctr.str("readinessProbe"))
	}
	// liveness restarts the pod: never through the metrics port, whose slots any client can crowd
	if ctr.str("livenessProbe", "exec", "command") != `["/usr/local/bin/cachet-probe","-p","11211"]` || ctr.get("livenessProbe", "httpGet") != nil {
		t.Errorf("pod %s livenessProbe = %s, want exec cachet-probe -p 11211 on the data port", name, ctr.str("livenessProbe"))
	}
	if metricsPort == 0 {
		t.Fatalf("pod %s has no metrics port: %s", name, ctr.str("ports"))
	}
	addr := s.c.portForward(t, s.c.cacheNS, "pod/"+name, metricsPort)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path) //nolint:noctx // bounded by the client's timeout
		if err != nil {
			t.Fatalf("GET %s from pod %s: %v", path, name, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz"); code != http.StatusOK {
		t.Errorf("pod %s GET /healthz: %d %q", name, code, body)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "\nmemcached_up 1") {
		t.Errorf("pod %s GET /metrics: %d, memcached_up 1 missing", name, code)
	}
	t.Logf("pod %s: readiness httpGet /healthz on port %d, liveness cachet-probe; /healthz 200, /metrics has memcached_up 1", name, metricsPort)
}
