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
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

const netpolNS = "cachet-e2e-netpol"

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
      serviceAccountName: kube-network-policies
      tolerations: [{operator: Exists, effect: NoSchedule}]
      terminationGracePeriodSeconds: 30
      containers:
      - name: kube-network-policies
        image: %[2]s
        imagePullPolicy: IfNotPresent
        # No NRI in the local cluster's containerd (1.6); pod IPs come from
        # the API. The metrics listener stays on the node's loopback.
        args: ["--hostname-override=$(NODE_NAME)", "--disable-nri", "--metrics-bind-address=127.0.0.1:19080", "--v=2"]
        env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
        resources: {requests: {cpu: 10m, memory: 32Mi}}
        securityContext: {privileged: true}
`, netpolNS, image)
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
				table := ""
				if netns != "" {
					table, _ = nftTable(netns)
				}
				t.Logf("the enforcer's log:\n%s\npods:\n%s\nits table:\n%s", logs, pods, table)
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
		eventually(t, 2*time.Minute, time.Second, "the enforcer's pods Running on every node", func() (bool, string) {
			ds, err := c.getJSON("daemonset", "kube-network-policies", "-n", netpolNS)
			if err != nil {
				return false, err.Error()
			}
			want, ready := ds.num("status", "desiredNumberScheduled"), ds.num("status", "numberReady")
			return want > 0 && ready == want, fmt.Sprintf("desired %d ready %d", want, ready)
		})
		if netns != "" {
			// The enforcer's rules in the kernel: its table with the queue
			// verdicts (a kernel that refused them leaves no table).
			eventually(t, time.Minute, time.Second, "the enforcer's nftables table in "+netns, func() (bool, string) {
				table, err := nftTable(netns)
				if err != nil {
					return false, err.Error()
				}
				return strings.Contains(table, "queue"), table
			})
		}
	} else {
		t.Log("E2E_NETPOL_IMAGE unset: relying on the cluster's own NetworkPolicy enforcer")
	}

	s.applyCache(t, name, "  memory: 32Mi\n  cpu: 0\n  dedicatedCPUs: false\n"+
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
  containers:
  - name: probe
    image: %s
    imagePullPolicy: IfNotPresent
    command: [sleep, "3600"]
    resources: {requests: {cpu: 5m, memory: 8Mi}, limits: {memory: 16Mi}}
`, p.name, c.cacheNS, p.role, env("E2E_TOOLBOX_IMAGE", "localhost/cachet-toolbox:0.1.0"))
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

	const version = `version\r\n`
	const scrape = `GET /metrics HTTP/1.0\r\n\r\n`
	// What each probe must see once the enforcer has the pods' IPs (it learns
	// them from the API, so the first seconds may judge with an older view).
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
