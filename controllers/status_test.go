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
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
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
	// Pods that serve are Ready, as a StatefulSet's would be, but the reason
	// says they run an older spec until deleted, never AllPodsReady.
	if r := cond(t, st, "Ready"); r.Status != metav1.ConditionTrue || r.Reason != ReasonOlderRevisionPods ||
		!strings.Contains(r.Message, "only 1 run the current spec") || !strings.Contains(r.Message, "until you delete them") {
		t.Fatalf("OnDelete pods that serve an older spec: %+v", r)
	}
	s.UpdatedReplicas, s.CurrentRevision = 3, "b"
	if r := cond(t, ComputeStatus(od, Observed{StatefulSet: stsWith(2, 2, s)}, "cluster.local"), "Ready"); r.Reason != ReasonAllPodsReady {
		t.Fatalf("OnDelete once every pod was deleted and updated: %+v", r)
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
		return Observed{StatefulSet: stsWith(1, 1, appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: 3}), Pods: []corev1.Pod{p}, Options: ownImage}
	}
	cases := map[string]struct {
		pod    corev1.Pod
		reason string
		words  []string
	}{
		"crash": {pod("web-1", false, waiting("CrashLoopBackOff", &corev1.ContainerStateTerminated{ExitCode: 2, Message: "cachetd: -I 2g exceeds -m"})), ReasonCrashLooping, []string{"exit code 2", "exceeds -m", "logs --previous"}},
		"oom":   {pod("web-1", false, waiting("CrashLoopBackOff", &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"})), ReasonOOMKilled, []string{"memory limit of 307Mi"}},
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

// Defect 9: a pod whose engine was OOM-killed and came back (so no longer in
// CrashLoopBackOff) set no condition, though the restart emptied its shard.
func TestStatusReportsRestartsAfterThePodCameBack(t *testing.T) {
	c := newCache()
	finished := metav1.NewTime(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	back := pod("web-1", true, func(p *corev1.Pod) {
		p.Spec.NodeName = "n1"
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: EngineContainerName, RestartCount: 2, Ready: true,
			State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137, FinishedAt: finished}},
		}}
	})
	st := ComputeStatus(c, Observed{
		StatefulSet: stsWith(1, 1, appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 3}),
		Pods:        []corev1.Pod{pod("web-0", true), back, pod("web-2", true)},
		Options:     ownImage,
	}, "cluster.local")
	r := cond(t, st, cachev1alpha1.ConditionPodsRestarted)
	if r.Status != metav1.ConditionTrue || r.Reason != "OOMKilled" {
		t.Fatalf("PodsRestarted = %+v", r)
	}
	for _, w := range []string{"web-1 (2)", "emptied", "307Mi", "2026-11-23T10:00:00Z"} {
		if !strings.Contains(r.Message, w) {
			t.Errorf("message %q lacks %q", r.Message, w)
		}
	}
	ep := st.Endpoints[1]
	if ep.Restarts != 2 || ep.LastTermination == nil || ep.LastTermination.Reason != "OOMKilled" || ep.LastTermination.ExitCode != 137 || ep.Node != "n1" {
		t.Fatalf("endpoint %+v", ep)
	}
	if d := cond(t, st, "Degraded"); d.Status != metav1.ConditionFalse {
		t.Fatalf("a pod that came back is not Degraded: %+v", d)
	}
	clean := ComputeStatus(c, Observed{StatefulSet: stsWith(1, 1, appsv1.StatefulSetStatus{Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1}), Pods: []corev1.Pod{pod("web-0", true)}}, "cluster.local")
	if r := cond(t, clean, cachev1alpha1.ConditionPodsRestarted); r.Status != metav1.ConditionFalse {
		t.Fatalf("no restarts: %+v", r)
	}
}

// A node that stops reporting: the node controller sets only the pod's Ready
// condition to False; the Cache says which node and why.
func TestStatusNamesANodeThatStoppedReporting(t *testing.T) {
	lost := pod("web-1", false, func(p *corev1.Pod) {
		p.Spec.NodeName = "node-b"
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionTrue})
	})
	st := ComputeStatus(newCache(), Observed{
		StatefulSet: stsWith(1, 1, appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: 3}),
		Pods:        []corev1.Pod{pod("web-0", true), lost, pod("web-2", true)},
	}, "cluster.local")
	d := cond(t, st, "Degraded")
	if d.Status != metav1.ConditionTrue || d.Reason != ReasonNodeNotReady || !strings.Contains(d.Message, "node-b") || !strings.Contains(d.Message, "web-1") {
		t.Fatalf("Degraded = %+v", d)
	}
	// A pod merely starting (containers not ready either) is no node problem.
	starting := pod("web-1", false, func(p *corev1.Pod) {
		p.Spec.NodeName = "node-b"
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.ContainersReady, Status: corev1.ConditionFalse})
	})
	st = ComputeStatus(newCache(), Observed{StatefulSet: stsWith(1, 1, appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: 3}), Pods: []corev1.Pod{starting}}, "cluster.local")
	if d := cond(t, st, "Degraded"); d.Status != metav1.ConditionFalse {
		t.Fatalf("a starting pod reported as a node problem: %+v", d)
	}
}

// Defect 2: "dedicated" pods on a node without the static CPU manager share
// every core, and nothing said so.
func TestStatusCoresExclusive(t *testing.T) {
	on := func(name, node string) corev1.Pod {
		return pod(name, true, func(p *corev1.Pod) { p.Spec.NodeName = node })
	}
	obs := Observed{
		StatefulSet:  stsWith(1, 1, appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2}),
		Pods:         []corev1.Pod{on("web-0", "a"), on("web-1", "b")},
		NodePolicies: map[string]NodeCPUPolicy{"a": {Policy: "static"}, "b": {Policy: "none"}},
	}
	c := cond(t, ComputeStatus(newCache(), obs, "cluster.local"), cachev1alpha1.ConditionCoresExclusive)
	if c.Status != metav1.ConditionFalse || c.Reason != ReasonSharedCores || !strings.Contains(c.Message, "web-1 on node b") || strings.Contains(c.Message, "web-0") {
		t.Fatalf("CoresExclusive = %+v", c)
	}
	obs.NodePolicies["b"] = NodeCPUPolicy{Policy: "static"}
	if c := cond(t, ComputeStatus(newCache(), obs, "cluster.local"), cachev1alpha1.ConditionCoresExclusive); c.Status != metav1.ConditionTrue {
		t.Fatalf("all static: %+v", c)
	}
	obs.NodePolicies = nil
	if c := cond(t, ComputeStatus(newCache(), obs, "cluster.local"), cachev1alpha1.ConditionCoresExclusive); c.Status != metav1.ConditionUnknown || c.Reason != ReasonNotChecked {
		t.Fatalf("unchecked: %+v", c)
	}
	shared := newCache(func(c *cachev1alpha1.Cache) { c.Spec.DedicatedCPUs = ptr.To(false) })
	if c := cond(t, ComputeStatus(shared, obs, "cluster.local"), cachev1alpha1.ConditionCoresExclusive); c.Status != metav1.ConditionFalse || c.Reason != ReasonNotDedicated {
		t.Fatalf("shared: %+v", c)
	}
}

// Defect 1: status reported the spec's arguments as "in effect". Revisions
// come from what each pod mounts.
func TestStatusRevisionsComeFromThePods(t *testing.T) {
	c := newCache()
	mounting := func(name, hash, cm string) corev1.Pod {
		return pod(name, true, func(p *corev1.Pod) {
			p.Annotations = map[string]string{ConfigHashAnnotation: hash}
			p.Spec.Volumes = []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}}
		})
	}
	desired := DesiredConfigHash(c, BuildOptions{})
	obs := Observed{
		StatefulSet: stsWith(1, 1, appsv1.StatefulSetStatus{Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 1, CurrentRevision: "a", UpdateRevision: "b"}),
		Pods:        []corev1.Pod{mounting("web-2", "old", "web-config-old"), mounting("web-0", desired, "web-config-"+desired), mounting("web-1", "old", "web-config-old")},
		ConfigMaps:  map[string][]string{"web-config-old": {"-m", "48"}, "web-config-" + desired: {"-m", "64"}},
	}
	st := ComputeStatus(c, obs, "cluster.local")
	if len(st.Revisions) != 2 || st.Revisions[0].ConfigHash != desired || st.Revisions[1].ConfigHash != "old" ||
		!slices.Equal(st.Revisions[1].Pods, []string{"web-1", "web-2"}) || !slices.Equal(st.Revisions[1].EngineArgs, []string{"-m", "48"}) ||
		!slices.Equal(st.Revisions[0].EngineArgs, []string{"-m", "64"}) {
		t.Fatalf("revisions %+v", st.Revisions)
	}
}

// ownImage builds for a Cache that runs the operator's own engine image: its
// limit includes the socket buffers (307Mi for the default spec).
var ownImage = BuildOptions{Engine: engine.Options{SocketBuffers: true}}
