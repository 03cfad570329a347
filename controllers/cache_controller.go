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
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// CacheReconciler turns each Cache into a ConfigMap, two Services, a
// StatefulSet and a PodDisruptionBudget, and reports what the pods do.
type CacheReconciler struct {
	client.Client
	// APIReader reads around the informers, which only hold labelled objects.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  recorder.EventRecorder
	// EngineImage is used when a Cache names no image (webhooks disabled).
	EngineImage string
	// ClusterDomain completes the pods' DNS names in status.endpoints.
	ClusterDomain string
}

// errNotOurs marks an object that exists under an owned object's name but is
// controlled by someone else: the operator must not take it over.
var errNotOurs = errors.New("exists and is not controlled by this Cache")

// requeueSoon retries after a write conflict or a replaced StatefulSet, which
// resolve by themselves.
const requeueSoon = time.Second

// +kubebuilder:rbac:groups=cache.cachet.dev,resources=caches,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=cache.cachet.dev,resources=caches/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=cache.cachet.dev,resources=caches/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile applies the owned objects and recomputes the status.
func (r *CacheReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	c := &cachev1alpha1.Cache{}
	if err := r.Get(ctx, req.NamespacedName, c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !c.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // owner references let the garbage collector remove the rest
	}

	prevSTS := &appsv1.StatefulSet{}
	stsKey := types.NamespacedName{Namespace: c.Namespace, Name: StatefulSetName(c)}
	err := r.Get(ctx, stsKey, prevSTS)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		// The informer may not have seen a StatefulSet created a moment ago;
		// ask the API server before announcing a creation.
		err = r.APIReader.Get(ctx, stsKey, prevSTS)
	}
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		prevSTS = nil
	}

	sts := StatefulSet(c, r.EngineImage)
	owned := []client.Object{ConfigMap(c), HeadlessService(c), ClientService(c), PodDisruptionBudget(c), sts}
	if prevSTS != nil && prevSTS.DeletionTimestamp != nil {
		// Being replaced (or deleted by someone): wait until it is gone,
		// then create the new one; its deletion brings us back here.
		owned = owned[:len(owned)-1]
	}
	for _, obj := range owned {
		if err := r.apply(ctx, c, obj); err != nil {
			kind := obj.GetObjectKind().GroupVersionKind().Kind
			switch {
			case errors.Is(err, errNotOurs):
				r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, ReasonNameConflict, "Apply", "%v", err)
				return ctrl.Result{}, r.setApplyFailure(ctx, c, ReasonNameConflict, fmt.Sprintf("%v: delete or rename it, or rename the Cache", err))
			case obj == client.Object(sts) && prevSTS != nil && isImmutableStatefulSetChange(err):
				// An immutable StatefulSet field changed (e.g. after an
				// operator upgrade). Replace the StatefulSet but orphan its
				// pods: the new one adopts them and rolls them one by one.
				log.Info("replacing StatefulSet whose immutable fields changed", "error", err.Error())
				r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "ReplacingStatefulSet", "Apply",
					"StatefulSet %s has immutable fields that changed; replacing it and keeping its pods", sts.Name)
				if derr := r.Delete(ctx, prevSTS, client.PropagationPolicy(metav1.DeletePropagationOrphan),
					client.Preconditions{UID: &prevSTS.UID}); derr != nil && !apierrors.IsNotFound(derr) {
					return ctrl.Result{}, derr
				}
				return ctrl.Result{RequeueAfter: requeueSoon}, nil
			case apierrors.IsInvalid(err):
				// The API server refused what the spec asks for (e.g. a
				// malformed toleration the CRD schema cannot check). Retrying
				// cannot help until the spec changes, which triggers a new
				// reconcile.
				msg := fmt.Sprintf("the API server refused the %s built from this spec: %v; fix spec and the operator retries", kind, err)
				r.Recorder.Eventf(c, nil, corev1.EventTypeWarning, ReasonInvalidSpec, "Apply", "%s", msg)
				return ctrl.Result{}, r.setApplyFailure(ctx, c, ReasonInvalidSpec, msg)
			}
			return ctrl.Result{}, fmt.Errorf("applying %s %s: %w", kind, obj.GetName(), err)
		}
	}
	if len(owned) < 5 {
		return ctrl.Result{}, nil
	}
	r.recordSpecEvents(c, prevSTS, sts)

	live := &appsv1.StatefulSet{}
	if err := r.Get(ctx, client.ObjectKeyFromObject(sts), live); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, err
		}
		live = nil
	}
	pods := &corev1.PodList{}
	if err := r.List(ctx, pods, client.InNamespace(c.Namespace), client.MatchingLabels(SelectorLabels(c))); err != nil {
		return ctrl.Result{}, err
	}

	status := ComputeStatus(c, Observed{StatefulSet: live, Pods: pods.Items}, r.ClusterDomain)
	if equality.Semantic.DeepEqual(c.Status, status) {
		return ctrl.Result{}, nil
	}
	previous := c.Status
	c.Status = status
	if err := r.Status().Update(ctx, c); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: requeueSoon}, nil
		}
		return ctrl.Result{}, err
	}
	// Only a transition that was stored is news, so a retried update never
	// repeats an Event.
	r.recordConditionEvents(c, previous, status)
	return ctrl.Result{}, nil
}

// apply server-side applies obj with the Cache as its controller. Applying
// the full desired object every time is idempotent, and fields that other
// controllers or people own (e.g. a Service's clusterIP) are left alone.
func (r *CacheReconciler) apply(ctx context.Context, c *cachev1alpha1.Cache, obj client.Object) error {
	existing := obj.DeepCopyObject().(client.Object)
	err := r.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	if apierrors.IsNotFound(err) && r.APIReader != nil {
		// Not in the informer: absent, or present without our label.
		err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), existing)
	}
	switch {
	case err == nil:
		if owner := metav1.GetControllerOf(existing); owner == nil || owner.UID != c.UID {
			return fmt.Errorf("%s %s/%s %w", obj.GetObjectKind().GroupVersionKind().Kind, existing.GetNamespace(), existing.GetName(), errNotOurs)
		}
	case !apierrors.IsNotFound(err):
		return err
	}
	if err := controllerutil.SetControllerReference(c, obj, r.Scheme); err != nil {
		return err
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	delete(u, "status")
	unstructured.RemoveNestedField(u, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(u, "spec", "template", "metadata", "creationTimestamp")
	return r.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: u}),
		client.FieldOwner(managerName), client.ForceOwnership)
}

// isImmutableStatefulSetChange recognises the API server's refusal to change
// a StatefulSet field other than the few it allows to change.
func isImmutableStatefulSetChange(err error) bool {
	if !apierrors.IsInvalid(err) {
		return false
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, cause := range status.Status().Details.Causes {
		if cause.Type == metav1.CauseType(field.ErrorTypeForbidden) && cause.Field == "spec" &&
			strings.Contains(cause.Message, "updates to statefulset spec for fields other than") {
			return true
		}
	}
	return false
}

// setApplyFailure reports, where kubectl shows it, why the owned objects
// could not be written. The Cache stays in that state until its spec or an
// owned object changes; retrying sooner cannot help.
func (r *CacheReconciler) setApplyFailure(ctx context.Context, c *cachev1alpha1.Cache, reason, msg string) error {
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: cachev1alpha1.ConditionDegraded, Status: metav1.ConditionTrue, Reason: reason,
		Message: msg, ObservedGeneration: c.Generation,
	})
	meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
		Type: cachev1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason,
		Message: msg, ObservedGeneration: c.Generation,
	})
	c.Status.ObservedGeneration = c.Generation
	if err := r.Status().Update(ctx, c); err != nil && !apierrors.IsConflict(err) {
		return err
	}
	return nil
}

// recordSpecEvents notes what this reconcile set in motion.
func (r *CacheReconciler) recordSpecEvents(c *cachev1alpha1.Cache, prev, next *appsv1.StatefulSet) {
	if prev == nil {
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Created", "Apply",
			"created StatefulSet %s with %d pod(s), engine arguments %v", next.Name, *next.Spec.Replicas, EngineArgs(c))
		return
	}
	if prev.Spec.Replicas != nil && *prev.Spec.Replicas != *next.Spec.Replicas {
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "Scaling", "Apply",
			"scaling from %d to %d pod(s)", *prev.Spec.Replicas, *next.Spec.Replicas)
	}
	oldHash := prev.Spec.Template.Annotations[ConfigHashAnnotation]
	newHash := next.Spec.Template.Annotations[ConfigHashAnnotation]
	if oldHash != newHash {
		how := "rolling pods one at a time"
		if c.Spec.UpdateStrategy.Type == cachev1alpha1.OnDeleteStrategy {
			how = "pods take it when deleted (OnDelete)"
		}
		r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, "ConfigChanged", "Apply",
			"engine configuration %s -> %s, %s: %v", oldHash, newHash, how, EngineArgs(c))
	}
}

// recordConditionEvents emits an Event when the Cache becomes Ready or stops
// being Ready, and when it becomes Degraded (a Warning), recovers, or its
// problem changes.
func (r *CacheReconciler) recordConditionEvents(c *cachev1alpha1.Cache, prev, next cachev1alpha1.CacheStatus) {
	statusOf := func(st cachev1alpha1.CacheStatus, t string) (metav1.ConditionStatus, string) {
		if cond := meta.FindStatusCondition(st.Conditions, t); cond != nil {
			return cond.Status, cond.Reason
		}
		return metav1.ConditionFalse, "" // absent reads as False: a new Cache is neither Ready nor Degraded
	}
	for _, t := range []string{cachev1alpha1.ConditionReady, cachev1alpha1.ConditionDegraded} {
		oldStatus, oldReason := statusOf(prev, t)
		cur := meta.FindStatusCondition(next.Conditions, t)
		if cur == nil {
			continue
		}
		changed := cur.Status != oldStatus
		if t == cachev1alpha1.ConditionDegraded && cur.Status == metav1.ConditionTrue && cur.Reason != oldReason {
			changed = true // a different problem
		}
		// StatefulSetPending lasts until the StatefulSet controller reads the
		// new spec, a moment; the next state is the news.
		if !changed || cur.Reason == ReasonStatefulSetPending {
			continue
		}
		// Planned work (a roll, a scale) also makes a Cache not Ready; only
		// problems, which always show as Degraded, are Warnings.
		kind := corev1.EventTypeNormal
		if t == cachev1alpha1.ConditionDegraded && cur.Status == metav1.ConditionTrue {
			kind = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(c, nil, kind, cur.Reason, "Observe", "%s=%s: %s", t, cur.Status, cur.Message)
	}
}

// podToCache maps a cache pod to the Cache named by its instance label.
func podToCache(_ context.Context, obj client.Object) []reconcile.Request {
	l := obj.GetLabels()
	if l["app.kubernetes.io/name"] != "cachet" || l["app.kubernetes.io/component"] != "cache" || l["app.kubernetes.io/instance"] == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: obj.GetNamespace(), Name: l["app.kubernetes.io/instance"]}}}
}

// SetupWithManager watches Caches, every owned kind, and the cache pods
// (owned by the StatefulSet, so mapped back through their labels).
func (r *CacheReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&cachev1alpha1.Cache{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(podToCache)).
		Named("cache").
		Complete(r)
}
