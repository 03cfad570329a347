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
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

func stsWith(gen, observed int64, s appsv1.StatefulSetStatus) *appsv1.StatefulSet {
	s.ObservedGeneration = observed
	return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: gen}, Status: s}
}

func pod(name string, ready bool, mutate ...func(*corev1.Pod)) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod"},
		Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
	for _, m := range mutate {
		m(&p)
	}
	return p
}

func cond(t *testing.T, st cachev1alpha1.CacheStatus, typ string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(st.Conditions, typ)
	if c == nil {
		t.Fatalf("condition %s missing in %+v", typ, st.Conditions)
	}
	return *c
}

func TestStatusAllReady(t *testing.T) {
	c := newCache()
	st := ComputeStatus(c, Observed{
		StatefulSet: stsWith(2, 2, appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 3, CurrentRevision: "a", UpdateRevision: "a"}),
		Pods:        []corev1.Pod{pod("web-0", true), pod("web-1", true), pod("web-2", true)},
	}, "cluster.local")
	if r := cond(t, st, "Ready"); r.Status != metav1.ConditionTrue || r.Reason != ReasonAllPodsReady {
		t.Fatalf("Ready = %+v", r)
	}
	if p := cond(t, st, "Progressing"); p.Status != metav1.ConditionFalse {
		t.Fatalf("Progressing = %+v", p)
	}
	if d := cond(t, st, "Degraded"); d.Status != metav1.ConditionFalse {
		t.Fatalf("Degraded = %+v", d)
	}
	if st.Replicas != 3 || st.ReadyReplicas != 3 || st.ObservedGeneration != 1 || len(st.Endpoints) != 3 || !st.Endpoints[2].Ready {
		t.Fatalf("counters/endpoints: %+v", st)
	}
	if st.Endpoints[0].Host != "web-0.web-headless.prod.svc.cluster.local" || st.Endpoints[0].Port != 11211 {
		t.Fatalf("endpoint %+v", st.Endpoints[0])
	}
	if st.Selector != "app.kubernetes.io/component=cache,app.kubernetes.io/instance=web,app.kubernetes.io/name=cachet" {
		t.Fatalf("selector %q", st.Selector)
	}
}

func TestStatusUnschedulableSurfacesSchedulerMessage(t *testing.T) {
	c := newCache()
	pending := pod("web-2", false, func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
			Message: "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.",
		})
	})
	st := ComputeStatus(c, Observed{
		StatefulSet: stsWith(1, 1, appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: 3, CurrentRevision: "a", UpdateRevision: "a"}),
		Pods:        []corev1.Pod{pod("web-0", true), pod("web-1", true), pending},
	}, "cluster.local")
	d := cond(t, st, "Degraded")
	if d.Status != metav1.ConditionTrue || d.Reason != ReasonPodUnschedulable {
		t.Fatalf("Degraded = %+v", d)
	}
	for _, want := range []string{"web-2", "Insufficient cpu", "exclusive cores", "spec.replicas"} {
		if !strings.Contains(d.Message, want) {
			t.Errorf("Degraded message %q lacks %q", d.Message, want)
		}
	}
	r := cond(t, st, "Ready")
	if r.Status != metav1.ConditionFalse || !strings.Contains(r.Message, "2 of 3") || !strings.Contains(r.Message, "Insufficient cpu") {
		t.Fatalf("Ready = %+v", r)
	}
}

func TestStatusRollingAndOnDelete(t *testing.T) {
	s := appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 1, CurrentRevision: "a", UpdateRevision: "b"}
	st := ComputeStatus(newCache(), Observed{StatefulSet: stsWith(2, 2, s)}, "cluster.local")
	if p := cond(t, st, "Progressing"); p.Status != metav1.ConditionTrue || p.Reason != ReasonRollingUpdate || !strings.Contains(p.Message, "1 of 3") {
		t.Fatalf("Progressing = %+v", p)
	}
	if r := cond(t, st, "Ready"); r.Status != metav1.ConditionFalse {
		t.Fatalf("Ready during a roll = %+v", r)
	}
	od := newCache(func(c *cachev1alpha1.Cache) { c.Spec.UpdateStrategy.Type = cachev1alpha1.OnDeleteStrategy })
	st = ComputeStatus(od, Observed{StatefulSet: stsWith(2, 2, s)}, "cluster.local")
	if p := cond(t, st, "Progressing"); p.Status != metav1.ConditionFalse || p.Reason != ReasonUpdatePendingDelete || !strings.Contains(p.Message, "delete") {
		t.Fatalf("OnDelete Progressing = %+v", p)
	}
	if r := cond(t, st, "Ready"); r.Status != metav1.ConditionTrue {
		t.Fatalf("OnDelete pods that serve are Ready: %+v", r)
	}
}

func TestStatusStaleStatefulSetAndScaling(t *testing.T) {
	st := ComputeStatus(newCache(), Observed{StatefulSet: stsWith(3, 2, appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 3})}, "cluster.local")
	if r := cond(t, st, "Ready"); r.Status != metav1.ConditionFalse || r.Reason != ReasonStatefulSetPending {
		t.Fatalf("a StatefulSet status from an older generation must not count: %+v", r)
	}
	st = ComputeStatus(newCache(), Observed{StatefulSet: stsWith(3, 3, appsv1.StatefulSetStatus{Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1, CurrentRevision: "a", UpdateRevision: "a"})}, "cluster.local")
	if p := cond(t, st, "Progressing"); p.Reason != ReasonScaling || !strings.Contains(p.Message, "from 1 to 3") {
		t.Fatalf("Progressing = %+v", p)
	}
	zero := newCache(func(c *cachev1alpha1.Cache) { c.Spec.Replicas = ptr.To(int32(0)) })
	st = ComputeStatus(zero, Observed{StatefulSet: stsWith(1, 1, appsv1.StatefulSetStatus{})}, "cluster.local")
	if r := cond(t, st, "Ready"); r.Status != metav1.ConditionTrue || r.Reason != ReasonScaledToZero {
		t.Fatalf("Ready at zero = %+v", r)
	}
}

func TestStatusCrashAndImageAndOOM(t *testing.T) {
	waiting := func(reason string, last *corev1.ContainerStateTerminated) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{
				Name: "cachetd", Image: "localhost/cachetd:x", RestartCount: 4,
				State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "back-off"}},
				LastTerminationState: corev1.ContainerState{Terminated: last},
			}}
		}
	}
	obs := func(p corev1.Pod) Observed {
		return Observed{StatefulSet: stsWith(1, 1, appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: 3}), Pods: []corev1.Pod{p}}
	}
	cases := map[string]struct {
		pod    corev1.Pod
		reason string
		words  []string
	}{
		"crash": {pod("web-1", false, waiting("CrashLoopBackOff", &corev1.ContainerStateTerminated{ExitCode: 2, Message: "cachetd: -I 2g exceeds -m"})), ReasonCrashLooping, []string{"exit code 2", "exceeds -m", "logs --previous"}},
		"oom":   {pod("web-1", false, waiting("CrashLoopBackOff", &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"})), ReasonOOMKilled, []string{"memory limit of 127Mi"}},
		"image": {pod("web-1", false, waiting("ErrImageNeverPull", nil)), ReasonImagePullFailed, []string{"localhost/cachetd:x", "spec.image"}},
		"rejected": {pod("web-1", false, func(p *corev1.Pod) {
			p.Spec.NodeName = "n1"
			p.Status.Phase, p.Status.Reason = corev1.PodFailed, "UnexpectedAdmissionError"
			p.Status.Message = "Allocate failed due to not enough cpus available to satisfy request"
		}), ReasonPodFailed, []string{"web-1", "n1", "UnexpectedAdmissionError", "not enough cpus"}},
	}
	for name, tc := range cases {
		d := cond(t, ComputeStatus(newCache(), obs(tc.pod), "cluster.local"), "Degraded")
		if d.Status != metav1.ConditionTrue || d.Reason != tc.reason {
			t.Errorf("%s: Degraded = %+v", name, d)
		}
		for _, w := range tc.words {
			if !strings.Contains(d.Message, w) {
				t.Errorf("%s: message %q lacks %q", name, d.Message, w)
			}
		}
	}
}

func TestConditionTransitionTimeKept(t *testing.T) {
	c := newCache()
	obs := Observed{StatefulSet: stsWith(1, 1, appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 3})}
	first := ComputeStatus(c, obs, "cluster.local")
	old := metav1.NewTime(cond(t, first, "Ready").LastTransitionTime.Add(-3600e9))
	for i := range first.Conditions {
		first.Conditions[i].LastTransitionTime = old
	}
	c.Status = first
	again := ComputeStatus(c, obs, "cluster.local")
	if got := cond(t, again, "Ready").LastTransitionTime; !got.Equal(&old) {
		t.Fatal("an unchanged condition got a new lastTransitionTime")
	}
}
