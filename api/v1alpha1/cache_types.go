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

package v1alpha1

import (
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Room to grow: every field below is optional or defaulted, so later fields for
// network tuning, a workload profile, tls and auth can be added to CacheSpec
// as new optional structs without breaking v1alpha1 objects already stored
// (monitoring, autoscaling and extstore came that way). Their names are
// reserved: network, profile, tls, auth.
//
// Which fields restart pods: every field that reaches the pod template (image,
// memory, cpu, dedicatedCPUs, engine, placement) replaces each pod, and a
// replaced pod starts empty. PodTemplateFields lists them; the webhook warns
// when an update changes one, and a test keeps the list equal to what the
// StatefulSet builder reads.

// CacheSpec is the desired state of a Cache.
// +kubebuilder:validation:XValidation:rule="(has(self.dedicatedCPUs) && !self.dedicatedCPUs) || !has(self.cpu) || self.cpu >= 1",message="spec.cpu must be at least 1 when spec.dedicatedCPUs is true: exclusive cores come in whole CPUs"
// +kubebuilder:validation:XValidation:rule="!has(self.engine) || !has(self.engine.connectionPlacement) || self.engine.connectionPlacement == 'Off' || !has(self.dedicatedCPUs) || self.dedicatedCPUs",message="spec.engine.connectionPlacement CPU needs spec.dedicatedCPUs: only pinned workers have a CPU to receive connections on"
// +kubebuilder:validation:XValidation:rule="!has(self.engine) || !has(self.engine.threads) || (has(self.dedicatedCPUs) && !self.dedicatedCPUs) || !has(self.cpu) || self.engine.threads >= self.cpu",message="spec.engine.threads must be at least spec.cpu when spec.dedicatedCPUs is true: every exclusive core needs a worker pinned to it"
// +kubebuilder:validation:XValidation:rule="!has(self.autoscaling) || !has(self.autoscaling.targets.cpuUtilization) || !has(self.cpu) || self.cpu > 0",message="spec.autoscaling.targets.cpuUtilization needs spec.cpu of at least 1: utilization is measured against the pods' CPU request, and spec.cpu 0 requests none",fieldPath=".autoscaling.targets.cpuUtilization"
// +kubebuilder:validation:XValidation:rule="!has(self.engine) || !has(self.engine.maxItemSize) || !isQuantity(string(self.engine.maxItemSize)) || !isQuantity(string(self.memory)) || quantity(string(self.engine.maxItemSize)).asApproximateFloat() * 2.0 <= quantity(string(self.memory)).asApproximateFloat()",message="spec.engine.maxItemSize must be at most half of spec.memory: the engine needs room for at least two items of the largest size",fieldPath=".engine.maxItemSize"
// +kubebuilder:validation:XValidation:rule="!has(self.extstore) || !has(self.extstore.itemMinSize) || (has(self.engine) && has(self.engine.maxItemSize) && isQuantity(string(self.engine.maxItemSize)) ? self.extstore.itemMinSize < quantity(string(self.engine.maxItemSize)).asInteger() : self.extstore.itemMinSize < 1048576)",message="spec.extstore.itemMinSize must be less than spec.engine.maxItemSize (default 1Mi): only items of at least itemMinSize go to disk, and none is larger than maxItemSize",fieldPath=".extstore.itemMinSize"
// +kubebuilder:validation:XValidation:rule="!has(self.extstore) || !has(self.engine) || !has(self.engine.maxItemSize) || !isQuantity(string(self.engine.maxItemSize)) || quantity(string(self.engine.maxItemSize)).compareTo(quantity('4091Ki')) <= 0",message="spec.engine.maxItemSize must be at most 4091Ki with spec.extstore: an item goes to disk whole in one 4Mi write buffer (less the page header with 4Mi pages), with its key and a record header",fieldPath=".engine.maxItemSize"
// +kubebuilder:validation:XValidation:rule="!has(self.extstore) || !has(self.engine) || !has(self.engine.threads) || self.engine.threads + (has(self.extstore.ioThreads) ? self.extstore.ioThreads : 1) <= 252",message="spec.engine.threads plus spec.extstore.ioThreads must be at most 252: cachetd has 256 storage thread contexts, and its two background threads and the extstore flusher and compactor take one each",fieldPath=".engine.threads"
// +kubebuilder:validation:XValidation:rule="!has(self.workloadProfile) || !has(self.workloadProfile.apply) || self.workloadProfile.apply != 'Auto' || !has(self.engine) || (!has(self.engine.chunkSizes) && !has(self.engine.growthFactor) && !has(self.engine.minChunk) && !has(self.engine.hashPower))",message="spec.workloadProfile with apply: Auto sets the slab classes and hash power itself: leave spec.engine.chunkSizes, growthFactor, minChunk and hashPower unset, or use apply: Manual",fieldPath=".workloadProfile.apply"
type CacheSpec struct {
	// Replicas is the number of cache pods. Each pod is an independent shard:
	// clients hash keys across status.endpoints.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// Image is the cachetd engine image. When empty the operator's
	// --engine-image is written here at admission, so that upgrading the
	// operator never restarts (and empties) existing caches by itself.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`

	// Memory is the item memory of each pod (cachetd -m), a whole number of
	// MiB from 8Mi to 32767Mi (cachetd addresses items with 32-bit handles).
	// The pod's memory limit adds connection buffers, worker threads, the
	// hash table and a fixed base that the operator computes (see
	// docs/operator.md).
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('8Mi')) >= 0",messageExpression="'spec.memory must be at least 8Mi, not ' + string(self)"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('32767Mi')) <= 0",messageExpression="'spec.memory must be at most 32767Mi, not ' + string(self) + ': cachetd addresses items with 32-bit handles'"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('32767Mi')) > 0 || double(int(quantity(string(self)).asApproximateFloat() / 1048576.0)) == quantity(string(self)).asApproximateFloat() / 1048576.0",messageExpression="'spec.memory must be a whole number of MiB (e.g. 64Mi, 1Gi), not ' + string(self) + ': cachetd -m counts mebibytes'"
	Memory resource.Quantity `json:"memory"`

	// CPU is the number of whole CPU cores of each pod. With dedicatedCPUs
	// false it may be 0: the pod then reserves no CPU and runs on whatever the
	// shared cores have free.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	// +optional
	CPU *int32 `json:"cpu,omitempty"`

	// DedicatedCPUs makes each pod Guaranteed (requests equal limits, integer
	// CPUs) so that the kubelet's static CPU manager gives it exclusive cores,
	// and cachetd pins one worker thread to each of them. When false the pod is
	// Burstable: it requests the CPUs but may run on shared cores.
	// +kubebuilder:default=true
	// +optional
	DedicatedCPUs *bool `json:"dedicatedCPUs,omitempty"`

	// Engine tunes cachetd. Unset fields keep the engine's own defaults, which
	// status.engineArgs shows as they are in effect.
	// +optional
	Engine EngineSpec `json:"engine,omitempty"`

	// WorkloadProfile describes what the cache will hold (value sizes, key
	// size, item count, TTL) so that the operator derives slab classes,
	// the hash table size and the item memory from it, and reports them in
	// status.recommendation. With apply: Auto the derived classes and hash
	// power reach the engine (and roll the pods); with Manual (the default)
	// they are only recommended. docs/profiles.md says how to use it.
	// +optional
	WorkloadProfile *WorkloadProfile `json:"workloadProfile,omitempty"`

	// Service configures the client Service.
	// +optional
	Service ServiceSpec `json:"service,omitempty"`

	// Placement controls where and with which metadata the cache pods run.
	// +optional
	Placement PlacementSpec `json:"placement,omitempty"`

	// UpdateStrategy says how pods are replaced when the spec changes.
	// +optional
	UpdateStrategy UpdateStrategy `json:"updateStrategy,omitempty"`

	// PodDisruptionBudget bounds voluntary disruptions (drains, evictions).
	// +optional
	PodDisruptionBudget PodDisruptionBudgetSpec `json:"podDisruptionBudget,omitempty"`

	// NetworkPolicy, when set, admits traffic to the cache pods only from the
	// listed clients (memcached port) and metrics scrapers (metrics port),
	// through a NetworkPolicy the operator owns. Enforcement needs a CNI that
	// implements NetworkPolicy.
	// +optional
	NetworkPolicy *NetworkPolicySpec `json:"networkPolicy,omitempty"`

	// Monitoring, when enabled, gives the Cache a PodMonitor and a
	// PrometheusRule (prometheus-operator's kinds) so that a Prometheus
	// scrapes every pod's /metrics and alerts on it. Without the
	// prometheus-operator CRDs the Monitoring condition says so and nothing
	// else changes.
	// +optional
	Monitoring *MonitoringSpec `json:"monitoring,omitempty"`

	// Autoscaling, when set, gives the Cache a HorizontalPodAutoscaler that
	// scales it through its /scale subresource (never the StatefulSet), on
	// cache-aware signals served by the custom metrics API (for example by
	// prometheus-adapter with the chart's rules) and on CPU and memory from
	// the resource metrics API. spec.replicas is then the autoscaler's to set.
	// +optional
	Autoscaling *AutoscalingSpec `json:"autoscaling,omitempty"`

	// Extstore, when set, keeps the values of large, cold items on a local
	// disk (memcached's extstore): each pod gets a PersistentVolumeClaim of
	// this size, from a claim template of its StatefulSet, and cachetd writes
	// its extstore file there. Item headers and keys stay in spec.memory.
	// The disk is cache space: a pod that moves to another node (or whose
	// node is lost) starts with a new, empty volume. Adding, removing or
	// resizing it, or changing its class, replaces every pod (see
	// docs/operator.md).
	// +optional
	Extstore *ExtstoreSpec `json:"extstore,omitempty"`

	// NodeTuning says where the node's NIC interrupts, receive packet
	// steering (RPS/RFS) and transmit steering (XPS) go for this Cache's
	// pods. The cachet node-tuner DaemonSet applies it on each node and
	// reports the NodeTuned condition; changing it re-plans the node
	// without restarting a pod (docs/node-tuning.md).
	// +optional
	NodeTuning NodeTuningSpec `json:"nodeTuning,omitempty"`

	// TLS, when set, serves the memcached protocol over TLS only (cachetd -Z
	// with memcached's -o ssl_* options); the plaintext port is off. The
	// certificate comes from cert-manager (issuerRef) or from a Secret the
	// user keeps (secretName); its rotation reaches the engine without a pod
	// restart (docs/security.md).
	// +optional
	TLS *TLSSpec `json:"tls,omitempty"`

	// Auth, when set, makes every connection authenticate first, as with
	// memcached's -Y authfile: the first command is a set whose value is
	// "user password".
	// +optional
	Auth *AuthSpec `json:"auth,omitempty"`
}

// TLSSpec is where a Cache's serving certificate comes from and whether
// clients must present one.
// +kubebuilder:validation:XValidation:rule="has(self.issuerRef) != has(self.secretName)",message="spec.tls needs exactly one of issuerRef (cert-manager issues the certificate) and secretName (a kubernetes.io/tls Secret you keep)"
// +kubebuilder:validation:XValidation:rule="!has(self.clientCA) || (has(self.clientAuth) && self.clientAuth == 'Require')",message="spec.tls.clientCA is used only with clientAuth Require: without it clients present no certificate",fieldPath=".clientCA"
type TLSSpec struct {
	// IssuerRef names the cert-manager Issuer or ClusterIssuer that signs
	// the certificate. The operator owns one cert-manager Certificate per
	// Cache, Secret CACHE-tls, whose SANs are every pod's DNS name and the
	// Cache's Services. Needs cert-manager's CRDs in the cluster.
	// +optional
	IssuerRef *IssuerReference `json:"issuerRef,omitempty"`

	// SecretName is a kubernetes.io/tls Secret in the Cache's namespace
	// (tls.crt, tls.key, and ca.crt for clientAuth Require) that the user
	// issues and rotates.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// ClientAuth None accepts any client that completes the handshake;
	// Require refuses clients without a certificate signed by the client
	// CA (cachetd -o ssl_verify_mode=2).
	// +kubebuilder:validation:Enum=None;Require
	// +kubebuilder:default=None
	// +optional
	ClientAuth string `json:"clientAuth,omitempty"`

	// ClientCA is the CA bundle that signs client certificates, for
	// clientAuth Require. Without it the serving Secret's ca.crt is used
	// (cert-manager writes it for CA issuers).
	// +optional
	ClientCA *SecretKeyRef `json:"clientCA,omitempty"`

	// MinVersion is the oldest TLS version accepted (cachetd -o
	// ssl_min_version).
	// +kubebuilder:validation:Enum=TLSv1.2;TLSv1.3
	// +kubebuilder:default=TLSv1.2
	// +optional
	MinVersion string `json:"minVersion,omitempty"`

	// Metrics serves the engines' metrics port (/metrics, /healthz) over
	// HTTPS with the same certificate (cachetd -o metrics_tls): the pods'
	// probes use HTTPS, the PodMonitor scrapes with https, verifying the
	// ca.crt of the serving Secret and the server name CACHE.NAMESPACE.svc,
	// and so does the operator's reader of an Observed workload profile.
	// That port asks for no client certificate, whatever clientAuth says
	// (kubelet probes present none); who may scrape is
	// spec.networkPolicy.metricsScrapers' business. Needs the operator's
	// metrics port (--engine-metrics-port, on by default).
	// +kubebuilder:default=false
	// +optional
	Metrics bool `json:"metrics,omitempty"`
}

// IssuerReference names a cert-manager issuer, as cert-manager's own
// issuerRef does.
type IssuerReference struct {
	// Name of the Issuer (in the Cache's namespace) or ClusterIssuer.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Kind is Issuer or ClusterIssuer.
	// +kubebuilder:validation:Enum=Issuer;ClusterIssuer
	// +kubebuilder:default=Issuer
	// +optional
	Kind string `json:"kind,omitempty"`
	// Group of the issuer kind; cert-manager.io for cert-manager's own,
	// another group for an external issuer.
	// +kubebuilder:default=cert-manager.io
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Group string `json:"group,omitempty"`
}

// SecretKeyRef is one key of a Secret in the Cache's namespace.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key in the Secret.
	// +kubebuilder:default=ca.crt
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// AuthSpec is where a Cache's users and passwords come from.
type AuthSpec struct {
	// SecretRef names a Secret in the Cache's namespace whose every key is
	// a user name and whose value is that user's password. The operator
	// renders it into the engine's authfile (user:password lines) in the
	// Secret CACHE-authfile, which the pods mount as a volume: an edit of
	// the Secret reaches the engine, which reloads the file, without a pod
	// restart. A user name with ':' or a value with a line break cannot be
	// an authfile line and is not rendered.
	SecretRef LocalSecretReference `json:"secretRef"`
}

// LocalSecretReference names a Secret in the Cache's namespace.
type LocalSecretReference struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// NodeTuningSpec is what the node tuner does for a Cache's pods.
type NodeTuningSpec struct {
	// IRQStrategy places the NIC queue interrupts: siblings (on the
	// hyperthread sibling of the worker core a queue feeds), housekeeping
	// (off every exclusive core, onto the shared pool), spread (each queue
	// on its own worker CPU), none (leave the node alone), or auto (one of
	// siblings, housekeeping, spread by the pod's cores and the node's
	// shape; the tuner says which and why).
	// +kubebuilder:validation:Enum=auto;siblings;housekeeping;spread;none
	// +kubebuilder:default=auto
	// +optional
	IRQStrategy string `json:"irqStrategy,omitempty"`

	// RPS turns on receive packet steering with flow steering (RFS) for the
	// pods' veths and the queues they own, and sets
	// net.core.rps_sock_flow_entries.
	// +kubebuilder:default=true
	// +optional
	RPS *bool `json:"rps,omitempty"`
}

// Strategy is IRQStrategy with its default.
func (n NodeTuningSpec) Strategy() string {
	if n.IRQStrategy == "" {
		return "auto"
	}
	return n.IRQStrategy
}

// RPSEnabled is RPS with its default.
func (n NodeTuningSpec) RPSEnabled() bool {
	return n.RPS == nil || *n.RPS
}

// ExtstoreSpec sizes the on-disk part of each pod's cache.
// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self.size)) || !has(self.pageSize) || !isQuantity(string(self.pageSize)) || quantity(string(self.size)).asApproximateFloat() * 0.90 - 67108864.0 >= 2.0 * quantity(string(self.pageSize)).asApproximateFloat()",message="spec.extstore.size must hold at least two pages of spec.extstore.pageSize in the extstore file, which is 90% of the claim less 64Mi (the filesystem keeps the rest): size >= (2 x pageSize + 64Mi) / 0.90",fieldPath=".size"
// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self.size)) || !has(self.pageSize) || !isQuantity(string(self.pageSize)) || quantity(string(self.size)).asApproximateFloat() * 0.90 - 67108864.0 <= 65536.0 * quantity(string(self.pageSize)).asApproximateFloat()",message="spec.extstore.size must fit in 65536 pages of spec.extstore.pageSize (the engine's page ids are 16 bits): raise pageSize",fieldPath=".size"
type ExtstoreSpec struct {
	// Size of each pod's PersistentVolumeClaim. The extstore file is 90% of
	// it less 64Mi, rounded down to a whole MiB: the rest is the
	// filesystem's (ext4 keeps 5% for root, which the engine's non-root user
	// cannot use, plus inode tables and a journal of up to 64Mi below 16Gi;
	// measured in docs/operator.md).
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('64Ti')) <= 0",messageExpression="'spec.extstore.size must be at most 64Ti, not ' + string(self)"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || double(int(quantity(string(self)).asApproximateFloat())) == quantity(string(self)).asApproximateFloat()",messageExpression="'spec.extstore.size must be a whole number of bytes (e.g. 300Mi, 10Gi), not ' + string(self)"
	// +required
	Size resource.Quantity `json:"size"`

	// StorageClassName of the claims. When unset the cluster's default
	// StorageClass is used. For local NVMe use a class of local
	// PersistentVolumes with volumeBindingMode WaitForFirstConsumer (see
	// config/samples).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`

	// ItemMinSize is the smallest item, in bytes, whose value may go to disk
	// (ext_item_size); smaller items stay in memory only. Less than
	// spec.engine.maxItemSize.
	// +kubebuilder:default=512
	// +kubebuilder:validation:Minimum=64
	// +kubebuilder:validation:Maximum=134217727
	// +optional
	ItemMinSize *int64 `json:"itemMinSize,omitempty"`

	// PageSize is the unit the engine allocates and reclaims disk space in
	// (ext_page_size), a whole multiple of the 4Mi write buffer, up to 2Gi.
	// +kubebuilder:default="64Mi"
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || (quantity(string(self)).compareTo(quantity('4Mi')) >= 0 && quantity(string(self)).compareTo(quantity('2Gi')) <= 0 && quantity(string(self)).isInteger() && quantity(string(self)).asInteger() % 4194304 == 0)",message="spec.extstore.pageSize must be a multiple of 4Mi (the write buffer) from 4Mi to 2Gi"
	// +optional
	PageSize *resource.Quantity `json:"pageSize,omitempty"`

	// IOThreads read values back from disk (ext_threads).
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	IOThreads *int32 `json:"ioThreads,omitempty"`

	// DeleteClaimOnNodeLoss deletes a pod's claim (and the pod, when it
	// cannot be scheduled or its node is gone) when the volume's node has
	// been deleted or NotReady for longer than nodeLossTimeout: a local
	// volume can only be used on its node, so the pod would otherwise wait
	// for that node forever. The StatefulSet then recreates both, with a new
	// empty volume on another node.
	// +kubebuilder:default=true
	// +optional
	DeleteClaimOnNodeLoss *bool `json:"deleteClaimOnNodeLoss,omitempty"`

	// NodeLossTimeout is how long a volume's node must be NotReady before
	// its claim is deleted. A deleted Node counts at once.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(s|m|h))+$')",messageExpression="'spec.extstore.nodeLossTimeout must be a duration in whole hours, minutes and seconds such as 90s, 5m or 1h30m, not ' + self"
	// +optional
	NodeLossTimeout *metav1.Duration `json:"nodeLossTimeout,omitempty"`
}

// DeletesClaimOnNodeLoss reports deleteClaimOnNodeLoss with its default applied.
func (e *ExtstoreSpec) DeletesClaimOnNodeLoss() bool {
	return e != nil && (e.DeleteClaimOnNodeLoss == nil || *e.DeleteClaimOnNodeLoss)
}

// NodeLossAfter reports nodeLossTimeout with its default applied.
func (e *ExtstoreSpec) NodeLossAfter() time.Duration {
	if e == nil || e.NodeLossTimeout == nil {
		return 5 * time.Minute
	}
	return e.NodeLossTimeout.Duration
}

// MonitoringSpec says how Prometheus watches a Cache.
type MonitoringSpec struct {
	// Enabled reconciles the PodMonitor and the PrometheusRule.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`

	// Interval between scrapes of each pod, a Prometheus duration.
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+(ms|s|m|h))+$')",messageExpression="'spec.monitoring.interval must be a Prometheus duration such as 30s, 1m or 1m30s, not ' + self"
	// +optional
	Interval string `json:"interval,omitempty"`

	// Labels added to the PodMonitor and the PrometheusRule, so that a
	// Prometheus' podMonitorSelector and ruleSelector pick them up (for
	// example release: kube-prometheus-stack).
	// +optional
	Labels map[string]string `json:"labels,omitempty"`

	// HitRatioAlertBelow raises CachetHitRatioLow when the Cache's GET hit
	// ratio stays under it, a decimal from 0 to 1 (e.g. "0.9"). When unset,
	// autoscaling.targets.hitRatio is used, and without either there is no
	// hit-ratio alert (a cache's natural hit ratio depends on its clients).
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || (quantity(string(self)).compareTo(quantity('0')) > 0 && quantity(string(self)).compareTo(quantity('1')) < 0)",message="spec.monitoring.hitRatioAlertBelow must be between 0 and 1, e.g. 0.9"
	// +optional
	HitRatioAlertBelow *resource.Quantity `json:"hitRatioAlertBelow,omitempty"`
}

// IsEnabled reports spec.monitoring.enabled with its default applied.
func (m *MonitoringSpec) IsEnabled() bool {
	return m != nil && (m.Enabled == nil || *m.Enabled)
}

// AutoscalingSpec bounds and drives the Cache's HorizontalPodAutoscaler.
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || self.minReplicas <= self.maxReplicas",message="spec.autoscaling.minReplicas must be at most maxReplicas"
type AutoscalingSpec struct {
	// MinReplicas the autoscaler keeps.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// MaxReplicas the autoscaler may reach.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxReplicas int32 `json:"maxReplicas"`

	// Targets the autoscaler holds; the largest replica count any of them
	// asks for wins.
	Targets AutoscalingTargets `json:"targets"`

	// Behavior is the HorizontalPodAutoscaler's scale-up and scale-down
	// policy, as in autoscaling/v2. When unset the operator scales in
	// slowly (one pod per 5 minutes after a 10-minute window): every pod
	// removed takes its shard's keys with it.
	// +optional
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
}

// AutoscalingTargets are the signals a Cache scales on. At least one is set.
// +kubebuilder:validation:XValidation:rule="has(self.youngEvictionsPerSecond) || has(self.hitRatio) || has(self.memoryUtilization) || has(self.cpuUtilization)",message="spec.autoscaling.targets needs at least one of youngEvictionsPerSecond, hitRatio, memoryUtilization, cpuUtilization"
type AutoscalingTargets struct {
	// YoungEvictionsPerSecond per pod: evictions of items read within the
	// engine's young window (-o young_window, 60 s). A cache that evicts
	// items its clients still read is too small; this is the signal to scale
	// out on (custom metric cachet_evictions_young_per_second).
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || quantity(string(self)).compareTo(quantity('0')) > 0",message="spec.autoscaling.targets.youngEvictionsPerSecond must be greater than 0"
	// +optional
	YoungEvictionsPerSecond *resource.Quantity `json:"youngEvictionsPerSecond,omitempty"`

	// HitRatio the Cache should keep, a decimal from 0 to 1 (e.g. "0.95").
	// The autoscaler holds each pod's GET miss ratio (custom metric
	// cachet_get_miss_ratio) at 1 - hitRatio.
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || (quantity(string(self)).compareTo(quantity('0')) > 0 && quantity(string(self)).compareTo(quantity('1')) < 0)",message="spec.autoscaling.targets.hitRatio must be between 0 and 1, e.g. 0.95"
	// +optional
	HitRatio *resource.Quantity `json:"hitRatio,omitempty"`

	// MemoryUtilization is the pods' average memory use in percent of their
	// memory request (resource metrics API). A cache fills its memory by
	// design, so this mostly says it is full, not that it is too small.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MemoryUtilization *int32 `json:"memoryUtilization,omitempty"`

	// CPUUtilization is the pods' average CPU use in percent of their CPU
	// request (resource metrics API).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	CPUUtilization *int32 `json:"cpuUtilization,omitempty"`
}

// NetworkPolicySpec lists who may reach a Cache's pods. Peers are standard
// NetworkPolicy peers: a podSelector (this namespace), a namespaceSelector, both
// (those pods in those namespaces), or an ipBlock.
type NetworkPolicySpec struct {
	// Clients may connect to the memcached port (11211). At least one: a
	// cache nobody may reach is a mistake, not a policy.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	Clients []networkingv1.NetworkPolicyPeer `json:"clients"`

	// MetricsScrapers may connect to the engine's metrics port (when the
	// operator runs the engine with one), e.g. Prometheus' namespace.
	// +listType=atomic
	// +optional
	MetricsScrapers []networkingv1.NetworkPolicyPeer `json:"metricsScrapers,omitempty"`
}

// EngineSpec holds cachetd's memcached-compatible tuning flags.
// +kubebuilder:validation:XValidation:rule="!has(self.chunkSizes) || (!has(self.growthFactor) && !has(self.minChunk))",message="spec.engine.chunkSizes replaces growthFactor and minChunk: set either chunkSizes or growthFactor/minChunk, not both"
type EngineSpec struct {
	// Threads is the number of worker threads (-t). Defaults to spec.cpu, one
	// worker per core. At most 254: cachetd has 256 storage thread contexts
	// and two background threads take one each (with spec.extstore the
	// flusher and the IO threads take theirs too, see CacheSpec's rules).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=254
	// +optional
	Threads *int32 `json:"threads,omitempty"`

	// MaxConnections is the most simultaneous client connections per pod (-c).
	// Each one is budgeted in the pod's memory limit.
	// +kubebuilder:default=1024
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=65536
	// +optional
	MaxConnections *int32 `json:"maxConnections,omitempty"`

	// MaxItemSize is the largest item accepted (-I), from 1Ki to 128Mi and at
	// most half of spec.memory.
	// +kubebuilder:validation:XValidation:rule="!isQuantity(string(self)) || (quantity(string(self)).compareTo(quantity('1Ki')) >= 0 && quantity(string(self)).compareTo(quantity('128Mi')) <= 0)",message="spec.engine.maxItemSize must be from 1Ki to 128Mi, cachetd's largest item"
	// +optional
	MaxItemSize *resource.Quantity `json:"maxItemSize,omitempty"`

	// HashPower is the initial hash table size as a power of two
	// (-o hashpower), at most 30. The table still grows on its own; set it
	// to avoid growing under load when the item count is known.
	// +kubebuilder:validation:Minimum=12
	// +kubebuilder:validation:Maximum=30
	// +optional
	HashPower *int32 `json:"hashPower,omitempty"`

	// GrowthFactor is the ratio between successive slab chunk sizes (-f), a
	// decimal number greater than 1.0, e.g. "1.25".
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+([.][0-9]+)?$')",messageExpression="'spec.engine.growthFactor must be a decimal number greater than 1.0 such as \"1.25\", not ' + self"
	// +optional
	GrowthFactor *string `json:"growthFactor,omitempty"`

	// MinChunk is the space in bytes for key, value and flags in the smallest
	// slab class (-n).
	// +kubebuilder:validation:Minimum=16
	// +kubebuilder:validation:Maximum=65536
	// +optional
	MinChunk *int32 `json:"minChunk,omitempty"`

	// ChunkSizes lists explicit slab chunk sizes in bytes (item header
	// included), ascending, each a multiple of 8 and at most maxItemSize
	// (-o slab_sizes). It replaces growthFactor and minChunk.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=62
	// +kubebuilder:validation:items:Minimum=48
	// +kubebuilder:validation:items:Maximum=1073741824
	// +kubebuilder:validation:XValidation:rule="self.isSorted()",message="spec.engine.chunkSizes must be in ascending order"
	// +listType=set
	// +optional
	ChunkSizes []int32 `json:"chunkSizes,omitempty"`

	// ConnectionPlacement CPU hands each new connection to the worker pinned
	// to the CPU whose softirq received it (cachetd -o conn_placement=cpu,
	// SO_INCOMING_CPU), else to one on a hyperthread sibling of it, so a
	// connection's interrupts and its worker share a core. Worth it with the
	// node tuner placing the NIC queues on the pod's cores (spec.nodeTuning);
	// without, every connection whose interrupts land on one core would go to
	// one worker, so the default is Off (round robin). Needs dedicated CPUs:
	// the workers must be pinned.
	// +kubebuilder:validation:Enum=Off;CPU
	// +kubebuilder:default=Off
	// +optional
	ConnectionPlacement string `json:"connectionPlacement,omitempty"`
}

// The values of spec.engine.connectionPlacement.
const (
	ConnectionPlacementOff = "Off"
	ConnectionPlacementCPU = "CPU"
)

// WorkloadProfile is the shape of the items a Cache holds: declared here, or
// observed by the operator in the pods' own metrics.
// +kubebuilder:validation:XValidation:rule="(has(self.source) && self.source == 'Observed') || has(self.preset) != has(self.valueSizes)",message="spec.workloadProfile needs exactly one of preset (a named shape) or valueSizes (your own histogram)"
// +kubebuilder:validation:XValidation:rule="!(has(self.source) && self.source == 'Observed') || (!has(self.preset) && !has(self.valueSizes))",message="spec.workloadProfile.source Observed reads the sizes from the pods: preset and valueSizes must be unset"
// +kubebuilder:validation:XValidation:rule="(has(self.source) && self.source == 'Observed') || !has(self.observeIntervalSeconds)",message="spec.workloadProfile.observeIntervalSeconds is for source Observed only"
type WorkloadProfile struct {
	// Preset is a named value-size shape (docs/profiles.md lists each):
	// small-objects (counters, flags, small JSON: 16-128 B), sessions
	// (serialized sessions: 256 B-4 KiB, most near 1 KiB), bimodal (small
	// ids or counters next to rendered blobs: 64-128 B and 8-16 KiB) or
	// html-fragments (rendered page parts: 2-64 KiB). It replaces
	// valueSizes.
	// +kubebuilder:validation:Enum=small-objects;sessions;bimodal;html-fragments
	// +optional
	Preset string `json:"preset,omitempty"`

	// ValueSizes is the value-size histogram: each bucket holds the values
	// larger than the previous bucket's bytes and at most its own, with a
	// weight proportional to its share of the items. A memcached
	// `stats sizes` histogram maps to it bucket for bucket. Ascending, at
	// most 64 buckets.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.map(b, b.bytes).isSorted()",message="spec.workloadProfile.valueSizes must be in ascending order of bytes"
	// +listType=map
	// +listMapKey=bytes
	// +optional
	ValueSizes []ValueSizeBucket `json:"valueSizes,omitempty"`

	// KeyBytes is the typical key length. Defaults to the preset's, or 32.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=250
	// +optional
	KeyBytes *int32 `json:"keyBytes,omitempty"`

	// ClientFlags says whether the items carry nonzero client flags, which
	// take 4 bytes of an item (a zero flags field takes none). Defaults to
	// true: most client libraries store a serialization type there.
	// +optional
	ClientFlags *bool `json:"clientFlags,omitempty"`

	// ExpectedItems is how many items one pod holds at its fullest: the hash
	// table is sized so that it never grows under load, and the
	// recommended memory holds them all.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	// +optional
	ExpectedItems *int64 `json:"expectedItems,omitempty"`

	// TTLSeconds is the items' typical time to live; items with one carry
	// a 4-byte expiry, which the derivation counts.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2592000
	// +optional
	TTLSeconds *int32 `json:"ttlSeconds,omitempty"`

	// TargetHitRatio is the hit ratio the memory should reach, a decimal
	// from 0 to 1 such as "0.95". It needs a miss-ratio curve, which only
	// an Observed profile has: the recommended memory is the least the
	// pods' merged curve reaches it with. A Declared profile keeps it in
	// the recommendation's notes and sizes memory for all expectedItems.
	// +kubebuilder:validation:MaxLength=8
	// +kubebuilder:validation:XValidation:rule="self.matches('^(0([.][0-9]+)?|1([.]0+)?)$')",messageExpression="'spec.workloadProfile.targetHitRatio must be a decimal from 0 to 1 such as \"0.95\", not ' + self"
	// +optional
	TargetHitRatio *string `json:"targetHitRatio,omitempty"`

	// Source says where the sizes come from. Declared: this spec (preset or
	// valueSizes). Observed: the operator reads every Ready pod's size
	// histogram and miss-ratio curve from its metrics endpoint, merges
	// them, and recommends classes and memory from what the pods really
	// hold; with apply Auto it runs the recommended classes once they are
	// stable and worth a roll (docs/profiles.md).
	// +kubebuilder:validation:Enum=Declared;Observed
	// +kubebuilder:default=Declared
	// +optional
	Source string `json:"source,omitempty"`

	// ObserveIntervalSeconds is how often an Observed profile reads the
	// pods' metrics (default 300). apply Auto needs the same
	// recommendation at several observations in a row, so this also sets
	// how soon it applies. Intervals of seconds are for tests: each
	// observation reads every pod's /metrics.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=86400
	// +optional
	ObserveIntervalSeconds *int32 `json:"observeIntervalSeconds,omitempty"`

	// Apply says what the operator does with the derivation. Manual only
	// recommends it (status.recommendation); Auto also runs the engine with
	// the derived slab classes and hash power (and the extstore item-size
	// threshold with spec.extstore), rolling the pods like any engine
	// change; spec.engine.chunkSizes, growthFactor, minChunk and hashPower
	// must then be unset.
	// +kubebuilder:validation:Enum=Manual;Auto
	// +kubebuilder:default=Manual
	// +optional
	Apply string `json:"apply,omitempty"`
}

// ValueSizeBucket is one bucket of a value-size histogram.
type ValueSizeBucket struct {
	// Bytes is the bucket's largest value size, at most spec.engine.maxItemSize.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=134217728
	Bytes int32 `json:"bytes"`
	// Weight is the bucket's share of the items, relative to the others.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000000
	Weight int32 `json:"weight"`
}

// Profile sources and apply modes.
const (
	ProfileSourceDeclared = "Declared"
	ProfileSourceObserved = "Observed"
	ProfileApplyManual    = "Manual"
	ProfileApplyAuto      = "Auto"
)

// Recommendation is what the operator derives from spec.workloadProfile.
type Recommendation struct {
	// ChunkSizes are the derived slab chunk sizes in bytes (-o slab_sizes).
	// +listType=atomic
	// +optional
	ChunkSizes []int32 `json:"chunkSizes,omitempty"`
	// HashPower is the hash table's size as a power of two that holds
	// expectedItems without growing.
	// +optional
	HashPower *int32 `json:"hashPower,omitempty"`
	// Memory is the item memory (spec.memory) that holds expectedItems in
	// the derived classes.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// ExtstoreItemMinSize is the derived extstore threshold (with
	// spec.extstore).
	// +optional
	ExtstoreItemMinSize *int64 `json:"extstoreItemMinSize,omitempty"`
	// PredictedWastePercent is the share of chunk bytes the items leave
	// unused in the derived classes, e.g. "3.1".
	// +optional
	PredictedWastePercent string `json:"predictedWastePercent,omitempty"`
	// CurrentWastePercent is the same share in the classes the pods run
	// now (spec.engine's), for comparison.
	// +optional
	CurrentWastePercent string `json:"currentWastePercent,omitempty"`
	// Applied is true when the engine runs the derived values (apply: Auto).
	// +optional
	Applied bool `json:"applied,omitempty"`
	// Notes say what the recommendation could not take into account.
	// +optional
	Notes string `json:"notes,omitempty"`

	// The rest is filled for an Observed profile only.

	// CurrentHitRatio is the hit ratio the pods' merged miss-ratio curve
	// predicts at spec.memory in the classes the pods run now, e.g. "0.912".
	// +optional
	CurrentHitRatio string `json:"currentHitRatio,omitempty"`
	// PredictedHitRatio is the hit ratio the merged curve predicts at the
	// recommended memory in the recommended classes.
	// +optional
	PredictedHitRatio string `json:"predictedHitRatio,omitempty"`
	// Pods are the per-pod predictions, from each pod's own histogram and
	// curve.
	// +listType=atomic
	// +optional
	Pods []PodRecommendation `json:"pods,omitempty"`
	// ObservedAt is when the pods' metrics were last read.
	// +optional
	ObservedAt *metav1.Time `json:"observedAt,omitempty"`
	// ObservedItems is how many items the read pods held, all together.
	// +optional
	ObservedItems int64 `json:"observedItems,omitempty"`
	// StableObservations counts the observations in a row that found the
	// recommended chunkSizes still within a point of the best classes.
	// +optional
	StableObservations int32 `json:"stableObservations,omitempty"`
	// AppliedChunkSizes are the observed classes the engine runs (apply:
	// Auto); empty until the first apply, when the pods run spec.engine's
	// ladder.
	// +listType=atomic
	// +optional
	AppliedChunkSizes []int32 `json:"appliedChunkSizes,omitempty"`
	// Decision says why the last observation applied the recommendation or
	// did not.
	// +optional
	Decision string `json:"decision,omitempty"`
}

// PodRecommendation is one pod's prediction under an Observed profile.
type PodRecommendation struct {
	// Name of the pod.
	Name string `json:"name"`
	// CurrentWastePercent is the share of the pod's chunk bytes its items
	// leave unused in the classes it runs now.
	// +optional
	CurrentWastePercent string `json:"currentWastePercent,omitempty"`
	// PredictedWastePercent is that share in the recommended classes.
	// +optional
	PredictedWastePercent string `json:"predictedWastePercent,omitempty"`
	// CurrentHitRatio is the pod's curve at spec.memory in the classes it
	// runs now.
	// +optional
	CurrentHitRatio string `json:"currentHitRatio,omitempty"`
	// PredictedHitRatio is the pod's curve at the recommended memory in
	// the recommended classes.
	// +optional
	PredictedHitRatio string `json:"predictedHitRatio,omitempty"`
}

// ServiceSpec configures the client Service in front of all pods.
type ServiceSpec struct {
	// Type of the client Service.
	// +kubebuilder:validation:Enum=ClusterIP;NodePort;LoadBalancer
	// +kubebuilder:default=ClusterIP
	// +optional
	Type corev1.ServiceType `json:"type,omitempty"`

	// Port the client Service listens on. Pods always listen on 11211.
	// +kubebuilder:default=11211
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	// +optional
	Port int32 `json:"port,omitempty"`

	// Annotations added to the client Service (for example for a cloud load
	// balancer).
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`

	// LoadBalancerSourceRanges restricts a LoadBalancer Service to these
	// client CIDRs. The memcached protocol has no authentication: a
	// LoadBalancer without source ranges is open to whoever reaches it, and
	// the API warns about it.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=43
	// +optional
	LoadBalancerSourceRanges []string `json:"loadBalancerSourceRanges,omitempty"`
}

// PlacementSpec controls scheduling and pod metadata.
type PlacementSpec struct {
	// NodeSelector for the cache pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Tolerations of the cache pods.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Affinity of the cache pods. When unset, the operator prefers (soft
	// anti-affinity, weight 100) to put no two pods of a Cache on one node, so
	// one node's loss takes one shard. Setting it replaces that default; an
	// empty affinity ({}) removes it.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// TopologySpreadConstraints of the cache pods. An empty labelSelector is
	// filled with the pods' own selector labels. When unset, the operator
	// adds a soft spread over zones (topology.kubernetes.io/zone, maxSkew 1,
	// ScheduleAnyway). Setting any constraint replaces that default.
	// +optional
	// +listType=atomic
	TopologySpreadConstraints []corev1.TopologySpreadConstraint `json:"topologySpreadConstraints,omitempty"`

	// PriorityClassName of the cache pods.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// PodLabels are added to the cache pods. They may not override the
	// app.kubernetes.io/ labels the operator selects pods by.
	// +optional
	PodLabels map[string]string `json:"podLabels,omitempty"`

	// PodAnnotations are added to the cache pods.
	// +optional
	PodAnnotations map[string]string `json:"podAnnotations,omitempty"`
}

// UpdateStrategyType names how pods are replaced.
// +kubebuilder:validation:Enum=RollingUpdate;OnDelete
type UpdateStrategyType string

const (
	// RollingUpdateStrategy replaces one pod at a time and waits for it to be Ready.
	RollingUpdateStrategy UpdateStrategyType = "RollingUpdate"
	// OnDeleteStrategy replaces a pod only when someone deletes it.
	OnDeleteStrategy UpdateStrategyType = "OnDelete"
)

// UpdateStrategy says how pods are replaced when the spec changes.
type UpdateStrategy struct {
	// Type is RollingUpdate (one pod at a time, each waits to be Ready) or
	// OnDelete (a pod takes the new spec only when it is deleted).
	// +kubebuilder:default=RollingUpdate
	// +optional
	Type UpdateStrategyType `json:"type,omitempty"`
}

// PodDisruptionBudgetSpec bounds voluntary disruptions.
type PodDisruptionBudgetSpec struct {
	// MaxUnavailable pods during voluntary disruptions, a number or a
	// percentage from 0% to 100%.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')",messageExpression="'spec.podDisruptionBudget.maxUnavailable must be a number of pods (0 or more) or a percentage from 0% to 100%, not ' + string(self)"
	// +optional
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// CacheEndpoint is one pod's stable address.
type CacheEndpoint struct {
	// Pod is the pod's name.
	Pod string `json:"pod"`
	// Host is the pod's stable DNS name,
	// POD.CACHE-headless.NAMESPACE.svc.CLUSTER-DOMAIN.
	Host string `json:"host"`
	// Port the pod serves the memcached protocol on.
	Port int32 `json:"port"`
	// Ready is true when the pod passes its readiness probe.
	Ready bool `json:"ready"`
	// TLS is true when Port serves TLS only (spec.tls).
	// +optional
	TLS bool `json:"tls,omitempty"`
	// Node the pod runs on.
	// +optional
	Node string `json:"node,omitempty"`
	// Restarts of the engine container since the pod was created. Each
	// restart started the shard empty.
	// +optional
	Restarts int32 `json:"restarts,omitempty"`
	// LastTermination is how the engine container last ended, when it has
	// restarted.
	// +optional
	LastTermination *CacheTermination `json:"lastTermination,omitempty"`
}

// CacheTermination is how an engine container ended.
type CacheTermination struct {
	// Reason as the kubelet reports it, e.g. OOMKilled, Error, Completed.
	Reason string `json:"reason"`
	// ExitCode of the engine.
	ExitCode int32 `json:"exitCode"`
	// FinishedAt is when it ended.
	// +optional
	FinishedAt metav1.Time `json:"finishedAt,omitempty"`
}

// CacheRevision is one engine configuration that pods run.
type CacheRevision struct {
	// ConfigHash identifies the configuration (the pods' config-hash
	// annotation and the name suffix of its immutable ConfigMap).
	ConfigHash string `json:"configHash"`
	// EngineArgs are the arguments those pods were started with, as read
	// from the ConfigMap they mount.
	// +listType=atomic
	// +optional
	EngineArgs []string `json:"engineArgs,omitempty"`
	// Pods running this configuration, in ordinal order.
	// +listType=atomic
	Pods []string `json:"pods"`
}

// Condition types of a Cache.
const (
	// ConditionReady is True when every desired pod is Ready: with reason
	// AllPodsReady once they all run the current spec, PodsRunOlderRevision
	// while OnDelete leaves some on an older one.
	ConditionReady = "Ready"
	// ConditionProgressing is True while pods are being created, rolled or removed.
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True when something needs a person: pods that cannot
	// be scheduled, crash, or cannot pull their image, or owned objects the API
	// server refused.
	ConditionDegraded = "Degraded"
	// ConditionPodsRestarted is True while a pod of the Cache has restarted
	// its engine (and so lost that shard's data) since it was created.
	ConditionPodsRestarted = "PodsRestarted"
	// ConditionCoresExclusive says whether dedicated-CPU pods really got
	// exclusive cores: False when a pod runs on a node whose kubelet does not
	// use the static CPU manager policy, Unknown when the operator does not
	// check (see --check-cpu-manager).
	ConditionCoresExclusive = "CoresExclusive"
	// ConditionTLSReady is True when spec.tls's certificate Secret is there
	// for the pods to mount (reason SecretMounted); False with NoCertManager
	// (issuerRef without cert-manager in the cluster), IssuerNotReady (the
	// Certificate is not issued), SecretMissing or SecretMissingCA
	// (spec.tls.metrics with no ca.crt in the Secret: the pods serve, the
	// metrics port cannot be verified). Absent without spec.tls.
	ConditionTLSReady = "TLSReady"
	// ConditionAuthReady is True when spec.auth's users are rendered into
	// the authfile the pods read (reason SecretMounted); False with
	// SecretMissing or InvalidUser (a user name with ':' or whitespace, an
	// empty password or one with a line break: nothing of that Secret is
	// rendered, the last valid authfile stays). Absent without spec.auth.
	ConditionAuthReady = "AuthReady"
	// ConditionMonitoring is True when the PodMonitor and PrometheusRule are
	// in place, False when the cluster has no prometheus-operator CRDs.
	// Absent when spec.monitoring is not enabled.
	ConditionMonitoring = "Monitoring"
	// ConditionAutoscaling is True when the HorizontalPodAutoscaler is in
	// place and the metrics APIs its targets need are served, False (with
	// what is missing, or the autoscaler's own complaint) otherwise. Absent
	// without spec.autoscaling.
	ConditionAutoscaling = "Autoscaling"
	// ConditionExtstore is True when every pod's extstore claim matches
	// spec.extstore, False while the StatefulSet is replaced for a new claim
	// template, while claims of an old class or size remain, when a claim
	// was deleted because its node was lost, or when claims wait for a
	// StorageClass that does not exist; Unknown when the operator
	// cannot read volumes or nodes. Absent without spec.extstore.
	ConditionExtstore = "Extstore"
	// ConditionNodeTuned is True when the node tuner placed every pod's NIC
	// interrupts and steering as spec.nodeTuning asks, False with the
	// first pod it could not (NoTuner, IrqbalanceConflict, ManagedIRQ,
	// SharedCores, NoQueue), Unknown while a pod is not yet scheduled or
	// not yet seen by the tuner. Absent with irqStrategy none.
	ConditionNodeTuned = "NodeTuned"
)

// CacheStatus is the observed state of a Cache.
type CacheStatus struct {
	// Conditions, each with the reasons it takes (docs/operator.md says what
	// to do about each):
	//
	// Ready: True AllPodsReady (every desired pod runs the current spec and
	// is Ready), PodsRunOlderRevision (updateStrategy OnDelete: every pod is
	// Ready but some run an older spec until deleted) or ScaledToZero; False
	// PodsNotReady, StatefulSetPending, or the Degraded reason of a refused
	// apply (NameConflict, InvalidSpec, ApplyFailed).
	//
	// Progressing: True Creating, Scaling, RollingUpdate,
	// WaitingForPodsReady, StatefulSetPending or ReplacingStatefulSet; False
	// Stable, or UpdateWaitsForPodDeletion (OnDelete: delete the pods that
	// run an older spec to update them).
	//
	// Degraded (needs a person): True PodUnschedulable, ImagePullFailed,
	// CrashLooping, OOMKilled, PodConfigError, PodFailed, NodeNotReady,
	// NameConflict, InvalidSpec or ApplyFailed; False NoProblems.
	//
	// PodsRestarted: True with the engine's last termination reason (e.g.
	// OOMKilled, Error) or EngineRestarted: a restart emptied that shard;
	// False NoRestarts.
	//
	// CoresExclusive: True StaticCPUManager; False SharedCores (dedicated
	// pods on a node without the static CPU manager) or NotDedicated
	// (spec.dedicatedCPUs is false, as asked); Unknown NotChecked.
	//
	// Monitoring (with spec.monitoring): True PodMonitorInPlace; False
	// PrometheusOperatorMissing, NoMetricsPort or ApplyFailed.
	//
	// Autoscaling (with spec.autoscaling): True AutoscalerActive; False
	// MetricsAPIMissing, ApplyFailed, or the HorizontalPodAutoscaler's own
	// reason (e.g. FailedGetPodsMetric); Unknown AutoscalerPending.
	//
	// Extstore (with spec.extstore): True ClaimsMatch; False
	// ClaimTemplateChanged, ClaimsOutdated, ClaimsExpanding, VolumeNodeLost
	// or StorageClassNotFound (claims wait for a class that does not exist);
	// Unknown NodeLossCheckFailed.
	//
	// NodeTuned (unless spec.nodeTuning.irqStrategy is none): True Tuned
	// (the node tuner placed every pod's NIC interrupts and steering);
	// False NoTuner (no node tuner reported for a pod: the chart's
	// nodeTuner.enabled or its nodeSelector), SharedCores (no exclusive
	// CPU to tune for), IrqbalanceConflict, ManagedIRQ (the kernel refused
	// an interrupt's affinity), NoQueue (other pods took every NIC queue),
	// NoSharedPool, NoNICQueueIRQs or ApplyFailed, each with the pod;
	// Unknown TunerPending (a pod not yet scheduled, running for less than
	// 20s without a report, or not yet seen by the tuner at this
	// generation). Events name each change: Tuned, the False reason, or
	// NodeTuningReverted when irqStrategy became none.
	// TLSReady (with spec.tls): True SecretMounted; False NoCertManager,
	// IssuerNotReady, SecretMissing or SecretMissingCA (spec.tls.metrics
	// without ca.crt in the Secret; the pods still serve).
	// AuthReady (with spec.auth): True SecretMounted; False SecretMissing
	// or InvalidUser.
	//
	// No condition, Events only: a workloadProfile with source Observed
	// emits ProfileApplied at each apply of the observed classes, and
	// ProfileNotApplied (apply Auto) or ProfileRecommended (apply Manual)
	// when the kind of decision changes; status.recommendation.decision
	// says why.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Replicas is the number of pods that exist.
	// +optional
	Replicas int32 `json:"replicas"`

	// ReadyReplicas is the number of Ready pods.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`

	// Selector is the label selector of the pods, for the scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"`

	// Endpoints lists every pod's stable DNS name and port, in ordinal order,
	// for clients that hash keys across servers.
	// +listType=atomic
	// +optional
	Endpoints []CacheEndpoint `json:"endpoints,omitempty"`

	// EngineArgs are the cachetd arguments of the current spec, one per
	// element: what every pod runs once the roll to ConfigHash is done.
	// Revisions says what each pod runs now.
	// +listType=atomic
	// +optional
	EngineArgs []string `json:"engineArgs,omitempty"`

	// ConfigHash is the hash of the engine arguments the pods are rolled to.
	// +optional
	ConfigHash string `json:"configHash,omitempty"`

	// Revisions lists each engine configuration that pods run now, with its
	// arguments and pods, the current one first. During a roll (or with
	// OnDelete, until old pods are deleted) there are two or more.
	// +listType=atomic
	// +optional
	Revisions []CacheRevision `json:"revisions,omitempty"`

	// Recommendation is the derivation from spec.workloadProfile.
	// +optional
	Recommendation *Recommendation `json:"recommendation,omitempty"`

	// Image is the engine image of the pod template: spec.image, or, when
	// that is empty, the image the operator pinned when it created the pods
	// (an operator upgrade never changes it).
	// +optional
	Image string `json:"image,omitempty"`
}

// Cache is a managed memcached-compatible cache: a set of cachetd pods, each an
// independent shard with its own stable DNS name.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:shortName=cch,categories=all
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.readyReplicas`,priority=1
// +kubebuilder:printcolumn:name="Memory",type=string,JSONPath=`.spec.memory`
// +kubebuilder:printcolumn:name="CPUs",type=integer,JSONPath=`.spec.cpu`
// +kubebuilder:printcolumn:name="Dedicated",type=boolean,JSONPath=`.spec.dedicatedCPUs`,priority=1
// +kubebuilder:printcolumn:name="Waste%",type=string,JSONPath=`.status.recommendation.predictedWastePercent`,priority=1
// +kubebuilder:printcolumn:name="Hit",type=string,JSONPath=`.status.recommendation.predictedHitRatio`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Cache struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired cache: its size, CPUs, engine tuning and placement.
	// +required
	Spec CacheSpec `json:"spec"`
	// Status is what the operator observes: conditions, pod counts, the pods'
	// stable addresses and the engine arguments in effect.
	// +optional
	Status CacheStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// CacheList contains a list of Cache.
type CacheList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cache `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Cache{}, &CacheList{})
}

// IsDedicatedCPUs reports spec.dedicatedCPUs with its default applied.
func (s *CacheSpec) IsDedicatedCPUs() bool {
	return s.DedicatedCPUs == nil || *s.DedicatedCPUs
}

// CPUs reports spec.cpu with its default applied.
func (s *CacheSpec) CPUs() int32 {
	if s.CPU == nil {
		return 1
	}
	return *s.CPU
}

// DesiredReplicas reports spec.replicas with its default applied.
func (s *CacheSpec) DesiredReplicas() int32 {
	if s.Replicas == nil {
		return 1
	}
	return *s.Replicas
}

// PodTemplateFields are the spec fields that reach the pod template: changing
// one replaces every pod (one at a time with RollingUpdate), and each
// replaced pod starts with an empty cache.
var PodTemplateFields = []string{"image", "memory", "cpu", "dedicatedCPUs", "engine", "workloadProfile", "placement", "extstore", "tls", "auth"}

// PodTemplateSpec is the part of a spec that reaches the pod template, with
// everything else zeroed: two specs restart pods when this differs.
func (s *CacheSpec) PodTemplateSpec() CacheSpec {
	ext := s.Extstore
	if ext != nil {
		// The node-loss policy is the operator's alone: it never reaches
		// the pods, so changing it restarts none.
		e := *ext
		e.DeleteClaimOnNodeLoss, e.NodeLossTimeout = nil, nil
		ext = &e
	}
	// The pods mount the issued certificate's Secret and the rendered
	// authfile, whose names do not follow the issuer or the user's Secret:
	// changing either restarts no pod.
	tls := s.TLS
	if tls != nil && tls.IssuerRef != nil {
		t := *tls
		t.IssuerRef = &IssuerReference{}
		tls = &t
	}
	var auth *AuthSpec
	if s.Auth != nil {
		auth = &AuthSpec{}
	}
	return CacheSpec{
		Image: s.Image, Memory: s.Memory, CPU: s.CPU, DedicatedCPUs: s.DedicatedCPUs,
		Engine: s.Engine, Placement: s.Placement, Extstore: ext,
		WorkloadProfile: autoProfile(s.WorkloadProfile), TLS: tls, Auth: auth,
	}
}

// autoProfile is the profile when it reaches the engine (apply: Auto), else
// nil: a Manual profile only fills status.recommendation. How often an
// Observed profile is read never reaches the pods.
func autoProfile(p *WorkloadProfile) *WorkloadProfile {
	if p == nil || p.Apply != ProfileApplyAuto {
		return nil
	}
	if p.ObserveIntervalSeconds != nil {
		q := *p
		q.ObserveIntervalSeconds = nil
		return &q
	}
	return p
}
