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
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// certManagerExited reports the exit of the process startCertManager
// started, so that a wait on it fails at once with its log instead of
// running out its bound.
var certManagerExited chan error

// certManagerAlive fails the test when cert-manager has exited.
func certManagerAlive(t *testing.T) {
	t.Helper()
	select {
	case err := <-certManagerExited:
		certManagerExited <- err // for the cleanup
		t.Fatalf("cert-manager exited: %v", err)
	default:
	}
}

// startCertManager runs cert-manager's controllers (the binary
// hack/security-stack.sh builds from the pinned release, CERT_MANAGER_CONTROLLER)
// against the suite's API server until the test ends, as a user of its own
// with a kubeconfig, the way it runs in a cluster. Its log is printed when
// the test fails.
func startCertManager(t *testing.T) {
	t.Helper()
	bin := os.Getenv("CERT_MANAGER_CONTROLLER")
	if bin == "" {
		t.Fatal("CERT_MANAGER_CONTROLLER is not set; run 'make test' (hack/security-stack.sh cert-manager builds it)")
	}
	installCRDsFrom(t, "CERT_MANAGER_CRDS", "cert-manager.io_certificates.yaml", "cert-manager.io_certificaterequests.yaml",
		"cert-manager.io_issuers.yaml", "cert-manager.io_clusterissuers.yaml")
	user, err := testEnv.AddUser(envtest.User{Name: "cert-manager", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kubeconfigPath := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfigPath, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "cert-manager.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--kubeconfig", kubeconfigPath, "-v=2")
	cmd.Stdout, cmd.Stderr = log, log
	// Stopped as the kubelet stops a pod: SIGTERM, then SIGKILL.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting %s: %v", bin, err)
	}
	certManagerExited = make(chan error, 1)
	go func() { certManagerExited <- cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		t.Logf("cert-manager stopped: %v", <-certManagerExited)
		_ = log.Close()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			if len(out) > 20000 {
				out = out[len(out)-20000:]
			}
			t.Logf("cert-manager's log (end):\n%s", out)
		}
	})
}

// certManagerObject is a cert-manager kind as the test writes it.
func certManagerObject(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(schema.FromAPIVersionAndKind(CertManagerAPI, kind))
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

// waitReady waits for cert-manager to set the Ready condition of a
// cert-manager object to True.
func waitReady(t *testing.T, kind, ns, name string) {
	t.Helper()
	eventually(t, kind+" "+name+" Ready", func() (bool, string) {
		certManagerAlive(t)
		u := certManagerObject(kind, ns, name, nil)
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, u); err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Ready" {
				return m["status"] == "True", fmt.Sprintf("Ready=%v %v: %v", m["status"], m["reason"], m["message"])
			}
		}
		return false, "no Ready condition"
	})
}

// issuedSecret waits for the Secret cert-manager writes for a Certificate
// and returns its leaf certificate, checked to chain to the roots in caPEM.
func issuedSecret(t *testing.T, ns, name string, caPEM []byte) *x509.Certificate {
	t.Helper()
	secret := &corev1.Secret{}
	eventually(t, "Secret "+name+" with a certificate and key", func() (bool, string) {
		certManagerAlive(t)
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, secret); err != nil {
			return false, err.Error()
		}
		return len(secret.Data["tls.crt"]) > 0 && len(secret.Data["tls.key"]) > 0, fmt.Sprintf("keys %v", slices.Sorted(maps.Keys(secret.Data)))
	})
	var chain []*x509.Certificate
	for rest := secret.Data["tls.crt"]; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("Secret %s: %v", name, err)
		}
		chain = append(chain, cert)
	}
	if len(chain) == 0 {
		t.Fatalf("Secret %s has no certificate in tls.crt", name)
	}
	roots, intermediates := x509.NewCertPool(), x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate to verify against")
	}
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		t.Fatalf("Secret %s's certificate does not chain to the CA: %v", name, err)
	}
	if !bytes.Equal(bytes.TrimSpace(secret.Data["ca.crt"]), bytes.TrimSpace(caPEM)) {
		t.Errorf("Secret %s's ca.crt is not the CA's certificate", name)
	}
	return chain[0]
}

// cert-manager itself, built from the module proxy, on a real API server:
// a SelfSigned ClusterIssuer signs a CA, which the CA injector copies into a
// webhook configuration, a CA Issuer signs a leaf with DNS SANs; then the operator's own path, spec.tls.issuerRef to that Issuer:
// the Certificate the operator owns is issued into the Secret the pods
// mount, and TLSReady turns True.
func TestCertManagerIssuesTheCachesCertificate(t *testing.T) {
	needIntegration(t)
	startCertManager(t)
	ctx := context.Background()
	ns := newNamespace(t)
	selfSigned := "selfsigned-" + ns
	create := func(u *unstructured.Unstructured) {
		t.Helper()
		if err := k8sClient.Create(ctx, u); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	clusterIssuer := certManagerObject("ClusterIssuer", "", selfSigned, map[string]any{"selfSigned": map[string]any{}})
	create(clusterIssuer)
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), clusterIssuer) })
	waitReady(t, "ClusterIssuer", "", selfSigned)

	create(certManagerObject("Certificate", ns, "ca", map[string]any{
		"isCA": true, "commonName": "cachet test CA", "secretName": "ca",
		"privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256)},
		"issuerRef":  map[string]any{"name": selfSigned, "kind": "ClusterIssuer", "group": "cert-manager.io"},
	}))
	waitReady(t, "Certificate", ns, "ca")
	caSecret := &corev1.Secret{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "ca"}, caSecret); err != nil {
		t.Fatal(err)
	}
	caPEM := caSecret.Data["tls.crt"]
	ca := issuedSecret(t, ns, "ca", caPEM)
	if !ca.IsCA || ca.Subject.CommonName != "cachet test CA" {
		t.Fatalf("the CA Certificate's Secret holds %q, IsCA=%v", ca.Subject.CommonName, ca.IsCA)
	}

	// The CA injector: a webhook configuration asking for the CA
	// Certificate's CA gets it as its caBundle. The webhook matches no real
	// resource, so the API server never calls it.
	webhookConfig := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "inject-" + ns, Annotations: map[string]string{"cert-manager.io/inject-ca-from": ns + "/ca"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "nothing.cachet.test",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:9/validate")},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"cachet.test"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if err := k8sClient.Create(ctx, webhookConfig); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), webhookConfig) })
	eventually(t, "the CA injected into the webhook configuration", func() (bool, string) {
		certManagerAlive(t)
		got := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(webhookConfig), got); err != nil {
			return false, err.Error()
		}
		bundle := got.Webhooks[0].ClientConfig.CABundle
		return bytes.Equal(bytes.TrimSpace(bundle), bytes.TrimSpace(caPEM)), fmt.Sprintf("caBundle of %d bytes", len(bundle))
	})

	create(certManagerObject("Issuer", ns, "ca", map[string]any{"ca": map[string]any{"secretName": "ca"}}))
	waitReady(t, "Issuer", ns, "ca")
	create(certManagerObject("Certificate", ns, "leaf", map[string]any{
		"secretName": "leaf", "dnsNames": []any{"a.example.test", "b.example.test"},
		"issuerRef": map[string]any{"name": "ca", "kind": "Issuer"},
	}))
	waitReady(t, "Certificate", ns, "leaf")
	leaf := issuedSecret(t, ns, "leaf", caPEM)
	if !slices.Equal(slices.Sorted(slices.Values(leaf.DNSNames)), []string{"a.example.test", "b.example.test"}) {
		t.Errorf("leaf DNS names %v", leaf.DNSNames)
	}

	c := createCache(t, ns, "secure", func(c *cachev1alpha1.Cache) {
		c.Spec.TLS = &cachev1alpha1.TLSSpec{IssuerRef: &cachev1alpha1.IssuerReference{Name: "ca", Kind: "Issuer"}}
	})
	waitReady(t, "Certificate", ns, CertificateName(c))
	served := issuedSecret(t, ns, TLSSecretName(c), caPEM)
	if !slices.Contains(served.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		t.Errorf("the Cache's certificate is not for server auth: %v", served.ExtKeyUsage)
	}
	for _, want := range TLSDNSNames(c, "cluster.test") {
		if !slices.Contains(served.DNSNames, want) {
			t.Errorf("the Cache's certificate lacks SAN %s (has %v)", want, served.DNSNames)
		}
	}
	eventually(t, "TLSReady True", func() (bool, string) {
		cond := condOf(getCache(t, ns, "secure"), cachev1alpha1.ConditionTLSReady)
		return cond.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", cond)
	})
}
