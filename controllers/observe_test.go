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
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
	"cachet.dev/cachet/test/utils"
)

// testEngines maps "namespace/pod" to the metrics address of a real cachetd
// a test started for that pod: envtest runs no kubelet, so the suite's
// operator reads those engines in place of the pods' IPs.
var testEngines sync.Map

func testEngineAddr(pod *corev1.Pod) string {
	if a, ok := testEngines.Load(pod.Namespace + "/" + pod.Name); ok {
		return a.(string)
	}
	return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(suiteEngine.MetricsPort)))
}

// An Observed profile with apply: Auto, on two pods whose engines (real
// cachetd processes) hold a two-mode load: the operator reads both engines'
// /metrics, recommends one class per mode, applies them once the
// recommendation is stable (a new revision with those classes), and then
// stays put over further observations.
func TestObservedProfileRecommendsTheLoadsModesAndAppliesOnce(t *testing.T) {
	needIntegration(t)
	ctx := context.Background()
	ns := newNamespace(t)
	// item sizes just above two classes of the default -f 1.25 ladder
	// (352, 2696 at 64Mi), which wastes 15% of the chunk bytes on them
	const small, large, keys = 240, 2200, 800
	for i := 0; i < 2; i++ {
		e := utils.StartCachetd(t, filepath.Join(".."), "-m", "64")
		if err := utils.MixedSizeLoad(net.JoinHostPort("127.0.0.1", strconv.Itoa(e.Port)), keys, small, large, 30*time.Second); err != nil {
			t.Fatal(err)
		}
		testEngines.Store(fmt.Sprintf("%s/obs-%d", ns, i), net.JoinHostPort("127.0.0.1", strconv.Itoa(e.MetricsPort)))
	}
	createCache(t, ns, "obs", func(c *cachev1alpha1.Cache) {
		c.Spec.Replicas = ptr.To(int32(2))
		c.Spec.WorkloadProfile = &cachev1alpha1.WorkloadProfile{
			Source: cachev1alpha1.ProfileSourceObserved, Apply: cachev1alpha1.ProfileApplyAuto,
			ObserveIntervalSeconds: ptr.To(int32(2)),
		}
	})
	key := types.NamespacedName{Namespace: ns, Name: "obs"}
	sts := &appsv1.StatefulSet{}
	eventually(t, "StatefulSet created", func() (bool, string) {
		err := k8sClient.Get(ctx, key, sts)
		return err == nil, fmt.Sprint(err)
	})
	firstHash := sts.Spec.Template.Annotations[ConfigHashAnnotation]
	c := getCache(t, ns, "obs")
	for i := 0; i < 2; i++ {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("obs-%d", i), Namespace: ns, Labels: SelectorLabels(c)},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: EngineContainerName, Image: testEngineImage}}},
		}
		if err := k8sClient.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		pod.Status = corev1.PodStatus{PodIP: "127.0.0.1", Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}}
		if err := k8sClient.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	setSTSStatus(t, ns, "obs", appsv1.StatefulSetStatus{Replicas: 2, ReadyReplicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r1"})

	// one class per mode: the bucket (32 bytes wide up to 512, an eighth of
	// a power of two above) that holds the mode's item size
	itemOf := func(v int) int64 {
		return cachev1alpha1.ItemBytes(int64(utils.MixedSizeLoadKeyBytes), int64(v), false, false)
	}
	holds := func(class int32, item int64) bool {
		return int64(class) >= item-8 && int64(class) <= item+item/8+32
	}
	var r *cachev1alpha1.Recommendation
	eventually(t, "applied: one class per mode, rolled to a new revision", func() (bool, string) {
		r = getCache(t, ns, "obs").Status.Recommendation
		if r == nil || len(r.AppliedChunkSizes) == 0 {
			return false, fmt.Sprintf("%+v", r)
		}
		return true, ""
	})
	if len(r.ChunkSizes) != 2 || !holds(r.ChunkSizes[0], itemOf(small)) || !holds(r.ChunkSizes[1], itemOf(large)) {
		t.Errorf("classes %v do not match the modes (items of %d and %d bytes)", r.ChunkSizes, itemOf(small), itemOf(large))
	}
	if !slices.Equal(r.AppliedChunkSizes, r.ChunkSizes) || r.StableObservations < engine.StableObservationsToApply ||
		r.ObservedItems != 2*keys || len(r.Pods) != 2 || r.PredictedHitRatio == "" || r.CurrentHitRatio == "" || r.Memory == nil {
		t.Errorf("recommendation %+v", r)
	}
	c = getCache(t, ns, "obs")
	want := engine.ConfigHash(engine.ArgsFile(EngineArgs(c, BuildOptions{Engine: suiteCurrent})))
	if a := strings.Join(EngineArgs(c, BuildOptions{Engine: suiteCurrent}), " "); !strings.Contains(a, fmt.Sprintf("slab_sizes=%d-%d", r.ChunkSizes[0], r.ChunkSizes[1])) {
		t.Errorf("the applied classes are not in the engine's arguments: %s", a)
	}
	eventually(t, "the StatefulSet rolls to the applied classes", func() (bool, string) {
		if err := k8sClient.Get(ctx, key, sts); err != nil {
			return false, err.Error()
		}
		h := sts.Spec.Template.Annotations[ConfigHashAnnotation]
		return h == want && h != firstHash, h
	})
	eventually(t, "a ProfileApplied event", func() (bool, string) {
		evs := &eventsv1.EventList{}
		if err := k8sClient.List(ctx, evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == "obs" && e.Reason == ReasonProfileApplied && strings.Contains(e.Note, "applied") {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events", len(evs.Items))
	})

	// stays put: two more observations of the same load change nothing
	stable := r.StableObservations
	eventually(t, "two more observations", func() (bool, string) {
		r = getCache(t, ns, "obs").Status.Recommendation
		return r.StableObservations >= stable+2, fmt.Sprintf("%+v", r)
	})
	if err := k8sClient.Get(ctx, key, sts); err != nil {
		t.Fatal(err)
	}
	if h := sts.Spec.Template.Annotations[ConfigHashAnnotation]; h != want || !strings.HasPrefix(r.Decision, "the pods run the recommended classes") {
		t.Errorf("not put after the apply: hash %s (want %s), decision %q", h, want, r.Decision)
	}
}
