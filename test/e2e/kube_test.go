//go:build e2e

package e2e

// Helpers that drive the cluster the way a user does: through kubectl and helm
// binaries, never through a fake client. Every wait is a bounded poll on state
// that reports what it last saw when it gives up.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cachet.dev/cachet/test/utils"
)

// cluster carries the paths and names the suite needs; all of them come from the
// environment that hack/e2e.sh sets, with defaults for a run from the repo root.
type cluster struct {
	kubectl    string
	helm       string
	chart      string
	samples    string
	repoRoot   string
	artifacts  string
	release    string
	systemNS   string // where the chart (the operator) is installed
	cacheNS    string // where the suite's Caches live
	nodeLocal  bool   // the node's cgroups and kubelet state are on this machine
	kubeletDir string
	engineImg  string
	operImg    string
	// operImgNext is the same operator under another tag (the upgrade stage).
	operImgNext string
	// clusterCmd is hack/local-cluster.sh when the cluster is the local one.
	clusterCmd string
	helmSets   []string
	// certManager: the cluster runs cert-manager (hack/cert-manager.sh on the
	// local one), so the chart's webhook certificate comes from it and stage
	// 21 runs.
	certManager bool
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	kubectl := env("E2E_KUBECTL", filepath.Join(root, "bin", "k8s", "kubectl"))
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("kubectl not found at %s (set E2E_KUBECTL or run hack/build-k8s.sh kubectl)", kubectl)
	}
	helm := env("E2E_HELM", filepath.Join(root, "bin", "helm"))
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("helm not found at %s (set E2E_HELM or run make helm)", helm)
	}
	c := &cluster{
		kubectl:     kubectl,
		helm:        helm,
		chart:       env("E2E_CHART", filepath.Join(root, "charts", "cachet")),
		samples:     env("E2E_SAMPLES", filepath.Join(root, "config", "samples")),
		repoRoot:    root,
		artifacts:   env("E2E_ARTIFACTS", filepath.Join(root, "test", "e2e", "artifacts")),
		release:     env("E2E_RELEASE", "cachet-e2e"),
		systemNS:    env("E2E_SYSTEM_NAMESPACE", "cachet-e2e-system"),
		cacheNS:     env("E2E_CACHE_NAMESPACE", "cachet-e2e"),
		nodeLocal:   os.Getenv("E2E_NODE_LOCAL") == "1",
		kubeletDir:  env("E2E_KUBELET_DIR", "/var/lib/kubelet"),
		engineImg:   env("E2E_ENGINE_IMAGE", "localhost/cachetd:0.1.0"),
		operImg:     env("E2E_OPERATOR_IMAGE", "localhost/cachet-operator:0.1.0"),
		operImgNext: os.Getenv("E2E_OPERATOR_IMAGE_NEXT"),
		clusterCmd:  os.Getenv("E2E_CLUSTER_SCRIPT"),
	}
	if s := os.Getenv("E2E_HELM_SET"); s != "" {
		c.helmSets = strings.Split(s, ",")
	}
	if c.certManager = os.Getenv("E2E_CERT_MANAGER") == "1"; c.certManager {
		// The chart's cert-manager mode; its self-signed mode is
		// TestSelfSignedWebhookCertificates' (main_test.go, make test).
		c.helmSets = append(c.helmSets, "certManager.enabled=true")
	}
	if err := os.MkdirAll(c.artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	return c
}

// run executes a command with a bound on its time and returns stdout; stderr
// is folded into the error so that a failure explains itself.
func run(timeout time.Duration, stdin []byte, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	if ctx.Err() == context.DeadlineExceeded {
		return out.String(), fmt.Errorf("%s %s: timed out after %s; stderr: %s", filepath.Base(name), strings.Join(args, " "), timeout, strings.TrimSpace(errb.String()))
	}
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w; stderr: %s", filepath.Base(name), strings.Join(args, " "), err, strings.TrimSpace(errb.String()+"\n"+out.String()))
	}
	return out.String(), nil
}

func (c *cluster) k(args ...string) (string, error) {
	return run(2*time.Minute, nil, c.kubectl, args...)
}

func (c *cluster) kIn(stdin string, args ...string) (string, error) {
	return run(2*time.Minute, []byte(stdin), c.kubectl, args...)
}

// mustK runs kubectl and fails the test (with diagnostics) if it fails.
func (c *cluster) mustK(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.k(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (c *cluster) helmRun(timeout time.Duration, args ...string) (string, error) {
	return run(timeout, nil, c.helm, args...)
}

// getJSON reads one object (or a List) as generic JSON.
func (c *cluster) getJSON(args ...string) (obj, error) {
	out, err := c.k(append(append([]string{"get"}, args...), "-o", "json")...)
	if err != nil {
		return nil, err
	}
	var o obj
	if err := json.Unmarshal([]byte(out), &o); err != nil {
		return nil, fmt.Errorf("decoding kubectl output: %w", err)
	}
	return o, nil
}

// items lists objects; a missing kind (for example a CRD not installed) is an error.
func (c *cluster) items(args ...string) ([]obj, error) {
	o, err := c.getJSON(args...)
	if err != nil {
		return nil, err
	}
	return o.list("items"), nil
}

// eventually is the shared bounded poll (test/utils).
var eventually = utils.Eventually

// obj is decoded JSON with small accessors, so the suite does not depend on the
// operator's Go types: it reads the API the way any client would.
type obj map[string]any

func (o obj) get(path ...string) any {
	var cur any = map[string]any(o)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			if om, ok2 := cur.(obj); ok2 {
				m = om
			} else {
				return nil
			}
		}
		cur = m[p]
	}
	return cur
}

func (o obj) str(path ...string) string {
	switch v := o.get(path...).(type) {
	case string:
		return v
	case float64:
		return fmt.Sprintf("%v", v)
	case bool:
		return fmt.Sprintf("%v", v)
	case nil:
		return ""
	default:
		b, _ := json.Marshal(v)
		return string(b)
	}
}

func (o obj) num(path ...string) int {
	if f, ok := o.get(path...).(float64); ok {
		return int(f)
	}
	return 0
}

func (o obj) list(path ...string) []obj {
	raw, _ := o.get(path...).([]any)
	out := make([]obj, 0, len(raw))
	for _, r := range raw {
		if m, ok := r.(map[string]any); ok {
			out = append(out, obj(m))
		}
	}
	return out
}

func (o obj) strMap(path ...string) map[string]string {
	raw, _ := o.get(path...).(map[string]any)
	out := map[string]string{}
	for k, v := range raw {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// condition returns the status condition of the given type, or nil.
func condition(o obj, typ string) obj {
	for _, c := range o.list("status", "conditions") {
		if c.str("type") == typ {
			return c
		}
	}
	return nil
}

func describeConditions(o obj) string {
	var parts []string
	for _, c := range o.list("status", "conditions") {
		parts = append(parts, fmt.Sprintf("%s=%s(%s: %s)", c.str("type"), c.str("status"), c.str("reason"), c.str("message")))
	}
	return strings.Join(parts, "; ")
}

func podReady(p obj) bool {
	if p.get("metadata", "deletionTimestamp") != nil {
		return false
	}
	for _, c := range p.list("status", "conditions") {
		if c.str("type") == "Ready" {
			return c.str("status") == "True"
		}
	}
	return false
}
