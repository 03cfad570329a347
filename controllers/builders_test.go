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
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	cachev1alpha1 "cachet.dev/cachet/api/v1alpha1"
)

var testOpts = BuildOptions{Image: "localhost/cachetd:test"}

func newCache(mutate ...func(*cachev1alpha1.Cache)) *cachev1alpha1.Cache {
	c := &cachev1alpha1.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", Generation: 1},
		Spec: cachev1alpha1.CacheSpec{
			Replicas: ptr.To(int32(3)),
			Image:    "localhost/cachetd:test",
			Memory:   resource.MustParse("64Mi"),
			CPU:      ptr.To(int32(2)),
		},
	}
	for _, m := range mutate {
		m(c)
	}
	return c
}

func TestResourcesGuaranteedOnlyWhenDedicated(t *testing.T) {
	r := Resources(newCache(), testOpts)
	if !r.Requests.Cpu().Equal(*r.Limits.Cpu()) || !r.Requests.Memory().Equal(*r.Limits.Memory()) || r.Limits.Cpu().Value() != 2 {
		t.Fatalf("dedicated resources are not Guaranteed with 2 CPUs: %+v", r)
	}
	shared := Resources(newCache(func(c *cachev1alpha1.Cache) { c.Spec.DedicatedCPUs = ptr.To(false) }), testOpts)
	if _, ok := shared.Limits[corev1.ResourceCPU]; ok {
		t.Fatalf("shared pods must have no CPU limit (no CFS throttling): %+v", shared)
	}
	if shared.Requests.Cpu().Value() != 2 {
		t.Fatalf("shared pods still request their CPUs: %+v", shared)
	}
	none := Resources(newCache(func(c *cachev1alpha1.Cache) { c.Spec.DedicatedCPUs = ptr.To(false); c.Spec.CPU = ptr.To(int32(0)) }), testOpts)
	if _, ok := none.Requests[corev1.ResourceCPU]; ok {
		t.Fatalf("cpu 0 must request no CPU: %+v", none)
	}
}

func TestStatefulSetPodTemplate(t *testing.T) {
	c := newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.Placement = cachev1alpha1.PlacementSpec{
			NodeSelector:   map[string]string{"disk": "nvme"},
			PodLabels:      map[string]string{"team": "web"},
			PodAnnotations: map[string]string{"note": "x"},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.DoNotSchedule,
			}},
			PriorityClassName: "high",
		}
	})
	sts := StatefulSet(c, testOpts)
	if sts.Name != "web" || sts.Namespace != "prod" || sts.Spec.ServiceName != "web-headless" || *sts.Spec.Replicas != 3 {
		t.Fatalf("identity wrong: %s/%s service %s replicas %d", sts.Namespace, sts.Name, sts.Spec.ServiceName, *sts.Spec.Replicas)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement || sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Fatalf("policy %s strategy %s", sts.Spec.PodManagementPolicy, sts.Spec.UpdateStrategy.Type)
	}
	tpl := sts.Spec.Template
	if tpl.Labels["team"] != "web" || tpl.Labels["app.kubernetes.io/instance"] != "web" || tpl.Annotations["note"] != "x" {
		t.Fatalf("pod metadata: %v %v", tpl.Labels, tpl.Annotations)
	}
	if tpl.Annotations[ConfigHashAnnotation] != DesiredConfigHash(c, testOpts) {
		t.Fatal("pod template does not carry the config hash")
	}
	ps := tpl.Spec
	if ps.NodeSelector["disk"] != "nvme" || ps.PriorityClassName != "high" {
		t.Fatal("placement not copied")
	}
	if sel := ps.TopologySpreadConstraints[0].LabelSelector; sel == nil || sel.MatchLabels["app.kubernetes.io/instance"] != "web" {
		t.Fatal("empty spread selector not filled with the pods' labels")
	}
	if c.Spec.Placement.TopologySpreadConstraints[0].LabelSelector != nil {
		t.Fatal("builder mutated the Cache")
	}
	if *ps.SecurityContext.RunAsUser != EngineUID || !*ps.SecurityContext.RunAsNonRoot || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Fatalf("pod security context: %+v", ps.SecurityContext)
	}
	ctr := ps.Containers[0]
	if ctr.Image != testOpts.Image {
		t.Fatalf("image %q: the builder must use the image it is given", ctr.Image)
	}
	if !slices.Equal(ctr.Command, []string{"/usr/local/bin/cachetd", "--args-file", "/etc/cachet/args"}) {
		t.Fatalf("command %q", ctr.Command)
	}
	sc := ctr.SecurityContext
	if !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Fatalf("container security context: %+v", sc)
	}
	if !slices.Equal(ctr.ReadinessProbe.Exec.Command, []string{"/usr/local/bin/cachet-probe", "-p", "11211"}) {
		t.Fatalf("readiness probe %q", ctr.ReadinessProbe.Exec.Command)
	}
	if ctr.Lifecycle.PreStop.Sleep == nil || ctr.Lifecycle.PreStop.Sleep.Seconds != PreStopSleepSeconds {
		t.Fatal("preStop sleep missing")
	}
	if !ctr.VolumeMounts[0].ReadOnly || ps.Volumes[0].ConfigMap.Name != "web-config-"+DesiredConfigHash(c, testOpts) {
		t.Fatal("config volume not mounted read-only from the revision's ConfigMap")
	}

	onDelete := StatefulSet(newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.UpdateStrategy.Type = cachev1alpha1.OnDeleteStrategy
	}), testOpts)
	if onDelete.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Fatal("OnDelete not honoured")
	}
}

// Defect 1: every pod read its arguments from one ConfigMap, rewritten before
// the StatefulSet rolled, so a pod that restarted before the roll reached it
// ran the new arguments inside its old memory limit. Each revision now has
// its own immutable ConfigMap, named after its hash, and the pod template
// mounts its own.
func TestEachRevisionHasItsOwnImmutableConfigMap(t *testing.T) {
	small := newCache(func(c *cachev1alpha1.Cache) { c.Spec.Memory = resource.MustParse("48Mi") })
	big := newCache(func(c *cachev1alpha1.Cache) { c.Spec.Memory = resource.MustParse("96Mi") })
	cmSmall, cmBig := ConfigMap(small, testOpts), ConfigMap(big, testOpts)
	if cmSmall.Name == cmBig.Name {
		t.Fatalf("two configurations share the ConfigMap %s: a pod that has not rolled would read the new arguments", cmSmall.Name)
	}
	for _, tc := range []struct {
		c  *cachev1alpha1.Cache
		cm *corev1.ConfigMap
		m  string
	}{{small, cmSmall, "48"}, {big, cmBig, "96"}} {
		if tc.cm.Immutable == nil || !*tc.cm.Immutable {
			t.Errorf("ConfigMap %s is not immutable", tc.cm.Name)
		}
		if !strings.Contains(tc.cm.Data[ArgsFileKey], "-m\n"+tc.m+"\n") || tc.cm.Labels[cachev1alpha1.LabelConfigHash] != DesiredConfigHash(tc.c, testOpts) {
			t.Errorf("ConfigMap %s: args %q labels %v", tc.cm.Name, tc.cm.Data[ArgsFileKey], tc.cm.Labels)
		}
		if got := ConfigMapOfPod(&StatefulSet(tc.c, testOpts).Spec.Template.Spec); got != tc.cm.Name {
			t.Errorf("pod template mounts %s, want its own revision's %s", got, tc.cm.Name)
		}
	}
}

// Defect 6: an operator upgrade with a new --engine-image restarted every
// Cache whose spec.image was empty (webhooks off).
func TestEngineImagePinnedByTheExistingStatefulSet(t *testing.T) {
	c := newCache(func(c *cachev1alpha1.Cache) { c.Spec.Image = "" })
	existing := StatefulSet(c, BuildOptions{Image: "localhost/cachetd:old"})
	if got := EngineImageFor(c, existing, "localhost/cachetd:new"); got != "localhost/cachetd:old" {
		t.Fatalf("image %q: a new operator default replaced the running image", got)
	}
	if got := EngineImageFor(c, nil, "localhost/cachetd:new"); got != "localhost/cachetd:new" {
		t.Fatalf("image %q: a new Cache must get the operator's default", got)
	}
	c.Spec.Image = "localhost/cachetd:pinned"
	if got := EngineImageFor(c, existing, "localhost/cachetd:new"); got != "localhost/cachetd:pinned" {
		t.Fatalf("image %q: spec.image must win", got)
	}
}

// Defect 3: by default all shards of a Cache could sit on one node.
func TestDefaultPlacementSpreadsShards(t *testing.T) {
	ps := StatefulSet(newCache(), testOpts).Spec.Template.Spec
	aa := ps.Affinity.PodAntiAffinity
	if aa == nil || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 1 || len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
		t.Fatalf("default affinity %+v: want one soft anti-affinity term", ps.Affinity)
	}
	term := aa.PreferredDuringSchedulingIgnoredDuringExecution[0]
	if term.PodAffinityTerm.TopologyKey != corev1.LabelHostname || term.PodAffinityTerm.LabelSelector.MatchLabels[cachev1alpha1.LabelInstance] != "web" {
		t.Fatalf("anti-affinity term %+v", term)
	}
	if len(ps.TopologySpreadConstraints) != 1 || ps.TopologySpreadConstraints[0].TopologyKey != ZoneTopologyKey ||
		ps.TopologySpreadConstraints[0].WhenUnsatisfiable != corev1.ScheduleAnyway {
		t.Fatalf("default spread %+v: want a soft zone spread", ps.TopologySpreadConstraints)
	}
	// The user's own placement replaces the defaults; an empty affinity removes it.
	own := StatefulSet(newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.Placement.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
		c.Spec.Placement.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 2, TopologyKey: "rack", WhenUnsatisfiable: corev1.DoNotSchedule}}
	}), testOpts).Spec.Template.Spec
	if own.Affinity.PodAntiAffinity != nil || own.Affinity.NodeAffinity == nil || len(own.TopologySpreadConstraints) != 1 || own.TopologySpreadConstraints[0].TopologyKey != "rack" {
		t.Fatalf("user placement not used as given: %+v %+v", own.Affinity, own.TopologySpreadConstraints)
	}
	none := StatefulSet(newCache(func(c *cachev1alpha1.Cache) { c.Spec.Placement.Affinity = &corev1.Affinity{} }), testOpts).Spec.Template.Spec
	if none.Affinity != nil {
		t.Fatalf("affinity {} must opt out of the default: %+v", none.Affinity)
	}
}

// Defect 10: exec probes started processes inside the exclusive cpuset, so
// readiness (every 5 s) is httpGet /healthz. Issue 20: 16 clients sending one
// byte each could hold every slot of the metrics port, and a liveness probe
// there would restart the pod and empty its cache, so liveness probes the
// data port with cachet-probe.
func TestProbesAreHTTPWhenTheEngineServesHealth(t *testing.T) {
	o := testOpts
	o.Engine.MetricsPort = 9150
	c := newCache()
	ctr := StatefulSet(c, o).Spec.Template.Spec.Containers[0]
	if p := ctr.ReadinessProbe; p.Exec != nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.StrVal != MetricsPortName {
		t.Errorf("readiness probe %+v: want httpGet /healthz on the metrics port", p.ProbeHandler)
	}
	if p := ctr.LivenessProbe; p.HTTPGet != nil || p.TCPSocket != nil || p.Exec == nil ||
		!slices.Equal(p.Exec.Command, []string{"/usr/local/bin/cachet-probe", "-p", strconv.Itoa(EnginePort)}) {
		t.Errorf("liveness probe %+v: want exec cachet-probe on the data port, never the metrics port", p.ProbeHandler)
	}
	if len(ctr.Ports) != 2 || ctr.Ports[1].Name != MetricsPortName || ctr.Ports[1].ContainerPort != 9150 {
		t.Errorf("ports %+v: want the metrics port named %q", ctr.Ports, MetricsPortName)
	}
	if !strings.Contains(strings.Join(EngineArgs(c, o), " "), "metrics_port=9150") {
		t.Errorf("args %q do not turn the engine's metrics port on", EngineArgs(c, o))
	}
}

// Defect 11: the list of fields that restart pods, which the webhook warns
// about and docs/operator.md documents, must be exactly what the StatefulSet
// builder reads into the pod template.
func TestPodTemplateFieldsAreWhatTheBuilderReads(t *testing.T) {
	base := newCache()
	template := func(c *cachev1alpha1.Cache) string {
		b, _ := json.Marshal(StatefulSet(c, BuildOptions{Image: EngineImageFor(c, nil, "x")}).Spec.Template)
		return string(b)
	}
	changes := map[string]func(*cachev1alpha1.Cache){
		"image":               func(c *cachev1alpha1.Cache) { c.Spec.Image = "other" },
		"memory":              func(c *cachev1alpha1.Cache) { c.Spec.Memory = resource.MustParse("128Mi") },
		"cpu":                 func(c *cachev1alpha1.Cache) { c.Spec.CPU = ptr.To(int32(3)) },
		"dedicatedCPUs":       func(c *cachev1alpha1.Cache) { c.Spec.DedicatedCPUs = ptr.To(false) },
		"engine":              func(c *cachev1alpha1.Cache) { c.Spec.Engine.MaxConnections = ptr.To(int32(99)) },
		"placement":           func(c *cachev1alpha1.Cache) { c.Spec.Placement.PriorityClassName = "p" },
		"replicas":            func(c *cachev1alpha1.Cache) { c.Spec.Replicas = ptr.To(int32(7)) },
		"service":             func(c *cachev1alpha1.Cache) { c.Spec.Service.Port = 1 },
		"updateStrategy":      func(c *cachev1alpha1.Cache) { c.Spec.UpdateStrategy.Type = cachev1alpha1.OnDeleteStrategy },
		"podDisruptionBudget": func(c *cachev1alpha1.Cache) { c.Spec.PodDisruptionBudget.MaxUnavailable = ptr.To(intstr.FromInt32(2)) },
		"networkPolicy":       func(c *cachev1alpha1.Cache) { c.Spec.NetworkPolicy = &cachev1alpha1.NetworkPolicySpec{} },
		"monitoring":          func(c *cachev1alpha1.Cache) { c.Spec.Monitoring = &cachev1alpha1.MonitoringSpec{Interval: "5s"} },
		"autoscaling":         func(c *cachev1alpha1.Cache) { c.Spec.Autoscaling = &cachev1alpha1.AutoscalingSpec{MaxReplicas: 3} },
		"extstore": func(c *cachev1alpha1.Cache) {
			c.Spec.Extstore = &cachev1alpha1.ExtstoreSpec{Size: resource.MustParse("1Gi")}
		},
		// apply: Auto derives the engine's classes and hash power
		"workloadProfile": func(c *cachev1alpha1.Cache) {
			c.Spec.WorkloadProfile = &cachev1alpha1.WorkloadProfile{Preset: "sessions", Apply: cachev1alpha1.ProfileApplyAuto}
		},
		"tls": func(c *cachev1alpha1.Cache) { c.Spec.TLS = &cachev1alpha1.TLSSpec{SecretName: "certs"} },
		"auth": func(c *cachev1alpha1.Cache) {
			c.Spec.Auth = &cachev1alpha1.AuthSpec{SecretRef: cachev1alpha1.LocalSecretReference{Name: "users"}}
		},
		// The node tuner reads it from the Cache: a change never restarts a pod.
		"nodeTuning": func(c *cachev1alpha1.Cache) { c.Spec.NodeTuning.IRQStrategy = "spread" },
	}
	specFields := reflect.TypeOf(cachev1alpha1.CacheSpec{})
	if specFields.NumField() != len(changes) {
		t.Fatalf("CacheSpec has %d fields and this test changes %d: add the new field here", specFields.NumField(), len(changes))
	}
	for name, change := range changes {
		c := base.DeepCopy()
		change(c)
		restarts := template(c) != template(base)
		listed := slices.Contains(cachev1alpha1.PodTemplateFields, name)
		if restarts != listed {
			t.Errorf("spec.%s: changes the pod template = %v, listed in PodTemplateFields = %v", name, restarts, listed)
		}
		warned := cachev1alpha1.RestartWarning(base, c) != ""
		if name != "image" && warned != restarts { // the image check is separate: an empty image is defaulted
			t.Errorf("spec.%s: restart warning = %v, restarts = %v", name, warned, restarts)
		}
	}
}

// A workload profile with apply: Manual only fills status.recommendation:
// it changes no pod template, and the webhook warns of no restart for it.
func TestManualWorkloadProfileRestartsNoPod(t *testing.T) {
	base := newCache()
	c := base.DeepCopy()
	c.Spec.WorkloadProfile = &cachev1alpha1.WorkloadProfile{Preset: "bimodal", ExpectedItems: ptr.To(int64(1 << 24)), Apply: cachev1alpha1.ProfileApplyManual}
	o := BuildOptions{Image: EngineImageFor(c, nil, "x")}
	a, _ := json.Marshal(StatefulSet(base, o).Spec.Template)
	b, _ := json.Marshal(StatefulSet(c, o).Spec.Template)
	if string(a) != string(b) || cachev1alpha1.RestartWarning(base, c) != "" {
		t.Errorf("apply: Manual changes the pod template (%v) or warns of a restart (%q)", string(a) != string(b), cachev1alpha1.RestartWarning(base, c))
	}
}

// Within spec.extstore, the node-loss policy stays with the operator: it
// changes no pod template, and the webhook warns of no restart for it.
func TestExtstoreNodeLossPolicyRestartsNoPod(t *testing.T) {
	template := func(c *cachev1alpha1.Cache) string {
		b, _ := json.Marshal(StatefulSet(c, BuildOptions{Image: EngineImageFor(c, nil, "x")}).Spec.Template)
		return string(b)
	}
	base := newCache(withExtstore("1Gi", "local"))
	for name, change := range map[string]func(*cachev1alpha1.ExtstoreSpec){
		"deleteClaimOnNodeLoss": func(e *cachev1alpha1.ExtstoreSpec) { e.DeleteClaimOnNodeLoss = ptr.To(false) },
		"nodeLossTimeout":       func(e *cachev1alpha1.ExtstoreSpec) { e.NodeLossTimeout = &metav1.Duration{Duration: time.Hour} },
	} {
		c := base.DeepCopy()
		change(c.Spec.Extstore)
		if template(c) != template(base) {
			t.Errorf("spec.extstore.%s changes the pod template", name)
		}
		if w := cachev1alpha1.RestartWarning(base, c); w != "" {
			t.Errorf("spec.extstore.%s: restart warning %q", name, w)
		}
	}
	c := base.DeepCopy()
	c.Spec.Extstore.IOThreads = ptr.To(int32(2))
	if template(c) == template(base) || !strings.Contains(cachev1alpha1.RestartWarning(base, c), "spec.extstore") {
		t.Error("spec.extstore.ioThreads reaches the engine's arguments: it restarts the pods and is warned of")
	}
}

func TestNetworkPolicyAdmitsOnlyClientsAndScrapers(t *testing.T) {
	if NetworkPolicy(newCache(), testOpts) != nil {
		t.Fatal("a NetworkPolicy without spec.networkPolicy")
	}
	c := newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.NetworkPolicy = &cachev1alpha1.NetworkPolicySpec{
			Clients:         []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
			MetricsScrapers: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"name": "monitoring"}}}},
		}
	})
	np := NetworkPolicy(c, testOpts)
	if np.Spec.PodSelector.MatchLabels[cachev1alpha1.LabelInstance] != "web" || len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Fatalf("policy %+v", np.Spec)
	}
	if len(np.Spec.Ingress) != 1 || np.Spec.Ingress[0].Ports[0].Port.IntValue() != EnginePort || np.Spec.Ingress[0].From[0].PodSelector.MatchLabels["app"] != "web" {
		t.Fatalf("without a metrics port only the clients' rule: %+v", np.Spec.Ingress)
	}
	o := testOpts
	o.Engine.MetricsPort = 9150
	np = NetworkPolicy(c, o)
	if len(np.Spec.Ingress) != 2 || np.Spec.Ingress[1].Ports[0].Port.IntValue() != 9150 || np.Spec.Ingress[1].From[0].NamespaceSelector == nil {
		t.Fatalf("scrapers' rule: %+v", np.Spec.Ingress)
	}
	c.Spec.NetworkPolicy.Clients[0].PodSelector.MatchLabels["app"] = "changed"
	if np.Spec.Ingress[0].From[0].PodSelector.MatchLabels["app"] != "web" {
		t.Fatal("the builder shares its peers with the Cache")
	}
}

func TestServicesAndPDB(t *testing.T) {
	c := newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.Service = cachev1alpha1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Port: 2000, Annotations: map[string]string{"a": "b"}}
		c.Spec.PodDisruptionBudget.MaxUnavailable = ptr.To(intstr.FromString("50%"))
	})
	h := HeadlessService(c)
	if h.Name != "web-headless" || h.Spec.ClusterIP != corev1.ClusterIPNone || !h.Spec.PublishNotReadyAddresses || h.Spec.Ports[0].Port != 11211 {
		t.Fatalf("headless service: %+v", h.Spec)
	}
	s := ClientService(c)
	if s.Name != "web" || s.Spec.Type != corev1.ServiceTypeNodePort || s.Spec.Ports[0].Port != 2000 || s.Spec.Ports[0].TargetPort.StrVal != "memcache" || s.Annotations["a"] != "b" {
		t.Fatalf("client service: %+v %v", s.Spec, s.Annotations)
	}
	p := PodDisruptionBudget(c)
	if p.Spec.MaxUnavailable.String() != "50%" || p.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] != "web" {
		t.Fatalf("pdb: %+v", p.Spec)
	}
	// Defect 9: a pod that is not Ready must never block a drain.
	if p.Spec.UnhealthyPodEvictionPolicy == nil || *p.Spec.UnhealthyPodEvictionPolicy != policyv1.AlwaysAllow {
		t.Fatalf("pdb unhealthyPodEvictionPolicy %v, want AlwaysAllow", p.Spec.UnhealthyPodEvictionPolicy)
	}
	lb := ClientService(newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.Service = cachev1alpha1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, LoadBalancerSourceRanges: []string{"10.0.0.0/8"}}
	}))
	if !slices.Equal(lb.Spec.LoadBalancerSourceRanges, []string{"10.0.0.0/8"}) {
		t.Fatalf("load balancer source ranges %v", lb.Spec.LoadBalancerSourceRanges)
	}
	if d := PodDisruptionBudget(newCache()); d.Spec.MaxUnavailable.IntValue() != 1 {
		t.Fatal("pdb default is not 1")
	}
	for _, l := range []map[string]string{h.Labels, s.Labels, p.Labels, ConfigMap(c, testOpts).Labels} {
		if l["app.kubernetes.io/managed-by"] != "cachet-operator" || l["app.kubernetes.io/component"] != "cache" {
			t.Fatalf("labels %v", l)
		}
	}
}

func TestPodHost(t *testing.T) {
	if got := PodHost(newCache(), "web-0", "example.org"); got != "web-0.web-headless.prod.svc.example.org" {
		t.Fatal(got)
	}
}

func TestExtstoreGivesEachPodAClaimMountedAtTheEnginesPath(t *testing.T) {
	plain := StatefulSet(newCache(), testOpts)
	if len(plain.Spec.VolumeClaimTemplates) != 0 || plain.Spec.PersistentVolumeClaimRetentionPolicy != nil ||
		plain.Spec.Template.Spec.SecurityContext.FSGroup != nil {
		t.Fatalf("a Cache without extstore got claims, a retention policy or an fsGroup: %+v", plain.Spec)
	}
	c := newCache(func(c *cachev1alpha1.Cache) {
		c.Spec.Extstore = &cachev1alpha1.ExtstoreSpec{Size: resource.MustParse("20Gi"), StorageClassName: ptr.To("local-nvme")}
	})
	sts := StatefulSet(c, testOpts)
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("claim templates %+v", sts.Spec.VolumeClaimTemplates)
	}
	vct := sts.Spec.VolumeClaimTemplates[0]
	if vct.Name != "extstore" || !slices.Equal(vct.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) ||
		ptr.Deref(vct.Spec.StorageClassName, "") != "local-nvme" || vct.Spec.Resources.Requests.Storage().String() != "20Gi" ||
		vct.Labels[cachev1alpha1.LabelManagedBy] != managerName {
		t.Fatalf("claim template %+v", vct)
	}
	if p := sts.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenDeleted != appsv1.DeletePersistentVolumeClaimRetentionPolicyType ||
		p.WhenScaled != appsv1.DeletePersistentVolumeClaimRetentionPolicyType {
		t.Fatalf("retention policy %+v, want Delete/Delete", p)
	}
	mounted := false
	for _, m := range sts.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == "extstore" && m.MountPath == "/data/extstore" && !m.ReadOnly)
	}
	if !mounted {
		t.Fatalf("extstore volume not mounted writable at /data/extstore: %+v", sts.Spec.Template.Spec.Containers[0].VolumeMounts)
	}
	if !strings.Contains(strings.Join(EngineArgs(c, testOpts), " "), "ext_path=/data/extstore/cache:") {
		t.Fatalf("engine args %q do not put the extstore file on the volume", EngineArgs(c, testOpts))
	}
	if g := sts.Spec.Template.Spec.SecurityContext.FSGroup; g == nil || *g != EngineUID {
		t.Fatalf("fsGroup %v: the engine user cannot write a new volume", g)
	}
	// The class reaches the pod template, so that changing it alone replaces
	// the pods and with them their claims.
	other := c.DeepCopy()
	other.Spec.Extstore.StorageClassName = ptr.To("other")
	if reflect.DeepEqual(StatefulSet(other, testOpts).Spec.Template, sts.Spec.Template) {
		t.Fatal("changing the storage class leaves the pod template as it was")
	}
	if ExtstoreClaimName(c, "web-2") != "extstore-web-2" {
		t.Fatalf("claim name %q", ExtstoreClaimName(c, "web-2"))
	}
}
