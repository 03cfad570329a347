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
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
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
	c := newCache(withIssuer)
	c.Namespace = ns
	built := Certificate(c, testOpts)
	sent := built.DeepCopy()
	if err := k8sClient.Create(context.Background(), sent, client.DryRunAll); err != nil {
		t.Fatalf("cert-manager's CRD refuses the Certificate: %v", err)
	}
	if !reflect.DeepEqual(sent.Object["spec"], built.Object["spec"]) {
		t.Fatalf("the API server would store another spec (a field it does not know was pruned):\nbuilt  %v\nstored %v", built.Object["spec"], sent.Object["spec"])
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
