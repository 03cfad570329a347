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

// This test runs the real manager binary in self-signed certificate mode
// against a real kube-apiserver (envtest) and checks what a cluster relies
// on: the rotator fills the Secret and injects its CA into both webhook
// configurations, the webhook server starts once the certificate is on disk
// and only then does /readyz turn green, and the served certificate verifies for the
// webhook Service's name with the injected CA; the operator copies the
// certificate from the Secret to disk itself (an emptyDir in a pod), so no
// kubelet volume refresh is awaited. The API server itself cannot call the webhook here (Services do not
// route in envtest), so the test sends the AdmissionReviews itself.

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"cachet.dev/cachet/test/utils"
)

func poll(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	utils.Eventually(t, 3*time.Minute, 200*time.Millisecond, what, cond)
}

func TestSelfSignedWebhookCertificates(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		t.Fatal("KUBEBUILDER_ASSETS is not set; run 'make test'")
	}
	ctx := context.Background()
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: assets,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	user, err := env.AddUser(envtest.User{Name: "operator", Groups: []string{"system:masters"}}, nil)
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

	const ns, secretName, svc = "cachet-system", "cachet-webhook-server-cert", "cachet-webhook-service"
	mutatingName, validatingName := "cachet-mutating-webhook-configuration", "cachet-validating-webhook-configuration"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	// As the Helm chart does: an empty Secret for the rotator to fill.
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	// The generated webhook configurations, named and pointed as installed.
	raw, err := os.ReadFile(filepath.Join("config", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	for {
		var probe struct {
			Kind string `json:"kind"`
		}
		var doc runtime.RawExtension
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if len(doc.Raw) == 0 {
			continue
		}
		_ = json.Unmarshal(doc.Raw, &probe)
		switch probe.Kind {
		case "MutatingWebhookConfiguration":
			m := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := json.Unmarshal(doc.Raw, m); err != nil {
				t.Fatal(err)
			}
			m.Name = mutatingName
			for i := range m.Webhooks {
				m.Webhooks[i].ClientConfig.Service.Name, m.Webhooks[i].ClientConfig.Service.Namespace = svc, ns
			}
			if err := c.Create(ctx, m); err != nil {
				t.Fatal(err)
			}
		case "ValidatingWebhookConfiguration":
			v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := json.Unmarshal(doc.Raw, v); err != nil {
				t.Fatal(err)
			}
			v.Name = validatingName
			for i := range v.Webhooks {
				v.Webhooks[i].ClientConfig.Service.Name, v.Webhooks[i].ClientConfig.Service.Namespace = svc, ns
			}
			if err := c.Create(ctx, v); err != nil {
				t.Fatal(err)
			}
		}
	}

	bin := filepath.Join(dir, "manager")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("building the manager: %v", err)
	}
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		t.Fatal(err)
	}
	// The manager listens on both once the rotator has written the
	// certificate (the webhook server starts then), within seconds.
	mgr := utils.StartServer(t, 2, func(ports []int) *exec.Cmd {
		return exec.Command(bin,
			"--kubeconfig="+kubeconfigPath,
			"--webhook-cert-mode=self-signed", "--namespace="+ns,
			"--webhook-cert-dir="+certDir, "--webhook-port="+strconv.Itoa(ports[0]),
			"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(ports[1]),
			"--metrics-bind-address=0", "--engine-image=localhost/cachetd:smoke", "--cluster-domain=example.test")
	})
	defer mgr.Stop() // before the API server stops
	webhookPort, probePort := mgr.Ports[0], mgr.Ports[1]

	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", probePort)
	readyStatus := func() int {
		resp, err := http.Get(readyz)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// /readyz turns OK only once the certificate is on disk: checked at every
	// sample, since the operator writes the files itself within seconds.
	poll(t, "/readyz OK once the operator wrote the certificate", func() (bool, string) {
		st := readyStatus()
		if st == http.StatusOK {
			if _, err := os.Stat(filepath.Join(certDir, "tls.crt")); err != nil {
				t.Fatalf("/readyz is OK while no certificate is on disk: %v", err)
			}
		}
		return st == http.StatusOK, strconv.Itoa(st)
	})
	secret := &corev1.Secret{}
	if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: secretName}, secret); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tls.crt", "tls.key"} {
		onDisk, err := os.ReadFile(filepath.Join(certDir, k))
		if err != nil || len(onDisk) == 0 || !bytes.Equal(onDisk, secret.Data[k]) {
			t.Fatalf("%s on disk differs from the rotator's Secret (err %v)", k, err)
		}
	}

	// Both configurations carry the CA, and it verifies the served certificate
	// for the Service's DNS name.
	var caBundle []byte
	poll(t, "CA injected into both webhook configurations", func() (bool, string) {
		m := &admissionregistrationv1.MutatingWebhookConfiguration{}
		v := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := c.Get(ctx, types.NamespacedName{Name: mutatingName}, m); err != nil {
			return false, err.Error()
		}
		if err := c.Get(ctx, types.NamespacedName{Name: validatingName}, v); err != nil {
			return false, err.Error()
		}
		caBundle = m.Webhooks[0].ClientConfig.CABundle
		return len(caBundle) > 0 && bytes.Equal(caBundle, v.Webhooks[0].ClientConfig.CABundle), "not yet"
	})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caBundle) {
		t.Fatal("caBundle holds no certificate")
	}
	httpClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: svc + "." + ns + ".svc", MinVersion: tls.VersionTLS12,
	}}}
	for _, name := range []string{svc + "." + ns + ".svc.example.test"} {
		conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(webhookPort), &tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatalf("certificate does not verify for %s: %v", name, err)
		}
		_ = conn.Close()
	}
	if conn, err := tls.Dial("tcp", "127.0.0.1:"+strconv.Itoa(webhookPort), &tls.Config{RootCAs: pool, ServerName: "elsewhere.example", MinVersion: tls.VersionTLS12}); err == nil {
		_ = conn.Close()
		t.Fatal("certificate verified for a name it must not hold")
	}

	review := func(path, cacheJSON string) *admissionv1.AdmissionResponse {
		t.Helper()
		body, _ := json.Marshal(admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID:       "1",
				Kind:      metav1.GroupVersionKind{Group: "cache.cachet.dev", Version: "v1alpha1", Kind: "Cache"},
				Resource:  metav1.GroupVersionResource{Group: "cache.cachet.dev", Version: "v1alpha1", Resource: "caches"},
				Namespace: "default", Name: "web", Operation: admissionv1.Create,
				Object: runtime.RawExtension{Raw: []byte(cacheJSON)},
			},
		})
		resp, err := httpClient.Post(fmt.Sprintf("https://127.0.0.1:%d%s", webhookPort, path), "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatalf("calling %s: %v", path, err)
		}
		defer resp.Body.Close()
		out := admissionv1.AdmissionReview{}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out.Response == nil {
			t.Fatalf("decoding %s answer: %v", path, err)
		}
		return out.Response
	}
	const cacheHead = `{"apiVersion":"cache.cachet.dev/v1alpha1","kind":"Cache","metadata":{"name":"web","namespace":"default"},"spec":`
	r := review("/mutate-cache-cachet-dev-v1alpha1-cache", cacheHead+`{"memory":"64Mi"}}`)
	if !r.Allowed || !strings.Contains(string(r.Patch), `"localhost/cachetd:smoke"`) || !strings.Contains(string(r.Patch), "/spec/image") {
		t.Errorf("defaulting answer: allowed=%v patch=%s", r.Allowed, r.Patch)
	}
	r = review("/validate-cache-cachet-dev-v1alpha1-cache", cacheHead+`{"memory":"100M","cpu":1,"dedicatedCPUs":true}}`)
	if r.Allowed || r.Result == nil || !strings.Contains(r.Result.Message, "spec.memory") || !strings.Contains(r.Result.Message, "whole number of MiB") {
		t.Errorf("validating answer: %+v", r)
	}
}
