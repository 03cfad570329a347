//go:build e2e

package e2e

// Stage 19: the NetworkPolicy the operator writes for spec.networkPolicy,
// enforced. The local cluster's bridge CNI enforces none, so the stage runs
// an enforcer there itself: sigs.k8s.io/kube-network-policies (built by
// hack/security-stack.sh, imported by hack/e2e.sh as E2E_NETPOL_IMAGE), a
// privileged hostNetwork DaemonSet that puts the packets of pods selected by
// any NetworkPolicy through an nfqueue and judges them. It is removed at the
// end, pass or fail, and its nftables table must be gone with it. On another
// cluster (no E2E_NETPOL_IMAGE) the cluster's own enforcer is relied on
// (kind's kindnet embeds kube-network-policies).
//
// The probes are real TCP connections between pods on the pod network
// (busybox nc in the toolbox image, from `kubectl exec`); nothing leaves the
// cluster's network namespace.

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cachet.dev/cachet/test/utils"
)

const netpolNS = "cachet-e2e-netpol"

// enforcerQueue is the nfqueue the enforcer binds (its --nfqueue-id): the
// stage reads the kernel's list of bound queues to know it is listening.
const enforcerQueue = 100

// netpolNode is the node the local cluster's enforcer, the Cache and the
// probes run on. Every node of the local cluster shares one network namespace
// (hack/local-cluster.sh), so an enforcer per node would mean two processes on
// one nftables table and one queue number: the one that cannot bind the queue
// deletes the table the other programs, and each programs only its own
// node's pods. One enforcer, and the pods it judges beside it.
const netpolNode = "cachet-node"

func (s *suite) netpolEnforcerManifest(image string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: kube-network-policies, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: cachet-e2e-kube-network-policies}
rules:
- apiGroups: [""]
  resources: [pods, namespaces]
  verbs: [list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: cachet-e2e-kube-network-policies}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cachet-e2e-kube-network-policies}
subjects: [{kind: ServiceAccount, name: kube-network-policies, namespace: %[1]s}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-network-policies, namespace: %[1]s}
spec:
  selector: {matchLabels: {app: kube-network-policies}}
  template:
    metadata: {labels: {app: kube-network-policies}}
    spec:
      hostNetwork: true
      nodeSelector: {kubernetes.io/hostname: %[3]s}
      serviceAccountName: kube-network-policies
      tolerations: [{operator: Exists, effect: NoSchedule}]
      terminationGracePeriodSeconds: 30
      containers:
      - name: kube-network-policies
        image: %[2]s
        imagePullPolicy: IfNotPresent
        # No NRI in the local cluster's containerd (1.6); pod IPs come from
        # the API. The metrics listener stays on the node's loopback.
        args: ["--hostname-override=$(NODE_NAME)", "--disable-nri", "--metrics-bind-address=127.0.0.1:19080", "--nfqueue-id=%[4]d", "--v=2"]
        env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
        resources: {requests: {cpu: 10m, memory: 32Mi}}
        securityContext: {privileged: true}
`, netpolNS, image, netpolNode, enforcerQueue)
}

// nftTable lists the enforcer's nftables table in the cluster's network
// namespace ("" when there is none).
func nftTable(netns string) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", netns, "nft", "list", "tables").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("nft list tables in %s: %w: %s", netns, err, out)
	}
	if !strings.Contains(string(out), "kube-network-policies") {
		return "", nil
	}
	out, err = exec.Command("ip", "netns", "exec", netns, "nft", "list", "table", "inet", "kube-network-policies").CombinedOutput()
	return string(out), err
}

// nfQueueListener returns the kernel's line for nfqueue num in the cluster's
// network namespace, "" while no process has bound it. A queue verdict with
// no listener drops the packet (the enforcer runs without --fail-open), so its
// rules alone do not say that it judges anything.
func nfQueueListener(netns string, num int) (string, error) {
	out, err := netnsRead(netns, "/proc/net/netfilter/nfnetlink_queue")
	if err != nil {
		return "", fmt.Errorf("the bound nfqueues of %s: %w: %s", netns, err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == strconv.Itoa(num) {
			return strings.TrimSpace(line), nil
		}
	}
	return "", nil
}

// waitEnforcerListening waits for the enforcer's table with its queue rules
// and then for a listener on that queue. The release programs the table
// before it binds the queue, so the table alone can stand for an enforcer
// that drops every packet of the pods it lists: one run here had the table
// up and queue 100 unbound for minutes, with no error in the enforcer's log
// and no restart, and the allowed probes timed out like the refused ones. An
// enforcer in that state is not ready: it gets SIGQUIT, so that its log
// keeps where every goroutine of it was stuck and the kubelet starts it
// again (or, when its process is not found on this machine, its pod is
// replaced), twice at most, and the stage fails if none listens.
func (s *suite) waitEnforcerListening(t *testing.T, netns string) {
	c := s.c
	for attempt := 1; ; attempt++ {
		// A kernel that refused the queue verdicts leaves no table.
		eventually(t, time.Minute, time.Second, "the enforcer's nftables table in "+netns, func() (bool, string) {
			table, err := nftTable(netns)
			if err != nil {
				return false, err.Error()
			}
			return strings.Contains(table, "queue"), table
		})
		listening, state := utils.Poll(t, 30*time.Second, time.Second, fmt.Sprintf("a listener on nfqueue %d in %s", enforcerQueue, netns), func() (bool, string) {
			line, err := nfQueueListener(netns, enforcerQueue)
			if err != nil {
				return false, err.Error()
			}
			return line != "", "no listener"
		})
		if listening {
			t.Logf("the enforcer listens on nfqueue %d (attempt %d)", enforcerQueue, attempt)
			return
		}
		logs, _ := c.k("logs", "-n", netpolNS, "daemonset/kube-network-policies", "--tail=40")
		if attempt == 3 {
			t.Fatalf("the enforcer's table is in %s but nothing listens on its nfqueue %d (%s), after %d enforcer starts; the last one's log:\n%s", netns, enforcerQueue, state, attempt, logs)
		}
		t.Logf("the enforcer's table is in %s but nothing listens on its nfqueue %d (attempt %d); its log:\n%s", netns, enforcerQueue, attempt, logs)
		restarts, err := s.enforcerRestarts()
		if err != nil {
			t.Fatalf("the enforcer's restart count: %v", err)
		}
		if pid := s.enforcerPID(); pid > 0 && syscall.Kill(pid, syscall.SIGQUIT) == nil {
			eventually(t, 2*time.Minute, time.Second, "the enforcer restarted after SIGQUIT", func() (bool, string) {
				n, err := s.enforcerRestarts() // an API error is a look that failed, not the answer
				if err != nil {
					return false, err.Error()
				}
				return n > restarts, fmt.Sprintf("restarts %d", n)
			})
			dump, _ := c.k("logs", "-n", netpolNS, "daemonset/kube-network-policies", "--previous")
			t.Logf("the stuck enforcer's goroutines (SIGQUIT):\n%s", dump)
		} else {
			t.Logf("the enforcer's process is not on this machine: replacing its pod")
			c.mustK(t, "delete", "pod", "-n", netpolNS, "-l", "app=kube-network-policies", "--wait=true", "--timeout=90s")
		}
		s.waitEnforcerRunning(t)
	}
}

// enforcerPod is the enforcer's one pod, as the API has it now.
func (s *suite) enforcerPod() (obj, error) {
	pods, err := s.c.items("pods", "-n", netpolNS, "-l", "app=kube-network-policies")
	if err != nil {
		return nil, fmt.Errorf("the enforcer's pod: %w", err)
	}
	if len(pods) != 1 {
		return nil, fmt.Errorf("the enforcer's pod: %d pods, want 1", len(pods))
	}
	return pods[0], nil
}

// enforcerRestarts is the restart count of the enforcer's container.
func (s *suite) enforcerRestarts() (int, error) {
	pod, err := s.enforcerPod()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, st := range pod.list("status", "containerStatuses") {
		n += st.num("restartCount")
	}
	return n, nil
}

// enforcerPID finds the process of the enforcer pod's running container on
// this machine (the local cluster's node is this machine), 0 if there is
// none. The command line alone does not name it: another local cluster here
// (`make up`'s, or a second e2e run) runs the same image with the same node
// name, and signalling its enforcer would break that cluster and leave ours
// stuck. The kubelet's cgroupfs driver puts each container in a cgroup named
// by its container ID, so the process must be in that cgroup.
func (s *suite) enforcerPID() int {
	pod, err := s.enforcerPod()
	if err != nil || pod.str("spec", "nodeName") != netpolNode {
		return 0
	}
	containerID := ""
	for _, st := range pod.list("status", "containerStatuses") {
		if st.str("name") == "kube-network-policies" && st.get("state", "running") != nil {
			_, containerID, _ = strings.Cut(st.str("containerID"), "://") // containerd://<id>
		}
	}
	if containerID == "" {
		return 0
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		// The image's entrypoint (hack/images/kube-network-policies.Containerfile).
		if args[0] == "/bin/netpol" && inContainerCgroup("/proc/"+e.Name()+"/cgroup", containerID) {
			return pid
		}
	}
	return 0
}

// inContainerCgroup tells whether a /proc/PID/cgroup file puts the process in
// the cgroup of the container with this ID: the last element of the path, as
// the cgroupfs driver names it (<root>/kubepods/<qos>/pod<uid>/<container id>).
func inContainerCgroup(cgroupFile, containerID string) bool {
	b, err := os.ReadFile(cgroupFile)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// hierarchy-ID:controllers:path
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && path.Base(parts[2]) == containerID {
			return true
		}
	}
	return false
}

// waitEnforcerRunning waits for the enforcer's one pod to be Ready.
func (s *suite) waitEnforcerRunning(t *testing.T) {
	eventually(t, 2*time.Minute, time.Second, "the enforcer's pod Running on "+netpolNode, func() (bool, string) {
		ds, err := s.c.getJSON("daemonset", "kube-network-policies", "-n", netpolNS)
		if err != nil {
			return false, err.Error()
		}
		want, ready := ds.num("status", "desiredNumberScheduled"), ds.num("status", "numberReady")
		return want == 1 && ready == want, fmt.Sprintf("desired %d ready %d", want, ready)
	})
}

// podConnect opens a TCP connection from a pod to ip:port, sends request and
// returns what came back; nc's 3 s timeout bounds a connection that is dropped.
func (s *suite) podConnect(pod, ip string, port int, request string) string {
	out, _ := s.c.k("exec", "-n", s.c.cacheNS, pod, "--", "sh", "-c",
		fmt.Sprintf("printf '%s' | nc -w 3 %s %d 2>&1; echo \" exit=$?\"", request, ip, port))
	return strings.TrimSpace(out)
}

func (s *suite) networkPolicyEnforced(t *testing.T) {
	c := s.c
	const name = "e2e-netpol"
	image := env("E2E_NETPOL_IMAGE", "")
	netns := env("E2E_CLUSTER_NETNS", "")
	c.dumpOnFailure(t, name)

	if image != "" {
		t.Cleanup(func() {
			if t.Failed() {
				// What the enforcer saw and decided, before it goes.
				logs, _ := c.k("logs", "-n", netpolNS, "daemonset/kube-network-policies", "--tail=150")
				pods, _ := c.k("get", "pods", "-A", "-o", "wide")
				table, queue := "", ""
				if netns != "" {
					table, _ = nftTable(netns)
					queue, _ = nfQueueListener(netns, enforcerQueue)
				}
				t.Logf("the enforcer's log:\n%s\npods:\n%s\nits table:\n%s\nits nfqueue (number, listener, waiting, copy mode, range, queue dropped, user dropped, last id): %q",
					logs, pods, table, queue)
			}
			_, _ = c.k("delete", "clusterrolebinding,clusterrole", "cachet-e2e-kube-network-policies", "--ignore-not-found")
			if _, err := c.k("delete", "namespace", netpolNS, "--ignore-not-found", "--wait=true", "--timeout=120s"); err != nil {
				t.Errorf("removing the enforcer: %v", err)
			}
			if netns == "" {
				return
			}
			// On its stop signal (SIGINT, from its image) the enforcer deletes
			// its table; a table left behind would keep sending packets to a
			// queue no one reads.
			var table string
			var err error
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
				if table, err = nftTable(netns); err == nil && table == "" {
					return
				}
			}
			t.Errorf("the enforcer's nftables table is still in %s a minute after its pod was deleted (%v):\n%s", netns, err, table)
			// Left behind, it would drop the packets of the pod IPs it lists.
			if out, err := exec.Command("ip", "netns", "exec", netns, "nft", "delete", "table", "inet", "kube-network-policies").CombinedOutput(); err != nil {
				t.Errorf("deleting it: %v %s", err, out)
			}
		})
		if _, err := c.kIn(s.netpolEnforcerManifest(image), "apply", "-f", "-"); err != nil {
			t.Fatalf("applying the enforcer: %v", err)
		}
		s.waitEnforcerRunning(t)
		if netns != "" {
			s.waitEnforcerListening(t, netns)
		}
	} else {
		t.Log("E2E_NETPOL_IMAGE unset: relying on the cluster's own NetworkPolicy enforcer")
	}

	// Our enforcer judges the pods of its own node only: the Cache and the
	// probes go there.
	placement, probeNode := "", ""
	if image != "" {
		placement = "  placement: {nodeSelector: {kubernetes.io/hostname: " + netpolNode + "}}\n"
		probeNode = "  nodeSelector: {kubernetes.io/hostname: " + netpolNode + "}\n"
	}
	s.applyCache(t, name, "  memory: 32Mi\n  cpu: 0\n  dedicatedCPUs: false\n"+placement+
		"  networkPolicy:\n"+
		"    clients: [{podSelector: {matchLabels: {cachet-e2e/role: client}}}]\n"+
		"    metricsScrapers: [{podSelector: {matchLabels: {cachet-e2e/role: scraper}}}]\n")
	defer s.deleteCache(t, name)
	// Three probes from the toolbox image: an allowed client, an allowed
	// scraper, and a pod the policy does not name.
	var manifest strings.Builder
	for _, p := range []struct{ name, role string }{{"np-client", "client"}, {"np-scraper", "scraper"}, {"np-outsider", "none"}} {
		fmt.Fprintf(&manifest, `---
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s, labels: {cachet-e2e/role: %s}}
spec:
  terminationGracePeriodSeconds: 0
%s  containers:
  - name: probe
    image: %s
    imagePullPolicy: IfNotPresent
    command: [sleep, "3600"]
    resources: {requests: {cpu: 5m, memory: 8Mi}, limits: {memory: 16Mi}}
`, p.name, c.cacheNS, p.role, probeNode, env("E2E_TOOLBOX_IMAGE", "localhost/cachet-toolbox:0.1.0"))
	}
	if _, err := c.kIn(manifest.String(), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_, _ = c.k("delete", "pod", "np-client", "np-scraper", "np-outsider", "-n", c.cacheNS, "--ignore-not-found", "--wait=false")
	}()
	pods := s.waitCacheReady(t, name, 1, 4*time.Minute)
	if _, err := c.k("wait", "-n", c.cacheNS, "--for=condition=Ready", "pod/np-client", "pod/np-scraper", "pod/np-outsider", "--timeout=2m"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.getJSON("networkpolicy", name, "-n", c.cacheNS); err != nil {
		t.Fatalf("the operator's NetworkPolicy %s: %v", name, err)
	}
	ip := pods[0].str("status", "podIP")
	metricsPort := 0
	for _, ct := range pods[0].list("spec", "containers") {
		for _, p := range ct.list("ports") {
			if p.str("name") == "metrics" {
				metricsPort = p.num("containerPort")
			}
		}
	}
	if ip == "" || metricsPort == 0 {
		t.Fatalf("cache pod %s: podIP %q, metrics port %d", pods[0].str("metadata", "name"), ip, metricsPort)
	}

	judged := image != "" && netns != ""
	if judged {
		// The enforcer has the policy and the cache pod (it learns both from
		// the API): the pod's IP is in the set its queue rules match.
		eventually(t, time.Minute, time.Second, "the cache pod's IP "+ip+" in the enforcer's set", func() (bool, string) {
			out, err := exec.Command("ip", "netns", "exec", netns, "nft", "list", "set", "inet", "kube-network-policies", "podips-v4").CombinedOutput()
			if err != nil {
				return false, fmt.Sprintf("%v: %s", err, out)
			}
			for _, f := range strings.FieldsFunc(string(out), func(r rune) bool { return strings.ContainsRune(" \t\n,{}", r) }) {
				if f == ip {
					return true, ""
				}
			}
			return false, string(out)
		})
		// Still listening now that the probes start (the queue can be
		// checked at any time; the probes cannot tell a dead queue from a
		// refusal).
		s.waitEnforcerListening(t, netns)
	}

	const version = `version\r\n`
	const scrape = `GET /metrics HTTP/1.0\r\n\r\n`
	// What each probe must see. An allowed probe is retried until the
	// deadline: the enforcer learns the probe pods' IPs from the API, and a
	// first SYN judged before that is dropped. A refused probe that connects
	// fails the stage at once when our enforcer's set already holds the cache
	// pod (it then has the policy and the pod, and lets nothing else in); a
	// cluster's own enforcer, not watched here, gets the same deadline.
	cases := []struct {
		pod, what string
		port      int
		request   string
		allowed   bool
		reply     string
	}{
		{"np-client", "memcached port", memcachePort, version, true, "VERSION "},
		{"np-outsider", "memcached port", memcachePort, version, false, "VERSION "},
		{"np-scraper", "metrics port", metricsPort, scrape, true, "memcached_"},
		{"np-outsider", "metrics port", metricsPort, scrape, false, "memcached_"},
		{"np-client", "metrics port", metricsPort, scrape, false, "memcached_"},
		{"np-scraper", "memcached port", memcachePort, version, false, "VERSION "},
	}
	// The six probes of one round run side by side: a refused one waits out
	// nc's timeout.
	got := make([]string, len(cases))
	eventually(t, 90*time.Second, 2*time.Second, "every probe allowed or refused as the policy says", func() (bool, string) {
		var wg sync.WaitGroup
		for i, tc := range cases {
			wg.Add(1)
			go func() { defer wg.Done(); got[i] = s.podConnect(tc.pod, ip, tc.port, tc.request) }()
		}
		wg.Wait()
		var wrong []string
		for i, tc := range cases {
			if strings.Contains(got[i], tc.reply) != tc.allowed {
				if !tc.allowed && judged {
					t.Fatalf("%s -> %s %s:%d connected and was answered though the policy refuses it: %q", tc.pod, tc.what, ip, tc.port, lastLines(got[i], 2))
				}
				wrong = append(wrong, fmt.Sprintf("%s -> %s: allowed=%v, got %q", tc.pod, tc.what, tc.allowed, lastLines(got[i], 2)))
			}
		}
		return len(wrong) == 0, strings.Join(wrong, "; ")
	})
	for i, tc := range cases {
		if tc.allowed {
			t.Logf("%s -> %s %s:%d: connected and answered", tc.pod, tc.what, ip, tc.port)
		} else {
			t.Logf("%s -> %s %s:%d: refused (%s)", tc.pod, tc.what, ip, tc.port, lastLines(got[i], 1))
		}
	}
}
