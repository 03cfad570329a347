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

// This file holds the pure functions that turn a Cache into the objects the
// operator owns. They read nothing but their arguments and return new
// objects, so each can be unit-tested without an API server and the
// reconciler stays a thin loop of "build, apply, observe".

package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"math/bits"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

const (
	// EnginePort is the port cachetd listens on inside every pod.
	EnginePort = 11211
	// EnginePortName names the port on pods and Services.
	EnginePortName = "memcache"
	// EngineContainerName is the cache container's name.
	EngineContainerName = "cachetd"
	// ArgsFileKey is the ConfigMap key holding cachetd's arguments.
	ArgsFileKey = "args"
	// ConfigDir is where the ConfigMap is mounted.
	ConfigDir = "/etc/cachet"
	// ConfigHashAnnotation on the pod template changes with the engine
	// arguments, so that a new configuration rolls the pods.
	ConfigHashAnnotation = cachev1alpha1.ConfigHashAnnotation
	// EngineUID is the non-root user the engine image runs as.
	EngineUID = 65532

	// PreStopSleepSeconds keeps a terminating pod serving while its endpoint
	// is removed from Services and client DNS, before SIGTERM makes cachetd
	// drain.
	PreStopSleepSeconds = 5
	// TerminationGracePeriodSeconds covers preStop plus cachetd's drain.
	TerminationGracePeriodSeconds = 30

	// Memory overhead budget of one pod on top of spec.memory, from how
	// cachetd allocates (engine/src/net.c, assoc.c, slabs.c); see
	// docs/operator.md for the formula and what it does not cover.
	PerConnectionBytes = 32 << 10 // a resting connection: 16 KiB read buffer + 16 KiB output buffer
	PerThreadBytes     = 2 << 20  // a worker's stack, event loop and per-thread caches
	// ConnBufferPerThreadBytes sizes cachetd's process-wide cap on
	// connection buffer memory above the resting 32 KiB (-o conn_buffer_limit):
	// grown read buffers, queued and unsent replies. Over the cap, cachetd
	// stops parsing connections with unsent output until they drain.
	ConnBufferPerThreadBytes = 4 << 20
	BaseBytes                = 16 << 20 // binary, libc, clock/cleaner/expander/mover threads, slab page rounding
	HashBucketBytes          = 4        // a bucket is a 32-bit item handle
	ItemFixedBytes           = 38       // item header 24 + CAS 8 + reference 4 + CRLF 2
	HashLoadFactor           = 1.5      // the table doubles when items exceed 1.5 x buckets
	DefaultHashPower         = 16
	MaxHashPower             = 30 // cachetd's ceiling
	// Engine defaults written out explicitly so status.engineArgs is complete.
	DefaultMaxConnections = 1024
	DefaultMaxItemSize    = 1 << 20
	DefaultGrowthFactor   = "1.25"
	DefaultMinChunk       = 48

	managerName = "cachet-operator"
)

// Names of the owned objects. They are derived from the Cache's name alone so
// that clients and people can predict them.
func ConfigMapName(c *cachev1alpha1.Cache) string       { return c.Name + "-config" }
func HeadlessServiceName(c *cachev1alpha1.Cache) string { return c.Name + "-headless" }
func ClientServiceName(c *cachev1alpha1.Cache) string   { return c.Name }
func StatefulSetName(c *cachev1alpha1.Cache) string     { return c.Name }
func PDBName(c *cachev1alpha1.Cache) string             { return c.Name }

// SelectorLabels select a Cache's pods. They never change for a Cache, as a
// StatefulSet's selector is immutable.
func SelectorLabels(c *cachev1alpha1.Cache) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":      "cachet",
		"app.kubernetes.io/instance":  c.Name,
		"app.kubernetes.io/component": "cache",
	}
}

// Labels go on every owned object.
func Labels(c *cachev1alpha1.Cache) map[string]string {
	l := SelectorLabels(c)
	l["app.kubernetes.io/managed-by"] = managerName
	return l
}

// Threads is the number of worker threads: spec.engine.threads, or one per CPU.
func Threads(c *cachev1alpha1.Cache) int32 {
	if c.Spec.Engine.Threads != nil {
		return *c.Spec.Engine.Threads
	}
	return max(c.Spec.CPUs(), 1)
}

// MaxConnections with its default applied.
func MaxConnections(c *cachev1alpha1.Cache) int32 {
	if c.Spec.Engine.MaxConnections != nil {
		return *c.Spec.Engine.MaxConnections
	}
	return DefaultMaxConnections
}

// MaxItemSizeBytes with its default applied.
func MaxItemSizeBytes(c *cachev1alpha1.Cache) int64 {
	if c.Spec.Engine.MaxItemSize != nil {
		return c.Spec.Engine.MaxItemSize.Value()
	}
	return DefaultMaxItemSize
}

// ItemMemoryMiB is spec.memory in whole MiB (cachetd -m), rounded down; the
// webhook refuses values that are not whole MiB, so nothing is lost.
func ItemMemoryMiB(c *cachev1alpha1.Cache) int64 {
	return c.Spec.Memory.Value() >> 20
}

// sizeArg writes a byte count the way memcached's -I reads it.
func sizeArg(b int64) string {
	switch {
	case b%(1<<30) == 0:
		return strconv.FormatInt(b>>30, 10) + "g"
	case b%(1<<20) == 0:
		return strconv.FormatInt(b>>20, 10) + "m"
	case b%(1<<10) == 0:
		return strconv.FormatInt(b>>10, 10) + "k"
	}
	return strconv.FormatInt(b, 10)
}

// EngineArgs are cachetd's arguments derived from the spec, one element per
// argument, in a fixed order so that equal specs hash equally.
func EngineArgs(c *cachev1alpha1.Cache) []string {
	e := c.Spec.Engine
	args := []string{
		"-p", strconv.Itoa(EnginePort),
		"-t", strconv.Itoa(int(Threads(c))),
		"-m", strconv.FormatInt(ItemMemoryMiB(c), 10),
		"-c", strconv.Itoa(int(MaxConnections(c))),
		"-I", sizeArg(MaxItemSizeBytes(c)),
	}
	var opts []string
	if len(e.ChunkSizes) > 0 {
		sizes := make([]string, len(e.ChunkSizes))
		for i, s := range e.ChunkSizes {
			sizes[i] = strconv.Itoa(int(s))
		}
		opts = append(opts, "slab_sizes="+strings.Join(sizes, "-"))
	} else {
		f, n := DefaultGrowthFactor, int32(DefaultMinChunk)
		if e.GrowthFactor != nil {
			f = *e.GrowthFactor
		}
		if e.MinChunk != nil {
			n = *e.MinChunk
		}
		args = append(args, "-f", f, "-n", strconv.Itoa(int(n)))
	}
	if e.HashPower != nil {
		opts = append(opts, "hashpower="+strconv.Itoa(int(*e.HashPower)))
	}
	opts = append(opts, "conn_buffer_limit="+sizeArg(ConnBufferLimitBytes(c)))
	return append(args, "-o", strings.Join(opts, ","))
}

// ConnBufferLimitBytes is the cap on connection buffer memory the operator
// gives cachetd and budgets in the pod's limit: 4 MiB per worker thread.
func ConnBufferLimitBytes(c *cachev1alpha1.Cache) int64 {
	return int64(Threads(c)) * ConnBufferPerThreadBytes
}

// ArgsFile is the content of cachetd's --args-file: one argument per line.
func ArgsFile(args []string) string {
	return strings.Join(args, "\n") + "\n"
}

// ConfigHash identifies an arguments file; it is short because it only has
// to change when the content does.
func ConfigHash(argsFile string) string {
	sum := sha256.Sum256([]byte(argsFile))
	return hex.EncodeToString(sum[:8])
}

// SmallestItemBytes is the engine's smallest slab chunk: the first explicit
// chunk size, or the fixed part of an item plus minChunk, 8-byte aligned.
func SmallestItemBytes(c *cachev1alpha1.Cache) int64 {
	if len(c.Spec.Engine.ChunkSizes) > 0 {
		return (int64(c.Spec.Engine.ChunkSizes[0]) + 7) &^ 7
	}
	n := int64(DefaultMinChunk)
	if c.Spec.Engine.MinChunk != nil {
		n = int64(*c.Spec.Engine.MinChunk)
	}
	return (ItemFixedBytes + n + 7) &^ 7
}

// HashTableBytes bounds the hash table of one pod: enough buckets for the
// most items the item memory can hold (every item the smallest chunk) at the
// engine's load factor, rounded up to a power of two (at most the engine's
// ceiling), plus the old half-size table that lives on while the table is
// being expanded.
func HashTableBytes(c *cachev1alpha1.Cache) int64 {
	maxItems := c.Spec.Memory.Value() / SmallestItemBytes(c)
	buckets := int64(float64(maxItems)/HashLoadFactor) + 1
	power := int64(bits.Len64(uint64(buckets - 1)))
	initial := int64(DefaultHashPower)
	if c.Spec.Engine.HashPower != nil {
		initial = int64(*c.Spec.Engine.HashPower)
	}
	power = min(max(power, initial), MaxHashPower)
	table := (int64(1) << power) * HashBucketBytes
	return table + table/2
}

// MemoryLimitBytes is the pod's memory limit: item memory plus resting
// connection buffers, the capped buffer memory above them, worker threads,
// the hash table and a fixed base, rounded up to MiB.
func MemoryLimitBytes(c *cachev1alpha1.Cache) int64 {
	total := c.Spec.Memory.Value() +
		int64(MaxConnections(c))*PerConnectionBytes +
		ConnBufferLimitBytes(c) +
		int64(Threads(c))*PerThreadBytes +
		HashTableBytes(c) +
		BaseBytes
	const mib = 1 << 20
	return (total + mib - 1) / mib * mib
}

// Resources of the cache container. With dedicated CPUs requests equal limits
// and the CPU count is whole, which makes the pod Guaranteed and eligible for
// exclusive cores. Otherwise the CPUs are only requested (none with cpu 0),
// so the pod is never throttled by a CFS quota on shared cores.
func Resources(c *cachev1alpha1.Cache) corev1.ResourceRequirements {
	cpu := *resource.NewQuantity(int64(c.Spec.CPUs()), resource.DecimalSI)
	mem := *resource.NewQuantity(MemoryLimitBytes(c), resource.BinarySI)
	r := corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceMemory: mem},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: mem},
	}
	if c.Spec.CPUs() > 0 {
		r.Requests[corev1.ResourceCPU] = cpu
	}
	if c.Spec.IsDedicatedCPUs() {
		r.Limits[corev1.ResourceCPU] = cpu
	}
	return r
}

func objectMeta(c *cachev1alpha1.Cache, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: c.Namespace, Labels: Labels(c)}
}

// ConfigMap holds cachetd's arguments file.
func ConfigMap(c *cachev1alpha1.Cache) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: objectMeta(c, ConfigMapName(c)),
		Data:       map[string]string{ArgsFileKey: ArgsFile(EngineArgs(c))},
	}
}

// HeadlessService gives every pod a stable DNS name. Not-ready pods are
// published too: a client's server list must not reshuffle keys while a pod
// restarts.
func HeadlessService(c *cachev1alpha1.Cache) *corev1.Service {
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: objectMeta(c, HeadlessServiceName(c)),
		Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			PublishNotReadyAddresses: true,
			Selector:                 SelectorLabels(c),
			Ports:                    enginePorts(EnginePort),
		},
	}
}

// enginePorts is the one port both Services expose: PORT on the Service,
// the engine's named container port behind it.
func enginePorts(port int32) []corev1.ServicePort {
	return []corev1.ServicePort{{
		Name: EnginePortName, Port: port, Protocol: corev1.ProtocolTCP,
		TargetPort: intstr.FromString(EnginePortName),
	}}
}

// ClientService spreads connections over the Ready pods, for clients that do
// not hash keys themselves.
func ClientService(c *cachev1alpha1.Cache) *corev1.Service {
	meta := objectMeta(c, ClientServiceName(c))
	if len(c.Spec.Service.Annotations) > 0 {
		meta.Annotations = maps.Clone(c.Spec.Service.Annotations)
	}
	svcType := c.Spec.Service.Type
	if svcType == "" {
		svcType = corev1.ServiceTypeClusterIP
	}
	port := c.Spec.Service.Port
	if port == 0 {
		port = EnginePort
	}
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:     svcType,
			Selector: SelectorLabels(c),
			Ports:    enginePorts(port),
		},
	}
}

// PodDisruptionBudget bounds voluntary evictions of the cache pods.
func PodDisruptionBudget(c *cachev1alpha1.Cache) *policyv1.PodDisruptionBudget {
	maxUnavailable := intstr.FromInt32(1)
	if c.Spec.PodDisruptionBudget.MaxUnavailable != nil {
		maxUnavailable = *c.Spec.PodDisruptionBudget.MaxUnavailable
	}
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: objectMeta(c, PDBName(c)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: &maxUnavailable,
			Selector:       &metav1.LabelSelector{MatchLabels: SelectorLabels(c)},
		},
	}
}

// StatefulSet runs the cache pods. image is the engine image to use when the
// Cache names none (the webhook normally fills spec.image).
func StatefulSet(c *cachev1alpha1.Cache, image string) *appsv1.StatefulSet {
	if c.Spec.Image != "" {
		image = c.Spec.Image
	}
	hash := ConfigHash(ArgsFile(EngineArgs(c)))

	podLabels := maps.Clone(c.Spec.Placement.PodLabels)
	if podLabels == nil {
		podLabels = map[string]string{}
	}
	maps.Copy(podLabels, Labels(c)) // the operator's labels win
	podAnnotations := maps.Clone(c.Spec.Placement.PodAnnotations)
	if podAnnotations == nil {
		podAnnotations = map[string]string{}
	}
	podAnnotations[ConfigHashAnnotation] = hash

	strategy := appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}
	if c.Spec.UpdateStrategy.Type == cachev1alpha1.OnDeleteStrategy {
		strategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	}

	spread := make([]corev1.TopologySpreadConstraint, len(c.Spec.Placement.TopologySpreadConstraints))
	for i, t := range c.Spec.Placement.TopologySpreadConstraints {
		t = *t.DeepCopy()
		if t.LabelSelector == nil {
			t.LabelSelector = &metav1.LabelSelector{MatchLabels: SelectorLabels(c)}
		}
		spread[i] = t
	}
	if len(spread) == 0 {
		spread = nil
	}
	var affinity *corev1.Affinity
	if c.Spec.Placement.Affinity != nil {
		affinity = c.Spec.Placement.Affinity.DeepCopy()
	}
	var tolerations []corev1.Toleration
	for _, t := range c.Spec.Placement.Tolerations {
		tolerations = append(tolerations, *t.DeepCopy())
	}

	probe := []string{"/usr/local/bin/cachet-probe", "-p", strconv.Itoa(EnginePort)}
	container := corev1.Container{
		Name:            EngineContainerName,
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"/usr/local/bin/cachetd", "--args-file", ConfigDir + "/" + ArgsFileKey},
		Ports: []corev1.ContainerPort{{
			Name: EnginePortName, ContainerPort: EnginePort, Protocol: corev1.ProtocolTCP,
		}},
		Resources: Resources(c),
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: probe}},
			PeriodSeconds:    5,
			TimeoutSeconds:   2,
			FailureThreshold: 2,
		},
		// Liveness only restarts an engine that stopped answering for a
		// minute: a restart empties the cache, so it must be rare.
		LivenessProbe: &corev1.Probe{
			ProbeHandler:        corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: probe}},
			InitialDelaySeconds: 10,
			PeriodSeconds:       10,
			TimeoutSeconds:      5,
			FailureThreshold:    6,
		},
		Lifecycle: &corev1.Lifecycle{
			PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: PreStopSleepSeconds}},
		},
		VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: ConfigDir, ReadOnly: true}},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr.To(false),
			ReadOnlyRootFilesystem:   ptr.To(true),
			RunAsNonRoot:             ptr.To(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
	}

	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: objectMeta(c, StatefulSetName(c)),
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To(c.Spec.DesiredReplicas()),
			ServiceName: HeadlessServiceName(c),
			Selector:    &metav1.LabelSelector{MatchLabels: SelectorLabels(c)},
			// Shards are independent: scale up and down all at once. Rolling
			// updates still replace one pod at a time and wait for it.
			PodManagementPolicy: appsv1.ParallelPodManagement,
			UpdateStrategy:      strategy,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnnotations},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{container},
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(int64(TerminationGracePeriodSeconds)),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To(int64(EngineUID)),
						RunAsGroup:     ptr.To(int64(EngineUID)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Volumes: []corev1.Volume{{
						Name: "config",
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName(c)},
							Items:                []corev1.KeyToPath{{Key: ArgsFileKey, Path: ArgsFileKey}},
							DefaultMode:          ptr.To(int32(0o444)),
						}},
					}},
					NodeSelector:              maps.Clone(c.Spec.Placement.NodeSelector),
					Tolerations:               tolerations,
					Affinity:                  affinity,
					TopologySpreadConstraints: spread,
					PriorityClassName:         c.Spec.Placement.PriorityClassName,
				},
			},
		},
	}
}

// PodHost is a pod's stable DNS name behind the headless Service.
func PodHost(c *cachev1alpha1.Cache, pod, clusterDomain string) string {
	return fmt.Sprintf("%s.%s.%s.svc.%s", pod, HeadlessServiceName(c), c.Namespace, clusterDomain)
}
