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
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/test/utils"
)

func withIssuer(c *cachev1alpha1.Cache) {
	c.Spec.TLS = &cachev1alpha1.TLSSpec{IssuerRef: &cachev1alpha1.IssuerReference{Name: "cluster-ca", Kind: "ClusterIssuer"}}
}

func TestCertificateOnlyForAnIssuer(t *testing.T) {
	if Certificate(newCache(), testOpts) != nil {
		t.Error("a Cache without spec.tls got a Certificate")
	}
	byo := newCache(func(c *cachev1alpha1.Cache) { c.Spec.TLS = &cachev1alpha1.TLSSpec{SecretName: "my-cert"} })
	if Certificate(byo, testOpts) != nil {
		t.Error("a Cache with its own Secret got a Certificate")
	}
	if got := TLSSecretName(byo); got != "my-cert" {
		t.Errorf("pods mount %q, not the user's Secret", got)
	}
	c := newCache(withIssuer)
	cert := Certificate(c, BuildOptions{ClusterDomain: "k.test"})
	if cert == nil {
		t.Fatal("no Certificate for an issuerRef")
	}
	if cert.GetName() != "web-tls" || cert.GetNamespace() != "prod" || TLSSecretName(c) != "web-tls" {
		t.Errorf("names: %s/%s, Secret %s", cert.GetNamespace(), cert.GetName(), TLSSecretName(c))
	}
	secret, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	issuer, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
	if secret != "web-tls" || !reflect.DeepEqual(issuer, map[string]string{"name": "cluster-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}) {
		t.Errorf("secretName %q issuerRef %v", secret, issuer)
	}
	// A commonName is capped at 64 bytes by X.509, which
	// <name>.<namespace>.svc exceeds for long names: issuance would fail.
	if cn, found, _ := unstructured.NestedString(cert.Object, "spec", "commonName"); found {
		t.Errorf("commonName %q: the dnsNames carry the names, a CN can be too long to issue", cn)
	}
	// With clientAuth Require the pod's probes (/healthz, cachet-probe)
	// present this certificate as their client certificate.
	usages, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "usages")
	if !slices.Contains(usages, "server auth") || slices.Contains(usages, "client auth") {
		t.Errorf("usages %v without clientAuth Require: want server auth only", usages)
	}
	c.Spec.TLS.ClientAuth = "Require"
	usages, _, _ = unstructured.NestedStringSlice(Certificate(c, testOpts).Object, "spec", "usages")
	if !slices.Contains(usages, "server auth") || !slices.Contains(usages, "client auth") {
		t.Errorf("usages %v with clientAuth Require lack server auth or client auth", usages)
	}
	c.Spec.TLS.ClientAuth = ""
	names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	// Every pod's stable name (web-N.web-headless.prod.svc.k.test) and the
	// client Service, as clients reach them in and across namespaces.
	for _, want := range []string{"*.web-headless.prod.svc", "*.web-headless.prod.svc.k.test", "web", "web.prod", "web.prod.svc", "web.prod.svc.k.test"} {
		if !slices.Contains(names, want) {
			t.Errorf("dnsNames %v lack %s", names, want)
		}
	}
	if Certificate(c, testOpts) == nil || !slices.Contains(TLSDNSNames(c, ""), "*.web-headless.prod.svc.cluster.local") {
		t.Error("without a cluster domain the names are not completed with cluster.local")
	}
}

// installCertManagerCRDs installs cert-manager's CRDs from its own module
// (CERT_MANAGER_CRDS, set by 'make test'), as installing cert-manager would.
func installCertManagerCRDs(t *testing.T) {
	installCRDsFrom(t, "CERT_MANAGER_CRDS", "cert-manager.io_certificates.yaml", "cert-manager.io_issuers.yaml")
}

// The Certificate as cert-manager's own CRD judges it: the API server
// refuses a wrong enum value and silently drops a misspelt field, so the
// object it would store must equal the one built.
func TestCertificateMatchesCertManagersSchema(t *testing.T) {
	needIntegration(t)
	installCertManagerCRDs(t)
	ns := newNamespace(t)
	c := newCache(withIssuer, func(c *cachev1alpha1.Cache) { c.Spec.TLS.ClientAuth = "Require" })
	c.Namespace = ns
	built := Certificate(c, testOpts)
	sent := built.DeepCopy()
	if err := k8sClient.Create(context.Background(), sent, client.DryRunAll); err != nil {
		t.Fatalf("cert-manager's CRD refuses the Certificate: %v", err)
	}
	if !reflect.DeepEqual(sent.Object["spec"], built.Object["spec"]) {
		t.Fatalf("the API server would store another spec (a field it does not know was pruned):\nbuilt  %v\nstored %v", built.Object["spec"], sent.Object["spec"])
	}
	if usages, _, _ := unstructured.NestedStringSlice(sent.Object, "spec", "usages"); !slices.Contains(usages, "client auth") {
		t.Errorf("stored usages %v lack client auth", usages)
	}
}

// spec.tls.issuerRef on a real API server: the Cache gets its Certificate
// once cert-manager's CRDs exist, controlled by the Cache, and loses it when
// spec.tls goes.
func TestCertificateFollowsTheSpec(t *testing.T) {
	needIntegration(t)
	installCertManagerCRDs(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := createCache(t, ns, "secure", withIssuer)
	key := client.ObjectKey{Namespace: ns, Name: CertificateName(c)}
	cert := certificateObject()
	eventually(t, "the Certificate of spec.tls.issuerRef", func() (bool, string) {
		if err := k8sClient.Get(ctx, key, cert); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if !controlledBy(cert, c) {
		t.Error("the Certificate is not controlled by the Cache")
	}
	if _, err := updateCache(ns, "secure", func(c *cachev1alpha1.Cache) { c.Spec.TLS = nil }); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Certificate pruned without spec.tls", func() (bool, string) {
		err := k8sClient.Get(ctx, key, certificateObject())
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

// setCertificateReady writes the Ready condition of a Certificate through
// its status subresource, as cert-manager's controller would (none runs in
// this test).
func setCertificateReady(t *testing.T, ns, name string, ready metav1.ConditionStatus, reason, message string) {
	t.Helper()
	ctx := context.Background()
	cert := certificateObject()
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cert); err != nil {
		t.Fatal(err)
	}
	cond := map[string]any{"type": "Ready", "status": string(ready), "reason": reason, "message": message,
		"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}
	if err := unstructured.SetNestedSlice(cert.Object, []any{cond}, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Status().Update(ctx, cert); err != nil {
		t.Fatalf("writing Certificate %s's status: %v", name, err)
	}
}

// waitTLSReady waits for c's TLSReady condition to have status and
// reason, and returns it.
func waitTLSReady(t *testing.T, c *cachev1alpha1.Cache, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	var cond metav1.Condition
	eventually(t, fmt.Sprintf("TLSReady %s %s", status, reason), func() (bool, string) {
		cond = condOf(getCache(t, c.Namespace, c.Name), cachev1alpha1.ConditionTLSReady)
		return cond.Status == status && cond.Reason == reason, fmt.Sprintf("%+v", cond)
	})
	return cond
}

// The TLSReady condition names what keeps spec.tls.issuerRef's certificate
// from the pods, on a real API server: first cert-manager itself (its CRDs
// are not served), then, once they are and the operator has made its
// Certificate, an issuer that has not issued it (the Certificate not Ready,
// written here as cert-manager would write it); then, with the Secret
// issued and the Certificate Ready, TLSReady turns True.
func TestTLSReadyNamesNoCertManagerThenTheIssuerNotReady(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: "certificates.cert-manager.io"}, crd); !apierrors.IsNotFound(err) {
		t.Fatalf("cert-manager's Certificate CRD is served before the test (%v): an earlier test left it", err)
	}
	ns := newNamespace(t)
	c := createCache(t, ns, "secure", func(c *cachev1alpha1.Cache) {
		c.Spec.TLS = &cachev1alpha1.TLSSpec{IssuerRef: &cachev1alpha1.IssuerReference{Name: "team-ca", Kind: "Issuer"}}
	})
	cond := waitTLSReady(t, c, metav1.ConditionFalse, ReasonNoCertManager)
	if !strings.Contains(cond.Message, "needs cert-manager") || !strings.Contains(cond.Message, "secretName") {
		t.Errorf("NoCertManager message %q: want what is missing and the way out", cond.Message)
	}

	installCertManagerCRDs(t)
	key := client.ObjectKey{Namespace: ns, Name: CertificateName(c)}
	eventually(t, "the Certificate made once cert-manager's CRDs are served", func() (bool, string) {
		err := k8sClient.Get(ctx, key, certificateObject())
		return err == nil, fmt.Sprint(err)
	})
	// no cert-manager controller: the Certificate has no status yet, and
	// no Secret exists
	waitTLSReady(t, c, metav1.ConditionFalse, ReasonSecretMissing)
	setCertificateReady(t, ns, key.Name, metav1.ConditionFalse, "DoesNotExist", `Referenced "Issuer" not found: issuer.cert-manager.io "team-ca" not found`)
	cond = waitTLSReady(t, c, metav1.ConditionFalse, ReasonIssuerNotReady)
	for _, want := range []string{"Certificate " + key.Name, "issuer Issuer team-ca", `"team-ca" not found`, "the Issuer team-ca does not exist"} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("IssuerNotReady message %q lacks %q", cond.Message, want)
		}
	}

	// an Issuer that exists but is not Ready: the message quotes the
	// issuer's own reason, which names the cause the Certificate's does not
	issuer := certManagerObject("Issuer", ns, "team-ca", map[string]any{"ca": map[string]any{"secretName": "team-ca-key"}})
	if err := k8sClient.Create(ctx, issuer); err != nil {
		t.Fatal(err)
	}
	issuerCond := map[string]any{"type": "Ready", "status": "False", "reason": "ErrGetKeyPair",
		"message":            `Error getting keypair for CA issuer: secrets "team-ca-key" not found`,
		"lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}
	if err := unstructured.SetNestedSlice(issuer.Object, []any{issuerCond}, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Status().Update(ctx, issuer); err != nil {
		t.Fatalf("writing the Issuer's status: %v", err)
	}
	bumped, err := updateCache(ns, c.Name, func(c *cachev1alpha1.Cache) { c.Spec.Replicas = ptr.To(int32(3)) })
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "TLSReady written for the generation after the Issuer", func() (bool, string) {
		cond = condOf(getCache(t, ns, c.Name), cachev1alpha1.ConditionTLSReady)
		return cond.ObservedGeneration >= bumped.Generation, fmt.Sprintf("generation %d: %+v", bumped.Generation, cond)
	})
	if want := `the Issuer says ErrGetKeyPair: Error getting keypair for CA issuer: secrets "team-ca-key" not found`; cond.Reason != ReasonIssuerNotReady || !strings.Contains(cond.Message, want) {
		t.Errorf("with the Issuer not Ready, TLSReady is %s (%s): want %s quoting %q", cond.Reason, cond.Message, ReasonIssuerNotReady, want)
	}

	// cert-manager writes the Secret, then marks the Certificate Ready:
	// until the mark, the issuer is still what is missing
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: TLSSecretName(c)}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": []byte("issued"), "tls.key": []byte("issued")}}
	if err := k8sClient.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	// the condition is IssuerNotReady already, so waiting for that value
	// proves nothing: change the spec after the Secret exists and wait for
	// the condition written for the new generation, which a reconcile that
	// saw the Secret wrote
	bumped, err = updateCache(ns, c.Name, func(c *cachev1alpha1.Cache) { c.Spec.Replicas = ptr.To(int32(2)) })
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "TLSReady written for the generation after the Secret", func() (bool, string) {
		cond = condOf(getCache(t, ns, c.Name), cachev1alpha1.ConditionTLSReady)
		return cond.ObservedGeneration >= bumped.Generation, fmt.Sprintf("generation %d: %+v", bumped.Generation, cond)
	})
	if cond.Status != metav1.ConditionFalse || cond.Reason != ReasonIssuerNotReady {
		t.Errorf("with the Secret but the Certificate not Ready, TLSReady is %s %s (%s): want False %s", cond.Status, cond.Reason, cond.Message, ReasonIssuerNotReady)
	}
	setCertificateReady(t, ns, key.Name, metav1.ConditionTrue, "Ready", "Certificate is up to date and has not expired")
	waitTLSReady(t, c, metav1.ConditionTrue, ReasonSecretMounted)
}

// With spec.tls.metrics, scrapers verify the metrics port against the
// serving Secret's ca.crt (the PodMonitor's tlsConfig, the Observed
// profile's reader): a user Secret without one is TLSReady False
// SecretMissingCA, naming the Secret, while the pods are still made (the
// data port works); adding ca.crt turns it True.
func TestTLSReadyNamesAMetricsSecretWithoutCA(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	ca := utils.NewTestCA(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "user-certs"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": []byte("issued"), "tls.key": []byte("issued")}}
	if err := k8sClient.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	c := createCache(t, ns, "scraped", func(c *cachev1alpha1.Cache) {
		c.Spec.TLS = &cachev1alpha1.TLSSpec{SecretName: secret.Name, Metrics: true}
	})
	cond := waitTLSReady(t, c, metav1.ConditionFalse, ReasonSecretMissingCA)
	for _, want := range []string{"spec.tls.metrics", "ca.crt", "Secret " + secret.Name} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("SecretMissingCA message %q lacks %q", cond.Message, want)
		}
	}
	eventually(t, "the StatefulSet made all the same", func() (bool, string) {
		err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: StatefulSetName(c)}, &appsv1.StatefulSet{})
		return err == nil, fmt.Sprint(err)
	})

	secret.Data[TLSCAKey] = ca.CertPEM
	if err := k8sClient.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	waitTLSReady(t, c, metav1.ConditionTrue, ReasonSecretMounted)
}

// A message quoted from cert-manager can be of any length, and a Condition
// message over 32768 bytes makes the API server refuse the whole status
// write: it is cut, on a UTF-8 boundary.
func TestConditionMessageFitsACondition(t *testing.T) {
	short := "Certificate x is not Ready"
	if got := conditionMessage(short); got != short {
		t.Errorf("a short message changed: %q", got)
	}
	long := strings.Repeat("é", maxConditionMessage) // 2 bytes a rune
	got := conditionMessage(long)
	if len(got) > maxConditionMessage || !utf8.ValidString(got) || !strings.HasSuffix(got, " [cut]") {
		t.Errorf("cut message: %d bytes, valid UTF-8 %v, suffix %q", len(got), utf8.ValidString(got), got[len(got)-8:])
	}
}
