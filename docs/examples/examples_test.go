// Package examples holds no code: its test keeps the YAML examples that the
// docs point users to valid Kubernetes objects that do what the docs say.
package examples

import (
	"bytes"
	"os"
	"path/filepath"
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
