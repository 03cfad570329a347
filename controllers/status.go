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

// This file derives a Cache's status from what the cluster reports: the
// StatefulSet's counters and the pods' own conditions. It is a pure function
// so that each situation a person may face (a pod that cannot be scheduled, a
// crash loop, a roll in progress) is unit-tested as data.

package controllers

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
)

// Condition reasons. They are CamelCase words a person can search for in
// docs/operator.md.
const (
	ReasonAllPodsReady        = "AllPodsReady"
	ReasonOlderRevisionPods   = "PodsRunOlderRevision"
	ReasonPodsNotReady        = "PodsNotReady"
	ReasonScaledToZero        = "ScaledToZero"
	ReasonStatefulSetPending  = "StatefulSetPending"
	ReasonCreating            = "Creating"
	ReasonScaling             = "Scaling"
	ReasonRollingUpdate       = "RollingUpdate"
	ReasonWaitingForPodsReady = "WaitingForPodsReady"
	ReasonUpdatePendingDelete = "UpdateWaitsForPodDeletion"
	ReasonStable              = "Stable"
	ReasonNoProblems          = "NoProblems"
	ReasonPodUnschedulable    = "PodUnschedulable"
	ReasonImagePullFailed     = "ImagePullFailed"
	ReasonCrashLooping        = "CrashLooping"
	ReasonOOMKilled           = "OOMKilled"
	ReasonPodConfigError      = "PodConfigError"
	ReasonPodFailed           = "PodFailed"
	ReasonNameConflict        = "NameConflict"
	ReasonInvalidSpec         = "InvalidSpec"
	ReasonApplyFailed         = "ApplyFailed"
	ReasonNodeNotReady        = "NodeNotReady"
	ReasonEngineRestarted     = "EngineRestarted"
	ReasonNoRestarts          = "NoRestarts"
	ReasonStaticCPUManager    = "StaticCPUManager"
	ReasonSharedCores         = "SharedCores"
	ReasonNotChecked          = "NotChecked"
	ReasonNotDedicated        = "NotDedicated"
	ReasonMonitored           = "PodMonitorInPlace"
	ReasonNoPrometheusOp      = "PrometheusOperatorMissing"
	ReasonNoMetricsPort       = "NoMetricsPort"
	ReasonAutoscalerActive    = "AutoscalerActive"
	ReasonMetricsAPIMissing   = "MetricsAPIMissing"
	ReasonAutoscalerPending   = "AutoscalerPending"
	ReasonAuxApplyFailed      = "ApplyFailed"
	ReasonNoCertManager       = "NoCertManager"
	ReasonIssuerNotReady      = "IssuerNotReady"
	ReasonSecretMissing       = "SecretMissing"
	ReasonSecretMissingCA     = "SecretMissingCA"
	ReasonInvalidUser         = "InvalidUser"
	ReasonSecretMounted       = "SecretMounted"
	// Event reasons only.
	ReasonScaledOutsideAutoscaler = "ScaledOutsideAutoscaler"
)

// Observed is what the reconciler read from the cluster for one Cache.
type Observed struct {
	StatefulSet *appsv1.StatefulSet // nil when it does not exist yet
	Pods        []corev1.Pod
	// Now is when the pods were read; zero gives no grace to pods that
	// wait for the node tuner's first report.
	Now time.Time
	// ConfigMaps holds the arguments of each of the Cache's ConfigMaps, by name.
	ConfigMaps map[string][]string
	// Image is the engine image of the pod template.
	Image string
	// Options are the builders' options (they shape the desired arguments).
	Options BuildOptions
	// NodePolicies is each pod node's CPU manager policy, when checked.
	NodePolicies map[string]NodeCPUPolicy
	// APIs says, by group/version, whether the cluster serves the metrics
	// APIs the Cache's HPA reads.
	APIs map[string]bool
	// MissingMonitoringKinds are prometheus-operator's resources the Cache's
	// monitoring needs and the cluster does not serve.
	MissingMonitoringKinds []string
	// AuxFailures holds, by resource, why the API server refused a
	// monitoring or autoscaling object.
	AuxFailures map[string]string
	// HPA is the Cache's HorizontalPodAutoscaler as it reports itself.
	HPA *autoscalingv2.HorizontalPodAutoscaler
	// Claims are the pods' extstore claims.
	Claims []corev1.PersistentVolumeClaim
	// ClaimsLost says which claims this reconcile deleted because their
	// node was lost.
	ClaimsLost []string
	// ExtstoreCheckErr says why volumes or nodes could not be read.
	ExtstoreCheckErr string
	// ClaimsWithoutClass says which Pending claims wait for a StorageClass
	// that does not exist.
	ClaimsWithoutClass []string
	// AuthProblem and TLSProblem say what keeps spec.auth's users and
	// spec.tls's certificate from the pods; nil when nothing does.
	AuthProblem, TLSProblem *podProblem
}

// podProblem is one reason a pod cannot serve, worded for a person.
type podProblem struct {
	reason, message string
}

// diagnosePod reports why a pod cannot serve, or nil when nothing is wrong
// beyond plain waiting.
func diagnosePod(c *cachev1alpha1.Cache, pod *corev1.Pod, o BuildOptions) *podProblem {
	if pod.Status.Phase == corev1.PodFailed {
		// The node refused or evicted the pod (OutOfcpu, UnexpectedAdmissionError
		// from the CPU manager, Evicted); the StatefulSet controller replaces it.
		return &podProblem{ReasonPodFailed, fmt.Sprintf("pod %s failed on node %q (%s): %s", pod.Name, pod.Spec.NodeName, pod.Status.Reason, strings.TrimSpace(pod.Status.Message))}
	}
	if nodeStoppedReporting(pod) {
		return &podProblem{ReasonNodeNotReady, fmt.Sprintf("pod %s is not ready because its node %q stopped reporting (the node controller marked it NotReady while its containers last reported ready); it serves again when the node returns, or is replaced elsewhere once the pod is deleted", pod.Name, pod.Spec.NodeName)}
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			msg := fmt.Sprintf("pod %s cannot be scheduled: %s", pod.Name, sentence(cond.Message))
			if strings.Contains(cond.Message, "Insufficient cpu") {
				if c.Spec.IsDedicatedCPUs() {
					msg += fmt.Sprintf(" Each pod needs %d whole free CPU(s) for exclusive cores: free CPUs on a node, add nodes, or lower spec.replicas or spec.cpu.", c.Spec.CPUs())
				} else {
					msg += fmt.Sprintf(" Each pod requests %d CPU(s): free CPU on a node, add nodes, or lower spec.replicas or spec.cpu (0 is allowed without dedicated CPUs).", c.Spec.CPUs())
				}
			} else if strings.Contains(cond.Message, "Insufficient memory") {
				msg += fmt.Sprintf(" Each pod needs %s of memory (spec.memory plus overhead): free memory, add nodes, or lower spec.memory, spec.engine.maxConnections or spec.replicas.",
					formatBytes(engine.MemoryLimitBytes(EngineSpec(c), o.Engine)))
			}
			return &podProblem{ReasonPodUnschedulable, msg}
		}
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			switch w.Reason {
			case "ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName":
				return &podProblem{ReasonImagePullFailed, fmt.Sprintf("pod %s cannot get image %s (%s): %s; check spec.image and that the image is present on the node", pod.Name, cs.Image, w.Reason, w.Message)}
			case "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return &podProblem{ReasonPodConfigError, fmt.Sprintf("pod %s container %s cannot start (%s): %s", pod.Name, cs.Name, w.Reason, w.Message)}
			case "CrashLoopBackOff":
				if t := cs.LastTerminationState.Terminated; t != nil && t.Reason == "OOMKilled" {
					return &podProblem{ReasonOOMKilled, fmt.Sprintf("pod %s was killed for exceeding its memory limit of %s; lower spec.engine.maxConnections or report the engine's memory use", pod.Name, formatBytes(engine.MemoryLimitBytes(EngineSpec(c), o.Engine)))}
				}
				msg := fmt.Sprintf("pod %s keeps crashing (restarted %d times)", pod.Name, cs.RestartCount)
				if t := cs.LastTerminationState.Terminated; t != nil {
					msg += fmt.Sprintf("; last exit code %d", t.ExitCode)
					if m := strings.TrimSpace(t.Message); m != "" {
						msg += ": " + lastLine(m)
					}
				}
				return &podProblem{ReasonCrashLooping, msg + "; see kubectl logs --previous"}
			}
		}
	}
	return nil
}

// nodeStoppedReporting recognises a pod the node lifecycle controller marked
// not Ready because its node stopped reporting: it sets only the pod's Ready
// condition to False, so ContainersReady (written by the kubelet alone) still
// says True.
func nodeStoppedReporting(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil || pod.Spec.NodeName == "" {
		return false
	}
	var ready, containersReady *corev1.PodCondition
	for i := range pod.Status.Conditions {
		switch pod.Status.Conditions[i].Type {
		case corev1.PodReady:
			ready = &pod.Status.Conditions[i]
		case corev1.ContainersReady:
			containersReady = &pod.Status.Conditions[i]
		}
	}
	return ready != nil && containersReady != nil && ready.Status == corev1.ConditionFalse && containersReady.Status == corev1.ConditionTrue
}

// sentence ends a message from another component with a full stop, so that
// advice can follow it.
func sentence(s string) string {
	s = strings.TrimSpace(s)
	if s != "" && !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func formatBytes(b int64) string {
	if b%(1<<20) == 0 {
		return strconv.FormatInt(b>>20, 10) + "Mi"
	}
	return strconv.FormatInt(b, 10)
}

func podReady(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp != nil {
		return false
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ordinal of a StatefulSet pod, or -1.
func ordinal(c *cachev1alpha1.Cache, pod string) int {
	prefix := StatefulSetName(c) + "-"
	if !strings.HasPrefix(pod, prefix) {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimPrefix(pod, prefix))
	if err != nil {
		return -1
	}
	return n
}

// Endpoints lists every desired pod's stable address in ordinal order, so
// that a client's server list is the same on every read.
func Endpoints(c *cachev1alpha1.Cache, pods []corev1.Pod, clusterDomain string) []cachev1alpha1.CacheEndpoint {
	byName := map[string]*corev1.Pod{}
	for i := range pods {
		byName[pods[i].Name] = &pods[i]
	}
	n := int(c.Spec.DesiredReplicas())
	eps := make([]cachev1alpha1.CacheEndpoint, 0, n)
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%d", StatefulSetName(c), i)
		ep := cachev1alpha1.CacheEndpoint{Pod: name, Host: PodHost(c, name, clusterDomain), Port: EnginePort, TLS: c.Spec.TLS != nil}
		if p, ok := byName[name]; ok {
			ep.Ready = podReady(p)
			ep.Node = p.Spec.NodeName
			if cs := engineStatus(p); cs != nil {
				ep.Restarts = cs.RestartCount
				if t := cs.LastTerminationState.Terminated; t != nil && cs.RestartCount > 0 {
					ep.LastTermination = &cachev1alpha1.CacheTermination{Reason: t.Reason, ExitCode: t.ExitCode, FinishedAt: t.FinishedAt}
				}
			}
		}
		eps = append(eps, ep)
	}
	return eps
}

func engineStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == EngineContainerName {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// Revisions groups the pods by the engine configuration they run, with the
// arguments read from the ConfigMap each mounts: what the pods run, not what
// the spec asks for. The desired configuration comes first, then older ones.
func Revisions(c *cachev1alpha1.Cache, pods []corev1.Pod, configMaps map[string][]string, desiredHash string) []cachev1alpha1.CacheRevision {
	byHash := map[string]*cachev1alpha1.CacheRevision{}
	var order []string
	sorted := append([]corev1.Pod(nil), pods...)
	sort.Slice(sorted, func(i, j int) bool { return ordinal(c, sorted[i].Name) < ordinal(c, sorted[j].Name) })
	for _, p := range sorted {
		hash := p.Annotations[ConfigHashAnnotation]
		rev, ok := byHash[hash]
		if !ok {
			rev = &cachev1alpha1.CacheRevision{ConfigHash: hash, EngineArgs: configMaps[ConfigMapOfPod(&p.Spec)], Pods: []string{}}
			byHash[hash] = rev
			order = append(order, hash)
		}
		rev.Pods = append(rev.Pods, p.Name)
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i] == desiredHash && order[j] != desiredHash })
	out := make([]cachev1alpha1.CacheRevision, 0, len(order))
	for _, h := range order {
		out = append(out, *byHash[h])
	}
	return out
}

// recommendation is a Declared profile's derivation, or what the last
// observation of an Observed one stored (observeProfile).
func recommendation(c *cachev1alpha1.Cache) *cachev1alpha1.Recommendation {
	if p := c.Spec.WorkloadProfile; p != nil && p.Source == cachev1alpha1.ProfileSourceObserved {
		return c.Status.Recommendation
	}
	return engine.Recommend(&c.Spec)
}

// ComputeStatus returns the Cache's new status. Conditions keep their
// lastTransitionTime unless their status changes.
func ComputeStatus(c *cachev1alpha1.Cache, obs Observed, clusterDomain string) cachev1alpha1.CacheStatus {
	args := EngineArgs(c, obs.Options)
	hash := engine.ConfigHash(engine.ArgsFile(args))
	st := cachev1alpha1.CacheStatus{
		Conditions:         append([]metav1.Condition(nil), c.Status.Conditions...),
		ObservedGeneration: c.Generation,
		Selector:           labels.SelectorFromSet(SelectorLabels(c)).String(),
		EngineArgs:         args,
		ConfigHash:         hash,
		Endpoints:          Endpoints(c, obs.Pods, clusterDomain),
		Revisions:          Revisions(c, obs.Pods, obs.ConfigMaps, hash),
		Image:              obs.Image,
		Recommendation:     recommendation(c),
	}
	set := func(t string, s metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: c.Generation,
		})
	}
	setRestartCondition(c, st.Endpoints, obs.Options, set)
	setCoresCondition(c, obs, set)
	setMonitoringCondition(c, obs, set, &st.Conditions)
	setSecurityConditions(c, obs, set, &st.Conditions)
	setAutoscalingCondition(c, obs, set, &st.Conditions)
	setExtstoreCondition(c, obs, set, &st.Conditions)
	setNodeTunedCondition(c, obs, set, &st.Conditions)
	problems := setDegradedCondition(c, obs, set)

	sts := obs.StatefulSet
	if sts == nil || sts.Status.ObservedGeneration < sts.Generation {
		if sts != nil {
			st.Replicas, st.ReadyReplicas = sts.Status.Replicas, sts.Status.ReadyReplicas
		}
		set(cachev1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonStatefulSetPending, "waiting for the StatefulSet controller to act on the latest spec")
		set(cachev1alpha1.ConditionReady, metav1.ConditionFalse, ReasonStatefulSetPending, "waiting for the StatefulSet controller to act on the latest spec")
		return st
	}
	st.Replicas, st.ReadyReplicas = sts.Status.Replicas, sts.Status.ReadyReplicas
	setRolloutConditions(c, sts.Status, len(obs.Pods), problems, set)
	return st
}

// setDegradedCondition reports the first pod problem (problems come first:
// they explain every other condition) and returns them all.
func setDegradedCondition(c *cachev1alpha1.Cache, obs Observed, set func(string, metav1.ConditionStatus, string, string)) []podProblem {
	var problems []podProblem
	pods := append([]corev1.Pod(nil), obs.Pods...)
	sort.Slice(pods, func(i, j int) bool { return ordinal(c, pods[i].Name) < ordinal(c, pods[j].Name) })
	for i := range pods {
		if p := diagnosePod(c, &pods[i], obs.Options); p != nil {
			problems = append(problems, *p)
		}
	}
	if len(problems) > 0 && problems[0].reason == ReasonPodUnschedulable && len(obs.ClaimsWithoutClass) > 0 {
		// The scheduler only says "unbound immediate PersistentVolumeClaims".
		problems[0].message += " " + strings.Join(obs.ClaimsWithoutClass, "; ")
	}
	if len(problems) > 0 {
		msg := problems[0].message
		if len(problems) > 1 {
			msg += fmt.Sprintf(" (and %d more pod(s) with problems)", len(problems)-1)
		}
		set(cachev1alpha1.ConditionDegraded, metav1.ConditionTrue, problems[0].reason, msg)
	} else {
		set(cachev1alpha1.ConditionDegraded, metav1.ConditionFalse, ReasonNoProblems, "no pod reports a problem")
	}
	return problems
}

// setRolloutConditions says, from the StatefulSet controller's counters,
// where the pods are on their way to the current spec (Progressing) and
// whether they all serve it (Ready).
func setRolloutConditions(c *cachev1alpha1.Cache, s appsv1.StatefulSetStatus, pods int, problems []podProblem, set func(string, metav1.ConditionStatus, string, string)) {
	desired := c.Spec.DesiredReplicas()
	onDelete := c.Spec.UpdateStrategy.Type == cachev1alpha1.OnDeleteStrategy
	rolled := s.UpdateRevision == "" || (s.CurrentRevision == s.UpdateRevision && s.UpdatedReplicas >= desired)
	if !rolled && s.UpdatedReplicas >= desired && s.Replicas == desired {
		rolled = true // the StatefulSet controller moves currentRevision once every pod is updated
	}

	switch {
	case s.Replicas == 0 && desired > 0 && s.ReadyReplicas == 0 && pods == 0:
		set(cachev1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonCreating, fmt.Sprintf("creating %d pod(s)", desired))
	case s.Replicas != desired:
		set(cachev1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonScaling, fmt.Sprintf("scaling from %d to %d pod(s)", s.Replicas, desired))
	case !rolled && onDelete:
		set(cachev1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonUpdatePendingDelete,
			fmt.Sprintf("%d of %d pod(s) run the current spec; updateStrategy is OnDelete, so delete the others to update them", s.UpdatedReplicas, desired))
	case !rolled:
		set(cachev1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonRollingUpdate,
			fmt.Sprintf("rolling one pod at a time: %d of %d pod(s) run the current spec", s.UpdatedReplicas, desired))
	case s.ReadyReplicas < desired:
		set(cachev1alpha1.ConditionProgressing, metav1.ConditionTrue, ReasonWaitingForPodsReady, fmt.Sprintf("%d of %d pod(s) ready", s.ReadyReplicas, desired))
	default:
		set(cachev1alpha1.ConditionProgressing, metav1.ConditionFalse, ReasonStable, fmt.Sprintf("%d pod(s) run the current spec", desired))
	}

	switch {
	case desired == 0 && s.Replicas == 0:
		set(cachev1alpha1.ConditionReady, metav1.ConditionTrue, ReasonScaledToZero, "spec.replicas is 0")
	case s.ReadyReplicas >= desired && s.Replicas == desired && rolled:
		set(cachev1alpha1.ConditionReady, metav1.ConditionTrue, ReasonAllPodsReady, fmt.Sprintf("%d of %d pod(s) ready", s.ReadyReplicas, desired))
	case s.ReadyReplicas >= desired && s.Replicas == desired && onDelete:
		// Every pod serves, as a StatefulSet's would, but not the spec asked
		// for: with OnDelete nothing moves until someone deletes the pods.
		set(cachev1alpha1.ConditionReady, metav1.ConditionTrue, ReasonOlderRevisionPods,
			fmt.Sprintf("%d of %d pod(s) ready, but only %d run the current spec: updateStrategy is OnDelete, so the others keep their older revision until you delete them", s.ReadyReplicas, desired, s.UpdatedReplicas))
	default:
		msg := fmt.Sprintf("%d of %d pod(s) ready", s.ReadyReplicas, desired)
		if !rolled {
			msg += fmt.Sprintf(", %d of %d run the current spec", s.UpdatedReplicas, desired)
		}
		if len(problems) > 0 {
			msg += ": " + problems[0].message
		}
		set(cachev1alpha1.ConditionReady, metav1.ConditionFalse, ReasonPodsNotReady, msg)
	}
}

// setRestartCondition reports pods whose engine restarted: a restart is not
// a crash loop once the pod is back, but it emptied that shard, and an OOM
// kill says the memory limit is too small for the load.
func setRestartCondition(c *cachev1alpha1.Cache, eps []cachev1alpha1.CacheEndpoint, o BuildOptions, set func(string, metav1.ConditionStatus, string, string)) {
	var worst *cachev1alpha1.CacheEndpoint
	var restarted []string
	for i := range eps {
		if eps[i].Restarts == 0 {
			continue
		}
		restarted = append(restarted, fmt.Sprintf("%s (%d)", eps[i].Pod, eps[i].Restarts))
		if worst == nil || (eps[i].LastTermination != nil && (worst.LastTermination == nil || eps[i].LastTermination.FinishedAt.After(worst.LastTermination.FinishedAt.Time))) {
			worst = &eps[i]
		}
	}
	if worst == nil {
		set(cachev1alpha1.ConditionPodsRestarted, metav1.ConditionFalse, ReasonNoRestarts, "no engine has restarted since its pod was created")
		return
	}
	reason, detail := ReasonEngineRestarted, ""
	if t := worst.LastTermination; t != nil {
		if t.Reason != "" {
			reason = t.Reason
		}
		detail = fmt.Sprintf("; last: pod %s ended with %s (exit code %d) at %s", worst.Pod, t.Reason, t.ExitCode, t.FinishedAt.UTC().Format("2006-01-02T15:04:05Z"))
		if t.Reason == "OOMKilled" {
			detail += fmt.Sprintf(", over its memory limit of %s: lower spec.engine.maxConnections or spec.engine.maxItemSize, or report the engine's memory use", formatBytes(engine.MemoryLimitBytes(EngineSpec(c), o.Engine)))
		}
	}
	set(cachev1alpha1.ConditionPodsRestarted, metav1.ConditionTrue, reason,
		fmt.Sprintf("engines restarted, and each restart emptied its shard: %s%s", strings.Join(restarted, ", "), detail))
}

// setCoresCondition says whether dedicated pods really have exclusive cores:
// only a kubelet with the static CPU manager policy gives a Guaranteed pod's
// integer CPUs to it alone; elsewhere the pod shares every core of the node
// and cachetd pins its workers to cores others use too.
func setCoresCondition(c *cachev1alpha1.Cache, obs Observed, set func(string, metav1.ConditionStatus, string, string)) {
	if !c.Spec.IsDedicatedCPUs() {
		set(cachev1alpha1.ConditionCoresExclusive, metav1.ConditionFalse, ReasonNotDedicated, "spec.dedicatedCPUs is false: the pods run on the shared cores, unpinned")
		return
	}
	if obs.NodePolicies == nil {
		set(cachev1alpha1.ConditionCoresExclusive, metav1.ConditionUnknown, ReasonNotChecked, "the operator does not check the kubelets' CPU manager policy (--check-cpu-manager=false)")
		return
	}
	var shared, unknown []string
	pods := append([]corev1.Pod(nil), obs.Pods...)
	sort.Slice(pods, func(i, j int) bool { return ordinal(c, pods[i].Name) < ordinal(c, pods[j].Name) })
	for _, p := range pods {
		pol, ok := obs.NodePolicies[p.Spec.NodeName]
		switch {
		case p.Spec.NodeName == "" || !ok:
		case pol.Err != "":
			unknown = append(unknown, fmt.Sprintf("pod %s on node %s: %s", p.Name, p.Spec.NodeName, pol.Err))
		case pol.Policy != "static":
			shared = append(shared, fmt.Sprintf("pod %s on node %s (cpuManagerPolicy %q)", p.Name, p.Spec.NodeName, pol.Policy))
		}
	}
	switch {
	case len(shared) > 0:
		set(cachev1alpha1.ConditionCoresExclusive, metav1.ConditionFalse, ReasonSharedCores,
			"dedicated cores are not exclusive: "+strings.Join(shared, "; ")+"; the kubelet gives Guaranteed pods exclusive cores only with cpuManagerPolicy static: configure those nodes, or keep the Cache off them with spec.placement.nodeSelector")
	case len(unknown) > 0:
		set(cachev1alpha1.ConditionCoresExclusive, metav1.ConditionUnknown, ReasonNotChecked, "could not read the CPU manager policy: "+strings.Join(unknown, "; "))
	default:
		set(cachev1alpha1.ConditionCoresExclusive, metav1.ConditionTrue, ReasonStaticCPUManager, "every pod's node runs the static CPU manager, which gives its cores to the pod alone")
	}
}

// setSecurityConditions say whether spec.tls's certificate and spec.auth's
// users reach the pods (TLSReady, AuthReady); absent without them.
func setSecurityConditions(c *cachev1alpha1.Cache, obs Observed, set func(string, metav1.ConditionStatus, string, string), conds *[]metav1.Condition) {
	switch {
	case c.Spec.TLS == nil:
		meta.RemoveStatusCondition(conds, cachev1alpha1.ConditionTLSReady)
	case obs.TLSProblem != nil:
		set(cachev1alpha1.ConditionTLSReady, metav1.ConditionFalse, obs.TLSProblem.reason, obs.TLSProblem.message)
	default:
		set(cachev1alpha1.ConditionTLSReady, metav1.ConditionTrue, ReasonSecretMounted,
			"the pods serve TLS only with the certificate of Secret "+TLSSecretName(c)+", mounted whole so that a renewal reaches them")
	}
	switch {
	case c.Spec.Auth == nil:
		meta.RemoveStatusCondition(conds, cachev1alpha1.ConditionAuthReady)
	case obs.AuthProblem != nil:
		set(cachev1alpha1.ConditionAuthReady, metav1.ConditionFalse, obs.AuthProblem.reason, obs.AuthProblem.message)
	default:
		set(cachev1alpha1.ConditionAuthReady, metav1.ConditionTrue, ReasonSecretMounted,
			"the users of Secret "+c.Spec.Auth.SecretRef.Name+" are rendered into Secret "+AuthFileSecretName(c)+", which the pods read as their authfile")
	}
}

// setMonitoringCondition says whether Prometheus is told to scrape the Cache:
// monitoring asked for in a cluster without prometheus-operator changes
// nothing else, and says so here.
func setMonitoringCondition(c *cachev1alpha1.Cache, obs Observed, set func(string, metav1.ConditionStatus, string, string), conds *[]metav1.Condition) {
	switch {
	case !c.Spec.Monitoring.IsEnabled():
		meta.RemoveStatusCondition(conds, cachev1alpha1.ConditionMonitoring)
	case obs.Options.Engine.MetricsPort == 0:
		set(cachev1alpha1.ConditionMonitoring, metav1.ConditionFalse, ReasonNoMetricsPort,
			"the operator runs the engines without a metrics port (--engine-metrics-port=0), so there is nothing to scrape")
	case len(obs.MissingMonitoringKinds) > 0:
		set(cachev1alpha1.ConditionMonitoring, metav1.ConditionFalse, ReasonNoPrometheusOp,
			"the cluster does not serve "+MonitoringAPI+" "+strings.Join(obs.MissingMonitoringKinds, " and ")+" (prometheus-operator's CRDs), so this Cache is not scraped or alerted on as asked; the cache itself is not affected, and the operator creates them once the CRDs are installed")
	case obs.AuxFailures["podmonitors"] != "" || obs.AuxFailures["prometheusrules"] != "":
		set(cachev1alpha1.ConditionMonitoring, metav1.ConditionFalse, ReasonAuxApplyFailed,
			strings.TrimSpace(obs.AuxFailures["podmonitors"]+" "+obs.AuxFailures["prometheusrules"])+"; the operator retries")
	default:
		interval := c.Spec.Monitoring.Interval
		if interval == "" {
			interval = "30s"
		}
		set(cachev1alpha1.ConditionMonitoring, metav1.ConditionTrue, ReasonMonitored,
			fmt.Sprintf("PodMonitor %s scrapes every pod's /metrics every %s; PrometheusRule %s holds %d alerts",
				PodMonitorName(c), interval, PrometheusRuleName(c), len(CacheAlerts(c))))
	}
}

// setAutoscalingCondition says whether the HPA can do its work: its metrics
// APIs must be served, and the HPA itself must not complain.
func setAutoscalingCondition(c *cachev1alpha1.Cache, obs Observed, set func(string, metav1.ConditionStatus, string, string), conds *[]metav1.Condition) {
	if c.Spec.Autoscaling == nil {
		meta.RemoveStatusCondition(conds, cachev1alpha1.ConditionAutoscaling)
		return
	}
	if f := obs.AuxFailures["horizontalpodautoscalers"]; f != "" {
		set(cachev1alpha1.ConditionAutoscaling, metav1.ConditionFalse, ReasonAuxApplyFailed, f+"; fix spec.autoscaling, the operator retries")
		return
	}
	var missing []string
	for _, gv := range metricsAPIsNeeded(c) {
		if !obs.APIs[gv] {
			switch gv {
			case CustomMetricsAPI:
				missing = append(missing, gv+" (young evictions and hit ratio; e.g. prometheus-adapter with the chart's rules, metricsAdapter.install)")
			default:
				missing = append(missing, gv+" (CPU and memory; metrics-server or prometheus-adapter's resource rules)")
			}
		}
	}
	if len(missing) > 0 {
		set(cachev1alpha1.ConditionAutoscaling, metav1.ConditionFalse, ReasonMetricsAPIMissing,
			fmt.Sprintf("HorizontalPodAutoscaler %s cannot read its metrics: the cluster does not serve %s", HPAName(c), strings.Join(missing, "; ")))
		return
	}
	a := c.Spec.Autoscaling
	min := int32(1)
	if a.MinReplicas != nil {
		min = *a.MinReplicas
	}
	if obs.HPA == nil {
		set(cachev1alpha1.ConditionAutoscaling, metav1.ConditionUnknown, ReasonAutoscalerPending, "waiting for HorizontalPodAutoscaler "+HPAName(c))
		return
	}
	if len(obs.HPA.Status.Conditions) == 0 {
		set(cachev1alpha1.ConditionAutoscaling, metav1.ConditionUnknown, ReasonAutoscalerPending,
			"waiting for the first evaluation of HorizontalPodAutoscaler "+HPAName(c))
		return
	}
	for _, t := range []autoscalingv2.HorizontalPodAutoscalerConditionType{autoscalingv2.AbleToScale, autoscalingv2.ScalingActive} {
		for _, hc := range obs.HPA.Status.Conditions {
			if hc.Type == t && hc.Status == corev1.ConditionFalse {
				set(cachev1alpha1.ConditionAutoscaling, metav1.ConditionFalse, hc.Reason,
					fmt.Sprintf("HorizontalPodAutoscaler %s: %s", HPAName(c), hc.Message))
				return
			}
		}
	}
	set(cachev1alpha1.ConditionAutoscaling, metav1.ConditionTrue, ReasonAutoscalerActive,
		fmt.Sprintf("HorizontalPodAutoscaler %s scales this Cache through /scale between %d and %d pods on %s; it wants %d now",
			HPAName(c), min, a.MaxReplicas, hpaTargetsText(c), obs.HPA.Status.DesiredReplicas))
}
