// Package examples holds no code: its tests keep what the docs tell users to
// type working. The YAML examples must be valid Kubernetes objects that do
// what the docs say; the READMEs' install steps must agree on namespaces, so
// that `helm test` finds the Cache they applied; and no hint may use nc,
// which the project does not install. Part of `make test` (go test ./...).
package examples

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// splitDocs returns the non-empty YAML documents of a file.
func splitDocs(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for _, d := range bytes.Split(b, []byte("\n---\n")) {
		var probe map[string]any
		if err := yaml.Unmarshal(d, &probe); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if len(probe) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

// endpoints-reader.yaml: every object decodes strictly (a misspelt field
// fails), the Role grants get on caches and caches/status in the Cache API's
// group, the RoleBinding gives it to the ServiceAccount the pod runs as, and
// the pod reads status.endpoints of the sample Cache, all in one namespace.
func TestEndpointsReader(t *testing.T) {
	var (
		sa   corev1.ServiceAccount
		role rbacv1.Role
		rb   rbacv1.RoleBinding
		pod  corev1.Pod
	)
	seen := map[string]bool{}
	for _, d := range splitDocs(t, "endpoints-reader.yaml") {
		var meta struct{ Kind string }
		if err := yaml.Unmarshal(d, &meta); err != nil {
			t.Fatal(err)
		}
		var into any
		switch meta.Kind {
		case "ServiceAccount":
			into = &sa
		case "Role":
			into = &role
		case "RoleBinding":
			into = &rb
		case "Pod":
			into = &pod
		default:
			t.Fatalf("unexpected kind %q", meta.Kind)
		}
		if err := yaml.UnmarshalStrict(d, into); err != nil {
			t.Fatalf("%s: %v", meta.Kind, err)
		}
		seen[meta.Kind] = true
	}
	for _, k := range []string{"ServiceAccount", "Role", "RoleBinding", "Pod"} {
		if !seen[k] {
			t.Fatalf("no %s", k)
		}
	}

	ns := sa.Namespace
	for _, o := range []string{role.Namespace, rb.Namespace, pod.Namespace} {
		if o != ns {
			t.Errorf("objects in namespaces %q and %q: a Role grants only in its own", ns, o)
		}
	}
	group := cachev1alpha1.GroupVersion.Group
	granted := map[string]bool{}
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, group) && slices.Contains(r.Verbs, "get") {
			for _, res := range r.Resources {
				granted[res] = true
			}
		}
	}
	for _, res := range []string{"caches", "caches/status"} {
		if !granted[res] {
			t.Errorf("the Role does not grant get on %s in %s", res, group)
		}
	}
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != role.Name {
		t.Errorf("the RoleBinding refers to %s %q, not the Role %q", rb.RoleRef.Kind, rb.RoleRef.Name, role.Name)
	}
	bound := false
	for _, s := range rb.Subjects {
		bound = bound || (s.Kind == "ServiceAccount" && s.Name == sa.Name && s.Namespace == ns)
	}
	if !bound {
		t.Errorf("the RoleBinding does not bind the ServiceAccount %s/%s", ns, sa.Name)
	}
	if pod.Spec.ServiceAccountName != sa.Name {
		t.Errorf("the pod runs as %q, not the ServiceAccount %q", pod.Spec.ServiceAccountName, sa.Name)
	}

	// The Cache it reads is the sample's, and it reads status.endpoints.
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "samples", "cache_v1alpha1_cache.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var sample cachev1alpha1.Cache
	if err := yaml.UnmarshalStrict(b, &sample); err != nil {
		t.Fatal(err)
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	args := strings.Join(pod.Spec.Containers[0].Args, " ")
	if !slices.Contains(pod.Spec.Containers[0].Args, sample.Name) {
		t.Errorf("the pod does not read the sample Cache %q: %s", sample.Name, args)
	}
	if !strings.Contains(args, ".status.endpoints[*]}{.host}:{.port}") {
		t.Errorf("the pod does not print status.endpoints' host:port: %s", args)
	}
}

// quickStart is what a README's install steps say: the release's namespace,
// the namespace `helm test` looks in, the namespace the sample Cache goes to.
type quickStart struct{ release, testNS, sampleNS string }

var (
	helmInstallRe = regexp.MustCompile(`helm install cachet charts/cachet (?:-n|--namespace) (\S+)`)
	testNSRe      = regexp.MustCompile(`--set tests\.cache\.namespace=(\S+)`)
	sampleRe      = regexp.MustCompile(`kubectl (?:(?:-n|--namespace) (\S+) )?apply (?:(?:-n|--namespace) (\S+) )?-f config/samples/cache_v1alpha1_cache\.yaml`)
	helmTestRe    = regexp.MustCompile(`helm test cachet (?:-n|--namespace) (\S+)`)
	ncRe          = regexp.MustCompile(`\|\s*nc\b|\bnc -q`)
)

func readQuickStart(t *testing.T, path string) quickStart {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	one := func(re *regexp.Regexp, what string) []string {
		m := re.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("%s: no %s", path, what)
		}
		return m
	}
	q := quickStart{release: one(helmInstallRe, "helm install of the chart")[1]}
	q.testNS = q.release // the chart's default: the release namespace
	if m := testNSRe.FindStringSubmatch(text); m != nil {
		q.testNS = m[1]
	}
	m := one(sampleRe, "kubectl apply of the sample Cache")
	q.sampleNS = "default" // kubectl's namespace without -n (and without a context's)
	for _, ns := range m[1:] {
		if ns != "" {
			q.sampleNS = ns
		}
	}
	if ht := one(helmTestRe, "helm test")[1]; ht != q.release {
		t.Errorf("%s: helm test -n %s, but the release is in %s", path, ht, q.release)
	}
	return q
}

// A reader who follows either README's steps gets a `helm test` that finds
// the Cache they applied, and both READMEs put things in the same places.
// (The user trial found README's Cache in default and the test looking in
// cachet-system.)
func TestQuickStartsAgree(t *testing.T) {
	root := filepath.Join("..", "..")
	readme := readQuickStart(t, filepath.Join(root, "README.md"))
	chart := readQuickStart(t, filepath.Join(root, "charts", "cachet", "README.md"))
	for path, q := range map[string]quickStart{"README.md": readme, "charts/cachet/README.md": chart} {
		if q.testNS != q.sampleNS {
			t.Errorf("%s: the sample Cache goes to namespace %q, but helm test looks in %q (tests.cache.namespace)", path, q.sampleNS, q.testNS)
		}
	}
	if readme != chart {
		t.Errorf("README.md says %+v, charts/cachet/README.md says %+v", readme, chart)
	}
}

// The project installs no nc; what the docs and hints tell users to type must
// work with what it does install (python3, cachet-probe).
func TestNoNetcatInHints(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, p := range []string{"README.md", "charts/cachet/README.md", "charts/cachet/templates/NOTES.txt", "hack/up.sh", "docs/operator.md", "docs/e2e.md", "docs/upgrade.md"} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if loc := ncRe.FindIndex(b); loc != nil {
			t.Errorf("%s tells users to run nc, which the project does not install: %q", p, b[max(0, loc[0]-40):loc[1]])
		}
	}
}
