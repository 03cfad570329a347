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
// reconciler stays a thin loop of "build, apply, observe". What the engine
// itself needs (arguments, memory) comes from internal/engine.

package controllers

import (
	"fmt"
	"maps"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
	"cachet.dev/cachet/internal/engine"
)

const (
	// EnginePort is the port cachetd listens on inside every pod.
	EnginePort = engine.Port
	// EnginePortName names the port on pods and Services.
	EnginePortName = "memcache"
	// MetricsPortName names the engine's HTTP port (health and metrics).
	MetricsPortName = "metrics"
	// EngineContainerName is the cache container's name.
	EngineContainerName = "cachetd"
	// ArgsFileKey is the ConfigMap key holding cachetd's arguments.
	ArgsFileKey = "args"
	// ConfigDir is where the ConfigMap is mounted.
	ConfigDir = "/etc/cachet"
	// ConfigHashAnnotation on the pod template names the arguments the pod
	// runs; a new configuration changes it and so rolls the pods.
	ConfigHashAnnotation = cachev1alpha1.ConfigHashAnnotation
	// EngineUID is the non-root user the engine image runs as.
	EngineUID = 65532

	// PreStopSleepSeconds keeps a terminating pod serving while its endpoint
	// is removed from Services and client DNS, before SIGTERM makes cachetd
	// drain. The sleep action needs Kubernetes 1.30 (the chart's floor).
	PreStopSleepSeconds = 5
	// TerminationGracePeriodSeconds covers preStop plus cachetd's drain.
	TerminationGracePeriodSeconds = 30

	// ZoneTopologyKey is the well-known zone label the default spread uses.
	ZoneTopologyKey = "topology.kubernetes.io/zone"

	managerName = cachev1alpha1.ManagerName

	// ExtstoreVolumeName names the extstore volume claim template (and so
	// each pod's claim, extstore-CACHE-ORDINAL).
	ExtstoreVolumeName = "extstore"
)

// BuildOptions are the operator-wide inputs of the builders.
type BuildOptions struct {
	// Engine shapes every engine's arguments.
	Engine engine.Options
	// Image is the engine image of the pod template.
	Image string
	// ClusterDomain completes the DNS names a certificate is issued for.
	ClusterDomain string
	// AuthFile is the authfile rendered from spec.auth's Secret (the
	// reconciler reads it; builders stay pure); empty without spec.auth or
	// while that Secret is missing or invalid.
	AuthFile string
}

// Names of the owned objects. They are derived from the Cache's name alone
// (and, for the per-revision ConfigMaps, the configuration's hash) so that
// clients and people can predict them.
func ConfigMapName(c *cachev1alpha1.Cache, hash string) string {
	return c.Name + "-config-" + hash
}
func HeadlessServiceName(c *cachev1alpha1.Cache) string { return c.Name + "-headless" }
func ClientServiceName(c *cachev1alpha1.Cache) string   { return c.Name }
func StatefulSetName(c *cachev1alpha1.Cache) string     { return c.Name }
func PDBName(c *cachev1alpha1.Cache) string             { return c.Name }
func NetworkPolicyName(c *cachev1alpha1.Cache) string   { return c.Name }

// ExtstoreClaimName is the claim the StatefulSet makes for one pod.
func ExtstoreClaimName(c *cachev1alpha1.Cache, pod string) string {
	return ExtstoreVolumeName + "-" + pod
}

// ExtstoreClaimKey identifies a claim template's class and size, for the pod
// template annotation: "" is the cluster's default class.
func ExtstoreClaimKey(e *cachev1alpha1.ExtstoreSpec) string {
	class := ""
	if e.StorageClassName != nil {
		class = *e.StorageClassName
	}
	return class + "/" + e.Size.String()
}

// ExtstoreClaimTemplate is the StatefulSet's claim template for spec.extstore:
// one ReadWriteOnce volume per pod, of the class and size asked for. It
// carries the operator's labels so that its claims are in the operator's
// informer.
func ExtstoreClaimTemplate(c *cachev1alpha1.Cache) corev1.PersistentVolumeClaim {
	e := c.Spec.Extstore
	var class *string
	if e.StorageClassName != nil {
		class = ptr.To(*e.StorageClassName)
	}
	return corev1.PersistentVolumeClaim{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: ExtstoreVolumeName, Labels: Labels(c)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: class,
			VolumeMode:       ptr.To(corev1.PersistentVolumeFilesystem),
			Resources: corev1.VolumeResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceStorage: e.Size.DeepCopy()},
			},
		},
	}
}

// SelectorLabels select a Cache's pods. They never change for a Cache, as a
// StatefulSet's selector is immutable.
func SelectorLabels(c *cachev1alpha1.Cache) map[string]string {
	return map[string]string{
		cachev1alpha1.LabelName:      cachev1alpha1.LabelNameValue,
		cachev1alpha1.LabelInstance:  c.Name,
		cachev1alpha1.LabelComponent: cachev1alpha1.LabelComponentCache,
	}
}

// Labels go on every owned object.
func Labels(c *cachev1alpha1.Cache) map[string]string {
	l := SelectorLabels(c)
	l[cachev1alpha1.LabelManagedBy] = managerName
	return l
}

// EngineArgs are the arguments of the current spec (with the classes an
// Observed profile applied, see EngineSpec).
func EngineArgs(c *cachev1alpha1.Cache, o BuildOptions) []string {
	return engine.Args(EngineSpec(c), o.Engine)
}

// DesiredConfigHash is the hash of the current spec's arguments file.
func DesiredConfigHash(c *cachev1alpha1.Cache, o BuildOptions) string {
	return engine.ConfigHash(engine.ArgsFile(EngineArgs(c, o)))
}

// Resources of the cache container. With dedicated CPUs requests equal limits
// and the CPU count is whole, which makes the pod Guaranteed and eligible for
// exclusive cores. Otherwise the CPUs are only requested (none with cpu 0),
// so the pod is never throttled by a CFS quota on shared cores.
func Resources(c *cachev1alpha1.Cache, o BuildOptions) corev1.ResourceRequirements {
	cpu := *resource.NewQuantity(int64(c.Spec.CPUs()), resource.DecimalSI)
	mem := *resource.NewQuantity(engine.MemoryLimitBytes(EngineSpec(c), o.Engine), resource.BinarySI)
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

// ConfigMap holds one revision's arguments file. It is immutable and named
// after the hash of its content: a pod mounts the ConfigMap of its own
// revision, so a pod that restarts before the roll reaches it restarts with
// the arguments it was created with, never the new ones.
func ConfigMap(c *cachev1alpha1.Cache, o BuildOptions) *corev1.ConfigMap {
	file := engine.ArgsFile(EngineArgs(c, o))
	hash := engine.ConfigHash(file)
	meta := objectMeta(c, ConfigMapName(c, hash))
	meta.Labels[cachev1alpha1.LabelConfigHash] = hash
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: meta,
		Immutable:  ptr.To(true),
		Data:       map[string]string{ArgsFileKey: file},
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
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:     svcType,
			Selector: SelectorLabels(c),
			Ports:    enginePorts(port),
		},
	}
	if svcType == corev1.ServiceTypeLoadBalancer && len(c.Spec.Service.LoadBalancerSourceRanges) > 0 {
		svc.Spec.LoadBalancerSourceRanges = append([]string(nil), c.Spec.Service.LoadBalancerSourceRanges...)
	}
	return svc
}

// PodDisruptionBudget bounds voluntary evictions of the cache pods. A pod
// that is not Ready serves nothing, so evicting it may always proceed
// (AlwaysAllow): otherwise one crash-looping pod would block every drain.
func PodDisruptionBudget(c *cachev1alpha1.Cache) *policyv1.PodDisruptionBudget {
	maxUnavailable := intstr.FromInt32(1)
	if c.Spec.PodDisruptionBudget.MaxUnavailable != nil {
		maxUnavailable = *c.Spec.PodDisruptionBudget.MaxUnavailable
	}
	always := policyv1.AlwaysAllow
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: objectMeta(c, PDBName(c)),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable:             &maxUnavailable,
			Selector:                   &metav1.LabelSelector{MatchLabels: SelectorLabels(c)},
			UnhealthyPodEvictionPolicy: &always,
		},
	}
}

// NetworkPolicy admits the listed clients to the memcached port and the
// metrics scrapers to the metrics port, and nothing else, when the Cache asks
// for a policy (nil otherwise).
func NetworkPolicy(c *cachev1alpha1.Cache, o BuildOptions) *networkingv1.NetworkPolicy {
	np := c.Spec.NetworkPolicy
	if np == nil {
		return nil
	}
	tcp := corev1.ProtocolTCP
	memcache := intstr.FromInt32(EnginePort)
	ingress := []networkingv1.NetworkPolicyIngressRule{{
		From:  copyPeers(np.Clients),
		Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &memcache}},
	}}
	if o.Engine.MetricsPort > 0 && len(np.MetricsScrapers) > 0 {
		metrics := intstr.FromInt32(o.Engine.MetricsPort)
		ingress = append(ingress, networkingv1.NetworkPolicyIngressRule{
			From:  copyPeers(np.MetricsScrapers),
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &metrics}},
		})
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: objectMeta(c, NetworkPolicyName(c)),
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: SelectorLabels(c)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     ingress,
		},
	}
}

func copyPeers(in []networkingv1.NetworkPolicyPeer) []networkingv1.NetworkPolicyPeer {
	out := make([]networkingv1.NetworkPolicyPeer, len(in))
	for i := range in {
		out[i] = *in[i].DeepCopy()
	}
	return out
}

// defaultAffinity prefers one pod of a Cache per node, so that one node's loss
// (or drain) takes one shard. Soft: a small cluster still runs every replica.
func defaultAffinity(c *cachev1alpha1.Cache) *corev1.Affinity {
	return &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 100,
			PodAffinityTerm: corev1.PodAffinityTerm{
				LabelSelector: &metav1.LabelSelector{MatchLabels: SelectorLabels(c)},
				TopologyKey:   corev1.LabelHostname,
			},
		}},
	}}
}

// spreadConstraints are the Cache's own constraints (an empty selector
// filled with the pods' labels), or a soft spread over zones.
func spreadConstraints(c *cachev1alpha1.Cache) []corev1.TopologySpreadConstraint {
	if len(c.Spec.Placement.TopologySpreadConstraints) == 0 {
		return []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: ZoneTopologyKey, WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector: &metav1.LabelSelector{MatchLabels: SelectorLabels(c)},
		}}
	}
	spread := make([]corev1.TopologySpreadConstraint, len(c.Spec.Placement.TopologySpreadConstraints))
	for i, t := range c.Spec.Placement.TopologySpreadConstraints {
		t = *t.DeepCopy()
		if t.LabelSelector == nil {
			t.LabelSelector = &metav1.LabelSelector{MatchLabels: SelectorLabels(c)}
		}
		spread[i] = t
	}
	return spread
}

// probes checks the engine answers. Readiness, the frequent one, is GET
// /healthz on the metrics port when there is one: the kubelet itself sends
// it (a storage round trip inside cachetd), where an exec probe would start
// a process inside the pod's exclusive cpuset every few seconds. Liveness
// restarts the pod and so empties its cache: it must not depend on a port
// any client in the network can crowd (the metrics port has 16 HTTP slots),
// so it speaks the memcached protocol on the data port through cachet-probe,
// as memcached users probe memcached; a client that fills the data port has
// taken the cache down anyway. Without a metrics port (an engine built
// before metrics_port) both are cachet-probe.
//
// With spec.tls and spec.auth, cachet-probe makes the round trip a client
// makes: over TLS (the server's certificate is the pod's own, not verified;
// with clientAuth Require the pod's certificate is its client certificate,
// as /healthz does), authenticated with the mounted authfile's first user.
// A client CA from another Secret has not signed the pod's certificate, so
// that case falls back to a TCP connect to the data port.
func probes(c *cachev1alpha1.Cache, o BuildOptions) (readiness, liveness corev1.ProbeHandler) {
	probe := []string{"/usr/local/bin/cachet-probe", "-p", strconv.Itoa(EnginePort)}
	if t := c.Spec.TLS; t != nil {
		probe = append(probe, "--tls")
		if t.ClientAuth == "Require" {
			probe = append(probe, "--cert", engine.TLSDir+"/tls.crt", "--key", engine.TLSDir+"/tls.key")
		}
	}
	if c.Spec.Auth != nil {
		probe = append(probe, "--auth-file", engine.AuthDir+"/"+engine.AuthFileKey)
	}
	liveness = corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: probe}}
	if t := c.Spec.TLS; t != nil && t.ClientAuth == "Require" && t.ClientCA != nil {
		liveness = corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString(EnginePortName)}}
	}
	if o.Engine.MetricsPort > 0 {
		get := &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString(MetricsPortName)}
		if MetricsTLS(c, o) {
			get.Scheme = corev1.URISchemeHTTPS // the kubelet neither verifies nor shows a certificate
		}
		readiness = corev1.ProbeHandler{HTTPGet: get}
		return readiness, liveness
	}
	return liveness, liveness
}

// StatefulSet runs the cache pods from o.Image.
func StatefulSet(c *cachev1alpha1.Cache, o BuildOptions) *appsv1.StatefulSet {
	hash := DesiredConfigHash(c, o)

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

	affinity := defaultAffinity(c)
	if c.Spec.Placement.Affinity != nil {
		affinity = c.Spec.Placement.Affinity.DeepCopy()
		if *affinity == (corev1.Affinity{}) {
			affinity = nil // "affinity: {}" opts out of the default
		}
	}
	var tolerations []corev1.Toleration
	for _, t := range c.Spec.Placement.Tolerations {
		tolerations = append(tolerations, *t.DeepCopy())
	}

	ports := []corev1.ContainerPort{{Name: EnginePortName, ContainerPort: EnginePort, Protocol: corev1.ProtocolTCP}}
	if o.Engine.MetricsPort > 0 {
		ports = append(ports, corev1.ContainerPort{Name: MetricsPortName, ContainerPort: o.Engine.MetricsPort, Protocol: corev1.ProtocolTCP})
	}
	readiness, liveness := probes(c, o)
	container := corev1.Container{
		Name:            EngineContainerName,
		Image:           o.Image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"/usr/local/bin/cachetd", "--args-file", ConfigDir + "/" + ArgsFileKey},
		Ports:           ports,
		Resources:       Resources(c, o),
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     readiness,
			PeriodSeconds:    5,
			TimeoutSeconds:   2,
			FailureThreshold: 2,
		},
		// Liveness only restarts an engine that stopped answering for a
		// minute: a restart empties the cache, so it must be rare.
		LivenessProbe: &corev1.Probe{
			ProbeHandler:        liveness,
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

	podSecurity := &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To(int64(EngineUID)),
		RunAsGroup:     ptr.To(int64(EngineUID)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	var claims []corev1.PersistentVolumeClaim
	var retention *appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy
	if e := c.Spec.Extstore; e != nil {
		claims = []corev1.PersistentVolumeClaim{ExtstoreClaimTemplate(c)}
		// The disk is cache space: a claim that outlives its pod (Cache
		// deleted, or scaled in) would only hold stale values and a node's
		// disk.
		retention = &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
			WhenDeleted: appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
			WhenScaled:  appsv1.DeletePersistentVolumeClaimRetentionPolicyType,
		}
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: ExtstoreVolumeName, MountPath: engine.ExtstoreDir})
		// A new volume's root belongs to root; the engine's group must be able
		// to create its file there. OnRootMismatch skips the recursive chown
		// of a volume that is already right.
		podSecurity.FSGroup = ptr.To(int64(EngineUID))
		podSecurity.FSGroupChangePolicy = ptr.To(corev1.FSGroupChangeOnRootMismatch)
		podAnnotations[cachev1alpha1.ExtstoreClaimAnnotation] = ExtstoreClaimKey(e)
	}

	volumes := []corev1.Volume{{
		Name: "config",
		VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName(c, hash)},
			Items:                []corev1.KeyToPath{{Key: ArgsFileKey, Path: ArgsFileKey}},
			DefaultMode:          ptr.To(int32(0o444)),
		}},
	}}
	for _, sv := range secretVolumes(c) {
		volumes = append(volumes, corev1.Volume{Name: sv.name, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName:  sv.secret,
			DefaultMode: ptr.To(int32(0o440)),
		}}})
		// Whole-Secret mounts, never subPath: the kubelet swaps a rotated
		// Secret's files only in a whole volume.
		container.VolumeMounts = append(container.VolumeMounts, corev1.VolumeMount{Name: sv.name, MountPath: sv.dir, ReadOnly: true})
	}
	if len(volumes) > 1 {
		// The engine runs as EngineUID, not root: its group reads the
		// Secrets' 0440 files.
		podSecurity.FSGroup = ptr.To(int64(EngineUID))
		podSecurity.FSGroupChangePolicy = ptr.To(corev1.FSGroupChangeOnRootMismatch)
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
			PodManagementPolicy:                  appsv1.ParallelPodManagement,
			UpdateStrategy:                       strategy,
			VolumeClaimTemplates:                 claims,
			PersistentVolumeClaimRetentionPolicy: retention,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: podAnnotations},
				Spec: corev1.PodSpec{
					Containers:                    []corev1.Container{container},
					AutomountServiceAccountToken:  ptr.To(false),
					EnableServiceLinks:            ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(int64(TerminationGracePeriodSeconds)),
					SecurityContext:               podSecurity,
					Volumes:                       volumes,
					NodeSelector:                  maps.Clone(c.Spec.Placement.NodeSelector),
					Tolerations:                   tolerations,
					Affinity:                      affinity,
					TopologySpreadConstraints:     spreadConstraints(c),
					PriorityClassName:             c.Spec.Placement.PriorityClassName,
				},
			},
		},
	}
}

// secretVolume is a Secret the engine reads files from, and where.
type secretVolume struct{ name, secret, dir string }

// secretVolumes are the Secrets spec.tls and spec.auth have the pods mount,
// at the directories internal/engine's arguments name.
func secretVolumes(c *cachev1alpha1.Cache) []secretVolume {
	var v []secretVolume
	if t := c.Spec.TLS; t != nil {
		v = append(v, secretVolume{"tls", TLSSecretName(c), engine.TLSDir})
		if t.ClientAuth == "Require" && t.ClientCA != nil {
			v = append(v, secretVolume{"client-ca", t.ClientCA.Name, engine.ClientCADir})
		}
	}
	if c.Spec.Auth != nil {
		v = append(v, secretVolume{"auth", AuthFileSecretName(c), engine.AuthDir})
	}
	return v
}

// PodHost is a pod's stable DNS name behind the headless Service.
func PodHost(c *cachev1alpha1.Cache, pod, clusterDomain string) string {
	return fmt.Sprintf("%s.%s.%s.svc.%s", pod, HeadlessServiceName(c), c.Namespace, clusterDomain)
}

// ConfigMapOfPod is the name of the ConfigMap a pod (or pod template) mounts
// its arguments from, or "".
func ConfigMapOfPod(spec *corev1.PodSpec) string {
	for _, v := range spec.Volumes {
		if v.Name == "config" && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	return ""
}
