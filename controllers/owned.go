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

// The owned-kinds table: every kind of object a Cache gets, in the order it
// is applied. The reconciler applies and prunes from it, SetupWithManager
// watches (Owns) each kind in it, CacheOptions limits the informers of each
// kind to the operator's labelled objects, and TestRBACMarkersMatchOwnedKinds
// holds the RBAC markers below to exactly the verbs each entry declares. A new
// kind (a PodMonitor, an HPA, PVC handling) is one entry here and one marker.

package controllers

import (
	"reflect"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=podmonitors,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=monitoring.coreos.com,resources=prometheusrules,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=cert-manager.io,resources=certificates,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=cert-manager.io,resources=issuers;clusterissuers,verbs=get

// ownedKind is one kind of object the operator makes for a Cache.
type ownedKind struct {
	// group and resource name the kind for RBAC.
	group, resource string
	// object and list are empty values of the kind, for watches, informers
	// and listing.
	object client.Object
	list   client.ObjectList
	// build returns the objects of this kind the Cache wants now (none when
	// its spec asks for none).
	build func(c *cachev1alpha1.Cache, o BuildOptions) []client.Object
	// prune deletes objects of this kind that the Cache controls but no
	// longer wants, unless keep says one is still in use.
	prune bool
	keep  func(obj client.Object, live *liveState) bool
	// deletes: the reconciler deletes objects of this kind (pruning, or
	// replacing a StatefulSet whose immutable fields changed).
	deletes bool
	// optionalAPI, when set, is the group/version that serves the kind in
	// clusters that have it (a CRD of another project). Where it is not
	// served the kind is neither applied nor pruned nor watched, and the
	// Cache's conditions say what is missing.
	optionalAPI string
	// auxiliary kinds serve a feature beside the cache (monitoring,
	// autoscaling): they are applied after the StatefulSet, and a refusal
	// is reported in that feature's condition, never as a cache that is
	// Degraded or not Ready.
	auxiliary bool
	// watchFilter, when set, passes only the changes of this kind that the
	// reconciler acts on.
	watchFilter predicate.Predicate
}

// verbs the operator needs on the kind: server-side apply is a patch that
// may create, and nothing is ever updated with a full PUT.
func (k ownedKind) verbs() []string {
	v := []string{"get", "list", "watch", "create", "patch"}
	if k.deletes || k.prune {
		v = append(v, "delete")
	}
	return v
}

func one[T client.Object](f func(*cachev1alpha1.Cache, BuildOptions) T) func(*cachev1alpha1.Cache, BuildOptions) []client.Object {
	return func(c *cachev1alpha1.Cache, o BuildOptions) []client.Object {
		obj := f(c, o)
		if reflect.ValueOf(obj).IsNil() {
			return nil // the spec asks for none
		}
		return []client.Object{obj}
	}
}

// ownedKinds, in apply order: a pod's ConfigMap exists before the
// StatefulSet that mounts it, and what only watches or scales the pods
// (PodMonitor, PrometheusRule, HPA) comes after it, so that its failure
// never holds the cache back.
var ownedKinds = []ownedKind{
	{group: "", resource: "configmaps", object: &corev1.ConfigMap{}, list: &corev1.ConfigMapList{},
		build: one(ConfigMap), prune: true, keep: configMapInUse},
	// Before the StatefulSet: its pods mount the rendered authfile.
	{group: "", resource: "secrets", object: &corev1.Secret{}, list: &corev1.SecretList{},
		build: one(AuthFileSecret), prune: true, keep: secretMounted},
	{group: "", resource: "services", object: &corev1.Service{}, list: &corev1.ServiceList{},
		build: func(c *cachev1alpha1.Cache, _ BuildOptions) []client.Object {
			return []client.Object{HeadlessService(c), ClientService(c)}
		}},
	{group: "policy", resource: "poddisruptionbudgets", object: &policyv1.PodDisruptionBudget{}, list: &policyv1.PodDisruptionBudgetList{},
		build: one(func(c *cachev1alpha1.Cache, _ BuildOptions) *policyv1.PodDisruptionBudget {
			return PodDisruptionBudget(c)
		})},
	{group: "networking.k8s.io", resource: "networkpolicies", object: &networkingv1.NetworkPolicy{}, list: &networkingv1.NetworkPolicyList{},
		build: one(NetworkPolicy), prune: true},
	// Before the StatefulSet: its pods mount the Secret cert-manager writes.
	{group: "cert-manager.io", resource: "certificates", object: certificateObject(), list: certManagerList("CertificateList"),
		build: one(Certificate), prune: true, optionalAPI: CertManagerAPI},
	{group: "apps", resource: "statefulsets", object: &appsv1.StatefulSet{}, list: &appsv1.StatefulSetList{},
		build: one(StatefulSet), deletes: true},
	{group: "monitoring.coreos.com", resource: "podmonitors", object: &monitoringv1.PodMonitor{}, list: &monitoringv1.PodMonitorList{},
		build: one(PodMonitor), prune: true, optionalAPI: MonitoringAPI, auxiliary: true},
	{group: "monitoring.coreos.com", resource: "prometheusrules", object: &monitoringv1.PrometheusRule{}, list: &monitoringv1.PrometheusRuleList{},
		build: one(PrometheusRule), prune: true, optionalAPI: MonitoringAPI, auxiliary: true},
	{group: "autoscaling", resource: "horizontalpodautoscalers", object: &autoscalingv2.HorizontalPodAutoscaler{}, list: &autoscalingv2.HorizontalPodAutoscalerList{},
		build: one(func(c *cachev1alpha1.Cache, _ BuildOptions) *autoscalingv2.HorizontalPodAutoscaler {
			return HorizontalPodAutoscaler(c)
		}), prune: true, auxiliary: true, watchFilter: hpaChangesThatMatter},
}

// hpaChangesThatMatter passes an HPA's spec changes and the status the
// Autoscaling condition reports (desired replicas, conditions), and not the
// current metric values the HPA controller rewrites every 15 s under load:
// each of those would re-apply every owned object of the Cache.
var hpaChangesThatMatter = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, okOld := e.ObjectOld.(*autoscalingv2.HorizontalPodAutoscaler)
		n, okNew := e.ObjectNew.(*autoscalingv2.HorizontalPodAutoscaler)
		if !okOld || !okNew {
			return true
		}
		if o.Generation != n.Generation || o.Status.DesiredReplicas != n.Status.DesiredReplicas ||
			!reflect.DeepEqual(o.Labels, n.Labels) || !reflect.DeepEqual(o.OwnerReferences, n.OwnerReferences) ||
			len(o.Status.Conditions) != len(n.Status.Conditions) {
			return true
		}
		for i := range o.Status.Conditions {
			a, b := o.Status.Conditions[i], n.Status.Conditions[i]
			if a.Type != b.Type || a.Status != b.Status || a.Reason != b.Reason || a.Message != b.Message {
				return true
			}
		}
		return false
	},
}

// OptionalKindsServed says, by resource, which optional kinds the cluster
// serves now: the manager watches those (the rest cannot be watched, and a
// watch on them would stop the manager from starting).
func OptionalKindsServed(apis APIChecker) map[string]bool {
	served := map[string]bool{}
	for _, k := range ownedKinds {
		if k.optionalAPI != "" && apis != nil && apis.Serves(k.optionalAPI, k.resource) {
			served[k.resource] = true
		}
	}
	return served
}

// watchedKinds are the owned kinds the manager watches: all but the optional
// ones the cluster did not serve when the operator started.
func watchedKinds(servedOptional map[string]bool) []ownedKind {
	var kinds []ownedKind
	for _, k := range ownedKinds {
		if k.optionalAPI == "" || servedOptional[k.resource] {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// liveState is what pruning needs to know about the running pods.
type liveState struct {
	statefulSet *appsv1.StatefulSet
	pods        []corev1.Pod
}

// secretMounted keeps the rendered authfile while the StatefulSet's pods
// mount it: a user's Secret that turns invalid leaves the last valid
// authfile serving rather than pods without one.
func secretMounted(obj client.Object, live *liveState) bool {
	if live.statefulSet == nil {
		return false
	}
	for _, v := range live.statefulSet.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == obj.GetName() {
			return true
		}
	}
	return false
}

// configMapInUse keeps a revision's ConfigMap while a pod mounts it, and,
// while a RollingUpdate is under way, every revision's: the StatefulSet
// controller recreates a deleted pod that the roll has not reached yet from
// the old template, which mounts the old ConfigMap.
func configMapInUse(obj client.Object, live *liveState) bool {
	for i := range live.pods {
		if ConfigMapOfPod(&live.pods[i].Spec) == obj.GetName() {
			return true
		}
	}
	sts := live.statefulSet
	if sts == nil || sts.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return false // OnDelete recreates deleted pods from the new template
	}
	atRest := sts.Status.ObservedGeneration >= sts.Generation && sts.Status.CurrentRevision == sts.Status.UpdateRevision
	return !atRest
}
