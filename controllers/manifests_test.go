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

package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// certManagerVersion pins the cert-manager release whose CRDs (shipped in
// the Go module under deploy/crds) validate config/certmanager.
const certManagerVersion = "v1.21.2"

// certManagerCRDs returns cert-manager's CRD directory, fetched through the
// Go module proxy (or taken from CERT_MANAGER_CRDS).
func certManagerCRDs(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("CERT_MANAGER_CRDS"); dir != "" {
		return dir
	}
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/cert-manager/cert-manager@"+certManagerVersion)
	cmd.Dir = t.TempDir() // outside the module: go.mod and go.sum stay untouched
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go mod download cert-manager: %v\n%s\n%s", err, out, ee.Stderr)
		}
		t.Fatalf("go mod download cert-manager: %v", err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download gave no directory: %v %s", err, out)
	}
	return filepath.Join(mod.Dir, "deploy", "crds")
}

// kustomizeBuild renders a kustomization with the project's pinned kustomize.
func kustomizeBuild(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	bin := os.Getenv("KUSTOMIZE")
	if bin == "" {
		bin = filepath.Join("..", "bin", "kustomize")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kustomize not found at %s (run 'make kustomize' or set KUSTOMIZE): %v", bin, err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "build", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v\n%s", dir, err, stderr.String())
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decoding kustomize output: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

// TestInstallerPassesServerSideDryRun renders config/default (operator,
// RBAC, webhooks, and the cert-manager Issuer and Certificates) and has the
// real API server validate every object, with cert-manager's real CRDs
// installed, by a server-side apply dry run.
func TestInstallerPassesServerSideDryRun(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{certManagerCRDs(t)}, ErrorIfPathMissing: true}); err != nil {
		t.Fatalf("installing cert-manager CRDs: %v", err)
	}

	objs := kustomizeBuild(t, filepath.Join("..", "config", "default"))
	kinds := map[string]int{}
	for _, o := range objs {
		kinds[o.GetKind()]++
		if o.GetKind() == "Namespace" {
			// Namespaced objects can only be validated inside a namespace
			// that exists, so this one is created for real.
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.GetName()}}
			if err := k8sClient.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
		}
	}
	for _, k := range []string{"CustomResourceDefinition", "Deployment", "ClusterRole", "Role", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "Issuer", "Certificate", "Service", "DaemonSet"} {
		if kinds[k] == 0 {
			t.Errorf("config/default renders no %s (rendered %v)", k, kinds)
		}
	}
	for _, o := range objs {
		// Apply writes the server's answer into its argument: keep o as rendered.
		if err := k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()), client.FieldOwner("dry-run-test"), client.ForceOwnership, client.DryRunAll); err != nil {
			t.Errorf("%s %s/%s refused by the API server: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}

	// The wiring between the objects: the cainjector annotation names the
	// serving Certificate, which names the webhook Service in its namespace.
	var cert *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "Certificate" && strings.HasSuffix(o.GetName(), "serving-cert") {
			cert = o
		}
	}
	if cert == nil {
		t.Fatal("no serving Certificate rendered")
	}
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if len(dns) != 2 || dns[0] != "cachet-webhook-service.cachet-system.svc" || dns[1] != "cachet-webhook-service.cachet-system.svc.cluster.local" {
		t.Errorf("serving certificate dnsNames %v", dns)
	}
	for _, o := range objs {
		if strings.HasSuffix(o.GetKind(), "WebhookConfiguration") {
			if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != cert.GetNamespace()+"/"+cert.GetName() {
				t.Errorf("%s inject-ca-from = %q, want %s/%s", o.GetName(), got, cert.GetNamespace(), cert.GetName())
			}
			hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
			for _, h := range hooks {
				name, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "name")
				ns, _, _ := unstructured.NestedString(h.(map[string]any), "clientConfig", "service", "namespace")
				if name != "cachet-webhook-service" || ns != "cachet-system" {
					t.Errorf("%s calls service %s/%s", o.GetName(), ns, name)
				}
			}
		}
	}

	// The dry run really validates against cert-manager's schema: a broken
	// Certificate is refused.
	bad := cert.DeepCopy()
	_ = unstructured.SetNestedField(bad.Object, int64(42), "spec", "secretName")
	err := k8sClient.Apply(ctx, client.ApplyConfigurationFromUnstructured(bad), client.FieldOwner("dry-run-test"), client.ForceOwnership, client.DryRunAll)
	if err == nil || !strings.Contains(err.Error(), "secretName") {
		t.Errorf("a Certificate with a numeric secretName was not refused: %v", err)
	}
}

// TestOptionalServiceMonitorScrapesWithItsOwnToken checks config/prometheus
// (kubebuilder's optional ServiceMonitor for the operator): it authenticates
// with the scraper ServiceAccount's token Secret, not the deprecated
// bearerTokenFile, and the two names kustomize cannot prefix (inside the
// ServiceMonitor and in the Secret's annotation) carry config/default's
// namePrefix, so they name the objects it renders.
func TestOptionalServiceMonitorScrapesWithItsOwnToken(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "config", "default", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	prefix := ""
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "namePrefix:"); ok {
			prefix = strings.TrimSpace(v)
		}
	}
	if prefix == "" {
		t.Fatal("config/default/kustomization.yaml has no namePrefix")
	}
	byKind := map[string]*unstructured.Unstructured{}
	for _, o := range kustomizeBuild(t, filepath.Join("..", "config", "prometheus")) {
		byKind[o.GetKind()] = o
	}
	sm, secret, sa := byKind["ServiceMonitor"], byKind["Secret"], byKind["ServiceAccount"]
	if sm == nil || secret == nil || sa == nil {
		t.Fatalf("config/prometheus should render a ServiceMonitor, a Secret and a ServiceAccount; got %v", byKind)
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor endpoints: %v", endpoints)
	}
	ep := endpoints[0].(map[string]any)
	if _, found := ep["bearerTokenFile"]; found {
		t.Error("the ServiceMonitor still uses the deprecated bearerTokenFile")
	}
	name, _, _ := unstructured.NestedString(ep, "authorization", "credentials", "name")
	if want := prefix + secret.GetName(); name != want {
		t.Errorf("ServiceMonitor authorization.credentials.name = %q, want %q (the rendered Secret)", name, want)
	}
	if got, want := secret.GetAnnotations()["kubernetes.io/service-account.name"], prefix+sa.GetName(); got != want {
		t.Errorf("token Secret's service-account.name = %q, want %q", got, want)
	}
}
