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
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

func TestNodeTunedConditionFromTheTunersAnnotations(t *testing.T) {
	running := func(name, report string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if report != "" {
			p.Annotations = map[string]string{cachev1alpha1.NodeTunedAnnotation: report}
		}
		return p
	}
	tuned := `{"status":"True","reason":"Tuned","message":"m","strategy":"housekeeping","generation":3}`
	cases := []struct {
		name     string
		strategy string
		dedicate bool
		pods     []corev1.Pod
		status   metav1.ConditionStatus // "" : absent
		reason   string
	}{
		{"every pod tuned", "", true, []corev1.Pod{running("c-0", tuned), running("c-1", tuned)}, metav1.ConditionTrue, ReasonTuned},
		{"no tuner on the node", "", true, []corev1.Pod{running("c-0", tuned), running("c-1", "")}, metav1.ConditionFalse, ReasonNoTuner},
		{"managed IRQ reported", "auto", true, []corev1.Pod{running("c-0", `{"status":"False","reason":"ManagedIRQ","message":"irq 38","strategy":"housekeeping","generation":3}`)}, metav1.ConditionFalse, ReasonManagedIRQ},
		{"tuner behind the spec", "", true, []corev1.Pod{running("c-0", `{"status":"True","reason":"Tuned","generation":2}`)}, metav1.ConditionUnknown, ReasonTunerPending},
		{"shared cores", "", false, []corev1.Pod{running("c-0", tuned)}, metav1.ConditionFalse, ReasonSharedCores},
		{"strategy none", "none", true, []corev1.Pod{running("c-0", "")}, "", ""},
	}
	for _, tc := range cases {
		c := &cachev1alpha1.Cache{ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: 3}}
		c.Spec.DedicatedCPUs = ptr.To(tc.dedicate)
		c.Spec.CPU = ptr.To(int32(1))
		c.Spec.NodeTuning.IRQStrategy = tc.strategy
		conds := []metav1.Condition{{Type: cachev1alpha1.ConditionNodeTuned, Status: metav1.ConditionTrue, Reason: "Old"}}
		set := func(ty string, s metav1.ConditionStatus, reason, msg string) {
			meta.SetStatusCondition(&conds, metav1.Condition{Type: ty, Status: s, Reason: reason, Message: msg})
		}
		setNodeTunedCondition(c, Observed{Pods: tc.pods}, set, &conds)
		got := meta.FindStatusCondition(conds, cachev1alpha1.ConditionNodeTuned)
		switch {
		case tc.status == "" && got != nil:
			t.Errorf("%s: condition %+v, want none", tc.name, got)
		case tc.status != "" && (got == nil || got.Status != tc.status || got.Reason != tc.reason):
			t.Errorf("%s: condition %+v, want %s %s", tc.name, got, tc.status, tc.reason)
		}
	}
}

// The tuner's apply, failure and revert reach the Cache's Events through
// the NodeTuned condition; waiting for the tuner does not.
// A pod that just started running has no report yet because the tuner's
// next pass has not come: TunerPending (Unknown, no Warning) until the
// grace ends, NoTuner after, and the reconciler is told when to look again.
func TestFreshPodAwaitsTheTunersFirstPass(t *testing.T) {
	now := time.Date(2026, 11, 28, 3, 0, 0, 0, time.UTC)
	started := func(name string, ago time.Duration) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{
			Phase:     corev1.PodRunning,
			StartTime: &metav1.Time{Time: now.Add(-time.Hour)}, // an image pull took long: the engine's start counts
			ContainerStatuses: []corev1.ContainerStatus{{Name: EngineContainerName, State: corev1.ContainerState{
				Running: &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: now.Add(-ago)}}}}},
		}}
	}
	c := &cachev1alpha1.Cache{ObjectMeta: metav1.ObjectMeta{Name: "c", Generation: 3}}
	c.Spec.DedicatedCPUs = ptr.To(true)
	c.Spec.CPU = ptr.To(int32(1))
	for _, tc := range []struct {
		name    string
		ago     time.Duration
		status  metav1.ConditionStatus
		reason  string
		recheck time.Duration
	}{
		{"just started", 5 * time.Second, metav1.ConditionUnknown, ReasonTunerPending, TunerReportGrace - 5*time.Second},
		{"past the grace", TunerReportGrace + time.Second, metav1.ConditionFalse, ReasonNoTuner, 0},
	} {
		obs := Observed{Now: now, Pods: []corev1.Pod{started("c-0", tc.ago)}}
		st := ComputeStatus(c, obs, "cluster.local")
		got := meta.FindStatusCondition(st.Conditions, cachev1alpha1.ConditionNodeTuned)
		if got == nil || got.Status != tc.status || got.Reason != tc.reason {
			t.Errorf("%s: condition %+v, want %s %s", tc.name, got, tc.status, tc.reason)
		}
		if typ, _, _, _ := nodeTunedEvent(nil, st.Conditions); tc.status == metav1.ConditionUnknown && typ != "" {
			t.Errorf("%s: a %s event for a pod the tuner has not passed over yet", tc.name, typ)
		}
		if w := NodeTunerRecheckAfter(c, obs); w != tc.recheck {
			t.Errorf("%s: recheck after %s, want %s", tc.name, w, tc.recheck)
		}
	}
}

func TestNodeTunedEvents(t *testing.T) {
	cond := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: cachev1alpha1.ConditionNodeTuned, Status: status, Reason: reason, Message: "m"}}
	}
	for _, tc := range []struct {
		name         string
		prev, next   []metav1.Condition
		typ, reason  string
		wantAnyEvent bool
	}{
		{"pending to tuned", cond(metav1.ConditionUnknown, ReasonTunerPending), cond(metav1.ConditionTrue, ReasonTuned), corev1.EventTypeNormal, ReasonTuned, true},
		{"new and tuned", nil, cond(metav1.ConditionTrue, ReasonTuned), corev1.EventTypeNormal, ReasonTuned, true},
		{"still tuned", cond(metav1.ConditionTrue, ReasonTuned), cond(metav1.ConditionTrue, ReasonTuned), "", "", false},
		{"tuned to managed", cond(metav1.ConditionTrue, ReasonTuned), cond(metav1.ConditionFalse, ReasonManagedIRQ), corev1.EventTypeWarning, ReasonManagedIRQ, true},
		{"no tuner to irqbalance", cond(metav1.ConditionFalse, ReasonNoTuner), cond(metav1.ConditionFalse, ReasonIrqbalanceConflict), corev1.EventTypeWarning, ReasonIrqbalanceConflict, true},
		{"waiting is not news", cond(metav1.ConditionTrue, ReasonTuned), cond(metav1.ConditionUnknown, ReasonTunerPending), "", "", false},
		{"strategy none reverts", cond(metav1.ConditionTrue, ReasonTuned), nil, corev1.EventTypeNormal, ReasonNodeTuningReverted, true},
		{"never tuned, none", cond(metav1.ConditionUnknown, ReasonTunerPending), nil, "", "", false},
	} {
		typ, reason, note, ok := nodeTunedEvent(tc.prev, tc.next)
		if ok != tc.wantAnyEvent || typ != tc.typ || reason != tc.reason {
			t.Errorf("%s: got (%q, %q, %q, %v), want (%q, %q, any, %v)", tc.name, typ, reason, note, ok, tc.typ, tc.reason, tc.wantAnyEvent)
		}
	}
}
