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

// Extstore on a real API server. envtest runs no StatefulSet controller,
// scheduler, garbage collector or PVC protection controller: the tests make
// the claims, volumes, nodes and pods those would, and remove the orphan
// finalizer of a replaced StatefulSet as the garbage collector would. A
// deleted claim keeps its kubernetes.io/pvc-protection finalizer (the API
// server adds it, only the missing controller removes it), so "deleted"
// below means gone or terminating.

package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/test/utils"
)

func withExtstore(size, class string) func(*cachev1alpha1.Cache) {
	return func(c *cachev1alpha1.Cache) {
		c.Spec.Extstore = &cachev1alpha1.ExtstoreSpec{Size: resource.MustParse(size)}
		if class != "" {
			c.Spec.Extstore.StorageClassName = ptr.To(class)
		}
	}
}

// createClaim makes the claim the StatefulSet controller would make for pod
// (its name and labels), bound to volume when one is given.
func createClaim(t *testing.T, c *cachev1alpha1.Cache, pod, class, size, volume string) *corev1.PersistentVolumeClaim {
	t.Helper()
	ctx := context.Background()
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: ExtstoreClaimName(c, pod), Namespace: c.Namespace, Labels: Labels(c)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(class),
			VolumeName:       volume,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	if err := k8sClient.Create(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	if volume != "" {
		pvc.Status.Phase = corev1.ClaimBound
		pvc.Status.AccessModes = pvc.Spec.AccessModes
		pvc.Status.Capacity = pvc.Spec.Resources.Requests
		if err := k8sClient.Status().Update(ctx, pvc); err != nil {
			t.Fatal(err)
		}
	}
	return pvc
}

// createStorageClass creates a cluster-wide StorageClass (named after the
// test's namespace: the samples test creates theirs).
func createStorageClass(t *testing.T, name string) {
	t.Helper()
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: "example.com/test"}
	if err := k8sClient.Create(context.Background(), sc); err != nil {
		t.Fatal(err)
	}
}

// claimDeleted: gone, or terminating (see the file comment).
func claimDeleted(ns, name string) (bool, string) {
	pvc := &corev1.PersistentVolumeClaim{}
	err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, pvc)
	switch {
	case apierrors.IsNotFound(err):
		return true, ""
	case err != nil:
		return false, err.Error()
	}
	return pvc.DeletionTimestamp != nil, fmt.Sprintf("claim %s: %s, not deleted", name, pvc.Spec.Resources.Requests.Storage())
}

// replaceAsTheGarbageCollectorWould waits until the operator has deleted the
// StatefulSet of uid with its pods orphaned, checks that the Cache reports
// the replacement, then removes the orphan finalizer as the collector
// would, and waits for the new StatefulSet.
func replaceAsTheGarbageCollectorWould(t *testing.T, ns, name string, uid types.UID, condType, condReason string) *appsv1.StatefulSet {
	t.Helper()
	ctx := context.Background()
	eventually(t, "the StatefulSet deleted with its pods orphaned, and the Cache saying why", func() (bool, string) {
		sts := &appsv1.StatefulSet{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sts); err != nil {
			return false, err.Error()
		}
		if sts.UID != uid || sts.DeletionTimestamp == nil || !slices.Contains(sts.Finalizers, metav1.FinalizerOrphanDependents) {
			return false, fmt.Sprintf("uid %s deleting %v finalizers %v", sts.UID, sts.DeletionTimestamp != nil, sts.Finalizers)
		}
		cond := condOf(getCache(t, ns, name), condType)
		return cond.Reason == condReason, fmt.Sprintf("%s: %s %s", condType, cond.Reason, cond.Message)
	})
	eventually(t, "a new StatefulSet", func() (bool, string) {
		sts := &appsv1.StatefulSet{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sts); err != nil {
			return false, err.Error()
		}
		if sts.UID == uid {
			sts.Finalizers = nil // the garbage collector, once it released the pods
			if err := k8sClient.Update(ctx, sts); err != nil && !apierrors.IsConflict(err) {
				return false, err.Error()
			}
			return false, "old StatefulSet still there"
		}
		return true, ""
	})
	sts := &appsv1.StatefulSet{}
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sts); err != nil {
		t.Fatal(err)
	}
	return sts
}

func statefulSetOf(t *testing.T, ns, name string) *appsv1.StatefulSet {
	t.Helper()
	sts := &appsv1.StatefulSet{}
	eventually(t, "StatefulSet "+name, func() (bool, string) {
		err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, sts)
		return err == nil, fmt.Sprint(err)
	})
	return sts
}

func TestExtstoreGivesTheStatefulSetAClaimTemplate(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	createCache(t, ns, "ext", withExtstore("1Gi", "local-nvme"))
	sts := statefulSetOf(t, ns, "ext")
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("claim templates %+v", sts.Spec.VolumeClaimTemplates)
	}
	vct := sts.Spec.VolumeClaimTemplates[0]
	if vct.Name != "extstore" || ptr.Deref(vct.Spec.StorageClassName, "") != "local-nvme" || vct.Spec.Resources.Requests.Storage().String() != "1Gi" ||
		!slices.Equal(vct.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Fatalf("claim template %+v", vct)
	}
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType ||
		p.WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		t.Fatalf("retention policy %+v", p)
	}
	c := getCache(t, ns, "ext")
	e := c.Spec.Extstore
	if ptr.Deref(e.ItemMinSize, 0) != 512 || e.PageSize.String() != "64Mi" || ptr.Deref(e.IOThreads, 0) != 1 ||
		!ptr.Deref(e.DeleteClaimOnNodeLoss, false) || e.NodeLossTimeout.Duration != 5*time.Minute {
		t.Fatalf("defaults not applied: %+v", e)
	}
	// Applying the same claim template again is no change: a scale keeps
	// the StatefulSet (a claim template the API server saw as changed would
	// replace it every time).
	if _, err := updateCache(ns, "ext", func(c *cachev1alpha1.Cache) { c.Spec.Replicas = ptr.To(int32(2)) }); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the same StatefulSet scaled to 2", func() (bool, string) {
		cur := &appsv1.StatefulSet{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "ext"}, cur); err != nil {
			return false, err.Error()
		}
		if cur.UID != sts.UID {
			return false, "the StatefulSet was replaced"
		}
		return *cur.Spec.Replicas == 2, fmt.Sprint(*cur.Spec.Replicas)
	})
	eventually(t, "Extstore True", func() (bool, string) {
		cond := condOf(getCache(t, ns, "ext"), cachev1alpha1.ConditionExtstore)
		return cond.Status == metav1.ConditionTrue && cond.Reason == ReasonClaimsMatch && strings.Contains(cond.Message, "/data/extstore/cache:857M"),
			cond.Reason + ": " + cond.Message
	})
	cur := &appsv1.StatefulSet{}
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "ext"}, cur); err != nil || cur.UID != sts.UID {
		t.Fatalf("StatefulSet replaced without a change of its claim template (err %v)", err)
	}
}

func TestAdmissionRejectsInvalidExtstore(t *testing.T) {
	needIntegration(t)
	ns := newNamespace(t)
	cases := []struct {
		name   string
		mutate func(*cachev1alpha1.Cache)
		want   string
	}{
		{"under-two-pages", withExtstore("128Mi", ""), "spec.extstore.size must hold at least two pages"},
		// 90% of 200Mi is two 64Mi pages and more, but not with 64Mi for ext4
		{"under-two-pages-after-the-filesystem", withExtstore("200Mi", ""), "spec.extstore.size must hold at least two pages"},
		{"zero-size", withExtstore("0", ""), "spec.extstore.size must hold at least two pages"},
		{"too-many-pages", func(c *cachev1alpha1.Cache) {
			withExtstore("1Ti", "")(c)
			c.Spec.Extstore.PageSize = ptr.To(resource.MustParse("4Mi"))
		}, "must fit in 65536 pages"},
		{"page-not-4mi", func(c *cachev1alpha1.Cache) {
			withExtstore("1Gi", "")(c)
			c.Spec.Extstore.PageSize = ptr.To(resource.MustParse("6Mi"))
		}, "spec.extstore.pageSize must be a multiple of 4Mi"},
		{"item-min-not-below-default-max", func(c *cachev1alpha1.Cache) {
			withExtstore("1Gi", "")(c)
			c.Spec.Extstore.ItemMinSize = ptr.To(int64(1 << 20))
		}, "spec.extstore.itemMinSize must be less than spec.engine.maxItemSize"},
		{"item-min-not-below-max", func(c *cachev1alpha1.Cache) {
			withExtstore("1Gi", "")(c)
			c.Spec.Engine.MaxItemSize = ptr.To(resource.MustParse("4Ki"))
			c.Spec.Extstore.ItemMinSize = ptr.To(int64(8192))
		}, "spec.extstore.itemMinSize must be less than spec.engine.maxItemSize"},
		{"io-threads-zero", func(c *cachev1alpha1.Cache) {
			withExtstore("1Gi", "")(c)
			c.Spec.Extstore.IOThreads = ptr.To(int32(0))
		}, "spec.extstore.ioThreads"},
		{"size-too-big", withExtstore("65Ti", ""), "spec.extstore.size must be at most 64Ti"},
		// cachetd exits 64 when the largest item's record cannot fit in one write buffer
		{"item-max-beyond-a-write-buffer", func(c *cachev1alpha1.Cache) {
			withExtstore("1Gi", "")(c)
			c.Spec.Engine.MaxItemSize = ptr.To(resource.MustParse("4Mi"))
		}, "spec.engine.maxItemSize must be at most 4091Ki with spec.extstore"},
		// ... and when workers, background and extstore threads exceed its 256 contexts
		{"threads-and-io-threads-beyond-the-contexts", func(c *cachev1alpha1.Cache) {
			withExtstore("1Gi", "")(c)
			c.Spec.Engine.Threads = ptr.To(int32(249))
			c.Spec.Extstore.IOThreads = ptr.To(int32(4))
		}, "spec.engine.threads plus spec.extstore.ioThreads must be at most 252"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { mustRefuse(t, ns, tc.name, tc.mutate, tc.want) })
	}
	// The smallest claim that holds two default pages passes.
	createCache(t, ns, "smallest", withExtstore("214Mi", "")) // 214 x 0.9 - 64 = 128.6; 213Mi is refused
	// The largest item and the most threads cachetd takes with extstore pass.
	createCache(t, ns, "largest-item", withExtstore("1Gi", ""), func(c *cachev1alpha1.Cache) {
		c.Spec.Engine.MaxItemSize = ptr.To(resource.MustParse("4091Ki"))
		c.Spec.Engine.Threads = ptr.To(int32(251))
	})
}

func TestExtstoreResizeReplacesTheStatefulSetAndItsClaims(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	class := ns + "-nvme"
	c := createCache(t, ns, "rs", withExtstore("1Gi", class), func(c *cachev1alpha1.Cache) { c.Spec.Replicas = ptr.To(int32(4)) })
	old := statefulSetOf(t, ns, "rs")
	revision := func(rev string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Labels[appsv1.StatefulSetRevisionLabel] = rev }
	}
	// rs-0 runs (on a node, so its deletion waits for a kubelet that envtest
	// lacks) and mounts its claim; rs-1's pod is gone. Their class exists:
	// a Pending claim of a missing class is another condition.
	createStorageClass(t, class)
	createClaim(t, c, "rs-0", class, "1Gi", "")
	rs0 := podOnVolume(t, ns, "rs", 0, ns+"-node", revision("rev-old"))
	createClaim(t, c, "rs-1", class, "1Gi", "")
	eventually(t, "claims of the spec's size kept", func() (bool, string) {
		cond := condOf(getCache(t, ns, "rs"), cachev1alpha1.ConditionExtstore)
		return cond.Reason == ReasonClaimsMatch, cond.Reason + ": " + cond.Message
	})
	for _, name := range []string{"extstore-rs-0", "extstore-rs-1"} {
		if deleted, _ := claimDeleted(ns, name); deleted {
			t.Fatalf("claim %s of the spec's size was deleted", name)
		}
	}

	if _, err := updateCache(ns, "rs", func(c *cachev1alpha1.Cache) { c.Spec.Extstore.Size = resource.MustParse("2Gi") }); err != nil {
		t.Fatal(err)
	}
	sts := replaceAsTheGarbageCollectorWould(t, ns, "rs", old.UID, cachev1alpha1.ConditionExtstore, ReasonClaimTemplateChanged)
	if got := sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().String(); got != "2Gi" {
		t.Fatalf("new StatefulSet's claim template asks for %s", got)
	}
	eventually(t, "a ReplacingStatefulSet event naming the new size", func() (bool, string) {
		return hasEvent(t, ns, ReasonReplacingStatefulSet, "", "size=2Gi")
	})
	setSTSStatus(t, ns, "rs", appsv1.StatefulSetStatus{Replicas: 2, CurrentRevision: "rev-old", UpdateRevision: "rev-new"})
	eventually(t, "the old-size claim without a pod deleted", func() (bool, string) { return claimDeleted(ns, "extstore-rs-1") })
	// The same reconcile left rs-0's claim alone: its pod still runs the old
	// revision, and the roll has not reached it.
	if deleted, _ := claimDeleted(ns, "extstore-rs-0"); deleted {
		t.Fatal("the claim of a running pod the roll has not reached was deleted")
	}
	eventually(t, "Extstore says old claims remain until their pods go", func() (bool, string) {
		cond := condOf(getCache(t, ns, "rs"), cachev1alpha1.ConditionExtstore)
		return cond.Status == metav1.ConditionFalse && cond.Reason == ReasonClaimsOutdated && strings.Contains(cond.Message, "extstore-rs-0"),
			cond.Reason + ": " + cond.Message
	})
	// The roll reaches rs-0: its pod terminates, and its claim goes with it.
	if err := k8sClient.Delete(ctx, rs0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "rs-0's claim deleted as its pod terminates", func() (bool, string) { return claimDeleted(ns, "extstore-rs-0") })
	// A claim of the new size, as the StatefulSet makes for a replaced pod,
	// is kept; a pod of the new revision that got an old claim (created
	// before the operator saw its predecessor go) is replaced with it.
	createClaim(t, c, "rs-2", class, "2Gi", "")
	createClaim(t, c, "rs-3", class, "1Gi", "")
	rs3 := podOnVolume(t, ns, "rs", 3, ns+"-node", revision("rev-new"))
	eventually(t, "the current pod's old claim deleted", func() (bool, string) { return claimDeleted(ns, "extstore-rs-3") })
	eventually(t, "the current pod on an old claim deleted", func() (bool, string) {
		cur := &corev1.Pod{}
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rs-3"}, cur)
		return apierrors.IsNotFound(err) || (err == nil && (cur.DeletionTimestamp != nil || cur.UID != rs3.UID)), fmt.Sprint(err)
	})
	if deleted, _ := claimDeleted(ns, "extstore-rs-2"); deleted {
		t.Fatal("a claim of the current size was deleted")
	}

	// Removing extstore replaces the StatefulSet again, without claims.
	if _, err := updateCache(ns, "rs", func(c *cachev1alpha1.Cache) { c.Spec.Extstore = nil }); err != nil {
		t.Fatal(err)
	}
	sts = replaceAsTheGarbageCollectorWould(t, ns, "rs", sts.UID, cachev1alpha1.ConditionProgressing, ReasonReplacingStatefulSet)
	if len(sts.Spec.VolumeClaimTemplates) != 0 {
		t.Fatalf("claim templates left: %+v", sts.Spec.VolumeClaimTemplates)
	}
	eventually(t, "the last claim deleted with extstore", func() (bool, string) { return claimDeleted(ns, "extstore-rs-2") })
	eventually(t, "no Extstore condition", func() (bool, string) {
		c := getCache(t, ns, "rs")
		return meta.FindStatusCondition(c.Status.Conditions, cachev1alpha1.ConditionExtstore) == nil, fmt.Sprint(c.Status.Conditions)
	})
}

func TestExtstoreGrowsClaimsInPlaceWhenTheirClassExpands(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	class := ns + "-expandable"
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "example.com/test", AllowVolumeExpansion: ptr.To(true)}
	if err := k8sClient.Create(ctx, sc); err != nil {
		t.Fatal(err)
	}
	c := createCache(t, ns, "ex", withExtstore("1Gi", class))
	old := statefulSetOf(t, ns, "ex")
	pv := utils.LocalPersistentVolume(ns+"-pv0", ns+"-node", class, "1Gi", ns, "extstore-ex-0")
	if err := k8sClient.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	createClaim(t, c, "ex-0", class, "1Gi", pv.Name)
	if _, err := updateCache(ns, "ex", func(c *cachev1alpha1.Cache) { c.Spec.Extstore.Size = resource.MustParse("3Gi") }); err != nil {
		t.Fatal(err)
	}
	replaceAsTheGarbageCollectorWould(t, ns, "ex", old.UID, cachev1alpha1.ConditionExtstore, ReasonClaimTemplateChanged)
	eventually(t, "the bound claim expanded to 3Gi, not deleted", func() (bool, string) {
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "extstore-ex-0"}, pvc); err != nil {
			return false, err.Error()
		}
		if pvc.DeletionTimestamp != nil {
			t.Fatal("an expandable claim was deleted")
		}
		return pvc.Spec.Resources.Requests.Storage().String() == "3Gi", pvc.Spec.Resources.Requests.Storage().String()
	})
	eventually(t, "an ExpandingClaim event", func() (bool, string) { return hasEvent(t, ns, "ExpandingClaim", "", "extstore-ex-0") })
	// The request is patched, the volume has not grown: not done yet.
	eventually(t, "Extstore False, ClaimsExpanding, while the capacity is 1Gi", func() (bool, string) {
		cond := condOf(getCache(t, ns, "ex"), cachev1alpha1.ConditionExtstore)
		return cond.Status == metav1.ConditionFalse && cond.Reason == ReasonClaimsExpanding && strings.Contains(cond.Message, "extstore-ex-0"),
			cond.Reason + ": " + cond.Message
	})
	// The resizer fails: the claim goes the delete path rather than wait
	// forever. (A claim that grew fits: TestClaimFitWaitsForTheCapacity.)
	pvc := &corev1.PersistentVolumeClaim{}
	if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "extstore-ex-0"}, pvc); err != nil {
		t.Fatal(err)
	}
	pvc.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimControllerResizeError,
		Status: corev1.ConditionTrue, Message: "volume cannot grow", LastTransitionTime: metav1.Now()}}
	if err := k8sClient.Status().Update(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "ClaimsOutdated naming the failed expansion", func() (bool, string) {
		cond := condOf(getCache(t, ns, "ex"), cachev1alpha1.ConditionExtstore)
		return cond.Reason == ReasonClaimsOutdated && strings.Contains(cond.Message, "volume cannot grow"), cond.Reason + ": " + cond.Message
	})
	// No pod uses it: it is deleted, and the StatefulSet makes a new one.
	eventually(t, "the claim whose expansion failed deleted", func() (bool, string) { return claimDeleted(ns, "extstore-ex-0") })
}

// A pod that the StatefulSet made and the scheduler bound to an outdated
// claim in the moment the claim was being deleted could never start: claim
// protection keeps the claim while the pod exists. The pod is deleted.
func TestExtstorePodOnATerminatingOutdatedClaimIsDeleted(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := createCache(t, ns, "tc", withExtstore("1Gi", "local-nvme"))
	statefulSetOf(t, ns, "tc")
	pvc := createClaim(t, c, "tc-0", "old-class", "1Gi", "")
	if err := k8sClient.Delete(ctx, pvc); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the outdated claim terminating (claim protection holds it)", func() (bool, string) {
		cur := &corev1.PersistentVolumeClaim{}
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(pvc), cur); err != nil {
			return false, err.Error()
		}
		return cur.DeletionTimestamp != nil, "not terminating"
	})
	pod := podOnVolume(t, ns, "tc", 0, "")
	eventually(t, "the pod on the terminating claim deleted", func() (bool, string) {
		cur := &corev1.Pod{}
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: pod.Name}, cur)
		return apierrors.IsNotFound(err) || (err == nil && (cur.UID != pod.UID || cur.DeletionTimestamp != nil)), fmt.Sprint(err)
	})
}

// podOnVolume creates the pod the StatefulSet would for ordinal, mounting
// its extstore claim, on node ("" while it cannot be scheduled), with the
// status the scheduler or node controller would give it.
func podOnVolume(t *testing.T, ns, name string, ordinal int, node string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	sts := statefulSetOf(t, ns, name)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, ordinal), Namespace: ns,
			Labels: sts.Spec.Template.Labels, Annotations: sts.Spec.Template.Annotations},
		Spec: *sts.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = node
	pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: ExtstoreVolumeName, VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: fmt.Sprintf("extstore-%s-%d", name, ordinal)}}})
	for _, m := range mutate {
		m(pod)
	}
	if err := k8sClient.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	if node == "" {
		pod.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, LastTransitionTime: now,
			Message: "0/2 nodes are available: 2 node(s) had volume node affinity conflict.",
		}}}
	} else { // what the node controller leaves when the node stops reporting
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "NodeNotReady", LastTransitionTime: now},
		}}
	}
	if err := k8sClient.Status().Update(ctx, pod); err != nil {
		// The controller may act on the spec alone (a pod on a terminating
		// claim, or whose volume is on a lost node) and delete the pod
		// before its status is written; the tests check what it did after.
		cur := &corev1.Pod{}
		gerr := k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), cur)
		if (apierrors.IsConflict(err) || apierrors.IsNotFound(err)) &&
			(apierrors.IsNotFound(gerr) || (gerr == nil && (cur.UID != pod.UID || cur.DeletionTimestamp != nil))) {
			return pod
		}
		t.Fatal(err)
	}
	return pod
}

func createNode(t *testing.T, name string, ready corev1.ConditionStatus, since time.Time) {
	t.Helper()
	node, status := utils.NodeWithReady(name, ready, since)
	if err := k8sClient.Create(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	node.Status = status
	if err := k8sClient.Status().Update(context.Background(), node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), node) })
}

func TestExtstoreClaimsOfLostNodesAreReplaced(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := createCache(t, ns, "nl", withExtstore("1Gi", "local-nvme"), func(c *cachev1alpha1.Cache) { c.Spec.Replicas = ptr.To(int32(4)) })
	statefulSetOf(t, ns, "nl")

	gone, down, blip, fine := ns+"-gone", ns+"-down", ns+"-blip", ns+"-fine"
	createNode(t, gone, corev1.ConditionTrue, time.Now())
	createNode(t, down, corev1.ConditionFalse, time.Now().Add(-10*time.Minute)) // past the 5m default
	createNode(t, blip, corev1.ConditionFalse, time.Now().Add(-30*time.Second))
	createNode(t, fine, corev1.ConditionTrue, time.Now())
	if err := k8sClient.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: gone}}); err != nil {
		t.Fatal(err)
	}
	for i, node := range []string{gone, down, blip, fine} {
		pod := fmt.Sprintf("nl-%d", i)
		pv := utils.LocalPersistentVolume(fmt.Sprintf("%s-pv%d", ns, i), node, "local-nvme", "1Gi", ns, ExtstoreClaimName(c, pod))
		if err := k8sClient.Create(ctx, pv); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), pv) })
		createClaim(t, c, pod, "local-nvme", "1Gi", pv.Name)
	}
	// nl-0 cannot be scheduled: its volume's node is gone. nl-1 sits on a
	// node NotReady for 10 minutes. nl-2's node is NotReady for 30 s only,
	// and nl-3 is Pending for some other reason on a healthy node's volume.
	p0 := podOnVolume(t, ns, "nl", 0, "")
	p1 := podOnVolume(t, ns, "nl", 1, down)
	podOnVolume(t, ns, "nl", 2, "")
	podOnVolume(t, ns, "nl", 3, "")

	for _, p := range []*corev1.Pod{p0, p1} {
		claim := "extstore-" + p.Name
		eventually(t, "claim "+claim+" of a lost node deleted", func() (bool, string) { return claimDeleted(ns, claim) })
		eventually(t, "pod "+p.Name+" deleted", func() (bool, string) {
			cur := &corev1.Pod{}
			err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: p.Name}, cur)
			if apierrors.IsNotFound(err) || (err == nil && cur.UID != p.UID) {
				return true, ""
			}
			return false, fmt.Sprint(err)
		})
	}
	eventually(t, "VolumeNodeLost events for both", func() (bool, string) {
		if ok, s := hasEvent(t, ns, ReasonVolumeNodeLost, "", "node "+gone+" was deleted"); !ok {
			return false, s
		}
		return hasEvent(t, ns, ReasonVolumeNodeLost, "", "node "+down+" has been NotReady for more than 5m0s")
	})
	eventually(t, "Extstore condition names the loss", func() (bool, string) {
		cond := condOf(getCache(t, ns, "nl"), cachev1alpha1.ConditionExtstore)
		// while the claims terminate (for good here: no PVC protection
		// controller releases them)
		return cond.Status == metav1.ConditionFalse && cond.Reason == ReasonVolumeNodeLost &&
			strings.Contains(cond.Message, "extstore-nl-0") && strings.Contains(cond.Message, "extstore-nl-1"), cond.Reason + ": " + cond.Message
	})
	for _, name := range []string{"extstore-nl-2", "extstore-nl-3"} {
		if deleted, _ := claimDeleted(ns, name); deleted {
			t.Errorf("claim %s deleted though its node is not lost", name)
		}
	}
	for _, name := range []string{"nl-2", "nl-3"} {
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &corev1.Pod{}); err != nil {
			t.Errorf("pod %s: %v", name, err)
		}
	}

	// With the policy off, a lost node's claim stays.
	if _, err := updateCache(ns, "nl", func(c *cachev1alpha1.Cache) { c.Spec.Extstore.DeleteClaimOnNodeLoss = ptr.To(false) }); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the policy change seen", func() (bool, string) {
		c := getCache(t, ns, "nl")
		return c.Status.ObservedGeneration == c.Generation, fmt.Sprint(c.Status.ObservedGeneration)
	})
	pv := utils.LocalPersistentVolume(ns+"-pv-off", gone, "local-nvme", "1Gi", ns, "extstore-nl-0")
	if err := k8sClient.Create(ctx, pv); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), pv) })
	eventually(t, "the old claim gone from the API", func() (bool, string) {
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "extstore-nl-0"}, &corev1.PersistentVolumeClaim{})
		if apierrors.IsNotFound(err) {
			return true, ""
		}
		// play the PVC protection controller: no pod uses it any more
		pvc := &corev1.PersistentVolumeClaim{}
		if err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "extstore-nl-0"}, pvc); err == nil && len(pvc.Finalizers) > 0 {
			pvc.Finalizers = nil
			_ = k8sClient.Update(ctx, pvc)
		}
		return false, fmt.Sprint(err)
	})
	createClaim(t, c, "nl-0", "local-nvme", "1Gi", pv.Name)
	podOnVolume(t, ns, "nl", 0, "")
	// A reconcile that reads the API server directly sees this claim and
	// pod for certain (the manager's may not have yet): after it, the claim
	// must still be there.
	direct := &CacheReconciler{Client: k8sClient, Scheme: scheme, Recorder: testRecorder, EngineImage: testEngineImage, ClusterDomain: "cluster.test", Engine: suiteEngine}
	if _, err := direct.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "nl"}}); err != nil {
		t.Fatal(err)
	}
	if deleted, _ := claimDeleted(ns, "extstore-nl-0"); deleted {
		t.Fatal("deleteClaimOnNodeLoss false, and a lost node's claim was deleted")
	}
	// The same claim and pod with the policy back on: the claim goes, so the
	// check above looked at a case the policy decides.
	if _, err := updateCache(ns, "nl", func(c *cachev1alpha1.Cache) { c.Spec.Extstore.DeleteClaimOnNodeLoss = nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "nl"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "with the policy on again, the lost node's claim deleted", func() (bool, string) { return claimDeleted(ns, "extstore-nl-0") })
}

// Nodes are matched to volumes by their hostname label, which may differ
// from the Node's name (--hostname-override, some clouds).
func TestExtstoreNodeLossFindsNodesByTheirHostnameLabel(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	c := createCache(t, ns, "hn", withExtstore("1Gi", "local-nvme"), func(c *cachev1alpha1.Cache) { c.Spec.Replicas = ptr.To(int32(3)) })
	statefulSetOf(t, ns, "hn")

	// hn-0's node is healthy but named apart from its hostname; hn-1's is
	// deleted; hn-2 is stuck on a node NotReady for 10 minutes, its
	// NodeName the Node's name, not the hostname the volume names.
	renamed := func(name, hostname string, ready corev1.ConditionStatus, since time.Time) {
		node, status := utils.NodeWithReady(name, ready, since)
		node.Labels[corev1.LabelHostname] = hostname
		if err := k8sClient.Create(ctx, node); err != nil {
			t.Fatal(err)
		}
		node.Status = status
		if err := k8sClient.Status().Update(ctx, node); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), node) })
	}
	renamed(ns+"-a.internal", ns+"-a", corev1.ConditionTrue, time.Now())
	renamed(ns+"-b.internal", ns+"-b", corev1.ConditionTrue, time.Now())
	renamed(ns+"-c.internal", ns+"-c", corev1.ConditionFalse, time.Now().Add(-10*time.Minute))
	if err := k8sClient.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-b.internal"}}); err != nil {
		t.Fatal(err)
	}
	for i, hostname := range []string{ns + "-a", ns + "-b", ns + "-c"} {
		pod := fmt.Sprintf("hn-%d", i)
		pv := utils.LocalPersistentVolume(fmt.Sprintf("%s-pv%d", ns, i), hostname, "local-nvme", "1Gi", ns, ExtstoreClaimName(c, pod))
		if err := k8sClient.Create(ctx, pv); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), pv) })
		createClaim(t, c, pod, "local-nvme", "1Gi", pv.Name)
	}
	podOnVolume(t, ns, "hn", 0, "")
	podOnVolume(t, ns, "hn", 1, "")
	p2 := podOnVolume(t, ns, "hn", 2, ns+"-c.internal")

	eventually(t, "claims of the deleted and the NotReady node deleted", func() (bool, string) {
		for _, claim := range []string{"extstore-hn-1", "extstore-hn-2"} {
			if ok, s := claimDeleted(ns, claim); !ok {
				return false, s
			}
		}
		return true, ""
	})
	eventually(t, "pod hn-2 on the NotReady node deleted", func() (bool, string) {
		cur := &corev1.Pod{}
		err := k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: p2.Name}, cur)
		return apierrors.IsNotFound(err) || (err == nil && cur.UID != p2.UID), fmt.Sprint(err)
	})
	eventually(t, "events name the Nodes", func() (bool, string) {
		if ok, s := hasEvent(t, ns, ReasonVolumeNodeLost, "", "node "+ns+"-b was deleted"); !ok {
			return false, s
		}
		return hasEvent(t, ns, ReasonVolumeNodeLost, "", "node "+ns+"-c.internal has been NotReady")
	})
	// hn-0's reconciles ran along with hn-1's and hn-2's (one Cache, one
	// reconcile over all its pods): its healthy node was looked up too.
	if deleted, _ := claimDeleted(ns, "extstore-hn-0"); deleted {
		t.Fatal("the claim of a healthy node whose name differs from its hostname label was deleted")
	}
}

// The node-loss rule without an API server: a deleted node is lost at once,
// a NotReady one after the timeout, a Ready or never-reporting one never.
func TestNodeLostAfterTheTimeout(t *testing.T) {
	now := time.Now()
	if lost, _ := NodeLost(nil, 5*time.Minute, now); !lost {
		t.Error("a deleted node is not lost")
	}
	down, st := utils.NodeWithReady("n", corev1.ConditionUnknown, now.Add(-6*time.Minute))
	down.Status = st
	if lost, _ := NodeLost(down, 5*time.Minute, now); !lost {
		t.Error("a node NotReady for 6m is not lost after 5m")
	}
	blip, st := utils.NodeWithReady("n", corev1.ConditionFalse, now.Add(-time.Minute))
	blip.Status = st
	if lost, left := NodeLost(blip, 5*time.Minute, now); lost || left != 4*time.Minute {
		t.Errorf("a node NotReady for 1m: lost %v, recheck in %s, want 4m", lost, left)
	}
	ready, st := utils.NodeWithReady("n", corev1.ConditionTrue, now.Add(-time.Hour))
	ready.Status = st
	if lost, left := NodeLost(ready, 5*time.Minute, now); lost || left != 0 {
		t.Errorf("a Ready node: lost %v, recheck in %s", lost, left)
	}
	if lost, _ := NodeLost(&corev1.Node{}, 5*time.Minute, now); lost {
		t.Error("a node that never reported is lost")
	}
	pv := utils.LocalPersistentVolume("pv", "node-a", "local", "1Gi", "ns", "claim")
	if got := VolumeNodes(pv); !slices.Equal(got, []string{"node-a"}) {
		t.Errorf("volume nodes %v", got)
	}
	pv.Spec.NodeAffinity = nil
	if got := VolumeNodes(pv); got != nil {
		t.Errorf("a volume without node affinity is pinned to %v", got)
	}
}

func TestClaimOutdated(t *testing.T) {
	c := newCache(withExtstore("2Gi", "local"))
	claim := func(class, size string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(class),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}}
	}
	for _, tc := range []struct {
		c        *cachev1alpha1.Cache
		class    string
		size     string
		outdated bool
	}{
		{c, "local", "2Gi", false},
		{c, "local", "2048Mi", false},
		{c, "local", "1Gi", true},
		{c, "local", "4Gi", false}, // larger than the size: kept, not replaced
		{c, "other", "2Gi", true},
		{newCache(withExtstore("2Gi", "")), "whatever-default", "2Gi", false},
		{newCache(), "local", "2Gi", true},
	} {
		if got := claimOutdated(tc.c, claim(tc.class, tc.size)); got != tc.outdated {
			t.Errorf("claim %s/%s for %+v: outdated %v, want %v", tc.class, tc.size, tc.c.Spec.Extstore, got, tc.outdated)
		}
	}
}

// An expanded claim fits only once its volume holds the size; an expansion
// that failed for good makes it outdated again (replaced, not waited for).
func TestClaimFitWaitsForTheCapacity(t *testing.T) {
	c := newCache(withExtstore("2Gi", "local"))
	bound := func(request, capacity string, mutate ...func(*corev1.PersistentVolumeClaim)) *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("local"),
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(request)}}},
			Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimBound,
				Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(capacity)}},
		}
		for _, m := range mutate {
			m(pvc)
		}
		return pvc
	}
	for _, tc := range []struct {
		name string
		pvc  *corev1.PersistentVolumeClaim
		want claimFit
	}{
		{"grown", bound("2Gi", "2Gi"), claimFits},
		{"provisioned larger", bound("2Gi", "3Gi"), claimFits},
		{"request patched, volume not grown", bound("2Gi", "1Gi"), claimGrowing},
		{"not yet patched", bound("1Gi", "1Gi"), claimOutdatedFit},
		{"controller resize error", bound("2Gi", "1Gi", func(p *corev1.PersistentVolumeClaim) {
			p.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimControllerResizeError, Status: corev1.ConditionTrue}}
		}), claimOutdatedFit},
		{"node resize infeasible", bound("2Gi", "1Gi", func(p *corev1.PersistentVolumeClaim) {
			p.Status.AllocatedResourceStatuses = map[corev1.ResourceName]corev1.ClaimResourceStatus{
				corev1.ResourceStorage: corev1.PersistentVolumeClaimNodeResizeInfeasible}
		}), claimOutdatedFit},
		{"resizing in progress", bound("2Gi", "1Gi", func(p *corev1.PersistentVolumeClaim) {
			p.Status.Conditions = []corev1.PersistentVolumeClaimCondition{{Type: corev1.PersistentVolumeClaimResizing, Status: corev1.ConditionTrue}}
		}), claimGrowing},
	} {
		if got, why := claimFitOf(c, tc.pvc); got != tc.want {
			t.Errorf("%s: fit %d (%s), want %d", tc.name, got, why, tc.want)
		}
	}
}

// A current-revision pod is deleted with its claim only when the live
// StatefulSet would make it a different claim; else it would only repeat.
func TestClaimFitsTemplate(t *testing.T) {
	sts := StatefulSet(newCache(withExtstore("2Gi", "local")), testOpts)
	claim := func(class, size string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(class),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}}}}
	}
	for _, tc := range []struct {
		class, size string
		fits        bool
	}{{"local", "2Gi", true}, {"local", "4Gi", true}, {"local", "1Gi", false}, {"other", "2Gi", false}} {
		if got := claimFitsTemplate(sts, claim(tc.class, tc.size)); got != tc.fits {
			t.Errorf("claim %s/%s fits the template: %v, want %v", tc.class, tc.size, got, tc.fits)
		}
	}
	if claimFitsTemplate(StatefulSet(newCache(), testOpts), claim("local", "2Gi")) {
		t.Error("a StatefulSet without extstore fits no claim")
	}
}
