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

// The engine's authfile (spec.auth): the user's Secret maps user names to
// passwords; cachetd -Y reads memcached's user:password lines. The operator
// renders the one into the other in a Secret it owns, CACHE-authfile, which
// the pods mount whole (no subPath): when the user's Secret changes, the
// derived one is re-rendered, the kubelet swaps the file, and the engine,
// which watches its authfile, reloads it without a restart. A user or a
// password that cannot be an authfile line refuses the whole rendering, so a
// half-valid Secret never silently drops a user. Pure functions; no
// concurrency.

package controllers

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
)

// AuthFileSecretName is the Secret the operator renders the authfile into.
func AuthFileSecretName(c *cachev1alpha1.Cache) string { return c.Name + "-authfile" }

// RenderAuthFile turns a Secret's data (user name -> password) into
// memcached's authfile, users sorted so that the same Secret always renders
// the same file. It refuses, naming the key, a user name that is empty or
// holds ':' or whitespace, and a password that is empty or holds a line
// break: memcached would misread either line.
func RenderAuthFile(users map[string][]byte) (string, error) {
	if len(users) == 0 {
		return "", fmt.Errorf("the Secret has no keys: it names no user")
	}
	names := make([]string, 0, len(users))
	for u := range users {
		names = append(names, u)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, u := range names {
		if strings.ContainsAny(u, ": \t\r\n") {
			return "", fmt.Errorf("user %q: a user name cannot hold ':' or whitespace", u)
		}
		pw := strings.TrimSuffix(string(users[u]), "\n")
		if pw == "" || strings.ContainsAny(pw, "\r\n") {
			return "", fmt.Errorf("user %q: the password is empty or holds a line break", u)
		}
		b.WriteString(u + ":" + pw + "\n")
	}
	if b.Len() > engine.AuthFileMaxBytes {
		return "", fmt.Errorf("the authfile would be %d bytes, over the engine's %d", b.Len(), engine.AuthFileMaxBytes)
	}
	return b.String(), nil
}

// AuthFileSecret is the derived Secret of a Cache with spec.auth, holding
// o.AuthFile (rendered by the reconciler from the user's Secret); nil
// without spec.auth or before a valid rendering exists.
func AuthFileSecret(c *cachev1alpha1.Cache, o BuildOptions) *corev1.Secret {
	if c.Spec.Auth == nil || o.AuthFile == "" {
		return nil
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: objectMeta(c, AuthFileSecretName(c)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{engine.AuthFileKey: []byte(o.AuthFile)},
	}
}
