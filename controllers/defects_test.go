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

// Integration tests, on a real API server, for defects found in review: each
// failed before its fix.

package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
)

// Defect 5: when an apply failed for a reason other than an invalid spec (a
// policy webhook, a quota, RBAC) the reconciler returned the error and left
// the status as it was: Ready. A ValidatingAdmissionPolicy plays the policy
// webhook here; it answers 403 Forbidden, as a denying webhook does.
func TestRefusedApplyIsReportedAndRetried(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	const msg = "PodDisruptionBudgets are refused by policy test-guard"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-pdbs-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"policy"}, APIVersions: []string{"v1"}, Resources: []string{"poddisruptionbudgets"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: msg, Reason: ptr.To(metav1.StatusReasonForbidden)}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-pdbs-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName: policy.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
		},
	}
	for _, o := range []client.Object{policy, binding} {
		if err := k8sClient.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	probe := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptr.To(intstr.FromInt32(1))},
	}
	eventually(t, "the policy to be in force", func() (bool, string) {
		err := k8sClient.Create(ctx, probe.DeepCopy(), client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), msg), fmt.Sprint(err)
	})

	createCache(t, ns, "guarded")
	eventually(t, "the refusal reported as Degraded, not Ready", func() (bool, string) {
		c := getCache(t, ns, "guarded")
		d := condOf(c, "Degraded")
		return d.Status == metav1.ConditionTrue && d.Reason == ReasonApplyFailed && strings.Contains(d.Message, msg) &&
				strings.Contains(d.Message, "PodDisruptionBudget") && condOf(c, "Ready").Status == metav1.ConditionFalse,
			fmt.Sprintf("%+v", c.Status.Conditions)
	})
	eventually(t, "a Warning event with the API server's message", func() (bool, string) {
		evs := &eventsv1.EventList{}
		if err := k8sClient.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "guarded" && e.Reason == ReasonApplyFailed && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, msg) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})

	// Lifting the policy is an event the operator does not watch: the
	// retries with backoff pick it up.
	if err := k8sClient.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the PDB applied and Degraded cleared once the policy is lifted", func() (bool, string) {
		c := getCache(t, ns, "guarded")
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "guarded"}, &policyv1.PodDisruptionBudget{})
		return err == nil && condOf(c, "Degraded").Reason != ReasonApplyFailed, fmt.Sprintf("pdb: %v; %+v", err, condOf(c, "Degraded"))
	})
	_ = k8sClient.Delete(ctx, policy)
}

// Defect 6, on a real API server: with webhooks off spec.image stays empty,
// and a new operator (another --engine-image) rewrote every such Cache's pod
// template, rolling (and emptying) it. The reconciler now keeps the image the
// StatefulSet runs.
func TestOperatorUpgradeKeepsTheEngineImage(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	createCache(t, ns, "pinned")
	sts := &appsv1.StatefulSet{}
	key := types.NamespacedName{Namespace: ns, Name: "pinned"}
	eventually(t, "StatefulSet created", func() (bool, string) {
		err := k8sClient.Get(ctx, key, sts)
		return err == nil, fmt.Sprint(err)
	})
	before := sts.ResourceVersion
	// The same Cache as stored without webhooks: no image. (The suite's
	// defaulting webhook fills spec.image on every write, so the empty image
	// is handed to the reconciler directly.)
	c := getCache(t, ns, "pinned")
	c.Spec.Image = ""
	upgraded := &CacheReconciler{Client: k8sClient, Scheme: scheme, Recorder: testRecorder, EngineImage: "localhost/cachetd:next-operator", ClusterDomain: "cluster.test", Engine: suiteEngine}
	if _, err := upgraded.reconcileCache(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := k8sClient.Get(ctx, key, sts); err != nil {
		t.Fatal(err)
	}
	if img := sts.Spec.Template.Spec.Containers[0].Image; img != testEngineImage || sts.ResourceVersion != before {
		t.Fatalf("the new operator's default rewrote the StatefulSet: image %q (was %q), resourceVersion %s -> %s", img, testEngineImage, before, sts.ResourceVersion)
	}
	if got := getCache(t, ns, "pinned").Status.Image; got != testEngineImage {
		t.Errorf("status.image %q, want the pinned %q", got, testEngineImage)
	}
}

// After an operator upgrade every existing Cache keeps its engine image, and
// an older cachetd refuses -o sock_sndbuf and sock_rcvbuf (exit 64): the
// first rolled pod of every Cache crash-looped. Only a Cache that runs the
// operator's own engine image gets them (and their term in the limit); one
// pinned to another image gets the arguments every cachetd understands.
func TestOnlyTheOperatorsEngineImageGetsSocketBufferOptions(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	createCache(t, ns, "older", func(c *cachev1alpha1.Cache) { c.Spec.Image = "localhost/cachetd:older" })
	createCache(t, ns, "current")
	for _, tc := range []struct {
		name    string
		sock    bool
		options engine.Options
	}{{"older", false, suiteEngine}, {"current", true, suiteCurrent}} {
		sts := &appsv1.StatefulSet{}
		eventually(t, tc.name+"'s StatefulSet created", func() (bool, string) {
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: tc.name}, sts)
			return err == nil, fmt.Sprint(err)
		})
		args, err := argsOf(t, ns, ConfigMapOfPod(&sts.Spec.Template.Spec))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(args, "sock_sndbuf=64k") && strings.Contains(args, "sock_rcvbuf=16k"); got != tc.sock || (!tc.sock && strings.Contains(args, "sock_")) {
			t.Errorf("%s (image %s): args %q, want socket buffer options %v", tc.name, sts.Spec.Template.Spec.Containers[0].Image, args, tc.sock)
		}
		c := getCache(t, ns, tc.name)
		lim := sts.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().Value()
		if want := engine.MemoryLimitBytes(&c.Spec, tc.options); lim != want {
			t.Errorf("%s: memory limit %d, want %d", tc.name, lim, want)
		}
	}
	older, current := engine.Budget(&getCache(t, ns, "older").Spec, suiteEngine), engine.Budget(&getCache(t, ns, "current").Spec, suiteCurrent)
	if older.SocketBuffers != 0 || current.SocketBuffers == 0 || older.Limit >= current.Limit {
		t.Errorf("the pinned image's budget %+v should have no socket_buffers term and a smaller limit than %+v", older, current)
	}
}

// Defect 8: the operator's RBAC was broader than the code needs. The
// generated role must grant each owned kind exactly the verbs its entry in
// the owned-kinds table declares, and nothing else beyond the reconciler's
// own needs.
func TestRBACMarkersMatchOwnedKinds(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(raw)), 4096)
	granted := map[string][]string{}
	for {
		var role rbacv1.ClusterRole // a Role decodes the same way
		if err := dec.Decode(&role); err != nil {
			break
		}
		for _, rule := range role.Rules {
			for _, g := range rule.APIGroups {
				for _, r := range rule.Resources {
					key := g + "/" + r
					if role.Kind == "Role" {
						key = "ns:" + key
					}
					granted[key] = append(granted[key], rule.Verbs...)
				}
			}
		}
	}
	want := map[string][]string{
		"cache.cachet.dev/caches":        {"get", "list", "watch"},
		"cache.cachet.dev/caches/status": {"get", "update"},
		// blockOwnerDeletion on owner references (OwnerReferencesPermissionEnforcement).
		"cache.cachet.dev/caches/finalizers": {"update"},
		// Pods and extstore claims of lost nodes are deleted (extstore.go);
		// volumes and classes are read one at a time, nodes listed by
		// their hostname label.
		"/pods":                         {"get", "list", "watch", "delete"},
		"/persistentvolumeclaims":       {"get", "list", "watch", "patch", "delete"},
		"/persistentvolumes":            {"get"},
		"/nodes":                        {"list"},
		"storage.k8s.io/storageclasses": {"get"},
		"events.k8s.io/events":          {"create", "patch"},
		// IssuerNotReady quotes the issuer's own Ready condition, read one
		// at a time (issuerSays).
		"cert-manager.io/issuers":        {"get"},
		"cert-manager.io/clusterissuers": {"get"},
		// Self-signed webhook certificates (narrowed by name in the chart).
		"admissionregistration.k8s.io/mutatingwebhookconfigurations":   {"get", "list", "watch", "update", "patch"},
		"admissionregistration.k8s.io/validatingwebhookconfigurations": {"get", "list", "watch", "update", "patch"},
		"ns:/secrets": {"get", "list", "watch", "update", "patch"},
	}
	for _, k := range ownedKinds {
		want[k.group+"/"+k.resource] = k.verbs()
	}
	for key, verbs := range want {
		got := append([]string(nil), granted[key]...)
		slices.Sort(got)
		w := append([]string(nil), verbs...)
		slices.Sort(w)
		if !slices.Equal(got, w) {
			t.Errorf("%s: role grants %v, the code needs %v", key, got, w)
		}
	}
	for key := range granted {
		if _, ok := want[key]; !ok {
			t.Errorf("%s: granted by the role but used by nothing", key)
		}
	}
}

// The watch-namespaces mode: every informer, Caches included, is limited to
// the listed namespaces, which is what lets the chart grant Roles only.
func TestWatchNamespacesLimitEveryInformer(t *testing.T) {
	opts := CacheOptions(map[string]bool{"podmonitors": true, "prometheusrules": true, "certificates": true}, "team-a", "team-b")
	if len(opts.DefaultNamespaces) != 2 {
		t.Fatalf("default namespaces %v", opts.DefaultNamespaces)
	}
	for obj, by := range opts.ByObject {
		if len(by.Namespaces) != 0 {
			t.Errorf("%T overrides the namespaces: %v", obj, by.Namespaces)
		}
	}
	if all := CacheOptions(nil); all.DefaultNamespaces != nil {
		t.Fatalf("no namespaces must watch all: %v", all.DefaultNamespaces)
	}
	// Owned kinds, plus the pods and their extstore claims.
	if len(opts.ByObject) != len(ownedKinds)+2 {
		t.Errorf("%d informer filters for %d owned kinds, pods and claims", len(opts.ByObject), len(ownedKinds))
	}
	// Kinds the cluster does not serve get no informer: one would stop the
	// manager from starting.
	if n := len(CacheOptions(nil).ByObject); n != len(ownedKinds)-3+2 {
		t.Errorf("%d informer filters without prometheus-operator's and cert-manager's kinds, want %d", n, len(ownedKinds)-3+2)
	}
}

// Defect 11: an update that reaches the pod template restarts every pod and
// empties each shard; the API now says so at admission.
func TestAdmissionWarnsWhenAnUpdateRestartsPods(t *testing.T) {
	needIntegration(t)
	ns := newNamespace(t)
	createCache(t, ns, "warm")
	warnings.take()
	if _, err := updateCache(ns, "warm", func(c *cachev1alpha1.Cache) { c.Spec.Replicas = ptr.To(int32(2)) }); err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(warnings.take(), "\n"); strings.Contains(w, "restarts every pod") {
		t.Errorf("scaling warned about restarts: %q", w)
	}
	if _, err := updateCache(ns, "warm", func(c *cachev1alpha1.Cache) { c.Spec.Memory = resource.MustParse("128Mi") }); err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(warnings.take(), "\n"); !strings.Contains(w, "changing spec.memory restarts every pod") || !strings.Contains(w, "empty cache") {
		t.Errorf("a memory change was not warned about: %q", w)
	}
}

// spec.networkPolicy becomes a NetworkPolicy the API server accepts, and goes
// away with the field. (Enforcement needs a CNI that implements it; the
// local cluster's bridge does not, see docs/e2e.md.)
func TestNetworkPolicyFollowsTheSpec(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	createCache(t, ns, "fenced", func(c *cachev1alpha1.Cache) {
		c.Spec.NetworkPolicy = &cachev1alpha1.NetworkPolicySpec{
			Clients: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
		}
	})
	key := types.NamespacedName{Namespace: ns, Name: "fenced"}
	np := &networkingv1.NetworkPolicy{}
	eventually(t, "NetworkPolicy created", func() (bool, string) {
		err := k8sClient.Get(ctx, key, np)
		return err == nil, fmt.Sprint(err)
	})
	if len(np.Spec.Ingress) != 1 || np.Spec.Ingress[0].From[0].PodSelector.MatchLabels["app"] != "web" || !controlledBy(np, getCache(t, ns, "fenced")) {
		t.Fatalf("policy %+v owners %+v", np.Spec, np.OwnerReferences)
	}
	if _, err := updateCache(ns, "fenced", func(c *cachev1alpha1.Cache) { c.Spec.NetworkPolicy = nil }); err != nil {
		t.Fatal(err)
	}
	eventually(t, "NetworkPolicy deleted with the field", func() (bool, string) {
		err := k8sClient.Get(ctx, key, &networkingv1.NetworkPolicy{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// A Cache asking for no clients is refused by the schema.
	err := k8sClient.Create(ctx, &cachev1alpha1.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "nobody", Namespace: ns},
		Spec:       cachev1alpha1.CacheSpec{Memory: resource.MustParse("64Mi"), NetworkPolicy: &cachev1alpha1.NetworkPolicySpec{}},
	})
	if err == nil || !strings.Contains(err.Error(), "spec.networkPolicy.clients") {
		t.Fatalf("a policy with no clients: %v", err)
	}
}
