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

// The NodeTuned condition: the node tuner (cachet node-tuner, one per node)
// reports what it did for each cache pod in the pod's
// cache.cachet.dev/node-tuned annotation; the operator only reads pods it
// already watches, so the tuner needs no write access to Caches.

package controllers

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

// NodeTuned reasons the operator sets itself; the others (SharedCores,
// IrqbalanceConflict, ManagedIRQ, NoQueue, NoSharedPool, NoNICQueueIRQs,
// ApplyFailed) come from the tuner's annotation as it wrote them.
const (
	ReasonTuned        = "Tuned"
	ReasonNoTuner      = "NoTuner"
	ReasonTunerPending = "TunerPending"
	// Reported by the tuner, listed so that the CRD documents them.
	ReasonIrqbalanceConflict = "IrqbalanceConflict"
	ReasonManagedIRQ         = "ManagedIRQ"
	ReasonNoQueue            = "NoQueue"
	ReasonNoSharedPool       = "NoSharedPool"
	ReasonNoNICQueueIRQs     = "NoNICQueueIRQs"
)

const (
	// Event reasons only.
	// ReasonNodeTuningReverted is the Event when the Cache stops asking for
	// tuning (irqStrategy none): the tuner puts back what it wrote on its
	// next pass, and the condition goes away.
	ReasonNodeTuningReverted = "NodeTuningReverted"
)

// nodeTunedEvent says which Event, if any, a change of the NodeTuned
// condition deserves: the tuner applied (True), could not (False, a
// Warning: the pods run with interrupts on their workers), or is asked to
// revert (the condition removed). Waiting for the tuner (Unknown) is not
// news: it is every new pod's first moment.
func nodeTunedEvent(prev, next []metav1.Condition) (eventType, reason, note string, ok bool) {
	old := meta.FindStatusCondition(prev, cachev1alpha1.ConditionNodeTuned)
	cur := meta.FindStatusCondition(next, cachev1alpha1.ConditionNodeTuned)
	switch {
	case cur == nil && old != nil && old.Status == metav1.ConditionTrue:
		return corev1.EventTypeNormal, ReasonNodeTuningReverted,
			"spec.nodeTuning.irqStrategy is none: the node tuner puts back every value it wrote for this Cache's pods", true
	case cur == nil || cur.Status == metav1.ConditionUnknown:
		return "", "", "", false
	case old != nil && old.Status == cur.Status && old.Reason == cur.Reason:
		return "", "", "", false
	case cur.Status == metav1.ConditionTrue:
		return corev1.EventTypeNormal, cur.Reason, "NodeTuned=True: " + cur.Message, true
	case cur.Reason == ReasonSharedCores:
		// the user's choice (spec.dedicatedCPUs false), as NotDedicated is:
		// said once, not a fault
		return corev1.EventTypeNormal, cur.Reason, "NodeTuned=False: " + cur.Message, true
	default:
		return corev1.EventTypeWarning, cur.Reason, "NodeTuned=False: " + cur.Message, true
	}
}

// TunerReportGrace is how long a running cache pod may go without the
// tuner's annotation before the operator says no tuner serves its node:
// two passes at the chart's default nodeTuner.interval (10s). Before
// that, every pod of a rollout would be reported NoTuner (a Warning) for
// the moment between starting and the tuner's next pass.
const TunerReportGrace = 2 * 10 * time.Second

// runningSince is when the pod's engine started running (the pod's start
// when the kubelet has not reported the container yet).
func runningSince(p *corev1.Pod) time.Time {
	if st := engineStatus(p); st != nil && st.State.Running != nil {
		return st.State.Running.StartedAt.Time
	}
	if p.Status.StartTime != nil {
		return p.Status.StartTime.Time
	}
	return time.Time{}
}

// awaitingFirstReport is how long until a running pod without the tuner's
// annotation is past TunerReportGrace; zero when it is, or when now is
// not known (ComputeStatus called without a clock).
func awaitingFirstReport(p *corev1.Pod, now time.Time) time.Duration {
	if now.IsZero() {
		return 0
	}
	return max(runningSince(p).Add(TunerReportGrace).Sub(now), 0)
}

// NodeTunerRecheckAfter is when the NodeTuned condition changes without an
// event the operator watches: the first pod still waiting for its first
// report passes TunerReportGrace. Zero when none is waiting.
func NodeTunerRecheckAfter(c *cachev1alpha1.Cache, obs Observed) time.Duration {
	if c.Spec.NodeTuning.Strategy() == "none" || !c.Spec.IsDedicatedCPUs() {
		return 0
	}
	var soonest time.Duration
	for i := range obs.Pods {
		p := &obs.Pods[i]
		if _, reported := p.Annotations[cachev1alpha1.NodeTunedAnnotation]; reported || p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
			continue
		}
		if w := awaitingFirstReport(p, obs.Now); w > 0 && (soonest == 0 || w < soonest) {
			soonest = w
		}
	}
	return soonest
}

// nodeTunedReport is the annotation's JSON.
type nodeTunedReport struct {
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	Message    string `json:"message"`
	Strategy   string `json:"strategy"`
	Generation int64  `json:"generation"`
}

// setNodeTunedCondition folds the pods' reports into one condition: the
// first pod (by ordinal) that is not tuned decides it.
func setNodeTunedCondition(c *cachev1alpha1.Cache, obs Observed, set func(string, metav1.ConditionStatus, string, string), conds *[]metav1.Condition) {
	if c.Spec.NodeTuning.Strategy() == "none" {
		meta.RemoveStatusCondition(conds, cachev1alpha1.ConditionNodeTuned)
		return
	}
	if !c.Spec.IsDedicatedCPUs() {
		set(cachev1alpha1.ConditionNodeTuned, metav1.ConditionFalse, ReasonSharedCores, "spec.dedicatedCPUs is false: the pods have no exclusive cores for the node tuner to keep interrupts off")
		return
	}
	pods := append([]corev1.Pod(nil), obs.Pods...)
	sort.Slice(pods, func(i, j int) bool { return ordinal(c, pods[i].Name) < ordinal(c, pods[j].Name) })
	var pending string
	for _, p := range pods {
		raw, ok := p.Annotations[cachev1alpha1.NodeTunedAnnotation]
		var r nodeTunedReport
		switch {
		case p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning:
			if pending == "" {
				pending = fmt.Sprintf("pod %s is not running yet", p.Name)
			}
			continue
		case !ok && awaitingFirstReport(&p, obs.Now) > 0:
			if pending == "" {
				pending = fmt.Sprintf("pod %s on node %s started running less than %s ago: waiting for the node tuner's first pass", p.Name, p.Spec.NodeName, TunerReportGrace)
			}
			continue
		case !ok:
			set(cachev1alpha1.ConditionNodeTuned, metav1.ConditionFalse, ReasonNoTuner,
				fmt.Sprintf("pod %s on node %s: no node tuner reported for it; install the chart with nodeTuner.enabled and a nodeTuner.nodeSelector that includes the node", p.Name, p.Spec.NodeName))
			return
		case json.Unmarshal([]byte(raw), &r) != nil:
			set(cachev1alpha1.ConditionNodeTuned, metav1.ConditionUnknown, ReasonTunerPending, fmt.Sprintf("pod %s: unreadable %s annotation", p.Name, cachev1alpha1.NodeTunedAnnotation))
			return
		case r.Generation < c.Generation:
			if pending == "" {
				pending = fmt.Sprintf("pod %s: the node tuner has not yet applied generation %d", p.Name, c.Generation)
			}
		case r.Status != "True":
			set(cachev1alpha1.ConditionNodeTuned, metav1.ConditionFalse, r.Reason, fmt.Sprintf("pod %s on node %s (%s): %s", p.Name, p.Spec.NodeName, r.Strategy, r.Message))
			return
		}
	}
	switch {
	case pending != "":
		set(cachev1alpha1.ConditionNodeTuned, metav1.ConditionUnknown, ReasonTunerPending, pending)
	case len(pods) == 0:
		set(cachev1alpha1.ConditionNodeTuned, metav1.ConditionUnknown, ReasonTunerPending, "no pod yet")
	default:
		set(cachev1alpha1.ConditionNodeTuned, metav1.ConditionTrue, ReasonTuned, fmt.Sprintf("the node tuner placed the NIC interrupts and steering of all %d pod(s) as spec.nodeTuning asks", len(pods)))
	}
}
