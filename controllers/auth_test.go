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
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
)

func TestRenderAuthFile(t *testing.T) {
	got, err := RenderAuthFile(map[string][]byte{"bob": []byte("pw2\n"), "alice": []byte("p:w=1")})
	if err != nil || got != "alice:p:w=1\nbob:pw2\n" {
		t.Errorf("RenderAuthFile = %q, %v; want sorted user:password lines", got, err)
	}
	for name, users := range map[string]map[string][]byte{
		"no users":         {},
		"':' in a user":    {"a:b": []byte("pw")},
		"space in a user":  {"a b": []byte("pw")},
		"empty password":   {"alice": []byte("")},
		"password newline": {"alice": []byte("a\nb")},
		"too big":          {"alice": []byte(strings.Repeat("x", engine.AuthFileMaxBytes))},
	} {
		if f, err := RenderAuthFile(users); err == nil {
			t.Errorf("%s: rendered %q, want refused", name, f)
		}
	}
}

// spec.tls and spec.auth reach the pod: whole-Secret volumes (never subPath,
// or the kubelet would not refresh rotated files) at the directories the
// engine's -Z/-Y arguments name, readable by the engine's group.
func TestSecuredPodTemplate(t *testing.T) {
	c := newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.TLS = &cachev1alpha1.TLSSpec{SecretName: "web-certs", ClientAuth: "Require", MinVersion: "TLSv1.3",
			ClientCA: &cachev1alpha1.SecretKeyRef{Name: "client-cas", Key: "bundle.pem"}}
		c.Spec.Auth = &cachev1alpha1.AuthSpec{SecretRef: cachev1alpha1.LocalSecretReference{Name: "users"}}
	})
	o := testOpts
	o.AuthFile = "alice:pw\n"
	pod := StatefulSet(c, o).Spec.Template.Spec
	ctr := pod.Containers[0]
	want := map[string]string{"web-certs": engine.TLSDir, "client-cas": engine.ClientCADir, AuthFileSecretName(c): engine.AuthDir}
	for _, v := range pod.Volumes {
		if v.Secret == nil {
			continue
		}
		dir, ok := want[v.Secret.SecretName]
		if !ok {
			t.Errorf("unexpected Secret volume %+v", v)
			continue
		}
		delete(want, v.Secret.SecretName)
		if len(v.Secret.Items) > 0 {
			t.Errorf("volume %s mounts some keys only: %+v", v.Name, v.Secret.Items)
		}
		found := false
		for _, m := range ctr.VolumeMounts {
			if m.Name == v.Name {
				found = m.MountPath == dir && m.SubPath == "" && m.ReadOnly
			}
		}
		if !found {
			t.Errorf("Secret %s not mounted whole and read-only at %s: %+v", v.Secret.SecretName, dir, ctr.VolumeMounts)
		}
	}
	if len(want) > 0 {
		t.Errorf("Secrets not mounted: %v", want)
	}
	if pod.SecurityContext.FSGroup == nil || *pod.SecurityContext.FSGroup != EngineUID {
		t.Errorf("the engine's group cannot read the 0440 Secret files: %+v", pod.SecurityContext)
	}
	args := strings.Join(EngineArgs(c, o), " ")
	for _, w := range []string{"-Y " + engine.AuthDir + "/" + engine.AuthFileKey, "-Z",
		"ssl_chain_cert=" + engine.TLSDir + "/tls.crt", "ssl_key=" + engine.TLSDir + "/tls.key",
		"ssl_ca_cert=" + engine.ClientCADir + "/bundle.pem", "ssl_verify_mode=2", "ssl_min_version=3"} {
		if !strings.Contains(args, w) {
			t.Errorf("args %q lack %q", args, w)
		}
	}
	// a client CA of another Secret did not sign the pod's certificate
	if p := ctr.LivenessProbe; p.Exec != nil || p.TCPSocket == nil {
		t.Errorf("liveness %+v with a foreign client CA: want a TCP connect", p.ProbeHandler)
	}
	c.Spec.TLS.ClientCA = nil
	live := StatefulSet(c, o).Spec.Template.Spec.Containers[0].LivenessProbe
	wantProbe := []string{"/usr/local/bin/cachet-probe", "-p", "11211", "--tls", "--cert", engine.TLSDir + "/tls.crt",
		"--key", engine.TLSDir + "/tls.key", "--auth-file", engine.AuthDir + "/" + engine.AuthFileKey}
	if live.Exec == nil || strings.Join(live.Exec.Command, " ") != strings.Join(wantProbe, " ") {
		t.Errorf("liveness %+v: want %v", live.ProbeHandler, wantProbe)
	}
	if u, _, _ := unstructured.NestedStringSlice(Certificate(newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.TLS = &cachev1alpha1.TLSSpec{IssuerRef: &cachev1alpha1.IssuerReference{Name: "ca"}, ClientAuth: "Require"}
	}), o).Object, "spec", "usages"); !slices.Contains(u, "client auth") {
		t.Errorf("with clientAuth Require the pod's certificate cannot be its probes' client certificate: usages %v", u)
	}
	if s := AuthFileSecret(c, o); s == nil || string(s.Data[engine.AuthFileKey]) != "alice:pw\n" {
		t.Errorf("authfile Secret %+v", s)
	}
	if s := AuthFileSecret(c, testOpts); s != nil {
		t.Errorf("an authfile Secret without a rendering: %+v", s)
	}
}

// On a real API server: the user's Secret is rendered into CACHE-authfile
// and AuthReady says so; a rotated Secret is re-rendered; an invalid user
// leaves the last valid authfile and says InvalidUser; a TLS Secret that is
// missing is SecretMissing until it appears; endpoints say tls.
func TestAuthAndTLSReachThePods(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	users := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "users", Namespace: ns}, Data: map[string][]byte{"alice": []byte("one")}}
	if err := k8sClient.Create(ctx, users); err != nil {
		t.Fatal(err)
	}
	c := createCache(t, ns, "sec", func(c *cachev1alpha1.Cache) {
		c.Spec.Auth = &cachev1alpha1.AuthSpec{SecretRef: cachev1alpha1.LocalSecretReference{Name: "users"}}
		c.Spec.TLS = &cachev1alpha1.TLSSpec{SecretName: "sec-certs"}
	})
	authfile := func() string {
		s := &corev1.Secret{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: AuthFileSecretName(c)}, s); err != nil {
			return err.Error()
		}
		return string(s.Data[engine.AuthFileKey])
	}
	conds := func() (metav1.Condition, metav1.Condition) {
		got := getCache(t, ns, "sec")
		return condOf(got, cachev1alpha1.ConditionAuthReady), condOf(got, cachev1alpha1.ConditionTLSReady)
	}
	eventually(t, "authfile rendered, AuthReady True, TLSReady SecretMissing", func() (bool, string) {
		a, tl := conds()
		return authfile() == "alice:one\n" && a.Status == metav1.ConditionTrue && a.Reason == ReasonSecretMounted &&
			tl.Status == metav1.ConditionFalse && tl.Reason == ReasonSecretMissing, fmt.Sprintf("%q %+v %+v", authfile(), a, tl)
	})
	users.Data = map[string][]byte{"alice": []byte("two"), "bob": []byte("three")}
	if err := k8sClient.Update(ctx, users); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rotated Secret re-rendered", func() (bool, string) {
		return authfile() == "alice:two\nbob:three\n", authfile()
	})
	// The API server refuses a key with ':'; a password can still break
	// the authfile's lines.
	users.Data = map[string][]byte{"eve": []byte("pw\nmallory:x")}
	if err := k8sClient.Update(ctx, users); err != nil {
		t.Fatal(err)
	}
	eventually(t, "InvalidUser, the last valid authfile kept", func() (bool, string) {
		a, _ := conds()
		return a.Status == metav1.ConditionFalse && a.Reason == ReasonInvalidUser && authfile() == "alice:two\nbob:three\n",
			fmt.Sprintf("%q %+v", authfile(), a)
	})
	certs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec-certs", Namespace: ns}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": []byte("x"), "tls.key": []byte("y")}}
	if err := k8sClient.Create(ctx, certs); err != nil {
		t.Fatal(err)
	}
	eventually(t, "TLSReady once the Secret exists", func() (bool, string) {
		_, tl := conds()
		return tl.Status == metav1.ConditionTrue && tl.Reason == ReasonSecretMounted, fmt.Sprintf("%+v", tl)
	})
	for _, ep := range getCache(t, ns, "sec").Status.Endpoints {
		if !ep.TLS {
			t.Errorf("endpoint %+v does not say tls", ep)
		}
	}
}
