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

// Extstore's volumes. The StatefulSet controller makes each pod's claim from
// the claim template; the operator handles what it cannot:
//
//   - Claim templates are immutable. When spec.extstore is added, removed,
//     resized or moved to another class, the StatefulSet is deleted with its
//     pods orphaned and created again (the one path the reconciler already
//     has for immutable fields); the new pod template then rolls the pods.
//   - The StatefulSet never touches an existing claim, so a replaced pod
//     would mount its old one again. Claims whose class or size differ from
//     the spec are expanded in place when only the size grew and their
//     StorageClass allows expansion, and otherwise deleted as the roll
//     replaces their pod (see replaceOutdatedClaim), so that the StatefulSet
//     makes the new pod a claim from the new template.
//   - A local volume can only be used on its node. When that node is deleted,
//     or NotReady for longer than spec.extstore.nodeLossTimeout, the pod
//     could never run again: its claim is deleted (and the pod, which is
//     Pending or stuck on the lost node) so that the StatefulSet recreates
//     both with a new, empty volume elsewhere. This is checked only for pods
//     that are not Ready, with direct reads of their volume and node: no
//     informer over every Node of the cluster.

package controllers

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// The claims the StatefulSet makes are read from a label-filtered informer;
// volumes, classes and nodes (by their hostname label) are read directly,
// only when a claim needs them.
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;patch;delete
// +kubebuilder:rbac:groups="",resources=persistentvolumes,verbs=get
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=delete

// Reasons of the Extstore condition and the replacement.
const (
	ReasonReplacingStatefulSet = "ReplacingStatefulSet"
	ReasonClaimTemplateChanged = "ClaimTemplateChanged"
	ReasonClaimsOutdated       = "ClaimsOutdated"
	ReasonClaimsMatch          = "ClaimsMatch"
	ReasonClaimsExpanding      = "ClaimsExpanding"
	ReasonVolumeNodeLost       = "VolumeNodeLost"
	ReasonNodeLossCheckFailed  = "NodeLossCheckFailed"
	ReasonStorageClassNotFound = "StorageClassNotFound"

	// NodeLostAnnotation on a terminating extstore claim says which lost
	// node it was deleted for.
	NodeLostAnnotation = "cache.cachet.dev/node-lost"
)

// claimTemplateKeys describe the claim templates of a StatefulSet by what
// the operator sets and the API server refuses to change: name, class, size
// and access modes. Defaults the API server adds are left out.
func claimTemplateKeys(sts *appsv1.StatefulSet) []string {
	var keys []string
	for _, t := range sts.Spec.VolumeClaimTemplates {
		class := "<default>"
		if t.Spec.StorageClassName != nil {
			class = *t.Spec.StorageClassName
		}
		modes := make([]string, len(t.Spec.AccessModes))
		for i, m := range t.Spec.AccessModes {
			modes[i] = string(m)
		}
		keys = append(keys, fmt.Sprintf("%s class=%s size=%s modes=%s", t.Name, class, t.Spec.Resources.Requests.Storage().String(), strings.Join(modes, ",")))
	}
	sort.Strings(keys)
	return keys
}

// claimTemplatesDiffer reports whether the live StatefulSet's claim
// templates differ from the desired ones (an immutable change), and how.
func claimTemplatesDiffer(live, desired *appsv1.StatefulSet) (bool, string) {
	a, b := claimTemplateKeys(live), claimTemplateKeys(desired)
	if slices.Equal(a, b) {
		return false, ""
	}
	describe := func(keys []string) string {
		if len(keys) == 0 {
			return "none"
		}
		return strings.Join(keys, "; ")
	}
	return true, fmt.Sprintf("volume claim templates change from [%s] to [%s]", describe(a), describe(b))
}

// claimFit is how a claim stands against spec.extstore.
type claimFit int

const (
	// claimFits: the class matches and the volume holds the size.
	claimFits claimFit = iota
	// claimGrowing: expanded in place (the request is the size or more),
	// but the volume has not grown yet. The engine sizes its file from the
	// spec at start, so until the filesystem grew it would fail with ENOSPC.
	claimGrowing
	// claimOutdated: to be expanded, or deleted with its pod.
	claimOutdatedFit
)

// claimFitOf tells whether a pod's extstore claim matches the spec. It is
// outdated when extstore was removed, the class differs, the request is
// below the size, or an expansion to the size failed for good. A claim
// larger than the size fits (the file is made from the spec and fits in
// it; replacing the claim would only lose its items). A claim of the
// default class matches any class when the spec names none (the API
// server writes the default class's name into the claim). A claim not yet
// bound fits: it gets a volume of at least its request.
func claimFitOf(c *cachev1alpha1.Cache, pvc *corev1.PersistentVolumeClaim) (claimFit, string) {
	e := c.Spec.Extstore
	if e == nil {
		return claimOutdatedFit, "extstore removed"
	}
	if e.StorageClassName != nil && ptrDeref(pvc.Spec.StorageClassName) != *e.StorageClassName {
		return claimOutdatedFit, fmt.Sprintf("class %q", ptrDeref(pvc.Spec.StorageClassName))
	}
	if pvc.Spec.Resources.Requests.Storage().Cmp(e.Size) < 0 {
		return claimOutdatedFit, "requests " + pvc.Spec.Resources.Requests.Storage().String()
	}
	if pvc.Status.Phase != corev1.ClaimBound {
		return claimFits, ""
	}
	capacity := pvc.Status.Capacity.Storage()
	if capacity.Cmp(e.Size) >= 0 {
		return claimFits, ""
	}
	if why := resizeFailure(pvc); why != "" {
		return claimOutdatedFit, fmt.Sprintf("expansion to %s failed (%s)", e.Size.String(), why)
	}
	return claimGrowing, fmt.Sprintf("capacity %s, expanding to %s", capacity.String(), e.Size.String())
}

// resizeFailure says why a claim's expansion cannot complete: the resizer
// found it infeasible, or reports an error (the claim is then replaced; the
// cache only loses the items it had on disk).
func resizeFailure(pvc *corev1.PersistentVolumeClaim) string {
	switch s := pvc.Status.AllocatedResourceStatuses[corev1.ResourceStorage]; s {
	case corev1.PersistentVolumeClaimControllerResizeInfeasible, corev1.PersistentVolumeClaimNodeResizeInfeasible:
		return string(s)
	}
	for _, cond := range pvc.Status.Conditions {
		if (cond.Type == corev1.PersistentVolumeClaimControllerResizeError || cond.Type == corev1.PersistentVolumeClaimNodeResizeError) &&
			cond.Status == corev1.ConditionTrue {
			return fmt.Sprintf("%s: %s", cond.Type, cond.Message)
		}
	}
	return ""
}

// claimOutdated reports whether a claim is to be expanded or replaced.
func claimOutdated(c *cachev1alpha1.Cache, pvc *corev1.PersistentVolumeClaim) bool {
	fit, _ := claimFitOf(c, pvc)
	return fit == claimOutdatedFit
}

func ptrDeref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// isExtstoreClaim tells the claims the StatefulSet made for this Cache's pods.
func isExtstoreClaim(c *cachev1alpha1.Cache, pvc *corev1.PersistentVolumeClaim) bool {
	prefix := ExtstoreVolumeName + "-"
	return strings.HasPrefix(pvc.Name, prefix) && ordinal(c, strings.TrimPrefix(pvc.Name, prefix)) >= 0
}

// extstoreClaims lists the Cache's extstore claims from the informer.
func (r *CacheReconciler) extstoreClaims(ctx context.Context, c *cachev1alpha1.Cache) ([]corev1.PersistentVolumeClaim, error) {
	list := &corev1.PersistentVolumeClaimList{}
	if err := r.List(ctx, list, client.InNamespace(c.Namespace), client.MatchingLabels(SelectorLabels(c))); err != nil {
		return nil, err
	}
	var claims []corev1.PersistentVolumeClaim
	for _, pvc := range list.Items {
		if isExtstoreClaim(c, &pvc) {
			claims = append(claims, pvc)
		}
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i].Name < claims[j].Name })
	return claims, nil
}

// replaceStatefulSet deletes the live StatefulSet with its pods orphaned, so
// that the next reconcile creates it from the current spec; the new one
// adopts the pods and rolls them. The Cache says so in Progressing (and in
// Extstore when the claims are why) and in an Event.
func (r *CacheReconciler) replaceStatefulSet(ctx context.Context, c *cachev1alpha1.Cache, live *appsv1.StatefulSet, why string, claims bool) error {
	logf.FromContext(ctx).Info("replacing StatefulSet whose immutable fields changed", "why", why)
	msg := fmt.Sprintf("StatefulSet %s: %s, which it cannot change in place; replacing it and keeping its pods, which are then replaced one at a time", live.Name, why)
	r.Recorder.Eventf(c, nil, corev1.EventTypeNormal, ReasonReplacingStatefulSet, "Apply", "%s", msg)
	if err := r.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationOrphan),
		client.Preconditions{UID: &live.UID}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	// Until the old StatefulSet is gone reconciles wait without writing
	// status, so this is the status the Cache shows meanwhile: retry a
	// conflict rather than leave it unsaid.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.Get(ctx, client.ObjectKeyFromObject(c), c); err != nil {
			return err
		}
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
			Type: cachev1alpha1.ConditionProgressing, Status: metav1.ConditionTrue, Reason: ReasonReplacingStatefulSet,
			Message: msg, ObservedGeneration: c.Generation,
		})
		if claims && c.Spec.Extstore != nil {
			meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
				Type: cachev1alpha1.ConditionExtstore, Status: metav1.ConditionFalse, Reason: ReasonClaimTemplateChanged,
				Message: msg, ObservedGeneration: c.Generation,
			})
		}
		return r.Status().Update(ctx, c)
	})
	return client.IgnoreNotFound(err)
}

// extstoreResult is what the claim handling did and found, for the status.
type extstoreResult struct {
	claims []corev1.PersistentVolumeClaim
	// lost says which claims were deleted because their node is lost.
	lost []string
	// checkErr says why volumes or nodes could not be read.
	checkErr string
	// requeueAfter is when a NotReady node reaches the timeout.
	requeueAfter time.Duration
	// withoutClass names the Pending claims whose StorageClass is missing.
	withoutClass []string
}

// reconcileClaims replaces outdated claims and those of lost nodes. It acts
// only when the live StatefulSet has the desired claim templates: while an
// old one is still in place, a deleted claim would come back from its old
// template.
func (r *CacheReconciler) reconcileClaims(ctx context.Context, c *cachev1alpha1.Cache, live *liveState, desired *appsv1.StatefulSet) (extstoreResult, error) {
	var res extstoreResult
	claims, err := r.extstoreClaims(ctx, c)
	if err != nil {
		return res, err
	}
	res.claims = claims
	if res.withoutClass, err = r.claimsWithoutClass(ctx, claims); err != nil {
		return res, err
	}
	if live.statefulSet == nil {
		return res, nil
	}
	if differ, _ := claimTemplatesDiffer(live.statefulSet, desired); differ {
		return res, nil
	}
	pods := map[string]*corev1.Pod{}
	for i := range live.pods {
		pods[live.pods[i].Name] = &live.pods[i]
	}
	for i := range claims {
		pvc := &claims[i]
		if !claimOutdated(c, pvc) {
			continue
		}
		pod := pods[strings.TrimPrefix(pvc.Name, ExtstoreVolumeName+"-")]
		if pvc.DeletionTimestamp != nil {
			if err := r.releaseTerminatingClaim(ctx, c, pvc, pod); err != nil {
				return res, err
			}
			continue
		}
		if err := r.replaceOutdatedClaim(ctx, c, pvc, pod, live.statefulSet); err != nil {
			return res, err
		}
	}
	if c.Spec.Extstore.DeletesClaimOnNodeLoss() {
		if err := r.replaceClaimsOfLostNodes(ctx, c, live.pods, claims, &res); err != nil {
			return res, err
		}
	}
	return res, nil
}

// claimsWithoutClass says, class by class, which Pending claims wait for a
// StorageClass that does not exist (or for a default class the cluster lacks):
// no volume ever comes for them, and the scheduler only tells their pods of
// "unbound immediate PersistentVolumeClaims".
func (r *CacheReconciler) claimsWithoutClass(ctx context.Context, claims []corev1.PersistentVolumeClaim) ([]string, error) {
	byClass := map[string][]string{}
	var classes []string
	for i := range claims {
		pvc := &claims[i]
		if pvc.Status.Phase != corev1.ClaimPending || pvc.DeletionTimestamp != nil || ptr.Deref(pvc.Spec.StorageClassName, "-") == "" {
			continue // an empty class binds to a volume by hand
		}
		class := ptr.Deref(pvc.Spec.StorageClassName, "")
		if _, seen := byClass[class]; !seen {
			classes = append(classes, class)
		}
		byClass[class] = append(byClass[class], pvc.Name)
	}
	var missing []string
	for _, class := range classes {
		if class == "" {
			missing = append(missing, fmt.Sprintf("claim(s) %s name no StorageClass and the cluster has no default one: set spec.extstore.storageClassName, or make a class the default",
				strings.Join(byClass[class], ", ")))
			continue
		}
		err := r.readDirect().Get(ctx, types.NamespacedName{Name: class}, &storagev1.StorageClass{})
		switch {
		case apierrors.IsNotFound(err):
			missing = append(missing, fmt.Sprintf("StorageClass %q does not exist, so claim(s) %s stay Pending and their pods cannot be scheduled: create the class (config/samples has one for local NVMe) or set spec.extstore.storageClassName to one that exists",
				class, strings.Join(byClass[class], ", ")))
		case err != nil && !apierrors.IsForbidden(err):
			return nil, err
		}
	}
	return missing, nil
}

// podMounts reports whether a pod mounts the claim.
func podMounts(pod *corev1.Pod, claim string) bool {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil && v.PersistentVolumeClaim.ClaimName == claim {
			return true
		}
	}
	return false
}

// replaceOutdatedClaim expands a claim in place when only its size grew and
// its class allows it. Otherwise it deletes the claim when its pod is being
// replaced: the pod is terminating (claim protection holds the deletion until
// it is gone, and the StatefulSet waits for the claim before it creates the
// new pod) or gone, or no longer mounts it (extstore removed). A pod that
// still runs an old revision keeps its claim until the roll reaches it: a
// claim deleted under a running pod would be refused to that pod by its
// kubelet if the kubelet restarted. A pod of the current revision that
// mounts an outdated claim was created in the moment before the operator
// saw its predecessor go; it is deleted with the claim, once more.
func (r *CacheReconciler) replaceOutdatedClaim(ctx context.Context, c *cachev1alpha1.Cache, pvc *corev1.PersistentVolumeClaim, pod *corev1.Pod, sts *appsv1.StatefulSet) error {
	e := c.Spec.Extstore
	if e != nil && pvc.Status.Phase == corev1.ClaimBound && pvc.Spec.StorageClassName != nil &&
		(e.StorageClassName == nil || *e.StorageClassName == *pvc.Spec.StorageClassName) &&
		e.Size.Cmp(*pvc.Spec.Resources.Requests.Storage()) > 0 {
		class := &storagev1.StorageClass{}
		err := r.readDirect().Get(ctx, types.NamespacedName{Name: *pvc.Spec.StorageClassName}, class)
		switch {
		case err == nil && class.AllowVolumeExpansion != nil && *class.AllowVolumeExpansion:
			patch := client.MergeFrom(pvc.DeepCopy())
			pvc.Spec.Resources.Requests[corev1.ResourceStorage] = e.Size.DeepCopy()
			if err := r.Patch(ctx, pvc, patch); err != nil {
				return client.IgnoreNotFound(err)
			}
			r.Recorder.Eventf(c, pvc, corev1.EventTypeNormal, "ExpandingClaim", "Apply",
				"expanding PersistentVolumeClaim %s to %s (StorageClass %s allows expansion)", pvc.Name, e.Size.String(), class.Name)
			return nil
		case err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err):
			return err
		}
		// No class, or one without expansion, or not allowed to look: replace.
	}
	if pod == nil {
		// The informer may not have seen a pod the StatefulSet just made
		// (and the scheduler bound to this claim): deleting the claim under
		// it would leave it terminating and the pod never starting.
		found := &corev1.Pod{}
		err := r.readDirect().Get(ctx, types.NamespacedName{Namespace: pvc.Namespace, Name: strings.TrimPrefix(pvc.Name, ExtstoreVolumeName+"-")}, found)
		switch {
		case err == nil:
			pod = found
		case !apierrors.IsNotFound(err):
			return err
		}
	}
	deletePod := false
	switch {
	case pod == nil || pod.DeletionTimestamp != nil || !podMounts(pod, pvc.Name):
	case sts.Status.UpdateRevision != "" && sts.Status.ObservedGeneration >= sts.Generation &&
		pod.Labels[appsv1.StatefulSetRevisionLabel] == sts.Status.UpdateRevision:
		if claimFitsTemplate(sts, pvc) {
			// what the live StatefulSet would make it again: deleting both
			// would only repeat
			return nil
		}
		deletePod = true
	default:
		return nil // the roll (or, with OnDelete, a person) replaces the pod first
	}
	if err := r.Delete(ctx, pvc, client.Preconditions{UID: &pvc.UID}); err != nil {
		return client.IgnoreNotFound(err)
	}
	how := "it goes with its pod, and the StatefulSet gives the new pod a claim from the current template"
	if deletePod {
		if err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		how = fmt.Sprintf("pod %s, already of the current revision, still mounted it and was deleted too, to get a claim from the current template", pod.Name)
	}
	r.Recorder.Eventf(c, pvc, corev1.EventTypeNormal, "ReplacingClaim", "Apply",
		"PersistentVolumeClaim %s (class %q, %s) no longer matches spec.extstore; deleted: %s",
		pvc.Name, ptrDeref(pvc.Spec.StorageClassName), pvc.Spec.Resources.Requests.Storage().String(), how)
	return nil
}

// claimFitsTemplate reports whether a claim is what the live StatefulSet's
// extstore claim template would make (its class, at least its size).
func claimFitsTemplate(sts *appsv1.StatefulSet, pvc *corev1.PersistentVolumeClaim) bool {
	for _, t := range sts.Spec.VolumeClaimTemplates {
		if t.Name != ExtstoreVolumeName {
			continue
		}
		if t.Spec.StorageClassName != nil && *t.Spec.StorageClassName != ptrDeref(pvc.Spec.StorageClassName) {
			return false
		}
		return pvc.Spec.Resources.Requests.Storage().Cmp(*t.Spec.Resources.Requests.Storage()) >= 0
	}
	return false
}

// releaseTerminatingClaim deletes a pod that mounts an outdated claim which
// is already terminating: claim protection keeps the claim until the pod is
// gone, and the pod can never start on a claim being deleted. This is the
// pod the StatefulSet made (and the scheduler bound to the old claim) in
// the moment between the claim's deletion and the claim being gone; the
// StatefulSet makes it again, with a claim from the current template.
func (r *CacheReconciler) releaseTerminatingClaim(ctx context.Context, c *cachev1alpha1.Cache, pvc *corev1.PersistentVolumeClaim, pod *corev1.Pod) error {
	if pod == nil || pod.DeletionTimestamp != nil || !podMounts(pod, pvc.Name) {
		return nil
	}
	if err := r.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}); err != nil {
		return client.IgnoreNotFound(err)
	}
	r.Recorder.Eventf(c, pvc, corev1.EventTypeNormal, "ReplacingClaim", "Apply",
		"pod %s mounts PersistentVolumeClaim %s, which no longer matches spec.extstore and is being deleted; deleted the pod, which could not start on it, so that the StatefulSet makes it again with a claim from the current template",
		pod.Name, pvc.Name)
	return nil
}

// readDirect reads around the informers: volumes, nodes and classes are read
// one object at a time, never cached.
func (r *CacheReconciler) readDirect() client.Reader {
	if r.APIReader != nil {
		return r.APIReader
	}
	return r.Client
}

// VolumeNodes are the hostname labels of the nodes a volume is pinned to by
// its node affinity (kubernetes.io/hostname In ...), which is how local
// volumes name their node; nil for a volume that any node can use. A label
// value is not necessarily a Node's name.
func VolumeNodes(pv *corev1.PersistentVolume) []string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return nil
	}
	var nodes []string
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, req := range term.MatchExpressions {
			if req.Key == corev1.LabelHostname && req.Operator == corev1.NodeSelectorOpIn {
				nodes = append(nodes, req.Values...)
			}
		}
	}
	return nodes
}

// NodeLost says whether a node (nil: deleted) is lost for good after timeout
// of NotReady, and otherwise how long until it would be (0: it is Ready).
func NodeLost(node *corev1.Node, timeout time.Duration, now time.Time) (bool, time.Duration) {
	if node == nil {
		return true, 0
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type != corev1.NodeReady {
			continue
		}
		if cond.Status == corev1.ConditionTrue {
			return false, 0
		}
		left := cond.LastTransitionTime.Add(timeout).Sub(now)
		if left <= 0 {
			return true, 0
		}
		return false, left
	}
	return false, 0 // a node that never reported: not known to be lost
}

// nodeLoss is what the nodes of one volume say.
type nodeLoss struct {
	// lostAll: every node is deleted or NotReady for longer than the timeout.
	lostAll bool
	// wait is when the first NotReady node reaches the timeout.
	wait time.Duration
	// why one node is lost, for the Event and the condition.
	why string
	// nodeNames are the Nodes that still exist.
	nodeNames []string
}

// volumeNodeLoss finds the nodes a volume is pinned to. The volume names
// them by their hostname label, which is not always the Node's name
// (--hostname-override, some clouds): the Nodes are found by that label,
// and a value no Node carries any more is a deleted node.
func (r *CacheReconciler) volumeNodeLoss(ctx context.Context, pv *corev1.PersistentVolume, hostnames []string, timeout time.Duration, now time.Time, res *extstoreResult) nodeLoss {
	loss := nodeLoss{lostAll: true}
	for _, hostname := range hostnames {
		list := &corev1.NodeList{}
		if err := r.readDirect().List(ctx, list, client.MatchingLabels{corev1.LabelHostname: hostname}); err != nil {
			res.checkErr = fmt.Sprintf("cannot list Nodes labelled %s=%s of volume %s: %v", corev1.LabelHostname, hostname, pv.Name, err)
			loss.lostAll = false
			continue
		}
		if len(list.Items) == 0 {
			loss.why = fmt.Sprintf("node %s was deleted", hostname)
			continue
		}
		for j := range list.Items {
			node := &list.Items[j]
			loss.nodeNames = append(loss.nodeNames, node.Name)
			lost, left := NodeLost(node, timeout, now)
			if !lost {
				loss.lostAll = false
				if left > 0 && (loss.wait == 0 || left < loss.wait) {
					loss.wait = left
				}
				continue
			}
			loss.why = fmt.Sprintf("node %s has been NotReady for more than %s", node.Name, timeout)
		}
	}
	return loss
}

// replaceClaimsOfLostNodes deletes the claim (and the pod) of every pod that
// is not Ready because its volume's node is gone or NotReady for too long.
func (r *CacheReconciler) replaceClaimsOfLostNodes(ctx context.Context, c *cachev1alpha1.Cache, pods []corev1.Pod, claims []corev1.PersistentVolumeClaim, res *extstoreResult) error {
	byName := map[string]*corev1.PersistentVolumeClaim{}
	for i := range claims {
		byName[claims[i].Name] = &claims[i]
	}
	timeout := c.Spec.Extstore.NodeLossAfter()
	now := time.Now()
	for i := range pods {
		pod := &pods[i]
		if pod.DeletionTimestamp != nil && pod.Spec.NodeName == "" || podReady(pod) {
			continue
		}
		pvc := byName[ExtstoreClaimName(c, pod.Name)]
		if pvc == nil || pvc.DeletionTimestamp != nil || pvc.Spec.VolumeName == "" {
			continue // not bound yet: the scheduler still chooses its node
		}
		pv := &corev1.PersistentVolume{}
		if err := r.readDirect().Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, pv); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			res.checkErr = fmt.Sprintf("cannot read PersistentVolume %s of claim %s: %v", pvc.Spec.VolumeName, pvc.Name, err)
			continue
		}
		nodes := VolumeNodes(pv)
		if len(nodes) == 0 {
			continue // not pinned to a node: it follows the pod
		}
		loss := r.volumeNodeLoss(ctx, pv, nodes, timeout, now, res)
		lostAll, wait, why, nodeNames := loss.lostAll, loss.wait, loss.why, loss.nodeNames
		// A pod that mounts the volume can only have been bound to one of
		// its nodes; when they all still exist and the pod's is not among
		// them, something else holds the pod back. When none exists, the
		// pod's node is the deleted one.
		if pod.Spec.NodeName != "" && len(nodeNames) > 0 && !slices.Contains(nodeNames, pod.Spec.NodeName) {
			continue
		}
		if !lostAll {
			logf.FromContext(ctx).V(1).Info("extstore volume's node not lost (yet)", "pod", pod.Name, "volume", pv.Name, "nodes", nodes, "recheckIn", wait)
			if wait > 0 && (res.requeueAfter == 0 || wait < res.requeueAfter) {
				res.requeueAfter = wait
			}
			continue
		}
		msg := fmt.Sprintf("pod %s's extstore volume %s is on a lost node (%s): deleted claim %s and the pod, which the StatefulSet recreates with a new, empty volume",
			pod.Name, pv.Name, why, pvc.Name)
		// The claim says why it goes for as long as it is terminating, so the
		// condition can say it too.
		// Optimistically locked: the claim read from the informer may be
		// stale, or already replaced by one of the same name (a conflict
		// then skips it until the next reconcile sees the current one).
		patch := client.MergeFromWithOptions(pvc.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if pvc.Annotations == nil {
			pvc.Annotations = map[string]string{}
		}
		pvc.Annotations[NodeLostAnnotation] = msg
		if err := r.Patch(ctx, pvc, patch); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				continue
			}
			return err
		}
		if err := r.Delete(ctx, pvc, client.Preconditions{UID: &pvc.UID}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		// The claim is only released once the pod is gone: a Pending pod
		// goes at once, and a pod on the lost node is removed without
		// waiting for its kubelet, which will never confirm.
		opts := []client.DeleteOption{client.Preconditions{UID: &pod.UID}}
		if pod.Spec.NodeName != "" {
			opts = append(opts, client.GracePeriodSeconds(0))
		}
		if err := r.Delete(ctx, pod, opts...); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		res.lost = append(res.lost, msg)
		// Related to the claim: Events of one Cache with one reason are otherwise
		// folded into one series, and each pod's loss is news.
		r.Recorder.Eventf(c, pvc, corev1.EventTypeWarning, ReasonVolumeNodeLost, "Apply", "%s", msg)
	}
	return nil
}

// setExtstoreCondition says whether every pod's claim matches spec.extstore.
func setExtstoreCondition(c *cachev1alpha1.Cache, obs Observed, set func(string, metav1.ConditionStatus, string, string), conds *[]metav1.Condition) {
	e := c.Spec.Extstore
	if e == nil {
		meta.RemoveStatusCondition(conds, cachev1alpha1.ConditionExtstore)
		return
	}
	lost := append([]string(nil), obs.ClaimsLost...)
	for i := range obs.Claims {
		if why := obs.Claims[i].Annotations[NodeLostAnnotation]; why != "" && obs.Claims[i].DeletionTimestamp != nil && !slices.Contains(lost, why) {
			lost = append(lost, why)
		}
	}
	if len(lost) > 0 {
		set(cachev1alpha1.ConditionExtstore, metav1.ConditionFalse, ReasonVolumeNodeLost, strings.Join(lost, "; "))
		return
	}
	if obs.StatefulSet != nil {
		if differ, how := claimTemplatesDiffer(obs.StatefulSet, StatefulSet(c, obs.Options)); differ {
			set(cachev1alpha1.ConditionExtstore, metav1.ConditionFalse, ReasonClaimTemplateChanged, how+"; the StatefulSet is being replaced")
			return
		}
	}
	var outdated, growing []string
	for i := range obs.Claims {
		switch fit, why := claimFitOf(c, &obs.Claims[i]); fit {
		case claimOutdatedFit:
			outdated = append(outdated, fmt.Sprintf("%s (%s)", obs.Claims[i].Name, why))
		case claimGrowing:
			growing = append(growing, fmt.Sprintf("%s (%s)", obs.Claims[i].Name, why))
		}
	}
	if len(outdated) > 0 {
		set(cachev1alpha1.ConditionExtstore, metav1.ConditionFalse, ReasonClaimsOutdated,
			fmt.Sprintf("claim(s) %s do not match spec.extstore (class or size); each is expanded in place, or deleted as the roll replaces its pod", strings.Join(outdated, ", ")))
		return
	}
	if len(growing) > 0 {
		set(cachev1alpha1.ConditionExtstore, metav1.ConditionFalse, ReasonClaimsExpanding,
			fmt.Sprintf("claim(s) %s are being expanded in place; a pod whose engine starts before its filesystem grew fails (no space for the extstore file) and restarts until it has", strings.Join(growing, ", ")))
		return
	}
	if len(obs.ClaimsWithoutClass) > 0 {
		set(cachev1alpha1.ConditionExtstore, metav1.ConditionFalse, ReasonStorageClassNotFound, strings.Join(obs.ClaimsWithoutClass, "; "))
		return
	}
	if obs.ExtstoreCheckErr != "" {
		set(cachev1alpha1.ConditionExtstore, metav1.ConditionUnknown, ReasonNodeLossCheckFailed,
			obs.ExtstoreCheckErr+"; claims of lost nodes are not replaced until the operator can read volumes and nodes (a ClusterRole)")
		return
	}
	class := "the cluster's default class"
	if e.StorageClassName != nil {
		class = "class " + *e.StorageClassName
	}
	set(cachev1alpha1.ConditionExtstore, metav1.ConditionTrue, ReasonClaimsMatch,
		fmt.Sprintf("every pod's claim is %s of %s, with the extstore file at %s", e.Size.String(), class, extstorePathArg(c, obs.Options)))
}

// extstorePathArg is the ext_path option the engine runs with.
func extstorePathArg(c *cachev1alpha1.Cache, o BuildOptions) string {
	for _, a := range EngineArgs(c, o) {
		for _, opt := range strings.Split(a, ",") {
			if strings.HasPrefix(opt, "ext_path=") {
				return strings.TrimPrefix(opt, "ext_path=")
			}
		}
	}
	return ""
}
