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

// What a user trial found the conditions and Events did not say, on a real
// API server with the real reconciler.

package controllers

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// eventsOf lists the Events of a namespace with reason ("" for all).
func eventsOf(t *testing.T, ns, reason string) []eventsv1.Event {
	t.Helper()
	evs := &eventsv1.EventList{}
	if err := k8sClient.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range evs.Items {
		if reason == "" || e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

// hasEvent finds an Event in ns with reason, of type typ ("" for either),
// whose note contains fragment; otherwise it describes the Events there are.
func hasEvent(t *testing.T, ns, reason, typ, fragment string) (bool, string) {
	t.Helper()
	var seen []string
	for _, e := range eventsOf(t, ns, "") {
		if e.Reason == reason && (typ == "" || e.Type == typ) && strings.Contains(e.Note, fragment) {
			return true, ""
		}
		seen = append(seen, e.Type+" "+e.Reason+": "+e.Note)
	}
	return false, strings.Join(seen, "\n")
}

// Shared cores are what the spec asked for: a Normal Event, never a
// Warning, which whoever alerts on Warnings would be paged for.
func TestSharedCoresAreNotAWarning(t *testing.T) {
	needIntegration(t)
	ns := newNamespace(t)
	createCache(t, ns, "shared", func(c *cachev1alpha1.Cache) { c.Spec.DedicatedCPUs = ptr.To(false) })
	eventually(t, "a NotDedicated Event", func() (bool, string) {
		return hasEvent(t, ns, ReasonNotDedicated, corev1.EventTypeNormal, "spec.dedicatedCPUs is false")
	})
	for _, e := range eventsOf(t, ns, ReasonNotDedicated) {
		if e.Type != corev1.EventTypeNormal {
			t.Errorf("%s Event for shared cores: %s", e.Type, e.Note)
		}
	}
}

// scaleAs sets spec.replicas as field manager who would (kubectl scale, or
// the autoscaler in kube-controller-manager).
func scaleAs(t *testing.T, ns, name, who string, replicas int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := getCache(t, ns, name)
		c.Spec.Replicas = ptr.To(replicas)
		return k8sClient.Update(context.Background(), c, client.FieldOwner(who))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A scale-in drops the keys of the removed shards, and a scale by hand of
// an autoscaled Cache lasts until the autoscaler's next evaluation: both
// are said when they happen, and the autoscaler's own scale is not blamed.
func TestScaleEventsSayWhatAScaleCosts(t *testing.T) {
	needIntegration(t)
	ns := newNamespace(t)
	createCache(t, ns, "sc", func(c *cachev1alpha1.Cache) {
		c.Spec.Replicas = ptr.To(int32(3))
		c.Spec.Autoscaling = &cachev1alpha1.AutoscalingSpec{MinReplicas: ptr.To(int32(2)), MaxReplicas: 5,
			Targets: cachev1alpha1.AutoscalingTargets{CPUUtilization: ptr.To(int32(80))}}
	})
	statefulSetOf(t, ns, "sc")
	scaleAs(t, ns, "sc", autoscalerManager, 2)
	eventually(t, "a Scaling Event naming the shard whose keys are dropped", func() (bool, string) {
		return hasEvent(t, ns, ReasonScaling, corev1.EventTypeNormal, "from 3 to 2 pod(s) (HorizontalPodAutoscaler sc scales this Cache): the keys of shard(s) sc-2 are dropped")
	})
	scaleAs(t, ns, "sc", "kubectl", 4)
	eventually(t, "a Warning that the autoscaler undoes a manual scale", func() (bool, string) {
		return hasEvent(t, ns, ReasonScaledOutsideAutoscaler, corev1.EventTypeWarning, "kubectl set spec.replicas to 4, but HorizontalPodAutoscaler sc manages it (from 2 to 5 pods)")
	})
	// The autoscaler's own scale to 2 is not blamed.
	for _, e := range eventsOf(t, ns, ReasonScaledOutsideAutoscaler) {
		if !strings.Contains(e.Note, "kubectl set spec.replicas to 4") {
			t.Errorf("the autoscaler's own scale was reported as manual: %s", e.Note)
		}
	}
}

// A class that does not exist leaves every claim Pending; the condition
// names it instead of "ClaimsMatch" and the scheduler's "not found".
func TestExtstoreNamesAMissingStorageClass(t *testing.T) {
	needIntegration(t)
	ns := newNamespace(t)
	class := ns + "-absent"
	c := createCache(t, ns, "nc", withExtstore("1Gi", class))
	statefulSetOf(t, ns, "nc")
	createClaim(t, c, "nc-0", class, "1Gi", "")
	eventually(t, "Extstore False naming the missing class", func() (bool, string) {
		cond := condOf(getCache(t, ns, "nc"), cachev1alpha1.ConditionExtstore)
		return cond.Status == metav1.ConditionFalse && cond.Reason == ReasonStorageClassNotFound &&
				strings.Contains(cond.Message, `StorageClass "`+class+`" does not exist`) && strings.Contains(cond.Message, "extstore-nc-0"),
			string(cond.Status) + " " + cond.Reason + ": " + cond.Message
	})
	// The pod's unschedulable message gets the same explanation.
	podOnVolume(t, ns, "nc", 0, "")
	eventually(t, "Degraded naming the missing class", func() (bool, string) {
		cur := &cachev1alpha1.Cache{}
		if err := k8sClient.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "nc"}, cur); err != nil {
			return false, err.Error()
		}
		cond := condOf(cur, cachev1alpha1.ConditionDegraded)
		return cond.Reason == ReasonPodUnschedulable && strings.Contains(cond.Message, `StorageClass "`+class+`" does not exist`), cond.Reason + ": " + cond.Message
	})
}

// With OnDelete, pods that serve an older spec are Ready, as a StatefulSet's
// would be, but the reason says so and that deleting them updates them.
func TestOnDeleteReadySaysPodsRunAnOlderRevision(t *testing.T) {
	needIntegration(t)
	ns := newNamespace(t)
	createCache(t, ns, "od", func(c *cachev1alpha1.Cache) {
		c.Spec.Replicas = ptr.To(int32(2))
		c.Spec.UpdateStrategy.Type = cachev1alpha1.OnDeleteStrategy
	})
	statefulSetOf(t, ns, "od")
	setSTSStatus(t, ns, "od", appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2, CurrentReplicas: 2, CurrentRevision: "od-old", UpdateRevision: "od-new"})
	eventually(t, "Ready True with the older revision named", func() (bool, string) {
		cond := condOf(getCache(t, ns, "od"), cachev1alpha1.ConditionReady)
		return cond.Status == metav1.ConditionTrue && cond.Reason == ReasonOlderRevisionPods &&
				strings.Contains(cond.Message, "only 0 run the current spec") && strings.Contains(cond.Message, "until you delete them"),
			string(cond.Status) + " " + cond.Reason + ": " + cond.Message
	})
}
