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

// The data plane's certificate (spec.tls): the cert-manager Certificate the
// operator owns for a Cache with spec.tls.issuerRef, and the names both it
// and a Secret the user brings (spec.tls.secretName) are found under.
// cert-manager is an optional API: its Go types are not a dependency of the
// operator (their module pins its own Kubernetes libraries), so the
// Certificate is built as unstructured content against cert-manager.io/v1,
// whose fields are stable. Pure functions; no concurrency.

package controllers

import (
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
)

const (
	// CertManagerAPI is cert-manager's group/version; the Certificate kind
	// is applied only where the cluster serves it.
	CertManagerAPI = "cert-manager.io/v1"
	// DefaultClusterDomain completes the DNS names when the operator is not
	// told the cluster's domain.
	DefaultClusterDomain = "cluster.local"
)

// CertificateName and TLSSecretName name the Certificate the operator owns
// and the Secret cert-manager writes for it.
func CertificateName(c *cachev1alpha1.Cache) string { return c.Name + "-tls" }

// TLSSecretName is the Secret the pods mount their serving certificate
// from: the user's own with spec.tls.secretName, cert-manager's otherwise.
func TLSSecretName(c *cachev1alpha1.Cache) string {
	if t := c.Spec.TLS; t != nil && t.SecretName != "" {
		return t.SecretName
	}
	return CertificateName(c)
}

// TLSCAKey is the serving Secret's CA bundle (cert-manager writes it; a
// Secret the user brings needs it for clientAuth Require and for
// spec.tls.metrics).
const TLSCAKey = "ca.crt"

// MetricsTLS says the pods serve their metrics port over HTTPS
// (spec.tls.metrics, with the operator's metrics port on).
func MetricsTLS(c *cachev1alpha1.Cache, o BuildOptions) bool {
	return engine.MetricsTLS(engine.ForSpec(&c.Spec, o.Engine))
}

// MetricsServerName is the name HTTPS readers of the metrics port verify:
// the client Service's, a SAN of the Cache's certificate (TLSDNSNames).
func MetricsServerName(c *cachev1alpha1.Cache) string {
	return ClientServiceName(c) + "." + c.Namespace + ".svc"
}

// TLSDNSNames are the names clients reach a Cache by, each a SAN of its
// certificate: every pod through the headless Service (one wildcard, so that
// scaling never reissues the certificate) and the client Service, in the
// short and the fully qualified forms.
func TLSDNSNames(c *cachev1alpha1.Cache, clusterDomain string) []string {
	if clusterDomain == "" {
		clusterDomain = DefaultClusterDomain
	}
	headless, client := HeadlessServiceName(c), ClientServiceName(c)
	ns := c.Namespace
	names := []string{
		"*." + headless + "." + ns + ".svc",
		"*." + headless + "." + ns + ".svc." + clusterDomain,
		client,
		client + "." + ns,
		client + "." + ns + ".svc",
		client + "." + ns + ".svc." + clusterDomain,
	}
	sort.Strings(names)
	return names
}

// Certificate is the cert-manager Certificate for a Cache whose spec.tls
// names an issuer; nil otherwise (no TLS, or a certificate the user brings).
// The private key is rotated with each renewal: a leaked key is good only
// until the next one.
func Certificate(c *cachev1alpha1.Cache, o BuildOptions) *unstructured.Unstructured {
	t := c.Spec.TLS
	if t == nil || t.IssuerRef == nil {
		return nil
	}
	kind, group := t.IssuerRef.Kind, t.IssuerRef.Group
	if kind == "" {
		kind = "Issuer"
	}
	if group == "" {
		group = "cert-manager.io"
	}
	// With clientAuth Require the pod's certificate is also the client
	// certificate of its own probes (cachet-probe, /healthz).
	usages := []any{"server auth", "digital signature", "key encipherment"}
	if t.ClientAuth == "Require" {
		usages = append(usages, "client auth")
	}
	names := TLSDNSNames(c, o.ClusterDomain)
	dnsNames := make([]any, len(names))
	for i, n := range names {
		dnsNames[i] = n
	}
	meta := objectMeta(c, CertificateName(c))
	labels := map[string]any{}
	for k, v := range meta.Labels {
		labels[k] = v
	}
	cert := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": CertManagerAPI,
		"kind":       "Certificate",
		"metadata": map[string]any{
			"name":      meta.Name,
			"namespace": meta.Namespace,
			"labels":    labels,
		},
		"spec": map[string]any{
			"secretName": TLSSecretName(c),
			// The Secret keeps the Cache's labels, so the operator's
			// label-filtered informers see it.
			"secretTemplate": map[string]any{"labels": labels},
			// No commonName: X.509 caps it at 64 bytes, which a long
			// name and namespace exceed (issuance fails); clients check
			// the dnsNames.
			"dnsNames": dnsNames,
			"usages":   usages,
			"privateKey": map[string]any{
				"algorithm":      "ECDSA",
				"size":           int64(256),
				"rotationPolicy": "Always",
			},
			"issuerRef": map[string]any{"name": t.IssuerRef.Name, "kind": kind, "group": group},
		},
	}}
	return cert
}

// certificateObject and certManagerList are empty objects of a cert-manager
// kind, for the owned-kinds table's watches, informers and listing.
func certificateObject() *unstructured.Unstructured {
	return certManagerKind("Certificate")
}

func certManagerKind(kind string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.FromAPIVersionAndKind(CertManagerAPI, kind))
	return u
}

func certManagerList(kind string) *unstructured.UnstructuredList {
	u := &unstructured.UnstructuredList{}
	u.SetGroupVersionKind(schema.FromAPIVersionAndKind(CertManagerAPI, kind))
	return u
}
